package dra

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	driver = "gpu.example.com"
	class  = "gpu.example.com"
)

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func gpu(name, model string) resourcev1.Device {
	return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		"model": {StringValue: ptr.To(model)}}}
}

// nodeSlice is what a driver publishes for one node: its GPUs, in a pool named after the node.
func nodeSlice(nodeName string, gen int64, devices ...resourcev1.Device) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-" + driver},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(nodeName), Devices: devices,
			Pool: resourcev1.ResourcePool{Name: nodeName, Generation: gen, ResourceSliceCount: 1}},
	}
}

func deviceClass(name string, selectors ...string) *resourcev1.DeviceClass {
	c := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, s := range selectors {
		c.Spec.Selectors = append(c.Spec.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s}})
	}
	return c
}

// gpuClass selects the driver's devices as the NVIDIA DRA driver's gpu.nvidia.com class does.
func gpuClass() *resourcev1.DeviceClass {
	return deviceClass(class, `device.driver == "`+driver+`"`)
}

// allocated is a claim whose allocation holds the named devices of the node's pool.
func allocated(name, nodeName string, devices ...string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "models"}}
	c.Status.Allocation = &resourcev1.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}}}}}}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourcev1.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: nodeName, Device: d})
	}
	return c
}

func exactly(count int64, mode resourcev1.DeviceAllocationMode, selectors ...string) resourcev1.DeviceClaim {
	e := &resourcev1.ExactDeviceRequest{DeviceClassName: class, Count: count, AllocationMode: mode}
	for _, s := range selectors {
		e.Selectors = append(e.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s}})
	}
	return resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: e}}}
}

type objects struct {
	claims    map[string]*resourcev1.ResourceClaim
	templates map[string]*resourcev1.ResourceClaimTemplate
}

func (o objects) ResourceClaim(ns, name string) (*resourcev1.ResourceClaim, bool) {
	c, ok := o.claims[ns+"/"+name]
	return c, ok
}

func (o objects) ResourceClaimTemplate(ns, name string) (*resourcev1.ResourceClaimTemplate, bool) {
	t, ok := o.templates[ns+"/"+name]
	return t, ok
}

func template(name string, dc resourcev1.DeviceClaim) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "models"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: dc}}}
}

func want(t *testing.T, what string, got Result, v Verdict, missing map[string]int64) {
	t.Helper()
	if got.Verdict != v || (missing != nil && !reflect.DeepEqual(got.Missing, missing)) {
		t.Errorf("%s: %s missing %v (%s), want %s missing %v", what, got.Verdict, got.Missing, got.Reason, v, missing)
	}
}

// A replacement whose GPU comes from a ResourceClaimTemplate needs a new device: it fits where one
// is free, not where the only device is allocated to the original's claim. A replacement sharing
// the original's allocated claim needs no device, but only the original's node reaches it.
func TestTemplateAndSharedClaims(t *testing.T) {
	a, b := node("gpu-a", nil), node("gpu-b", nil)
	inv := NewInventory(
		[]*resourcev1.ResourceSlice{nodeSlice("gpu-a", 1, gpu("gpu-0", "a100")), nodeSlice("gpu-b", 1, gpu("gpu-0", "a100"))},
		[]*resourcev1.ResourceClaim{allocated("model-0-gpu", "gpu-a", "gpu-0")},
		[]*resourcev1.DeviceClass{gpuClass()})
	objs := objects{
		claims:    map[string]*resourcev1.ResourceClaim{"models/shared": allocated("shared", "gpu-a", "gpu-0")},
		templates: map[string]*resourcev1.ResourceClaimTemplate{"models/one-gpu": template("one-gpu", exactly(1, ""))},
	}

	fromTemplate := NeedOf("models", []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}, objs)
	want(t, "template claim on the node whose device is allocated", inv.Fit(a, fromTemplate), DoesNotFit, map[string]int64{class: 1})
	r := inv.Fit(b, fromTemplate)
	want(t, "template claim on the node with a free device", r, Fits, nil)
	if !reflect.DeepEqual(r.Devices, []DeviceID{{driver, "gpu-b", "gpu-0"}}) {
		t.Errorf("devices = %v, want gpu-b's gpu-0", r.Devices)
	}

	shared := NeedOf("models", []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("shared")}}, objs)
	if len(shared.Requests) != 0 {
		t.Errorf("a shared allocated claim asks for new devices: %+v", shared.Requests)
	}
	want(t, "shared claim elsewhere", inv.Fit(b, shared), DoesNotFit, nil)
	want(t, "shared claim on its node", inv.Fit(a, shared), Fits, nil)

	missing := NeedOf("models", []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gone")}}, objs)
	if r := inv.Fit(b, missing); r.Verdict != DoesNotFit || r.Reason == "" {
		t.Errorf("a missing template: %s (%q), want DoesNotFit with a reason", r.Verdict, r.Reason)
	}
}

