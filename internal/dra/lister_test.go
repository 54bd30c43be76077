package dra

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// The count reads the informers' caches of slimmed objects through Listers: the inventory from
// everything cached, a pod's claims and templates from its namespace.
func TestListers(t *testing.T) {
	indexer := func(objs ...any) cache.Indexer {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			s, err := Slim(o)
			if err != nil {
				t.Fatal(err)
			}
			if err := idx.Add(s); err != nil {
				t.Fatal(err)
			}
		}
		return idx
	}
	l := Listers{
		Slices:    resourcelisters.NewResourceSliceLister(indexer(nodeSlice("gpu-a", 1, gpu("gpu-0", "a100")), nodeSlice("gpu-b", 1, gpu("gpu-0", "a100")))),
		Claims:    resourcelisters.NewResourceClaimLister(indexer(allocated("model-0-gpu", "gpu-a", "gpu-0"))),
		Templates: resourcelisters.NewResourceClaimTemplateLister(indexer(template("one-gpu", exactly(1, "")))),
		Classes:   resourcelisters.NewDeviceClassLister(indexer(gpuClass())),
	}
	inv, err := l.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	need := NeedOf("models", []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}, l)
	want(t, "from the template, on the node whose device is allocated", inv.Fit(node("gpu-a", nil), need), DoesNotFit, map[string]int64{class: 1})
	want(t, "from the template, on the free node", inv.Fit(node("gpu-b", nil), need), Fits, nil)
	shared := NeedOf("models", []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("model-0-gpu")}}, l)
	want(t, "the shared claim, elsewhere", inv.Fit(node("gpu-b", nil), shared), DoesNotFit, nil)
	if other := NeedOf("other", []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}, l); other.Unresolved == "" {
		t.Error("a template of another namespace was found")
	}
}
