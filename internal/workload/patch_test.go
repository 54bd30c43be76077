package workload

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

func TestSurgePatch(t *testing.T) {
	tests := []struct {
		name    string
		kind    Kind
		ann     map[string]string
		spec    string
		fields  []Field
		wantAnn map[string]string // besides the record
		want    map[string]int64
	}{
		{
			name:   "Deployment without annotations: the map is created",
			kind:   KindDeployment,
			spec:   `{"replicas": 1}`,
			fields: []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
			want:   map[string]int64{"/spec/replicas": 2},
		},
		{
			name:    "existing annotations kept, remembered failure dropped",
			kind:    KindDeployment,
			ann:     map[string]string{"team": "ml", FailureAnnotation: `{"node":"n0","drain":"rendered-a","reason":"NoCapacity"}`},
			spec:    `{"replicas": 1}`,
			fields:  []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
			wantAnn: map[string]string{"team": "ml"},
			want:    map[string]int64{"/spec/replicas": 2},
		},
		{
			name: "InferenceService: absent minReplicas added, maxReplicas raised",
			kind: KindInferenceService,
			ann:  map[string]string{AutoscalerClassAnnotation: "hpa"},
			spec: `{"predictor": {"maxReplicas": 1}}`,
			fields: []Field{
				{Path: "/spec/predictor/minReplicas", Set: 2},
				{Path: "/spec/predictor/maxReplicas", Original: i64(1), Set: 2},
			},
			wantAnn: map[string]string{AutoscalerClassAnnotation: "hpa"},
			want:    map[string]int64{"/spec/predictor/minReplicas": 2, "/spec/predictor/maxReplicas": 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := testObject(t, tt.kind, "42", tt.ann, tt.spec)
			rec := testRecord(tt.fields...)
			data := SurgePatch(obj, rec)
			assertTestsResourceVersion(t, data, "42")

			got := applyPatch(t, obj, data)
			for path, v := range tt.want {
				if n, ok := got.Int(path); !ok || n != v {
					t.Errorf("%s = %d (present %v), want %d", path, n, ok, v)
				}
			}
			gotRec, err := got.Record()
			if err != nil || gotRec == nil {
				t.Fatalf("Record() after surge = %v, %v; want the record", gotRec, err)
			}
			if !reflect.DeepEqual(normalized(gotRec), normalized(rec)) {
				t.Errorf("record after surge = %s, want %s", gotRec.Encode(), rec.Encode())
			}
			ann := got.Meta.GetAnnotations()
			delete(ann, RecordAnnotation)
			if len(ann) != len(tt.wantAnn) || (len(ann) > 0 && !reflect.DeepEqual(ann, tt.wantAnn)) {
				t.Errorf("other annotations after surge = %v, want %v", ann, tt.wantAnn)
			}
		})
	}
}

// The patch is made against the object the decision was made on: once someone else wrote it, the test
// operation fails and nothing is applied.
func TestPatchFailsOnChangedResourceVersion(t *testing.T) {
	obj := testObject(t, KindDeployment, "42", nil, `{"replicas": 1}`)
	rec := testRecord(Field{Path: "/spec/replicas", Original: i64(1), Set: 2})
	changed := testObject(t, KindDeployment, "43", nil, `{"replicas": 1}`)
	for name, data := range map[string][]byte{
		"surge":   SurgePatch(obj, rec),
		"record":  RecordPatch(obj, rec),
		"restore": PlanRestore(obj, rec, "PoolUpdated", nil).Patch,
		"drop":    FinishPatch(obj, nil),
	} {
		t.Run(name, func(t *testing.T) {
			assertTestsResourceVersion(t, data, "42")
			p, err := jsonpatch.DecodePatch(data)
			if err != nil {
				t.Fatal(err)
			}
			doc, _ := json.Marshal(changed.Content)
			if _, err := p.Apply(doc); err == nil {
				t.Error("patch applied to an object with another resourceVersion")
			}
		})
	}
}

