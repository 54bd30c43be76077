package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestPlanSurge(t *testing.T) {
	tests := []struct {
		name      string
		kind      Kind
		spec      string // JSON of .spec
		ann       map[string]string
		component string
		current   int32
		delta     int32
		keep      bool
		viaScale  bool // the target is scaled through its /scale subresource
		want      []Field
	}{
		{
			name: "Deployment without replicas (defaults to 1)", kind: KindDeployment, spec: `{}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/replicas", Set: 2}},
		},
		{
			name: "Deployment with 1 replica", kind: KindDeployment, spec: `{"replicas": 1}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
		},
		{
			name: "Deployment with 3 replicas, surge of 2", kind: KindDeployment, spec: `{"replicas": 3}`, current: 3, delta: 2,
			want: []Field{{Path: "/spec/replicas", Original: i64(3), Set: 5}},
		},
		{
			name: "StatefulSet with 1 replica", kind: KindStatefulSet, spec: `{"replicas": 1}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
		},
		{
			name: "HPA without minReplicas: max raised with it", kind: KindHPA, spec: `{"maxReplicas": 1}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/minReplicas", Set: 2}, {Path: "/spec/maxReplicas", Original: i64(1), Set: 2}},
		},
		{
			name: "HPA min 1 max 1", kind: KindHPA, spec: `{"minReplicas": 1, "maxReplicas": 1}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/minReplicas", Original: i64(1), Set: 2}, {Path: "/spec/maxReplicas", Original: i64(1), Set: 2}},
		},
		{
			name: "HPA scaled above its minimum: surge from the current count, max leaves room", kind: KindHPA,
			spec: `{"minReplicas": 1, "maxReplicas": 5}`, current: 3, delta: 1,
			want: []Field{{Path: "/spec/minReplicas", Original: i64(1), Set: 4}},
		},
		{
			name: "HPA max equal to the raised min is left alone", kind: KindHPA, spec: `{"minReplicas": 1, "maxReplicas": 2}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/minReplicas", Original: i64(1), Set: 2}},
		},
		{
			name: "InferenceService, default hpa class, max 1", kind: KindInferenceService,
			spec: `{"predictor": {"minReplicas": 1, "maxReplicas": 1}}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/predictor/minReplicas", Original: i64(1), Set: 2}, {Path: "/spec/predictor/maxReplicas", Original: i64(1), Set: 2}},
		},
		{
			name: "InferenceService, hpa class, max 3 is not lowered", kind: KindInferenceService, ann: map[string]string{AutoscalerClassAnnotation: "hpa"},
			spec: `{"predictor": {"minReplicas": 1, "maxReplicas": 3}}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/predictor/minReplicas", Original: i64(1), Set: 2}},
		},
		{
			name: "InferenceService, none class, minReplicas and maxReplicas absent", kind: KindInferenceService, ann: map[string]string{AutoscalerClassAnnotation: "none"},
			spec: `{"predictor": {"model": {"modelFormat": {"name": "vllm"}}}}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/predictor/minReplicas", Set: 2}},
		},
		{
			name: "InferenceService, keda class, maxReplicas 0 sets no bound", kind: KindInferenceService, ann: map[string]string{AutoscalerClassAnnotation: "keda"},
			spec: `{"predictor": {"minReplicas": 1, "maxReplicas": 0}}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/predictor/minReplicas", Original: i64(1), Set: 2}},
		},
		{
			name: "LLMInferenceService main, replicas 1", kind: KindLLMInferenceService, component: ComponentMain,
			spec: `{"replicas": 1}`, current: 1, delta: 1, keep: true,
			want: []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
		},
		{
			name: "LLMInferenceService main, absent, nil means one", kind: KindLLMInferenceService, component: ComponentMain,
			spec: `{}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/replicas", Set: 2}},
		},
		{
			name: "LLMInferenceService main, absent, nil keeps the count: explicit count before removal", kind: KindLLMInferenceService, component: ComponentMain,
			spec: `{}`, current: 3, delta: 1, keep: true,
			want: []Field{{Path: "/spec/replicas", Set: 4, ExplicitBeforeRemove: i64(3)}},
		},
		{
			name: "LLMInferenceService prefill, replicas 2", kind: KindLLMInferenceService, component: ComponentPrefill,
			spec: `{"replicas": 1, "prefill": {"replicas": 2}}`, current: 2, delta: 1, keep: true,
			want: []Field{{Path: "/spec/prefill/replicas", Original: i64(2), Set: 3}},
		},
		{
			name: "LLMInferenceService prefill, absent, nil keeps the count", kind: KindLLMInferenceService, component: ComponentPrefill,
			spec: `{"replicas": 1, "prefill": {}}`, current: 2, delta: 1, keep: true,
			want: []Field{{Path: "/spec/prefill/replicas", Set: 3, ExplicitBeforeRemove: i64(2)}},
		},
		{
			name: "LLMInferenceService prefill, present, nil keeps the count: no explicit step", kind: KindLLMInferenceService, component: ComponentPrefill,
			spec: `{"prefill": {"replicas": 1}}`, current: 1, delta: 1, keep: true,
			want: []Field{{Path: "/spec/prefill/replicas", Original: i64(1), Set: 2}},
		},
		{
			name: "owner of another kind through /scale", kind: Kind("Notebook"), viaScale: true,
			spec: `{"replicas": 1}`, current: 1, delta: 1,
			want: []Field{{Path: "/spec/replicas", Original: i64(1), Set: 2}},
		},
		{
			name: "owner through /scale, absent replicas count as one", kind: Kind("Notebook"), viaScale: true,
			spec: `{}`, current: 1, delta: 2,
			want: []Field{{Path: "/spec/replicas", Set: 3}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := testObject(t, tt.kind, "1", tt.ann, tt.spec)
			target := &Target{Ref: obj.Ref, Component: tt.component}
			if tt.viaScale {
				target.Ref.APIVersion, target.Ref.Resource = "example.io/v1", "notebooks"
			}
			got, err := PlanSurge(obj, target, tt.current, tt.delta, tt.keep)
			if err != nil {
				t.Fatalf("PlanSurge() error = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("PlanSurge() = %s, want %s", fieldsString(got), fieldsString(tt.want))
			}
			// A Surge holding exactly what the guardian planned must pass the path check that guards
			// every later write.
			if err := CheckPaths(target, got); err != nil {
				t.Errorf("CheckPaths() of the planned fields = %v, want nil", err)
			}
		})
	}
}

func TestPlanSurgeUnsupported(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		ann  map[string]string
		spec string
	}{
		{name: "InferenceService with external autoscaler", kind: KindInferenceService, ann: map[string]string{AutoscalerClassAnnotation: "external"}, spec: `{"predictor": {"minReplicas": 1}}`},
		{name: "InferenceService with External autoscaler (any case)", kind: KindInferenceService, ann: map[string]string{AutoscalerClassAnnotation: "External"}, spec: `{"predictor": {"minReplicas": 1}}`},
		{name: "multi-node InferenceService", kind: KindInferenceService, spec: `{"predictor": {"minReplicas": 1, "workerSpec": {"pipelineParallelSize": 2}}}`},
		{name: "multi-node LLMInferenceService", kind: KindLLMInferenceService, spec: `{"replicas": 1, "worker": {"containers": []}}`},
		{name: "LLMInferenceService with scaling", kind: KindLLMInferenceService, spec: `{"scaling": {"minReplicas": 1, "maxReplicas": 3}}`},
		{name: "unknown kind", kind: Kind("ReplicaSet"), spec: `{"replicas": 1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := testObject(t, tt.kind, "1", tt.ann, tt.spec)
			fields, err := PlanSurge(obj, &Target{Ref: obj.Ref, Component: ComponentMain}, 1, 1, false)
			var unsup *UnsupportedError
			if !errors.As(err, &unsup) {
				t.Fatalf("PlanSurge() = %v, %v; want an *UnsupportedError", fields, err)
			}
			if unsup.Detail == "" {
				t.Error("UnsupportedError has no detail for the Event")
			}
		})
	}
}

