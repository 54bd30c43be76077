package controller

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/internal/check"
	"github.com/drain-guardian/drain-guardian/internal/options"
)

// The DeviceClass and driver of the tests' DRA GPUs.
const (
	gpuClass  = "gpu.example.com"
	gpuDriver = "gpu.example.com"
)

// draAPI is the discovery entry of resource.k8s.io/v1.
var draAPI = &metav1.APIResourceList{
	GroupVersion: resourcev1.SchemeGroupVersion.String(),
	APIResources: []metav1.APIResource{{Name: "resourceslices"}, {Name: "resourceclaims", Namespaced: true},
		{Name: "resourceclaimtemplates", Namespaced: true}, {Name: "deviceclasses"}},
}

// draNode is a Ready worker whose one GPU is a DRA device, not an extended resource.
func draNode(name string) *corev1.Node {
	n := gpuNode(name)
	delete(n.Status.Allocatable, "nvidia.com/gpu")
	return n
}

// draSlice publishes the node's one GPU; tainted marks it with a device taint, which the count
// cannot judge.
func draSlice(node string, tainted bool) *resourcev1.ResourceSlice {
	d := resourcev1.Device{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		"model": {StringValue: ptr.To("H100")}}}
	if tainted {
		d.Taints = []resourcev1.DeviceTaint{{Key: "example.com/unhealthy", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
	}
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourcev1.ResourceSliceSpec{Driver: gpuDriver, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}, Devices: []resourcev1.Device{d}},
	}
}

func draClass() *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: gpuClass}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + gpuDriver + `"`}}}}}
}

// allocatedClaim is a claim allocated the GPU of node.
func allocatedClaim(name, node string, pinned bool) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: gpuClass}}}}},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: gpuDriver, Pool: node, Device: "gpu-0"}}}}}}
	if pinned {
		c.Status.Allocation.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}
	}
	return c
}

func gpuTemplate() *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: gpuClass}}}}}}}
}

// draModel is the single-replica model on w1 taking its GPU through claim (a template's or a
// shared claim's), and requesting no extended resource.
func draModel(claim corev1.PodResourceClaim) []runtime.Object {
	objs := model(1, "w1")
	p := objs[2].(*corev1.Pod)
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *p.Spec.Containers[0].Resources.Requests.Cpu()}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{claim}
	return objs
}

var fromTemplate = corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}

// draCluster is a draining w1 whose model holds its GPU, and a spare w2 with one GPU; w2Busy
// allocates w2's GPU to another claim, w2Tainted taints it.
func draCluster(claim corev1.PodResourceClaim, w2Busy, w2Tainted bool) []runtime.Object {
	objs := []runtime.Object{namespace(ns), draining(draNode("w1")), draNode("w2"), workerPool(true), pdb(0, 1, 1),
		draClass(), gpuTemplate(), draSlice("w1", false), draSlice("w2", w2Tainted), allocatedClaim("model-abc-a-gpu", "w1", true)}
	if w2Busy {
		objs = append(objs, allocatedClaim("other-gpu", "w2", true))
	}
	return append(objs, draModel(claim)...)
}

// A replacement taking its GPU through a ResourceClaimTemplate needs a new device: with w2's free,
// the stall is surged.
func TestDRATemplateClaimWithAFreeDeviceSurges(t *testing.T) {
	h := newHarnessServing(t, nil, []*metav1.APIResourceList{draAPI}, draCluster(fromTemplate, false, false)...)
	h.syncNode("w1")
	if h.surge(depSurge) == nil {
		t.Fatalf("no Surge with a free device on w2; events %v", h.events())
	}
}