// The lister returns typed Deployments; the view of them must read and write the same paths.
func TestSurgePatchTypedDeployment(t *testing.T) {
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "models", UID: "uid-1", ResourceVersion: "7"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1)},
	}
	obj, err := newObject(KindDeployment, appsv1.SchemeGroupVersion, d)
	if err != nil {
		t.Fatal(err)
	}
	fields, err := PlanSurge(obj, "", 1, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}}; !reflect.DeepEqual(fields, want) {
		t.Fatalf("PlanSurge() = %s, want %s", fieldsString(fields), fieldsString(want))
	}
	got := applyPatch(t, obj, SurgePatch(obj, testRecord(fields...)))
	var out appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Content, &out); err != nil {
		t.Fatal(err)
	}
	if out.Spec.Replicas == nil || *out.Spec.Replicas != 2 {
		t.Errorf("replicas after surge = %v, want 2", out.Spec.Replicas)
	}
	if _, ok := out.Annotations[RecordAnnotation]; !ok {
		t.Errorf("annotations after surge = %v, want the record", out.Annotations)
	}
	if *d.Spec.Replicas != 1 || d.Annotations != nil {
		t.Error("building the view or the patch modified the lister's object")
	}
}

func TestPlanRestore(t *testing.T) {
	failure := &Failure{Node: "node-a", Drain: "rendered-b", Reason: "ReadyTimeout", Time: metav1.NewTime(time.Date(2025, 5, 1, 10, 0, 0, 0, time.UTC))}
	tests := []struct {
		name     string
		kind     Kind
		spec     string // before the surge
		fields   []Field
		external map[string]int64 // changed by someone else after the surge
		failure  *Failure
		want     map[string]int64 // after the restore
		absent   []string         // removed by the restore
		wantKept []string
	}{
		{
			name:   "original value written back",
			kind:   KindDeployment,
			spec:   `{"replicas": 1}`,
			fields: []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
			want:   map[string]int64{"/spec/replicas": 1},
		},
		{
			name:   "absent original removed",
			kind:   KindLLMInferenceService,
			spec:   `{"model": {"uri": "hf://m"}}`,
			fields: []Field{{Path: "/spec/replicas", Set: 2}},
			absent: []string{"/spec/replicas"},
		},
		{
			name: "InferenceService min and max restored, absent min removed",
			kind: KindInferenceService,
			spec: `{"predictor": {"maxReplicas": 1}}`,
			fields: []Field{
				{Path: "/spec/predictor/minReplicas", Set: 2},
				{Path: "/spec/predictor/maxReplicas", Original: i64(1), Set: 2},
			},
			want:   map[string]int64{"/spec/predictor/maxReplicas": 1},
			absent: []string{"/spec/predictor/minReplicas"},
		},
		{
			name:     "externally changed field kept",
			kind:     KindDeployment,
			spec:     `{"replicas": 1}`,
			fields:   []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
			external: map[string]int64{"/spec/replicas": 5},
			want:     map[string]int64{"/spec/replicas": 5},
			wantKept: []string{"/spec/replicas"},
		},
		{
			name: "HPA: changed max kept, min restored",
			kind: KindHPA,
			spec: `{"minReplicas": 1, "maxReplicas": 1}`,
			fields: []Field{
				{Path: "/spec/minReplicas", Original: i64(1), Set: 2},
				{Path: "/spec/maxReplicas", Original: i64(1), Set: 2},
			},
			external: map[string]int64{"/spec/maxReplicas": 4},
			want:     map[string]int64{"/spec/minReplicas": 1, "/spec/maxReplicas": 4},
			wantKept: []string{"/spec/maxReplicas"},
		},
		{
			name:    "failed restore remembers the failure",
			kind:    KindDeployment,
			spec:    `{"replicas": 1}`,
			fields:  []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
			failure: failure,
			want:    map[string]int64{"/spec/replicas": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := testRecord(tt.fields...)
			surged := applyPatch(t, testObject(t, tt.kind, "42", nil, tt.spec), SurgePatch(testObject(t, tt.kind, "42", nil, tt.spec), rec))
			for path, v := range tt.external {
				surged = applyPatch(t, surged, []byte(`[{"op":"replace","path":"`+path+`","value":`+itoa(v)+`}]`))
			}
			step := PlanRestore(surged, rec, "PoolUpdated", tt.failure)
			if !step.Done {
				t.Fatal("one-step restore reported Done=false")
			}
			assertTestsResourceVersion(t, step.Patch, surged.Meta.GetResourceVersion())
			var kept []string
			for _, f := range step.Kept {
				kept = append(kept, f.Path)
			}
			if !reflect.DeepEqual(kept, tt.wantKept) {
				t.Errorf("Kept = %v, want %v", kept, tt.wantKept)
			}

			got := applyPatch(t, surged, step.Patch)
			for path, v := range tt.want {
				if n, ok := got.Int(path); !ok || n != v {
					t.Errorf("%s = %d (present %v), want %d", path, n, ok, v)
				}
			}
			for _, path := range tt.absent {
				if got.Has(path) {
					t.Errorf("%s still present after restore", path)
				}
			}
			if _, ok := got.Meta.GetAnnotations()[RecordAnnotation]; ok {
				t.Error("record still present after restore")
			}
			gotFailure := got.Failure()
			switch {
			case tt.failure == nil && gotFailure != nil:
				t.Errorf("failure annotation %+v written on a successful restore", gotFailure)
			case tt.failure != nil && (gotFailure == nil || gotFailure.Reason != tt.failure.Reason || gotFailure.Node != tt.failure.Node ||
				gotFailure.Drain != tt.failure.Drain || !gotFailure.Time.Equal(&tt.failure.Time)):
				t.Errorf("failure annotation = %+v, want %+v", gotFailure, tt.failure)
			}
		})
	}
}

