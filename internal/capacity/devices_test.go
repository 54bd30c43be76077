package capacity

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/internal/dra"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// draObjects serves the one template the tests' pods use.
type draObjects struct {
	template *resourcev1.ResourceClaimTemplate
}

func (draObjects) ResourceClaim(string, string) (*resourcev1.ResourceClaim, bool) { return nil, false }
func (o draObjects) ResourceClaimTemplate(_, name string) (*resourcev1.ResourceClaimTemplate, bool) {
	return o.template, o.template != nil && o.template.Name == name
}

// oneGPUPerNode publishes one DRA GPU of class "gpu" on each node; extended maps nvidia.com/gpu to
// the class (KEP-5004) when set.
func oneGPUPerNode(extended bool, nodes ...string) *Devices {
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}}
	if extended {
		class.Spec.ExtendedResourceName = ptr.To(string(gpu))
	}
	var slices []*resourcev1.ResourceSlice
	for _, n := range nodes {
		slices = append(slices, &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: n}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "gpu.example.com", NodeName: ptr.To(n), Pool: resourcev1.ResourcePool{Name: n, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "gpu-0"}}}})
	}
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourcev1.ResourceClaimTemplateSpec{
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu"}}}}}}}
	return &Devices{Inventory: dra.NewInventory(slices, nil, []*resourcev1.DeviceClass{class}), Objects: draObjects{tmpl}}
}

// claimPod takes its GPU through the "gpu" template.
func claimPod(name, node string) *podinfo.Pod {
	p := gpuPod(name, node, 0)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}}
	return podinfo.From(p)
}

// A pending replacement books the device it will take: the next pod finds none, and its shortfall
// names the DeviceClass. Fit books on a copy: the next Fit starts over.
func TestFitBooksDevices(t *testing.T) {
	devs := oneGPUPerNode(false, "node-b", "node-c")
	cands := candidates([]cand{{Node: readyNode("node-b", 0)}, {Node: readyNode("node-c", 0)}})
	pending := []*podinfo.Pod{claimPod("pending", "")}
	placed, short := New(cands, Standard(devs)...).Fit(claimPod("blocked", "node-a"), 2, pending)
	if placed != 1 {
		t.Fatalf("placed %d, want 1 (two devices, one booked by the pending replacement)", placed)
	}
	if got, want := DescribeResources(short.Resources), "1 device of class gpu, 1 cpu"; got != want {
		t.Errorf("missing %q, want %q", got, want)
	}
	if again, _ := New(cands, Standard(devs)...).Fit(claimPod("blocked", "node-a"), 1, nil); again != 1 {
		t.Errorf("a second Fit placed %d, want 1: the first one's bookings leaked", again)
	}
}

// An nvidia.com/gpu request on nodes that do not advertise it is served by the class that the
// extended resource name maps to; without the mapping it fits nowhere.
func TestFitCountsExtendedResourcesServedByDevices(t *testing.T) {
	cands := candidates([]cand{{Node: readyNode("node-b", 0)}})
	pod := podinfo.From(gpuPod("blocked", "node-a", 1))
	if placed, _ := New(cands, Standard(oneGPUPerNode(true, "node-b"))...).Fit(pod, 1, nil); placed != 1 {
		t.Errorf("placed %d with nvidia.com/gpu mapped to a DeviceClass, want 1", placed)
	}
	placed, short := New(cands, Standard(oneGPUPerNode(false, "node-b"))...).Fit(pod, 1, nil)
	if q := short.Resources[gpu]; placed != 0 || !q.Equal(resource.MustParse("1")) {
		t.Errorf("placed %d missing %v without the mapping, want 0 and 1 nvidia.com/gpu", placed, short.Resources)
	}
}

// A replacement whose ResourceClaimTemplate does not exist fits nowhere, and the shortfall says why.
func TestFitSaysWhyAClaimIsRefused(t *testing.T) {
	devs := oneGPUPerNode(false, "node-b")
	pod := claimPod("blocked", "node-a")
	pod.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To("deleted")
	placed, short := New(candidates([]cand{{Node: readyNode("node-b", 0)}}), Standard(devs)...).Fit(pod, 1, nil)
	if placed != 0 || short.Refused != "ResourceClaimTemplate models/deleted not found" {
		t.Errorf("placed %d refused %q, want 0 and the template not found", placed, short.Refused)
	}
}
