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

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/options"
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
	served := true
	h.c.store.KServe = func(kind workload.Kind) (cache.GenericLister, schema.GroupVersionResource, bool) {
		if kind != workload.KindInferenceService || !served {
			return nil, schema.GroupVersionResource{}, false
		}
		return cache.NewGenericLister(idx, isvcGVR.GroupResource()), isvcGVR, true
	}
	h.kserveServed = func(b bool) { served = b }
	refresh = func() {
		h.refresh()
		var items []any
		u, err := dyn.Resource(isvcGVR).Namespace(ns).Get(context.Background(), "llm", metav1.GetOptions{})
		switch {
		case err == nil:
			// The cache holds what the KServe informers' transform keeps.
			items = append(items, workload.SlimKServe(u))
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

const isvcSurge = "inferenceservice-llm"

func TestInferenceServiceIsSurgedThroughItsSpecAndRestoredExactly(t *testing.T) {
	spec := map[string]any{"predictor": map[string]any{"maxReplicas": int64(1), "model": map[string]any{"modelFormat": map[string]any{"name": "vllm"}}}}
	h := newHarness(t, func(o *options.Options) { o.Restore = "pool" }, predictorOf(stalled())...)
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
	settle := func() {
		for range 6 {
			refresh()
			h.syncSurge(isvcSurge)
		}
		refresh()
	}

	// The state is a Surge in the namespace, never an annotation on the InferenceService (KServe
	// copies those into the pod template) or on the predictor (KServe deletes foreign annotations).
	h.syncNode("w1")
	s := h.mustSurge(isvcSurge)
	if s.Spec.Target.Kind != "InferenceService" || s.Spec.Target.UID != "isvc-uid" || s.Spec.PodOwner.Name != "model" {
		t.Fatalf("Surge spec = %+v", s.Spec)
	}
	if len(get().GetAnnotations()) != 1 || len(h.deployment(ns, "model").Annotations) != 0 {
		t.Fatal("the guardian annotated the InferenceService or its predictor")
	}
	// The fields, min and max together (validation rejects min > max).
	settle()
	min, _, _ := unstructured.NestedInt64(get().Object, "spec", "predictor", "minReplicas")
	max, _, _ := unstructured.NestedInt64(get().Object, "spec", "predictor", "maxReplicas")
	if min != 2 || max != 2 || h.phase(isvcSurge) != v1alpha1.PhaseSurged {
		t.Fatalf("after surge min/max = %d/%d, phase %s; want 2/2, Surged", min, max, h.phase(isvcSurge))
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeStarted, "spec.predictor.minReplicas from unset to 2")

	// Restore after the pool update: spec byte-for-byte as before, Surge gone.
	h.updatePool(true)
	settle()
	if after := get(); !reflect.DeepEqual(after.Object["spec"], before.Object["spec"]) {
		t.Fatalf("spec after restore = %v, want %v", after.Object["spec"], before.Object["spec"])
	}
	if h.surge(isvcSurge) != nil {
		t.Fatal("Surge left behind")
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, "spec.predictor.minReplicas to unset", "spec.predictor.maxReplicas to 1")
}

func TestInferenceServiceSurgeResumesAfterACrashBetweenSurgeAndFields(t *testing.T) {
	h := newHarness(t, nil, predictorOf(stalled())...)
	dyn := kserveClient(inferenceService(map[string]any{"predictor": map[string]any{}}))
	withInferenceService(t, h, dyn)
	h.syncNode("w1") // Surge persisted, then the guardian "crashes"

	second := restart(t, nil, h.kube, h.mco, h.dyn)
	withInferenceService(t, second, dyn)
	second.syncSurge(isvcSurge)
	u, _ := dyn.Resource(isvcGVR).Namespace(ns).Get(context.Background(), "llm", metav1.GetOptions{})
	if min, _, _ := unstructured.NestedInt64(u.Object, "spec", "predictor", "minReplicas"); min != 2 {
		t.Fatalf("restarted guardian did not complete the pending surge: minReplicas %d", min)
	}
}

// While KServe discovery has not found the kind (or its informer has not synced), the Surge is kept:
// "not served yet" is never taken for "deleted".
func TestInferenceServiceNotServedYetKeepsTheSurge(t *testing.T) {
	h := newHarness(t, nil, predictorOf(stalled())...)
	dyn := kserveClient(inferenceService(map[string]any{"predictor": map[string]any{}}))
	refresh := withInferenceService(t, h, dyn)
	h.syncNode("w1")
	refresh()
	h.syncSurge(isvcSurge)
	refresh()
	h.syncSurge(isvcSurge)
	if h.phase(isvcSurge) != v1alpha1.PhaseSurged {
		t.Fatalf("phase %s, want Surged", h.phase(isvcSurge))
	}
	restarted := restart(t, nil, h.kube, h.mco, h.dyn)
	r := withInferenceService(t, restarted, dyn)
	restarted.kserveServed(false)
	r()
	writes := len(restarted.writes())
	if after := restarted.syncSurge(isvcSurge); after <= 0 {
		t.Fatal("a Surge whose API is not available yet must be looked at again")
	}
	if restarted.surge(isvcSurge) == nil || len(restarted.writes()) != writes {
		t.Fatalf("the Surge was dropped or written while its API was not available: %v", restarted.writes()[writes:])
	}
	if evs := restarted.events(); len(evs) != 0 {
		t.Fatalf("events while waiting for the API: %v", evs)
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
	h.syncSurge(isvcSurge)
	u, _ = dyn.Resource(isvcGVR).Namespace(ns).Get(context.Background(), "llm", metav1.GetOptions{})
	if min, _, _ := unstructured.NestedInt64(u.Object, "spec", "predictor", "minReplicas"); min != 3 {
		t.Fatalf("minReplicas = %d, want their 3", min)
	}
	if h.surge(isvcSurge) != nil {
		t.Fatal("Surge not dropped")
	}
	requireEvent(t, h.events(), "Normal", ReasonExternalChange, "not surging")
}

func TestInferenceServiceDeletedDuringTheSurgeDropsTheSurge(t *testing.T) {
	h := newHarness(t, nil, predictorOf(stalled())...)
	dyn := kserveClient(inferenceService(map[string]any{"predictor": map[string]any{}}))
	refresh := withInferenceService(t, h, dyn)
	h.syncNode("w1")
	refresh()
	h.syncSurge(isvcSurge) // fields written
	if err := dyn.Resource(isvcGVR).Namespace(ns).Delete(context.Background(), "llm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	refresh()
	if after := h.syncSurge(isvcSurge); after != 0 {
		t.Fatalf("requeued after the InferenceService was deleted: %v", after)
	}
	if h.surge(isvcSurge) != nil {
		t.Fatal("Surge of a deleted InferenceService left")
	}
	requireEvent(t, h.events(), "Warning", ReasonWorkloadDeleted, "InferenceService llm was deleted during its surge")
	refresh()
	if after := h.syncSurge(isvcSurge); after != 0 || len(h.events()) != 0 {
		t.Fatal("the deletion is handled again on the next sync")
	}
}
