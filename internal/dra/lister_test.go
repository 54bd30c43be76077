package dra

import (
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// indexer is an informer's cache of objs as the transform keeps them, each with a UID and a
// resourceVersion as an API server gives them.
func indexer(t *testing.T, objs ...any) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for i, o := range objs {
		s, err := Slim(o)
		if err != nil {
			t.Fatal(err)
		}
		setVersion(s, fmt.Sprint(i+1))
		if err := idx.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

func setVersion(obj any, rv string) {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(err)
	}
	m.SetUID(types.UID("uid-" + m.GetName()))
	m.SetResourceVersion(rv)
}

// The count reads the informers' caches of slimmed objects through Listers: the inventory from
// everything cached, a pod's claims and templates from its namespace.
func TestListers(t *testing.T) {
	l := Listers{
		Slices:    resourcelisters.NewResourceSliceLister(indexer(t, nodeSlice("gpu-a", 1, gpu("gpu-0", "a100")), nodeSlice("gpu-b", 1, gpu("gpu-0", "a100")))),
		Claims:    resourcelisters.NewResourceClaimLister(indexer(t, allocated("model-0-gpu", "gpu-a", "gpu-0"))),
		Templates: resourcelisters.NewResourceClaimTemplateLister(indexer(t, template("one-gpu", exactly(1, "")))),
		Classes:   resourcelisters.NewDeviceClassLister(indexer(t, gpuClass())),
	}
	var ic InventoryCache
	inv, err := ic.Inventory(l)
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

// The cache builds the inventory again only when a slice, claim or class changed, and what one
// caller books is never seen by the next: a claim allocated on the free node's device makes it
// taken; until then every caller finds it free, whatever the callers before it took.
func TestInventoryCacheFollowsTheCaches(t *testing.T) {
	slices := indexer(t, nodeSlice("gpu-a", 1, gpu("gpu-0", "a100")), nodeSlice("gpu-b", 1, gpu("gpu-0", "a100")))
	claims := indexer(t, allocated("model-0-gpu", "gpu-a", "gpu-0"))
	l := Listers{Slices: resourcelisters.NewResourceSliceLister(slices), Claims: resourcelisters.NewResourceClaimLister(claims),
		Classes: resourcelisters.NewDeviceClassLister(indexer(t, gpuClass()))}
	var ic InventoryCache
	b := node("gpu-b", nil)
	get := func() *Inventory {
		t.Helper()
		inv, err := ic.Inventory(l)
		if err != nil {
			t.Fatal(err)
		}
		return inv
	}
	first := get()
	built := ic.inv
	want(t, "first caller", first.Take(b, Extended(class, 1), false), Fits, nil)
	want(t, "next caller, nothing changed", get().Take(b, Extended(class, 1), false), Fits, nil)
	if ic.inv != built {
		t.Error("the inventory was built again although nothing changed")
	}

	// The resource claim controller allocates gpu-b's device: a new object, a new resourceVersion.
	claim := allocated("model-1-gpu", "gpu-b", "gpu-0")
	setVersion(claim, "9")
	if err := claims.Add(claim); err != nil {
		t.Fatal(err)
	}
	want(t, "after the allocation", get().Fit(b, Extended(class, 1)), DoesNotFit, map[string]int64{class: 1})

	// The claim is deallocated: the same object at a new resourceVersion.
	freed := claim.DeepCopy()
	freed.Status.Allocation = nil
	setVersion(freed, "10")
	if err := claims.Update(freed); err != nil {
		t.Fatal(err)
	}
	want(t, "after the deallocation", get().Fit(b, Extended(class, 1)), Fits, nil)

	// Objects without a resourceVersion cannot be told from their next version: never cached.
	bare := allocated("model-2-gpu", "gpu-b", "gpu-0")
	if err := claims.Add(bare); err != nil {
		t.Fatal(err)
	}
	want(t, "with an unversioned claim", get().Fit(b, Extended(class, 1)), DoesNotFit, nil)
	if err := claims.Delete(bare); err != nil {
		t.Fatal(err)
	}
	want(t, "unversioned claim gone", get().Fit(b, Extended(class, 1)), Fits, nil)
}

// Workers check capacity at the same time on forks of one cached inventory: the selectors' verdicts
// are remembered per fork, so nothing is written that another reads (go test -race fails otherwise).
func TestInventoryForksAreIndependent(t *testing.T) {
	devs := make([]resourcev1.Device, 8)
	for i := range devs {
		devs[i] = gpu(fmt.Sprintf("gpu-%d", i), "a100")
	}
	l := Listers{Slices: resourcelisters.NewResourceSliceLister(indexer(t, nodeSlice("gpu-a", 1, devs...))),
		Claims: resourcelisters.NewResourceClaimLister(indexer(t)), Classes: resourcelisters.NewDeviceClassLister(indexer(t, gpuClass()))}
	var ic InventoryCache
	a := node("gpu-a", nil)
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inv, err := ic.Inventory(l)
			if err != nil {
				errs <- err.Error()
				return
			}
			for i := range 8 {
				if r := inv.Take(a, Extended(class, 1), false); r.Verdict != Fits {
					errs <- fmt.Sprintf("GPU %d of 8: %s", i+1, r.Verdict)
				}
			}
			if r := inv.Fit(a, Extended(class, 1)); r.Verdict != DoesNotFit {
				errs <- fmt.Sprintf("a ninth GPU: %s", r.Verdict)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