// Take books what a replacement takes: the next replacement of the wave no longer finds it, and
// a device reachable from several nodes is booked for all of them.
func TestTakeBooks(t *testing.T) {
	sel := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}}}}}}
	rack := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "rack-r1"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: driver, NodeSelector: sel, Pool: resourcev1.ResourcePool{Name: "rack-r1", Generation: 1, ResourceSliceCount: 1},
		Devices: []resourcev1.Device{gpu("fabric-0", "a100")}}}
	x, y, z := node("x", map[string]string{"rack": "r1"}), node("y", map[string]string{"rack": "r1"}), node("z", map[string]string{"rack": "r2"})
	inv := NewInventory([]*resourcev1.ResourceSlice{rack, nodeSlice("x", 1, gpu("gpu-0", "a100"))}, nil, []*resourcev1.DeviceClass{gpuClass()})
	one := Extended(class, 1)

	if sure, _ := inv.Free(x); sure[class] != 2 {
		t.Errorf("free on x = %v, want 2 (its own and the rack's)", sure)
	}
	if sure, _ := inv.Free(z); sure[class] != 0 {
		t.Errorf("free on z = %v, want none: the rack's selector excludes it", sure)
	}
	want(t, "first on x", inv.Take(x, one, false), Fits, nil)
	want(t, "second on x", inv.Take(x, one, false), Fits, nil)
	want(t, "third on x", inv.Take(x, one, false), DoesNotFit, map[string]int64{class: 1})
	want(t, "on y, the rack's device booked from x", inv.Fit(y, one), DoesNotFit, map[string]int64{class: 1})

	all := NewInventory([]*resourcev1.ResourceSlice{{ObjectMeta: metav1.ObjectMeta{Name: "everywhere"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: driver, AllNodes: ptr.To(true), Pool: resourcev1.ResourcePool{Name: "net", Generation: 1, ResourceSliceCount: 1},
		Devices: []resourcev1.Device{gpu("net-0", "a100")}}}}, nil, []*resourcev1.DeviceClass{gpuClass()})
	want(t, "allNodes device from z", all.Take(z, one, false), Fits, nil)
	want(t, "allNodes device again from x", all.Fit(x, one), DoesNotFit, nil)
}

// A clone books apart from its original: a ledger that places the same replacements on every
// check starts each from a clone of one inventory.
func TestCloneBooksApart(t *testing.T) {
	n := node("gpu-a", nil)
	inv := NewInventory([]*resourcev1.ResourceSlice{nodeSlice("gpu-a", 1, gpu("gpu-0", "a100"), gpu("gpu-1", "a100"))},
		[]*resourcev1.ResourceClaim{allocated("c", "gpu-a", "gpu-0")}, []*resourcev1.DeviceClass{gpuClass()})
	one := Extended(class, 1)
	c := inv.Clone()
	want(t, "on the clone", c.Take(n, one, false), Fits, nil)
	want(t, "again on the clone", c.Fit(n, one), DoesNotFit, map[string]int64{class: 1})
	want(t, "on the original", inv.Fit(n, one), Fits, nil)
	want(t, "on a second clone", inv.Clone().Take(n, one, false), Fits, nil)
	want(t, "the allocated device stays taken on clones", inv.Clone().Fit(n, Extended(class, 2)), DoesNotFit, map[string]int64{class: 1})
}

