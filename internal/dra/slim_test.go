package dra

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// The transform drops what the count does not read, and the count answers the same from the slimmed
// objects as from the full ones.
func TestSlimKeepsWhatTheCountReads(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "driver"}}
	opaque := resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: driver,
		Parameters: runtime.RawExtension{Raw: []byte(`{"sharing":{"strategy":"TimeSlicing"}}`)}}}

	partitioned := gpu("gpu-1", "h100")
	partitioned.ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-1-memory"}}
	slice := nodeSlice("gpu-a", 3, gpu("gpu-0", "a100"), partitioned)
	slice.ManagedFields = managed
	slice.Spec.SharedCounters = []resourcev1.CounterSet{{Name: "gpu-1-memory"}}

	claim := allocated("model-0-gpu", "gpu-a", "gpu-0")
	claim.ManagedFields = managed
	claim.Spec.Devices = exactly(1, "")
	claim.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: opaque}}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "model-0", UID: "p"}}
	claim.Status.Devices = []resourcev1.AllocatedDeviceStatus{{Driver: driver, Pool: "gpu-a", Device: "gpu-0", Data: &runtime.RawExtension{Raw: []byte(`{}`)}}}
	claim.Status.Allocation.Devices.Config = []resourcev1.DeviceAllocationConfiguration{{DeviceConfiguration: opaque}}

	class := gpuClass()
	class.ManagedFields = managed
	class.Spec.Config = []resourcev1.DeviceClassConfiguration{{DeviceConfiguration: opaque}}
	class.Spec.ExtendedResourceName = ptr.To("nvidia.com/gpu")

	tmpl := template("one-gpu", claim.Spec.Devices)
	tmpl.ManagedFields = managed

	slim := func(o any) any {
		out, err := Slim(o)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	s := slim(slice.DeepCopy()).(*resourcev1.ResourceSlice)
	c := slim(claim.DeepCopy()).(*resourcev1.ResourceClaim)
	dc := slim(class.DeepCopy()).(*resourcev1.DeviceClass)
	tm := slim(tmpl.DeepCopy()).(*resourcev1.ResourceClaimTemplate)
	if s.ManagedFields != nil || c.ManagedFields != nil || dc.ManagedFields != nil || tm.ManagedFields != nil {
		t.Error("managed fields kept")
	}
	if s.Spec.SharedCounters != nil || c.Spec.Devices.Config != nil || c.Status.ReservedFor != nil || c.Status.Devices != nil ||
		c.Status.Allocation.Devices.Config != nil || dc.Spec.Config != nil || tm.Spec.Spec.Devices.Config != nil {
		t.Error("configuration, consumers or device status kept")
	}
	if pod := (&corev1.Pod{}); slim(pod) != any(pod) {
		t.Error("another kind is changed")
	}

	n := node("gpu-a", nil)
	for _, need := range []Need{Extended(class.Name, 1), Extended(class.Name, 2)} {
		full := NewInventory([]*resourcev1.ResourceSlice{slice}, nil, []*resourcev1.DeviceClass{class}).Fit(n, need)
		lean := NewInventory([]*resourcev1.ResourceSlice{s}, nil, []*resourcev1.DeviceClass{dc}).Fit(n, need)
		if !reflect.DeepEqual(full, lean) {
			t.Errorf("need %+v: full objects %+v, slimmed %+v", need, full, lean)
		}
	}
	objsFull := objects{claims: map[string]*resourcev1.ResourceClaim{"models/c": claim}, templates: map[string]*resourcev1.ResourceClaimTemplate{"models/t": tmpl}}
	objsLean := objects{claims: map[string]*resourcev1.ResourceClaim{"models/c": c}, templates: map[string]*resourcev1.ResourceClaimTemplate{"models/t": tm}}
	podClaims := []corev1.PodResourceClaim{{Name: "a", ResourceClaimName: ptr.To("c")}, {Name: "b", ResourceClaimTemplateName: ptr.To("t")}}
	if a, b := NeedOf("models", podClaims, objsFull), NeedOf("models", podClaims, objsLean); !reflect.DeepEqual(a, b) {
		t.Errorf("need from full objects %+v, from slimmed %+v", a, b)
	}
	full := NewInventory([]*resourcev1.ResourceSlice{slice}, []*resourcev1.ResourceClaim{claim}, []*resourcev1.DeviceClass{class})
	lean := NewInventory([]*resourcev1.ResourceSlice{s}, []*resourcev1.ResourceClaim{c}, []*resourcev1.DeviceClass{dc})
	if a, b := full.Fit(n, Extended(class.Name, 1)), lean.Fit(n, Extended(class.Name, 1)); !reflect.DeepEqual(a, b) || a.Verdict != Unknown {
		t.Errorf("with the allocation: full %+v, slimmed %+v; want Unknown (only the partitioned device free)", a, b)
	}
	if cl, ok := lean.ExtendedClass("nvidia.com/gpu"); !ok || cl != class.Name {
		t.Errorf("extended resource name lost: %q %v", cl, ok)
	}
}

// The GPUs of a slice with the same capacities share one map in the cache; a device with other
// capacities, or with a request policy (consumable capacity), keeps its own, and every device reads
// the capacities it was published with.
func TestSlimSharesEqualCapacities(t *testing.T) {
	capacity := func(mem string) map[resourcev1.QualifiedName]resourcev1.DeviceCapacity {
		return map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse(mem)}, "cores": {Value: resource.MustParse("132")}}
	}
	devs := []resourcev1.Device{gpu("gpu-0", "h100"), gpu("gpu-1", "h100"), gpu("gpu-2", "h100"), gpu("gpu-3", "h100")}
	devs[0].Capacity, devs[1].Capacity, devs[2].Capacity = capacity("80Gi"), capacity("80Gi"), capacity("40Gi")
	devs[3].Capacity = capacity("80Gi")
	devs[3].Capacity["memory"] = resourcev1.DeviceCapacity{Value: resource.MustParse("80Gi"),
		RequestPolicy: &resourcev1.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("1Gi"))}}
	full := nodeSlice("gpu-a", 1, devs...)
	s := SlimSlice(full.DeepCopy())
	same := func(i, j int) bool {
		return reflect.ValueOf(s.Spec.Devices[i].Capacity).UnsafePointer() == reflect.ValueOf(s.Spec.Devices[j].Capacity).UnsafePointer()
	}
	if !same(0, 1) {
		t.Error("two GPUs of 80Gi keep a map each")
	}
	if same(0, 2) || same(0, 3) {
		t.Error("a GPU of 40Gi, or one with a request policy, shares the map of the 80Gi GPUs")
	}
	for i := range devs {
		if !apiequality.Semantic.DeepEqual(s.Spec.Devices[i].Capacity, full.Spec.Devices[i].Capacity) {
			t.Errorf("device %d: capacity %v, published %v", i, s.Spec.Devices[i].Capacity, full.Spec.Devices[i].Capacity)
		}
	}
}
