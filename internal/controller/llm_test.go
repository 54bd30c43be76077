package controller

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

var llmGVR = schema.GroupVersionResource{Group: "serving.kserve.io", Version: "v1alpha2", Resource: "llminferenceservices"}

const llmSurge = "llminferenceservice-llm"

// With OpenShift AI 3.4 semantics an absent spec.replicas keeps the Deployment's count: the restore
// writes the original count, waits until the Deployment has caught up with it (spec, observed
// generation and pods), and only then removes the field, so the workload ends at its original count.
func TestLLMInferenceServiceKeepSemanticsRestoreEndsAtTheOriginalCount(t *testing.T) {
	objs := stalled()
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			d.OwnerReferences = []metav1.OwnerReference{{APIVersion: "serving.kserve.io/v1alpha2", Kind: "LLMInferenceService",
				Name: "llm", UID: "llm-uid", Controller: ptr.To(true)}}
		}
	}
	h := newHarness(t, func(o *options.Options) { o.Restore = "pool"; o.LLMNilSemantics = "keep" }, objs...)
	llm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
		"metadata": map[string]any{"name": "llm", "namespace": ns, "uid": "llm-uid", "resourceVersion": "1"},
		"spec":     map[string]any{"model": map[string]any{"uri": "hf://x"}},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{llmGVR: "LLMInferenceServiceList"}, llm)
	h.c.store.Dynamic = dyn
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	h.c.store.KServe = func(kind workload.Kind) (cache.GenericLister, schema.GroupVersionResource, bool) {
		return cache.NewGenericLister(idx, llmGVR.GroupResource()), llmGVR, kind == workload.KindLLMInferenceService
	}
	get := func() *unstructured.Unstructured {
		u, err := dyn.Resource(llmGVR).Namespace(ns).Get(context.Background(), "llm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	refresh := func() {
		h.refresh()
		// The cache holds what the KServe informers' transform keeps.
		if err := idx.Replace([]any{workload.SlimKServe(get())}, ""); err != nil {
			t.Fatal(err)
		}
	}
	// kserve sets the Deployment from the LLMInferenceService, as the real controller does.
	setDeployment := func(spec, status, updated int32, generation, observed int64) {
		d := h.deployment(ns, "model")
		d.Spec.Replicas = ptr.To(spec)
		d.Generation, d.Status.ObservedGeneration = generation, observed
		d.Status.Replicas, d.Status.UpdatedReplicas = status, updated
		if _, err := h.kube.AppsV1().Deployments(ns).Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	replicas := func() (int64, bool) {
		v, found, _ := unstructured.NestedInt64(get().Object, "spec", "replicas")
		return v, found
	}
	refresh()
	h.syncNode("w1")
	for range 3 {
		refresh()
		h.syncSurge(llmSurge)
	}
	if v, ok := replicas(); !ok || v != 2 {
		t.Fatalf("spec.replicas after surge = %d (set %v), want 2", v, ok)
	}
	setDeployment(2, 2, 2, 2, 2)
	h.updatePool(true)
	for range 3 { // Restoring, explicit count written
		refresh()
		h.syncSurge(llmSurge)
	}
	if v, ok := replicas(); !ok || v != 1 {
		t.Fatalf("first restore step: spec.replicas = %d (set %v), want the explicit original 1", v, ok)
	}
	// KServe set the Deployment to 1, but its status still shows 2 pods: the field must stay.
	setDeployment(1, 2, 1, 3, 3)
	for range 3 {
		refresh()
		h.syncSurge(llmSurge)
	}
	if _, ok := replicas(); !ok {
		t.Fatal("the explicit count was removed before the Deployment scaled down: KServe would keep 2 replicas")
	}
	setDeployment(1, 1, 1, 3, 3)
	for range 3 {
		refresh()
		h.syncSurge(llmSurge)
	}
	if _, ok := replicas(); ok {
		t.Fatal("spec.replicas still set after the Deployment scaled down to its original count")
	}
	if h.surge(llmSurge) != nil {
		t.Fatal("Surge left behind")
	}
	if d := h.deployment(ns, "model"); *d.Spec.Replicas != 1 {
		t.Fatalf("Deployment replicas %d, want the original 1", *d.Spec.Replicas)
	}
}
