package dra

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

type classLister []*resourcev1.DeviceClass

func (l classLister) List() ([]*resourcev1.DeviceClass, error) { return l, nil }

func (l classLister) Get(name string) (*resourcev1.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, apierrors.NewNotFound(resourcev1.Resource("deviceclasses"), name)
}

// The count agrees with the scheduler's own allocator (k8s.io/dynamic-resource-allocation/structured,
// with the features Kubernetes 1.34 enables by default) on random clusters: node-local slices, an
// older generation of a pool, a rack of devices behind a node selector, allocated devices, classes
// and request selectors, count and All modes, firstAvailable, and what Take booked for an earlier
// replacement. With one request per claim the
// answers are equal; with several, the count (which does not backtrack) may only miss a fit the
// allocator finds, never claim one it does not.
func TestAgreesWithTheSchedulersAllocator(t *testing.T) {
	ctx := context.Background()
	h100 := `device.attributes["` + driver + `"].model == "h100"`
	classes := classLister{gpuClass(), deviceClass("h100", `device.driver == "`+driver+`"`, h100)}
	rng := rand.New(rand.NewPCG(23, 1))
	models := []string{"a100", "h100"}
	missed := 0
	for scenario := range 400 {
		var slices []*resourcev1.ResourceSlice
		var all []DeviceID
		nodes := []*corev1.Node{node("n0", map[string]string{"rack": "r1"}), node("n1", map[string]string{"rack": "r1"}), node("n2", nil)}
		for _, n := range nodes {
			devs := make([]resourcev1.Device, rng.IntN(4))
			for i := range devs {
				devs[i] = gpu(fmt.Sprintf("gpu-%d", i), models[rng.IntN(2)])
				all = append(all, DeviceID{driver, n.Name, devs[i].Name})
			}
			gen := int64(1 + rng.IntN(2))
			slices = append(slices, nodeSlice(n.Name, gen, devs...))
			if gen == 2 { // the previous generation, with one more device the scheduler must ignore
				old := nodeSlice(n.Name, 1, append(devs, gpu("gpu-old", "h100"))...)
				old.Name += "-old"
				slices = append(slices, old)
			}
		}
		if rng.IntN(2) == 0 {
			rack := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "rack"}, Spec: resourcev1.ResourceSliceSpec{
				Driver: driver, Pool: resourcev1.ResourcePool{Name: "rack", Generation: 1, ResourceSliceCount: 1},
				NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}}}}}},
				Devices: []resourcev1.Device{gpu("fabric-0", models[rng.IntN(2)])}}}
			slices = append(slices, rack)
			all = append(all, DeviceID{driver, "rack", "fabric-0"})
		}
		// The order in which the informer lists slices is not the order of generations.
		rng.Shuffle(len(slices), func(i, j int) { slices[i], slices[j] = slices[j], slices[i] })
		inUse := sets.New[structured.DeviceID]()
		var claims []*resourcev1.ResourceClaim
		for _, d := range all {
			if rng.IntN(3) == 0 {
				inUse.Insert(structured.MakeDeviceID(d.Driver, d.Pool, d.Device))
				c := allocated("c-"+d.Pool+"-"+d.Device, d.Pool, d.Device)
				claims = append(claims, c)
			}
		}
		dc := randomClaim(rng, h100)
		inv := NewInventory(slices, claims, classes)
		alloc, err := structured.NewAllocator(ctx, structured.Features{AdminAccess: true, PrioritizedList: true},
			structured.AllocatedState{AllocatedDevices: inUse}, classes, slices, dracel.NewCache(10, dracel.Features{}))
		if err != nil {
			t.Fatal(err)
		}
		claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "replacement", Namespace: "models", UID: "r"},
			Spec: resourcev1.ResourceClaimSpec{Devices: dc}}
		need := Need{}
		need.add(dc)
		compare := func(n *corev1.Node, ours Result, alloc structured.Allocator) {
			results, err := alloc.Allocate(ctx, n, []*resourcev1.ResourceClaim{claim})
			if err != nil {
				t.Fatalf("scenario %d, node %s: allocator: %v", scenario, n.Name, err)
			}
			theirs := results != nil
			switch {
			case ours.Verdict == Unknown:
				t.Errorf("scenario %d, node %s: Unknown (%s) without any feature the count cannot judge", scenario, n.Name, ours.Reason)
			case ours.Verdict == Fits && !theirs:
				t.Errorf("scenario %d, node %s: the count fits %+v where the allocator does not", scenario, n.Name, dc.Requests)
			case ours.Verdict == DoesNotFit && theirs && len(dc.Requests) == 1:
				t.Errorf("scenario %d, node %s: the count misses the allocator's fit %+v for %+v", scenario, n.Name, results, dc.Requests)
			case ours.Verdict == DoesNotFit && theirs:
				missed++
			}
		}
		for _, n := range nodes {
			compare(n, inv.Fit(n, need), alloc)
		}
		// A replacement booked on the first node: the allocator, told its devices are in use,
		// agrees on the second (the rack's devices reach both).
		r := inv.Take(nodes[0], need, false)
		if r.Verdict != Fits {
			continue
		}
		for _, d := range r.Devices {
			inUse.Insert(structured.MakeDeviceID(d.Driver, d.Pool, d.Device))
		}
		after, err := structured.NewAllocator(ctx, structured.Features{AdminAccess: true, PrioritizedList: true},
			structured.AllocatedState{AllocatedDevices: inUse}, classes, slices, dracel.NewCache(10, dracel.Features{}))
		if err != nil {
			t.Fatal(err)
		}
		compare(nodes[1], inv.Fit(nodes[1], need), after)
	}
	t.Logf("fits missed by not backtracking (several requests per claim): %d", missed)
}

// randomClaim is one or two requests: exactly (either class, a count of 1 to 3 or All, sometimes a
// selector) or firstAvailable of two such subrequests.
func randomClaim(rng *rand.Rand, h100 string) resourcev1.DeviceClaim {
	classes := []string{class, "h100"}
	var dc resourcev1.DeviceClaim
	for i := range 1 + rng.IntN(2) {
		name := fmt.Sprintf("r%d", i)
		mode, count := resourcev1.DeviceAllocationModeExactCount, int64(1+rng.IntN(3))
		if rng.IntN(5) == 0 {
			mode, count = resourcev1.DeviceAllocationModeAll, 0
		}
		var sel []resourcev1.DeviceSelector
		if rng.IntN(4) == 0 {
			sel = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: h100}}}
		}
		if rng.IntN(4) == 0 {
			dc.Requests = append(dc.Requests, resourcev1.DeviceRequest{Name: name, FirstAvailable: []resourcev1.DeviceSubRequest{
				{Name: "a", DeviceClassName: classes[rng.IntN(2)], AllocationMode: mode, Count: count, Selectors: sel},
				{Name: "b", DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1},
			}})
			continue
		}
		dc.Requests = append(dc.Requests, resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{
			DeviceClassName: classes[rng.IntN(2)], AllocationMode: mode, Count: count, Selectors: sel}})
	}
	return dc
}