// ExactCount asks for count devices; All for every matching device the node reaches, none of them
// in use.
func TestCountAndAllModes(t *testing.T) {
	n := node("gpu-a", nil)
	slices := []*resourcev1.ResourceSlice{nodeSlice("gpu-a", 1, gpu("gpu-0", "a100"), gpu("gpu-1", "a100"), gpu("gpu-2", "a100"))}
	classes := []*resourcev1.DeviceClass{gpuClass()}
	need := func(dc resourcev1.DeviceClaim) Need {
		return NeedOf("models", []corev1.PodResourceClaim{{Name: "g", ResourceClaimTemplateName: ptr.To("t")}},
			objects{templates: map[string]*resourcev1.ResourceClaimTemplate{"models/t": template("t", dc)}})
	}
	free := NewInventory(slices, nil, classes)
	busy := NewInventory(slices, []*resourcev1.ResourceClaim{allocated("c", "gpu-a", "gpu-1")}, classes)

	want(t, "2 of 3 free", free.Fit(n, need(exactly(2, resourcev1.DeviceAllocationModeExactCount))), Fits, nil)
	want(t, "2 of 2 free", busy.Fit(n, need(exactly(2, resourcev1.DeviceAllocationModeExactCount))), Fits, nil)
	want(t, "3 of 2 free", busy.Fit(n, need(exactly(3, resourcev1.DeviceAllocationModeExactCount))), DoesNotFit, map[string]int64{class: 1})
	want(t, "count defaults to 1", busy.Fit(n, need(exactly(0, ""))), Fits, nil)

	r := free.Fit(n, need(exactly(0, resourcev1.DeviceAllocationModeAll)))
	want(t, "All, all free", r, Fits, nil)
	if len(r.Devices) != 3 {
		t.Errorf("All took %v, want the 3 devices", r.Devices)
	}
	want(t, "All, one in use", busy.Fit(n, need(exactly(0, resourcev1.DeviceAllocationModeAll))), DoesNotFit, map[string]int64{class: 1})
	want(t, "All on a node without devices", free.Fit(node("cpu", nil), need(exactly(0, resourcev1.DeviceAllocationModeAll))), DoesNotFit, map[string]int64{class: 1})

	admin := exactly(1, "")
	admin.Requests[0].Exactly.AdminAccess = ptr.To(true)
	if got := need(admin); len(got.Requests) != 0 {
		t.Errorf("an admin-access request asks for devices: %+v", got.Requests)
	}
}

// CEL selectors of the class and of the request are evaluated as the scheduler does: a free device
// they exclude is not counted. firstAvailable falls back to the next subrequest.
func TestSelectors(t *testing.T) {
	n := node("gpu-a", nil)
	slices := []*resourcev1.ResourceSlice{nodeSlice("gpu-a", 1, gpu("gpu-0", "a100"), gpu("gpu-1", "h100"))}
	claims := []*resourcev1.ResourceClaim{allocated("c", "gpu-a", "gpu-1")}
	h100 := `device.attributes["` + driver + `"].model == "h100"`
	inv := NewInventory(slices, claims, []*resourcev1.DeviceClass{gpuClass(), deviceClass("h100", `device.driver == "`+driver+`"`, h100)})
	templ := func(dc resourcev1.DeviceClaim) Need {
		return NeedOf("models", []corev1.PodResourceClaim{{Name: "g", ResourceClaimTemplateName: ptr.To("t")}},
			objects{templates: map[string]*resourcev1.ResourceClaimTemplate{"models/t": template("t", dc)}})
	}

	want(t, "any GPU", inv.Fit(n, templ(exactly(1, ""))), Fits, nil)
	want(t, "request selects the allocated h100", inv.Fit(n, templ(exactly(1, "", h100))), DoesNotFit, map[string]int64{class: 1})
	want(t, "class selects the allocated h100", inv.Fit(n, Extended("h100", 1)), DoesNotFit, map[string]int64{"h100": 1})
	want(t, "selector that does not compile", inv.Fit(n, templ(exactly(1, "", "device.driver =="))), DoesNotFit, nil)
	want(t, "unknown class", inv.Fit(n, Extended("nope", 1)), DoesNotFit, map[string]int64{"nope": 1})
	if sure, _ := inv.Free(n); sure[class] != 1 || sure["h100"] != 0 {
		t.Errorf("free = %v, want 1 %s and 0 h100", sure, class)
	}

	first := resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "g", FirstAvailable: []resourcev1.DeviceSubRequest{
		{Name: "h100", DeviceClassName: "h100"}, {Name: "any", DeviceClassName: class}}}}}
	r := inv.Fit(n, templ(first))
	want(t, "firstAvailable falls back", r, Fits, nil)
	if !reflect.DeepEqual(r.Devices, []DeviceID{{driver, "gpu-a", "gpu-0"}}) {
		t.Errorf("firstAvailable took %v, want the free a100", r.Devices)
	}
	first.Requests[0].FirstAvailable[1].Count = 2
	want(t, "firstAvailable, no subrequest fits", inv.Fit(n, templ(first)), DoesNotFit, map[string]int64{"h100": 1})
}

