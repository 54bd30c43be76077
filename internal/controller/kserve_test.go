package controller

import (
	"context"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/internal/workload"
)

var isvcGVR = schema.GroupVersionResource{Group: "serving.kserve.io", Version: "v1beta1", Resource: "inferenceservices"}

func kserveClient(isvc *unstructured.Unstructured) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{isvcGVR: "InferenceServiceList"}, isvc)
}

// withInferenceService serves the InferenceService "llm" of dyn to the harness's guardian, and returns
// a function that refreshes every cache.
func withInferenceService(t *testing.T, h *harness, dyn *dynamicfake.FakeDynamicClient) (refresh func()) {
	t.Helper()
	h.c.store.Dynamic = dyn
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	h.c.store.KServe = func(kind workload.Kind) (cache.GenericLister, schema.GroupVersionResource, bool) {
		if kind != workload.KindInferenceService {
			return nil, schema.GroupVersionResource{}, false
		}
		return cache.NewGenericLister(idx, isvcGVR.GroupResource()), isvcGVR, true
	}
	refresh = func() {
		h.refresh()
		var items []any
		u, err := dyn.Resource(isvcGVR).Namespace(ns).Get(context.Background(), "llm", metav1.GetOptions{})
		switch {
		case err == nil:
			items = append(items, u)
		case !apierrors.IsNotFound(err):
			t.Fatal(err)
		}
		if err := idx.Replace(items, ""); err != nil {
			t.Fatal(err)
		}
	}
	refresh()
	return refresh
}

func inferenceService(spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
		"metadata": map[string]any{"name": "llm", "namespace": ns, "uid": "isvc-uid", "resourceVersion": "1",
			"annotations": map[string]any{workload.AutoscalerClassAnnotation: "hpa"}},
		"spec": spec,
	}}
	return u
}

// predictorOf makes the harness's Deployment controlled by the InferenceService.
func predictorOf(objs []runtime.Object) []runtime.Object {
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			d.OwnerReferences = []metav1.OwnerReference{{APIVersion: "serving.kserve.io/v1beta1", Kind: "InferenceService",
				Name: "llm", UID: "isvc-uid", Controller: ptr.To(true)}}
		}
	}
	return objs
}

