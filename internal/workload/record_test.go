package workload

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRecordRoundTrip(t *testing.T) {
	ready := metav1.NewTime(time.Date(2025, 5, 1, 9, 3, 0, 0, time.UTC))
	resolved := metav1.NewTime(time.Date(2025, 5, 1, 9, 4, 0, 0, time.UTC))
	full := testRecord(
		Field{Path: "/spec/predictor/minReplicas", Set: 2},
		Field{Path: "/spec/predictor/maxReplicas", Original: i64(1), Set: 2},
		Field{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)},
	)
	full.ReadyTime, full.ResolvedTime = &ready, &resolved
	full.Restoring, full.RestoreFailure = "PoolUpdated", "ReadyTimeout"

	for name, rec := range map[string]*Record{
		"minimal": testRecord(Field{Path: "/spec/replicas", Original: i64(1), Set: 2}),
		"full":    full,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeRecord(rec.Encode())
			if err != nil {
				t.Fatalf("DecodeRecord(Encode()) error = %v", err)
			}
			if !reflect.DeepEqual(normalized(got), normalized(rec)) {
				t.Errorf("round trip = %s, want %s", got.Encode(), rec.Encode())
			}
		})
	}
}

// An absent original must survive the round trip as absent, not as zero: restoring it as 0 would scale
// the workload away.
func TestRecordKeepsAbsentOriginal(t *testing.T) {
	enc := testRecord(Field{Path: "/spec/replicas", Set: 2}).Encode()
	if !strings.Contains(enc, `"original":null`) {
		t.Errorf("encoded record %s does not say original is null", enc)
	}
	got, err := DecodeRecord(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Fields[0].Original != nil {
		t.Errorf("decoded Original = %d, want nil", *got.Fields[0].Original)
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	valid := testRecord(Field{Path: "/spec/replicas", Original: i64(1), Set: 2})
	mutate := func(f func(r *Record)) string {
		c := *valid
		c.Fields = append([]Field(nil), valid.Fields...)
		f(&c)
		return c.Encode()
	}
	tests := map[string]string{
		"empty":                  "",
		"not JSON":               "{surge",
		"JSON of another type":   `["a"]`,
		"future version":         mutate(func(r *Record) { r.Version = RecordVersion + 1 }),
		"missing version":        mutate(func(r *Record) { r.Version = 0 }),
		"no fields":              mutate(func(r *Record) { r.Fields = nil }),
		"field without a path":   mutate(func(r *Record) { r.Fields[0].Path = "" }),
		"field path not pointer": mutate(func(r *Record) { r.Fields[0].Path = "spec.replicas" }),
		"missing node":           mutate(func(r *Record) { r.Node = "" }),
		"missing pod owner":      mutate(func(r *Record) { r.PodOwner = Ref{} }),
		"missing start time":     mutate(func(r *Record) { r.StartTime = metav1.Time{} }),
	}
	if _, err := DecodeRecord(valid.Encode()); err != nil {
		t.Fatalf("the valid record is rejected: %v", err)
	}
	for name, s := range tests {
		t.Run(name, func(t *testing.T) {
			if r, err := DecodeRecord(s); err == nil {
				t.Errorf("DecodeRecord(%s) = %+v, want an error", s, r)
			}
		})
	}
}

func TestObjectRecord(t *testing.T) {
	valid := testRecord(Field{Path: "/spec/replicas", Original: i64(1), Set: 2})
	tests := []struct {
		name    string
		ann     map[string]string
		wantRec bool
		wantErr bool
	}{
		{name: "no annotations"},
		{name: "other annotations", ann: map[string]string{"team": "ml"}},
		{name: "valid record", ann: map[string]string{RecordAnnotation: valid.Encode()}, wantRec: true},
		{name: "malformed record", ann: map[string]string{RecordAnnotation: `{"version":1}`}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := testObject(t, KindDeployment, "1", tt.ann, `{"replicas": 2}`)
			rec, err := obj.Record()
			if (err != nil) != tt.wantErr || (rec != nil) != tt.wantRec {
				t.Errorf("Record() = %v, %v; want record %v, error %v", rec, err, tt.wantRec, tt.wantErr)
			}
		})
	}
}

func TestDecodeFailure(t *testing.T) {
	f := &Failure{Node: "node-a", Drain: "rendered-b", Reason: "NoCapacity", Time: metav1.NewTime(time.Date(2025, 5, 1, 9, 0, 0, 0, time.UTC))}
	got := DecodeFailure(f.Encode())
	if got == nil || got.Node != f.Node || got.Drain != f.Drain || got.Reason != f.Reason || !got.Time.Equal(&f.Time) {
		t.Errorf("DecodeFailure(Encode()) = %+v, want %+v", got, f)
	}
	for _, s := range []string{"", "not json", `[1]`} {
		if got := DecodeFailure(s); got != nil {
			t.Errorf("DecodeFailure(%q) = %+v, want nil", s, got)
		}
	}
}

func TestIgnoredByAnnotation(t *testing.T) {
	tests := map[string]bool{"true": true, "True": true, "1": true, "false": false, "": false, "yes": false}
	for v, want := range tests {
		if got := IgnoredByAnnotation(map[string]string{IgnoreAnnotation: v}); got != want {
			t.Errorf("IgnoredByAnnotation(%q) = %v, want %v", v, got, want)
		}
	}
	if IgnoredByAnnotation(nil) {
		t.Error("IgnoredByAnnotation(nil) = true")
	}
}