// An LLMInferenceService whose absent replicas field keeps the Deployment's count is restored in two
// steps: the explicit original count first, the removal of the field once the Deployment scaled down.
func TestPlanRestoreTwoSteps(t *testing.T) {
	failure := &Failure{Node: "node-a", Drain: "rendered-b", Reason: "Unschedulable", Time: metav1.NewTime(time.Date(2025, 5, 1, 10, 0, 0, 0, time.UTC))}
	for _, tc := range []struct {
		name           string
		failure        *Failure
		changedBetween bool
	}{
		{name: "success"},
		{name: "failed surge", failure: failure},
		{name: "field changed between the steps", changedBetween: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := testObject(t, KindLLMInferenceService, "42", nil, `{"model": {"uri": "hf://m"}}`)
			fields, err := PlanSurge(orig, ComponentMain, 1, 1, true)
			if err != nil {
				t.Fatal(err)
			}
			rec := testRecord(fields...)
			surged := applyPatch(t, orig, SurgePatch(orig, rec))
			if n, _ := surged.Int("/spec/replicas"); n != 2 {
				t.Fatalf("replicas after surge = %d, want 2", n)
			}

			// Step 1: explicit count, record kept with Restoring.
			step1 := PlanRestore(surged, rec, "PoolUpdated", tc.failure)
			if step1.Done || len(step1.Kept) != 0 {
				t.Fatalf("step 1: Done=%v Kept=%v, want Done=false and nothing kept", step1.Done, step1.Kept)
			}
			mid := applyPatch(t, surged, step1.Patch)
			if n, ok := mid.Int("/spec/replicas"); !ok || n != 1 {
				t.Errorf("step 1: replicas = %d (present %v), want explicit 1", n, ok)
			}
			midRec, err := mid.Record()
			if err != nil || midRec == nil {
				t.Fatalf("step 1: record = %v, %v; want it kept", midRec, err)
			}
			if midRec.Restoring != "PoolUpdated" {
				t.Errorf("step 1: Restoring = %q, want PoolUpdated", midRec.Restoring)
			}
			wantRestoreFailure := ""
			if tc.failure != nil {
				wantRestoreFailure = tc.failure.Reason
			}
			if midRec.RestoreFailure != wantRestoreFailure {
				t.Errorf("step 1: RestoreFailure = %q, want %q", midRec.RestoreFailure, wantRestoreFailure)
			}
			if mid.Failure() != nil {
				t.Error("step 1 wrote the failure annotation before the restore finished")
			}

			if tc.changedBetween {
				mid = applyPatch(t, mid, []byte(`[{"op":"replace","path":"/spec/replicas","value":3}]`))
			}

			// Step 2: the field removed, the record dropped.
			step2 := PlanRestore(mid, midRec, midRec.Restoring, tc.failure)
			if !step2.Done {
				t.Fatal("step 2: Done=false")
			}
			assertTestsResourceVersion(t, step2.Patch, mid.Meta.GetResourceVersion())
			done := applyPatch(t, mid, step2.Patch)
			if tc.changedBetween {
				if len(step2.Kept) != 1 || step2.Kept[0].Path != "/spec/replicas" {
					t.Errorf("step 2: Kept = %v, want /spec/replicas", step2.Kept)
				}
				if n, _ := done.Int("/spec/replicas"); n != 3 {
					t.Errorf("step 2: replicas = %d, want the external 3 kept", n)
				}
			} else {
				if len(step2.Kept) != 0 {
					t.Errorf("step 2: Kept = %v, want none", step2.Kept)
				}
				if done.Has("/spec/replicas") {
					t.Error("step 2: replicas still present, want it removed as it was before the surge")
				}
			}
			if _, ok := done.Meta.GetAnnotations()[RecordAnnotation]; ok {
				t.Error("step 2: record still present")
			}
			if (done.Failure() != nil) != (tc.failure != nil) {
				t.Errorf("step 2: failure annotation = %+v, want present=%v", done.Failure(), tc.failure != nil)
			}
		})
	}
}

