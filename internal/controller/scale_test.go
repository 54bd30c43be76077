package controller

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

var notebookGVR = schema.GroupVersionResource{Group: "example.io", Version: "v1", Resource: "notebooks"}

// ownedByNotebook makes the model Deployment controlled by a custom "Notebook" whose controller owns
// the replica count, and serves that kind, with or without a /scale subresource.
func ownedByNotebook(t *testing.T, withScale bool) (*harness, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	objs := stalled()
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			d.OwnerReferences = []metav1.OwnerReference{{APIVersion: "example.io/v1", Kind: "Notebook", Name: "nb", UID: "nb-uid", Controller: ptr.To(true)}}
		}
	}
	h := newHarness(t, nil, objs...)
	resources := []metav1.APIResource{{Name: "notebooks", Kind: "Notebook", Namespaced: true}}
	if withScale {
		resources = append(resources, metav1.APIResource{Name: "notebooks/scale", Kind: "Scale", Group: "autoscaling", Version: "v1", Namespaced: true})
	}
	fd := h.kube.Discovery().(*fakediscovery.FakeDiscovery)
	fd.Resources = append(fd.Resources, &metav1.APIResourceList{GroupVersion: "example.io/v1", APIResources: resources})
	// The fake dynamic client serves the owner itself for its /scale subresource: the fields the
	// guardian reads and writes (/spec/replicas, metadata) are at the same paths.
	nb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.io/v1", "kind": "Notebook",
		"metadata": map[string]any{"name": "nb", "namespace": ns, "uid": "nb-uid", "resourceVersion": "1"},
		"spec":     map[string]any{"replicas": int64(1)},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{notebookGVR: "NotebookList"}, nb)
	h.c.store.Dynamic = dyn
	return h, dyn
}

func TestUnknownOwnerWithScaleIsSurgedThroughScale(t *testing.T) {
	h, dyn := ownedByNotebook(t, true)
	h.syncNode("w1")
	s := h.mustSurge("notebook-nb")
	if s.Spec.Target.Resource != "notebooks" || s.Spec.Target.APIVersion != "example.io/v1" || s.Spec.Target.UID != "nb-uid" {
		t.Fatalf("Surge target = %+v, want notebooks/scale", s.Spec.Target)
	}
	h.refresh()
	h.syncSurge("notebook-nb")
	if *h.deployment(ns, "model").Spec.Replicas != 1 {
		t.Fatal("the Deployment was scaled behind its owner's back")
	}
	scaled := false
	for _, a := range dyn.Actions() {
		if a.GetVerb() == "patch" && a.GetSubresource() == "scale" {
			scaled = true
		}
	}
	nb, _ := dyn.Resource(notebookGVR).Namespace(ns).Get(context.Background(), "nb", metav1.GetOptions{})
	if r, _, _ := unstructured.NestedInt64(nb.Object, "spec", "replicas"); !scaled || r != 2 {
		t.Fatalf("owner not scaled through /scale (patched via scale: %v, replicas %d)", scaled, r)
	}
}

func TestUnknownOwnerWithoutScaleIsReported(t *testing.T) {
	h, _ := ownedByNotebook(t, false)
	h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("scaled a workload whose owner has no /scale: %v", w)
	}
	requireEvent(t, h.events(), "Warning", ReasonUnsupportedOwner, "no /scale subresource")
}

func TestUnknownOwnerWithoutScalePermissionTellsWhatToGrant(t *testing.T) {
	h, dyn := ownedByNotebook(t, true)
	dyn.PrependReactor("get", "notebooks", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(notebookGVR.GroupResource(), "nb", nil)
	})
	h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("wrote without being allowed to read the owner's scale: %v", w)
	}
	requireEvent(t, h.events(), "Warning", ReasonUnsupportedOwner, `grant get and patch on notebooks/scale in API group "example.io"`)
}