func TestInferenceServiceIsSurgedThroughItsSpecWithTheRecordOnThePredictor(t *testing.T) {
	spec := map[string]any{"predictor": map[string]any{"maxReplicas": int64(1), "model": map[string]any{"modelFormat": map[string]any{"name": "vllm"}}}}
	h := newHarness(t, nil, predictorOf(stalled())...)
	dyn := kserveClient(inferenceService(spec))
	refresh := withInferenceService(t, h, dyn)
	get := func() *unstructured.Unstructured {
		u, err := dyn.Resource(isvcGVR).Namespace(ns).Get(context.Background(), "llm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	before := get().DeepCopy()

	// Step 1: the record goes on the predictor Deployment, never on the InferenceService (KServe copies
	// its annotations into the pod template: an annotation there would restart the model).
	h.syncNode("w1")
	rec := recordOf(t, h.deployment(ns, "model").Annotations)
	if !rec.Pending || rec.Target == nil || rec.Target.Kind != workload.KindInferenceService {
		t.Fatalf("record = %+v, want a pending record targeting the InferenceService", rec)
	}
	if _, ok := get().GetAnnotations()[workload.RecordAnnotation]; ok {
		t.Fatal("surge record written on the InferenceService")
	}
	// Step 2: the fields, min and max together (validation rejects min > max).
	refresh()
	h.syncWorkload(depRef)
	min, _, _ := unstructured.NestedInt64(get().Object, "spec", "predictor", "minReplicas")
	max, _, _ := unstructured.NestedInt64(get().Object, "spec", "predictor", "maxReplicas")
	if min != 2 || max != 2 {
		t.Fatalf("after surge min/max = %d/%d, want 2/2", min, max)
	}
	// Step 3: the record is complete. Running the step again changes nothing.
	refresh()
	h.syncWorkload(depRef)
	if recordOf(t, h.deployment(ns, "model").Annotations).Pending {
		t.Fatal("record still pending after the fields were written")
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeStarted, "spec.predictor.minReplicas from unset to 2")

	// Restore after the pool update: Restoring, fields, record removed, spec byte-for-byte as before.
	h.updatePool(true)
	for i := 0; i < 3; i++ {
		refresh()
		h.syncWorkload(depRef)
	}
	after := get()
	if !reflect.DeepEqual(after.Object["spec"], before.Object["spec"]) {
		t.Fatalf("spec after restore = %v, want %v", after.Object["spec"], before.Object["spec"])
	}
	if _, ok := h.deployment(ns, "model").Annotations[workload.RecordAnnotation]; ok {
		t.Fatal("record left on the predictor Deployment")
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, "spec.predictor.minReplicas to unset", "spec.predictor.maxReplicas to 1")
}

func TestInferenceServiceSurgeResumesAfterACrashBetweenRecordAndFields(t *testing.T) {
	h := newHarness(t, nil, predictorOf(stalled())...)
	dyn := kserveClient(inferenceService(map[string]any{"predictor": map[string]any{}}))
	withInferenceService(t, h, dyn)
	h.syncNode("w1") // record persisted, then the guardian "crashes"

	second := restart(t, nil, h.kube, h.mco)
	withInferenceService(t, second, dyn)
	second.syncWorkload(depRef)
	u, _ := dyn.Resource(isvcGVR).Namespace(ns).Get(context.Background(), "llm", metav1.GetOptions{})
	if min, _, _ := unstructured.NestedInt64(u.Object, "spec", "predictor", "minReplicas"); min != 2 {
		t.Fatalf("restarted guardian did not complete the pending surge: minReplicas %d", min)
	}
}

func TestInferenceServiceChangedBeforeTheSurgeWasWrittenIsLeftAlone(t *testing.T) {
	h := newHarness(t, nil, predictorOf(stalled())...)
	dyn := kserveClient(inferenceService(map[string]any{"predictor": map[string]any{}}))
	refresh := withInferenceService(t, h, dyn)
	h.syncNode("w1")
	u, _ := dyn.Resource(isvcGVR).Namespace(ns).Get(context.Background(), "llm", metav1.GetOptions{})
	_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "predictor", "minReplicas")
	if _, err := dyn.Resource(isvcGVR).Namespace(ns).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	refresh()
	h.syncWorkload(depRef)
	u, _ = dyn.Resource(isvcGVR).Namespace(ns).Get(context.Background(), "llm", metav1.GetOptions{})
	if min, _, _ := unstructured.NestedInt64(u.Object, "spec", "predictor", "minReplicas"); min != 3 {
		t.Fatalf("minReplicas = %d, want their 3", min)
	}
	if _, ok := h.deployment(ns, "model").Annotations[workload.RecordAnnotation]; ok {
		t.Fatal("record not dropped")
	}
	requireEvent(t, h.events(), "Normal", ReasonExternalChange, "not surging")
}

func TestInferenceServiceDeletedDuringTheSurgeDropsTheRecord(t *testing.T) {
	h := newHarness(t, nil, predictorOf(stalled())...)
	dyn := kserveClient(inferenceService(map[string]any{"predictor": map[string]any{}}))
	refresh := withInferenceService(t, h, dyn)
	h.syncNode("w1")
	refresh()
	h.syncWorkload(depRef) // fields written
	if err := dyn.Resource(isvcGVR).Namespace(ns).Delete(context.Background(), "llm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	refresh()
	if after := h.syncWorkload(depRef); after != 0 {
		t.Fatalf("requeued after the InferenceService was deleted: %v", after)
	}
	if _, ok := h.deployment(ns, "model").Annotations[workload.RecordAnnotation]; ok {
		t.Fatal("record of a deleted InferenceService left on its Deployment")
	}
	requireEvent(t, h.events(), "Warning", ReasonWorkloadDeleted, "InferenceService "+ns+"/llm was deleted during its surge")
	refresh()
	if after := h.syncWorkload(depRef); after != 0 || len(h.events()) != 0 {
		t.Fatal("the deletion is handled again on the next sync")
	}
}
