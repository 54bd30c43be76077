package workload

import (
	"encoding/json"
	"reflect"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

func TestSurgePatch(t *testing.T) {
	tests := []struct {
		name   string
		kind   Kind
		ann    map[string]string
		spec   string
		fields []Field
		want   map[string]int64
	}{
		{
			name:   "Deployment replicas raised",
			kind:   KindDeployment,
			spec:   `{"replicas": 1}`,
			fields: []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
			want:   map[string]int64{"/spec/replicas": 2},
		},
		{
			name: "InferenceService: absent minReplicas added, maxReplicas raised, annotations untouched",
			kind: KindInferenceService,
			ann:  map[string]string{AutoscalerClassAnnotation: "hpa"},
			spec: `{"predictor": {"maxReplicas": 1}}`,
			fields: []Field{
				{Path: "/spec/predictor/minReplicas", Set: 2},
				{Path: "/spec/predictor/maxReplicas", Original: i64(1), Set: 2},
			},
			want: map[string]int64{"/spec/predictor/minReplicas": 2, "/spec/predictor/maxReplicas": 2},
		},
		{
			name:   "LLMInferenceService prefill",
			kind:   KindLLMInferenceService,
			spec:   `{"replicas": 1, "prefill": {"replicas": 2}}`,
			fields: []Field{{Path: "/spec/prefill/replicas", Original: i64(2), Set: 3}},
			want:   map[string]int64{"/spec/replicas": 1, "/spec/prefill/replicas": 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := testObject(t, tt.kind, "42", tt.ann, tt.spec)
			data := SurgePatch(obj, tt.fields)
			assertTestsResourceVersion(t, data, "42")

			got := applyPatch(t, obj, data)
			for path, v := range tt.want {
				if n, ok := got.Int(path); !ok || n != v {
					t.Errorf("%s = %d (present %v), want %d", path, n, ok, v)
				}
			}
			// The state lives in the Surge now: the patch names the fields and nothing else.
			wantPaths := map[string]bool{"/metadata/resourceVersion": true}
			for _, f := range tt.fields {
				wantPaths[f.Path] = true
			}
			if named := patchPaths(t, data); !reflect.DeepEqual(named, wantPaths) {
				t.Errorf("patch %s names %v, want exactly %v", data, named, wantPaths)
			}
			if ann := got.Meta.GetAnnotations(); len(ann) != len(tt.ann) || (len(ann) > 0 && !reflect.DeepEqual(ann, tt.ann)) {
				t.Errorf("annotations after surge = %v, want %v unchanged", ann, tt.ann)
			}
			if states := States(got, tt.fields); !allStates(states, FieldAtSet) {
				t.Errorf("States() after the surge patch = %v, want every field at its set value", states)
			}
		})
	}
}

// The patch is made against the object the decision was made on: once someone else wrote it, the test
// operation fails and nothing is applied.
func TestPatchFailsOnChangedResourceVersion(t *testing.T) {
	fields := []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}}
	orig := testObject(t, KindDeployment, "42", nil, `{"replicas": 1}`)
	surged := testObject(t, KindDeployment, "42", nil, `{"replicas": 2}`)
	for name, tc := range map[string]struct {
		data    []byte
		changed *Object
	}{
		"surge":   {SurgePatch(orig, fields), testObject(t, KindDeployment, "43", nil, `{"replicas": 1}`)},
		"restore": {RestorePatch(surged, fields, false), testObject(t, KindDeployment, "43", nil, `{"replicas": 2}`)},
	} {
		t.Run(name, func(t *testing.T) {
			assertTestsResourceVersion(t, tc.data, "42")
			p, err := jsonpatch.DecodePatch(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			doc, _ := json.Marshal(tc.changed.Content)
			if _, err := p.Apply(doc); err == nil {
				t.Error("patch applied to an object with another resourceVersion")
			}
		})
	}
}