// With no free device the stall is deferred: NoCapacity names the DeviceClass, in the Event and in
// drain_guardian_missing_capacity.
func TestDRATemplateClaimWithoutAFreeDeviceIsNoCapacity(t *testing.T) {
	h := newHarnessServing(t, nil, []*metav1.APIResourceList{draAPI}, draCluster(fromTemplate, true, false)...)
	h.syncNode("w1")
	if s := h.surge(depSurge); s != nil {
		t.Fatalf("Surge %s made although no device is free", s.Name)
	}
	requireEvent(t, h.events(), corev1.EventTypeWarning, ReasonNoCapacity, "missing 1 device of class "+gpuClass)
	res := "deviceclass.resource.kubernetes.io/" + gpuClass
	if got := testutil.ToFloat64(h.metrics.MissingCapacity.WithLabelValues("worker", res)); got != 1 {
		t.Errorf("missing_capacity{resource=%q} = %v, want 1", res, got)
	}

	// The claim holding w2's GPU is deallocated: the stall is looked at again at once.
	for h.c.queue.Len() > 0 {
		k, _ := h.c.queue.Get()
		h.c.queue.Done(k)
	}
	busy := allocatedClaim("other-gpu", "w2", true)
	freed := busy.DeepCopy()
	freed.Status.Allocation = nil
	h.c.claimHandler().OnUpdate(busy, busy)
	if n := h.c.queue.Len(); n != 0 {
		t.Fatalf("%d keys queued for a claim update that freed nothing", n)
	}
	h.c.claimHandler().OnUpdate(busy, freed)
	if h.c.queue.Len() != 1 {
		t.Fatalf("%d keys queued after a device was freed, want node w1", h.c.queue.Len())
	}
	if k, _ := h.c.queue.Get(); k.Node != "w1" {
		t.Fatalf("queued %v after a device was freed, want node w1", k)
	}
}

// A shared ResourceClaim stays with its devices: the replacement takes no new one, and surges
// although no device is free.
func TestDRASharedClaimNeedsNoDevice(t *testing.T) {
	objs := draCluster(corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To("shared")}, true, false)
	objs = append(objs, allocatedClaim("shared", "network", false))
	h := newHarnessServing(t, nil, []*metav1.APIResourceList{draAPI}, objs...)
	h.syncNode("w1")
	if h.surge(depSurge) == nil {
		t.Fatalf("no Surge for a replacement sharing an allocated claim; events %v", h.events())
	}
}

// A device the count cannot judge (a device taint) takes a replacement only when the operator
// opted in with --dra-unknown-fits; otherwise the stall is deferred and the reason reported.
func TestDRAUnknownDeviceSurgesOnlyWhenOptedIn(t *testing.T) {
	h := newHarnessServing(t, nil, []*metav1.APIResourceList{draAPI}, draCluster(fromTemplate, false, true)...)
	h.syncNode("w1")
	if s := h.surge(depSurge); s != nil {
		t.Fatalf("Surge %s made on a device the count cannot judge, without --dra-unknown-fits", s.Name)
	}
	requireEvent(t, h.events(), corev1.EventTypeWarning, ReasonNoCapacity, "device taints", "--dra-unknown-fits")

	h = newHarnessServing(t, func(o *options.Options) { o.DRAUnknownFits = true }, []*metav1.APIResourceList{draAPI},
		draCluster(fromTemplate, false, true)...)
	h.syncNode("w1")
	if h.surge(depSurge) == nil {
		t.Fatalf("no Surge with --dra-unknown-fits; events %v", h.events())
	}
}

// check predicts the same: a replacement that finds no free device is NoCapacity, missing a device
// of the class.
func TestDRAPredictedMissingDevice(t *testing.T) {
	objs := draCluster(fromTemplate, true, false)
	objs[1] = draNode("w1") // not draining: a prediction of the next update
	objs[3] = workerPool(false)
	h := newHarnessServing(t, nil, []*metav1.APIResourceList{draAPI}, objs...)
	h.c.newPredictor().predict()
	if got := testutil.ToFloat64(h.metrics.PredictedBlocks.WithLabelValues("worker", string(check.NoCapacity))); got != 1 {
		t.Errorf("predicted_blocks{verdict=no-capacity} = %v, want 1", got)
	}
	requireEvent(t, h.events(), corev1.EventTypeWarning, ReasonUpdateWillStall, "no-capacity", "device of class "+gpuClass)
	res := "deviceclass.resource.kubernetes.io/" + gpuClass
	if got := testutil.ToFloat64(h.metrics.PredictedMissingCapacity.WithLabelValues("worker", res)); got != 1 {
		t.Errorf("predicted_missing_capacity{resource=%q} = %v, want 1", res, got)
	}

	// With w2's GPU free the surge is predicted to take it.
	objs = draCluster(fromTemplate, false, false)
	objs[1], objs[3] = draNode("w1"), workerPool(false)
	r, err := newHarnessServing(t, nil, []*metav1.APIResourceList{draAPI}, objs...).c.reconcile.pool.predict(PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := check.Resource{Name: res, Peak: 1, Free: 1}
	if got := r.Pools[0].Plan.Resources; len(got) != 1 || got[0] != want {
		t.Errorf("plan resources %+v, want %+v", got, want)
	}
}