func TestRecordAndFinishPatch(t *testing.T) {
	rec := testRecord(Field{Path: "/spec/replicas", Original: i64(1), Set: 2})
	orig := testObject(t, KindDeployment, "42", map[string]string{"team": "ml"}, `{"replicas": 1}`)
	surged := applyPatch(t, orig, SurgePatch(orig, rec))

	now := metav1.NewTime(time.Date(2025, 5, 1, 11, 0, 0, 0, time.UTC))
	next := *rec
	next.ReadyTime = &now
	updated := applyPatch(t, surged, RecordPatch(surged, &next))
	got, err := updated.Record()
	if err != nil || got == nil || got.ReadyTime == nil || !got.ReadyTime.Equal(&now) {
		t.Fatalf("record after RecordPatch = %+v, %v; want ReadyTime %v", got, err, now)
	}
	if n, _ := updated.Int("/spec/replicas"); n != 2 {
		t.Errorf("RecordPatch changed replicas to %d", n)
	}

	dropped := applyPatch(t, updated, FinishPatch(updated, nil))
	if _, ok := dropped.Meta.GetAnnotations()[RecordAnnotation]; ok {
		t.Error("record still present after FinishPatch")
	}
	if dropped.Meta.GetAnnotations()["team"] != "ml" {
		t.Errorf("annotations after FinishPatch = %v, want team=ml kept", dropped.Meta.GetAnnotations())
	}
	if n, _ := dropped.Int("/spec/replicas"); n != 2 {
		t.Errorf("FinishPatch changed replicas to %d", n)
	}
}

// applyPatch applies data to obj's JSON as the API server would, bumps the resourceVersion like a
// write does, and returns the new object.
func applyPatch(t *testing.T, obj *Object, data []byte) *Object {
	t.Helper()
	p, err := jsonpatch.DecodePatch(data)
	if err != nil {
		t.Fatalf("invalid JSON patch %s: %v", data, err)
	}
	doc, err := json.Marshal(obj.Content)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("applying %s to %s: %v", data, doc, err)
	}
	next := objectFromJSON(t, obj.Ref.Kind, out)
	rv := next.Meta.GetResourceVersion()
	next.Meta.SetResourceVersion(rv + "1")
	return next
}

// assertTestsResourceVersion checks that the patch's first operation tests the resourceVersion.
func assertTestsResourceVersion(t *testing.T, data []byte, rv string) {
	t.Helper()
	var ops []map[string]any
	if err := json.Unmarshal(data, &ops); err != nil {
		t.Fatalf("patch %s: %v", data, err)
	}
	if len(ops) == 0 || ops[0]["op"] != "test" || ops[0]["path"] != "/metadata/resourceVersion" || ops[0]["value"] != rv {
		t.Errorf("first operation of %s does not test resourceVersion %q", data, rv)
	}
}

func testRecord(fields ...Field) *Record {
	return &Record{
		Version:     RecordVersion,
		Fields:      fields,
		PodOwner:    Ref{Kind: KindDeployment, Namespace: "models", Name: "llm-predictor", UID: "dep-uid"},
		Node:        "node-a",
		Pool:        "worker",
		Trigger:     "MCODrain",
		Drain:       "rendered-worker-b",
		BlockedPod:  "llm-predictor-abc",
		PDB:         "llm",
		Delta:       1,
		ReadyBefore: 0,
		StartTime:   metav1.NewTime(time.Date(2025, 5, 1, 9, 0, 0, 0, time.UTC)),
	}
}

// normalized returns a copy of r with its times in UTC, as JSON decoding yields local times.
func normalized(r *Record) Record {
	c := *r
	c.StartTime = metav1.NewTime(c.StartTime.UTC())
	for _, p := range []**metav1.Time{&c.ReadyTime, &c.ResolvedTime} {
		if *p != nil {
			u := metav1.NewTime((*p).UTC())
			*p = &u
		}
	}
	return c
}

func itoa(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