// The lister returns typed Deployments; the view of them must read and write the same paths, and never
// modify the lister's object.
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
	fields, err := PlanSurge(obj, &Target{Ref: obj.Ref, PodOwner: obj.Ref}, 1, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}}; !reflect.DeepEqual(fields, want) {
		t.Fatalf("PlanSurge() = %s, want %s", fieldsString(fields), fieldsString(want))
	}
	data := SurgePatch(obj, fields)
	assertTestsResourceVersion(t, data, "7")
	got := applyPatch(t, obj, data)
	var out appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Content, &out); err != nil {
		t.Fatal(err)
	}
	if out.Spec.Replicas == nil || *out.Spec.Replicas != 2 {
		t.Errorf("replicas after surge = %v, want 2", out.Spec.Replicas)
	}
	if *d.Spec.Replicas != 1 || d.Annotations != nil {
		t.Error("building the view or the patch modified the lister's object")
	}
}

func TestStateOf(t *testing.T) {
	tests := []struct {
		name  string
		spec  string // the target now
		field Field
		want  FieldState
	}{
		{name: "original present, unchanged", spec: `{"replicas": 1}`, field: Field{Path: "/spec/replicas", Original: i64(1), Set: 2}, want: FieldAtOriginal},
		{name: "original absent, still absent", spec: `{}`, field: Field{Path: "/spec/replicas", Set: 2}, want: FieldAtOriginal},
		{name: "original absent, null counts as absent", spec: `{"replicas": null}`, field: Field{Path: "/spec/replicas", Set: 2}, want: FieldAtOriginal},
		{name: "at set, original present", spec: `{"replicas": 2}`, field: Field{Path: "/spec/replicas", Original: i64(1), Set: 2}, want: FieldAtSet},
		{name: "at set, original absent", spec: `{"replicas": 2}`, field: Field{Path: "/spec/replicas", Set: 2}, want: FieldAtSet},
		{name: "at set, two-step field", spec: `{"replicas": 4}`, field: Field{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)}, want: FieldAtSet},
		{name: "at explicit", spec: `{"replicas": 3}`, field: Field{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)}, want: FieldAtExplicit},
		{name: "two-step field removed: back at its original absence", spec: `{}`, field: Field{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)}, want: FieldAtOriginal},
		{name: "explicit value on a field that had an original is not the explicit step", spec: `{"replicas": 3}`, field: Field{Path: "/spec/replicas", Original: i64(1), Set: 4, ExplicitBeforeRemove: i64(3)}, want: FieldChanged},
		{name: "changed to another value", spec: `{"replicas": 5}`, field: Field{Path: "/spec/replicas", Original: i64(1), Set: 2}, want: FieldChanged},
		{name: "changed from absent", spec: `{"replicas": 5}`, field: Field{Path: "/spec/replicas", Set: 2}, want: FieldChanged},
		{name: "two-step field changed", spec: `{"replicas": 5}`, field: Field{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)}, want: FieldChanged},
		{name: "removed although it had an original", spec: `{}`, field: Field{Path: "/spec/replicas", Original: i64(1), Set: 2}, want: FieldChanged},
		{name: "nested path at set", spec: `{"predictor": {"minReplicas": 2}}`, field: Field{Path: "/spec/predictor/minReplicas", Original: i64(1), Set: 2}, want: FieldAtSet},
		{name: "nested path, parent absent", spec: `{}`, field: Field{Path: "/spec/predictor/minReplicas", Set: 2}, want: FieldAtOriginal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := testObject(t, KindDeployment, "1", nil, tt.spec)
			if got := StateOf(obj, tt.field); got != tt.want {
				t.Errorf("StateOf(%s, %s) = %v, want %v", tt.spec, fieldsString([]Field{tt.field}), got, tt.want)
			}
		})
	}
}

func TestStatesKeepsFieldOrder(t *testing.T) {
	obj := testObject(t, KindHPA, "1", nil, `{"minReplicas": 2, "maxReplicas": 4}`)
	fields := []Field{
		{Path: "/spec/minReplicas", Original: i64(1), Set: 2},
		{Path: "/spec/maxReplicas", Original: i64(1), Set: 2},
		{Path: "/spec/behavior/scaleUp/stabilizationWindowSeconds", Set: 2},
	}
	want := []FieldState{FieldAtSet, FieldChanged, FieldAtOriginal}
	if got := States(obj, fields); !reflect.DeepEqual(got, want) {
		t.Errorf("States() = %v, want %v", got, want)
	}
}