// An extended resource name maps to the class that declares it (the newest when several do) or to
// the class its implicit name names.
func TestExtendedResourceMapping(t *testing.T) {
	old := gpuClass()
	old.Spec.ExtendedResourceName = ptr.To("nvidia.com/gpu")
	old.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	newer := deviceClass("gpu-newer", `device.driver == "`+driver+`"`)
	newer.Spec.ExtendedResourceName = ptr.To("nvidia.com/gpu")
	newer.CreationTimestamp = metav1.NewTime(old.CreationTimestamp.Add(time.Hour))
	inv := NewInventory([]*resourcev1.ResourceSlice{nodeSlice("gpu-a", 1, gpu("gpu-0", "a100"))}, nil, []*resourcev1.DeviceClass{old, newer})

	c, ok := inv.ExtendedClass("nvidia.com/gpu")
	if !ok || c != "gpu-newer" {
		t.Errorf("nvidia.com/gpu maps to %q %v, want the newer class", c, ok)
	}
	if c, ok := inv.ExtendedClass(corev1.ResourceName(resourcev1.ResourceDeviceClassPrefix + class)); !ok || c != class {
		t.Errorf("the implicit name maps to %q %v, want %s", c, ok, class)
	}
	if _, ok := inv.ExtendedClass(corev1.ResourceName(resourcev1.ResourceDeviceClassPrefix + "absent")); ok {
		t.Error("the implicit name of a class that does not exist maps")
	}
	if _, ok := inv.ExtendedClass("example.com/fpga"); ok {
		t.Error("an unmapped name maps")
	}
	n := node("gpu-a", nil)
	requests := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("4")}
	need, rest := inv.ExtendedNeed(requests, n)
	if len(need.Requests) != 1 || !reflect.DeepEqual(need.Requests[0].Alternatives, []Alternative{{Class: "gpu-newer", Count: 1}}) || len(rest) != 1 || rest.Cpu().Value() != 4 {
		t.Errorf("on a DRA node: need %+v, rest %v; want one gpu-newer device and the CPUs", need.Requests, rest)
	}
	plugin := node("plugin", nil)
	plugin.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("0")}
	if need, rest := inv.ExtendedNeed(requests, plugin); len(need.Requests) != 0 || len(rest) != 2 {
		t.Errorf("on a device plugin's node: need %+v, rest %v; want everything left to the allocatable check", need.Requests, rest)
	}
	want(t, "one nvidia.com/gpu", inv.Take(n, need, false), Fits, nil)
	want(t, "another nvidia.com/gpu", inv.Fit(n, Extended(c, 1)), DoesNotFit, map[string]int64{"gpu-newer": 1})
}