func TestPlanSurgeRejectsNonPositiveDelta(t *testing.T) {
	obj := testObject(t, KindDeployment, "1", nil, `{"replicas": 1}`)
	for _, delta := range []int32{0, -1} {
		_, err := PlanSurge(obj, &Target{Ref: obj.Ref}, 1, delta, false)
		var unsup *UnsupportedError
		if err == nil || errors.As(err, &unsup) {
			t.Errorf("PlanSurge(delta=%d) error = %v, want a plain error", delta, err)
		}
	}
}

// testObject builds the view of an unstructured object of kind with the given resourceVersion,
// annotations and spec (JSON), decoded as the dynamic client would.
func testObject(t *testing.T, kind Kind, rv string, ann map[string]string, spec string) *Object {
	t.Helper()
	meta := map[string]any{"name": "llm", "namespace": "models", "uid": "uid-1", "resourceVersion": rv}
	if ann != nil {
		meta["annotations"] = ann
	}
	doc, err := json.Marshal(map[string]any{"apiVersion": apiVersionOf(kind), "kind": string(kind), "metadata": meta, "spec": json.RawMessage(spec)})
	if err != nil {
		t.Fatal(err)
	}
	return objectFromJSON(t, kind, doc)
}

func objectFromJSON(t *testing.T, kind Kind, doc []byte) *Object {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(doc); err != nil {
		t.Fatalf("decoding %s: %v", doc, err)
	}
	gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
	if err != nil {
		t.Fatal(err)
	}
	obj, err := newObject(kind, gv, u)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

func apiVersionOf(kind Kind) string {
	switch kind {
	case KindDeployment, KindStatefulSet:
		return "apps/v1"
	case KindHPA:
		return "autoscaling/v2"
	case KindInferenceService:
		return KServeGroup + "/v1beta1"
	case KindLLMInferenceService:
		return KServeGroup + "/v1alpha1"
	}
	return "apps/v1"
}

func i64(v int64) *int64 { return &v }

func fieldsString(fs []Field) string {
	s := "["
	for i, f := range fs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("{%s original=%s set=%d explicit=%s}", f.Path, ptrString(f.Original), f.Set, ptrString(f.ExplicitBeforeRemove))
	}
	return s + "]"
}

func ptrString(p *int64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// A count at the int32 limit cannot be raised: the surge is reported, not written for the API server
// to refuse.
func TestPlanSurgeRefusesACountPastTheLimit(t *testing.T) {
	obj := testObject(t, KindDeployment, "1", nil, `{"replicas": 2147483647}`)
	_, err := PlanSurge(obj, &Target{Ref: Ref{Kind: KindDeployment, Name: "huge"}}, 2147483647, 1, false)
	var unsup *UnsupportedError
	if !errors.As(err, &unsup) || !strings.Contains(unsup.Detail, "largest replica count") {
		t.Fatalf("PlanSurge at the int32 limit = %v, want UnsupportedError about the largest replica count", err)
	}
}