func TestRestorePatch(t *testing.T) {
	tests := []struct {
		name           string
		kind           Kind
		spec           string // the target now (after the surge, and whatever others did)
		fields         []Field
		removeExplicit bool
		wantNil        bool
		want           map[string]int64 // after the restore
		absent         []string         // absent after the restore
		untouched      []string         // paths the patch must not name
	}{
		{
			name:   "field at set goes back to its original",
			kind:   KindDeployment,
			spec:   `{"replicas": 2}`,
			fields: []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
			want:   map[string]int64{"/spec/replicas": 1},
		},
		{
			name:   "field at set that was absent is removed",
			kind:   KindLLMInferenceService,
			spec:   `{"model": {"uri": "hf://m"}, "replicas": 2}`,
			fields: []Field{{Path: "/spec/replicas", Set: 2}},
			absent: []string{"/spec/replicas"},
		},
		{
			name: "InferenceService: absent min removed, max restored",
			kind: KindInferenceService,
			spec: `{"predictor": {"minReplicas": 2, "maxReplicas": 2}}`,
			fields: []Field{
				{Path: "/spec/predictor/minReplicas", Set: 2},
				{Path: "/spec/predictor/maxReplicas", Original: i64(1), Set: 2},
			},
			want:   map[string]int64{"/spec/predictor/maxReplicas": 1},
			absent: []string{"/spec/predictor/minReplicas"},
		},
		{
			name:   "two-step field at set goes to its explicit count first",
			kind:   KindLLMInferenceService,
			spec:   `{"replicas": 4}`,
			fields: []Field{{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)}},
			want:   map[string]int64{"/spec/replicas": 3},
		},
		{
			name:           "two-step field at set goes to its explicit count first, even with removeExplicit",
			kind:           KindLLMInferenceService,
			spec:           `{"replicas": 4}`,
			fields:         []Field{{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)}},
			removeExplicit: true,
			want:           map[string]int64{"/spec/replicas": 3},
		},
		{
			name:           "field at its explicit count removed with removeExplicit",
			kind:           KindLLMInferenceService,
			spec:           `{"replicas": 3}`,
			fields:         []Field{{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)}},
			removeExplicit: true,
			absent:         []string{"/spec/replicas"},
		},
		{
			name:    "field at its explicit count kept without removeExplicit: nothing to write",
			kind:    KindLLMInferenceService,
			spec:    `{"replicas": 3}`,
			fields:  []Field{{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)}},
			wantNil: true,
		},
		{
			name:           "prefill field at its explicit count removed, main replicas untouched",
			kind:           KindLLMInferenceService,
			spec:           `{"replicas": 1, "prefill": {"replicas": 2}}`,
			fields:         []Field{{Path: "/spec/prefill/replicas", Set: 3, ExplicitBeforeRemove: i64(2)}},
			removeExplicit: true,
			want:           map[string]int64{"/spec/replicas": 1},
			absent:         []string{"/spec/prefill/replicas"},
			untouched:      []string{"/spec/replicas"},
		},
		{
			name:      "HPA: max changed by someone else is left alone, min restored",
			kind:      KindHPA,
			spec:      `{"minReplicas": 2, "maxReplicas": 4}`,
			fields:    []Field{{Path: "/spec/minReplicas", Original: i64(1), Set: 2}, {Path: "/spec/maxReplicas", Original: i64(1), Set: 2}},
			want:      map[string]int64{"/spec/minReplicas": 1, "/spec/maxReplicas": 4},
			untouched: []string{"/spec/maxReplicas"},
		},
		{
			name:    "only field changed by someone else: nothing to write",
			kind:    KindDeployment,
			spec:    `{"replicas": 5}`,
			fields:  []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
			wantNil: true,
		},
		{
			name:           "two-step field changed between the steps: nothing to write",
			kind:           KindLLMInferenceService,
			spec:           `{"replicas": 5}`,
			fields:         []Field{{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)}},
			removeExplicit: true,
			wantNil:        true,
		},
		{
			name:    "every field at its original (restore resumed after a crash): nothing to write",
			kind:    KindInferenceService,
			spec:    `{"predictor": {"maxReplicas": 1}}`,
			fields:  []Field{{Path: "/spec/predictor/minReplicas", Set: 2}, {Path: "/spec/predictor/maxReplicas", Original: i64(1), Set: 2}},
			wantNil: true,
		},
		{
			name:      "one field already restored, the other still at set",
			kind:      KindHPA,
			spec:      `{"minReplicas": 1, "maxReplicas": 2}`,
			fields:    []Field{{Path: "/spec/minReplicas", Original: i64(1), Set: 2}, {Path: "/spec/maxReplicas", Original: i64(1), Set: 2}},
			want:      map[string]int64{"/spec/minReplicas": 1, "/spec/maxReplicas": 1},
			untouched: []string{"/spec/minReplicas"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := testObject(t, tt.kind, "42", nil, tt.spec)
			data := RestorePatch(obj, tt.fields, tt.removeExplicit)
			if tt.wantNil {
				if data != nil {
					t.Fatalf("RestorePatch() = %s, want nil", data)
				}
				return
			}
			if data == nil {
				t.Fatal("RestorePatch() = nil, want a patch")
			}
			assertTestsResourceVersion(t, data, "42")
			named := patchPaths(t, data)
			for _, p := range tt.untouched {
				if named[p] {
					t.Errorf("patch %s names %s, which must be left alone", data, p)
				}
			}
			got := applyPatch(t, obj, data)
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
		})
	}
}