// Only the newest generation of a pool counts. A pool still being republished gives devices by
// count, but none for allocationMode All.
func TestPoolGenerations(t *testing.T) {
	n := node("gpu-a", nil)
	old := nodeSlice("gpu-a", 1, gpu("gpu-0", "a100"), gpu("gpu-1", "a100"))
	cur := nodeSlice("gpu-a", 2, gpu("gpu-0", "a100"))
	cur.Name = "gpu-a-2"
	classes := []*resourcev1.DeviceClass{gpuClass()}
	inv := NewInventory([]*resourcev1.ResourceSlice{old, cur}, []*resourcev1.ResourceClaim{allocated("c", "gpu-a", "gpu-0")}, classes)
	want(t, "gpu-1 only in the old generation", inv.Fit(n, Extended(class, 1)), DoesNotFit, map[string]int64{class: 1})

	cur.Spec.Pool.ResourceSliceCount = 2
	partial := NewInventory([]*resourcev1.ResourceSlice{cur, old}, nil, classes)
	want(t, "by count from an incomplete pool", partial.Fit(n, Extended(class, 1)), Fits, nil)
	all := Need{Requests: []Request{{Name: "all", Alternatives: []Alternative{{Class: class, All: true}}}}}
	want(t, "All from a complete pool", inv.Fit(n, all), DoesNotFit, map[string]int64{class: 1})
	want(t, "All from an incomplete pool", partial.Fit(n, all), DoesNotFit, map[string]int64{class: 1})
	cur.Spec.Pool.ResourceSliceCount = 1
	want(t, "All from a complete pool, nothing allocated", NewInventory([]*resourcev1.ResourceSlice{old, cur}, nil, classes).Fit(n, all), Fits, nil)
}

// What the count cannot judge is Unknown, and Take books it only when told to.
func TestUnknownDevices(t *testing.T) {
	n := node("gpu-a", nil)
	tainted := gpu("gpu-0", "a100")
	tainted.Taints = []resourcev1.DeviceTaint{{Key: "maintenance", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
	inv := NewInventory([]*resourcev1.ResourceSlice{nodeSlice("gpu-a", 1, tainted)}, nil, []*resourcev1.DeviceClass{gpuClass()})
	if sure, maybe := inv.Free(n); sure[class] != 0 || maybe[class] != 1 {
		t.Errorf("free = %v sure, %v maybe; want the tainted device as maybe", sure, maybe)
	}
	want(t, "tainted device", inv.Take(n, Extended(class, 1), false), Unknown, nil)
	want(t, "not booked", inv.Take(n, Extended(class, 1), true), Unknown, nil)
	want(t, "booked when unknown is accepted", inv.Fit(n, Extended(class, 1)), DoesNotFit, map[string]int64{class: 1})

	constrained := NewInventory([]*resourcev1.ResourceSlice{nodeSlice("gpu-a", 1, gpu("gpu-0", "a100"))}, nil, []*resourcev1.DeviceClass{gpuClass()})
	dc := exactly(1, "")
	dc.Constraints = []resourcev1.DeviceConstraint{{MatchAttribute: ptr.To[resourcev1.FullyQualifiedName](driver + "/model")}}
	need := NeedOf("models", []corev1.PodResourceClaim{{Name: "g", ResourceClaimTemplateName: ptr.To("t")}},
		objects{templates: map[string]*resourcev1.ResourceClaimTemplate{"models/t": template("t", dc)}})
	want(t, "constraints", constrained.Fit(n, need), Unknown, nil)
}

// FreeOn counts each free device once, however many of the nodes reach it, and leaves out the
// allocated ones and those of other classes.
func TestFreeOnCountsEachDeviceOnce(t *testing.T) {
	shared := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "fabric"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: driver, AllNodes: ptr.To(true), Devices: []resourcev1.Device{gpu("gpu-f", "h100")},
		Pool: resourcev1.ResourcePool{Name: "fabric", Generation: 1, ResourceSliceCount: 1}}}
	slices := []*resourcev1.ResourceSlice{nodeSlice("a", 1, gpu("gpu-0", "h100"), gpu("gpu-1", "h100")), nodeSlice("b", 1, gpu("gpu-0", "h100")), shared}
	other := deviceClass("fpga", `device.driver == "fpga.example.com"`)
	inv := NewInventory(slices, []*resourcev1.ResourceClaim{allocated("busy", "a", "gpu-1")}, []*resourcev1.DeviceClass{gpuClass(), other})
	got := inv.FreeOn([]*corev1.Node{node("a", nil), node("b", nil)})
	if !reflect.DeepEqual(got, map[string]int64{class: 3}) {
		t.Errorf("FreeOn = %v, want 3 of %s (a's free GPU, b's, the fabric's once)", got, class)
	}
}