// A full surge and two-step restore of an LLMInferenceService whose absent replicas field keeps the
// Deployment's count: surged, explicit count written, field removed once the workload scaled down,
// and the target ends exactly as it was.
func TestSurgeAndTwoStepRestore(t *testing.T) {
	orig := testObject(t, KindLLMInferenceService, "42", nil, `{"model": {"uri": "hf://m"}}`)
	target := &Target{Ref: orig.Ref, Component: ComponentMain}
	fields, err := PlanSurge(orig, target, 3, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Field{{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)}}; !reflect.DeepEqual(fields, want) {
		t.Fatalf("PlanSurge() = %s, want %s", fieldsString(fields), fieldsString(want))
	}
	if s := States(orig, fields); !allStates(s, FieldAtOriginal) {
		t.Fatalf("States() before the surge = %v, want at original", s)
	}
	surged := applyPatch(t, orig, SurgePatch(orig, fields))
	if s := States(surged, fields); !allStates(s, FieldAtSet) {
		t.Fatalf("States() after the surge = %v, want at set", s)
	}

	step1 := RestorePatch(surged, fields, false)
	if step1 == nil {
		t.Fatal("step 1: no patch")
	}
	mid := applyPatch(t, surged, step1)
	if n, ok := mid.Int("/spec/replicas"); !ok || n != 3 {
		t.Fatalf("step 1: replicas = %d (present %v), want the explicit 3", n, ok)
	}
	if s := States(mid, fields); !allStates(s, FieldAtExplicit) {
		t.Fatalf("States() after step 1 = %v, want at explicit", s)
	}
	if p := RestorePatch(mid, fields, false); p != nil {
		t.Fatalf("before the workload caught up: RestorePatch() = %s, want nil", p)
	}

	step2 := RestorePatch(mid, fields, true)
	if step2 == nil {
		t.Fatal("step 2: no patch")
	}
	assertTestsResourceVersion(t, step2, mid.Meta.GetResourceVersion())
	done := applyPatch(t, mid, step2)
	if done.Has("/spec/replicas") {
		t.Error("step 2: replicas still present, want it removed as it was before the surge")
	}
	if s := States(done, fields); !allStates(s, FieldAtOriginal) {
		t.Errorf("States() after step 2 = %v, want at original", s)
	}
	if p := RestorePatch(done, fields, true); p != nil {
		t.Errorf("after the restore: RestorePatch() = %s, want nil", p)
	}
	if !reflect.DeepEqual(done.Content["spec"], orig.Content["spec"]) {
		t.Errorf("spec after the restore = %v, want the original %v", done.Content["spec"], orig.Content["spec"])
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

// patchPaths returns the paths the patch's operations name.
func patchPaths(t *testing.T, data []byte) map[string]bool {
	t.Helper()
	var ops []struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(data, &ops); err != nil {
		t.Fatalf("patch %s: %v", data, err)
	}
	out := map[string]bool{}
	for _, o := range ops {
		out[o.Path] = true
	}
	return out
}

func allStates(states []FieldState, want FieldState) bool {
	for _, s := range states {
		if s != want {
			return false
		}
	}
	return len(states) > 0
}
