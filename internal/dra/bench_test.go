package dra

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimepkg "k8s.io/apimachinery/pkg/runtime"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// BenchmarkInventory is one analysis on a 1,000-node GPU fleet: 1,000 slices of eight GPUs, seven
// of each node's allocated, the inventory built, then a one-GPU replacement taken on the first node
// with a free device for each of 100 stalls (the class's CEL selector evaluated once per device).
func BenchmarkInventory(b *testing.B) {
	slices, claims, ns := fleet()
	classes := []*resourcev1.DeviceClass{gpuClass()}
	b.ReportAllocs()
	for b.Loop() {
		takeHundred(b, NewInventory(slices, claims, classes), ns)
	}
}

// BenchmarkInventoryCached is BenchmarkInventory through the InventoryCache of the same objects,
// none changed since the last analysis: listed and compared, not built again.
func BenchmarkInventoryCached(b *testing.B) {
	slices, claims, ns := fleet()
	sliceIdx, claimIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil), cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)
	for i, s := range slices {
		setVersion(s, fmt.Sprint(i+1))
		if err := sliceIdx.Add(s); err != nil {
			b.Fatal(err)
		}
	}
	for i, c := range claims {
		setVersion(c, fmt.Sprint(i+1))
		if err := claimIdx.Add(c); err != nil {
			b.Fatal(err)
		}
	}
	class := gpuClass()
	setVersion(class, "1")
	classIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)
	if err := classIdx.Add(class); err != nil {
		b.Fatal(err)
	}
	l := Listers{Slices: resourcelisters.NewResourceSliceLister(sliceIdx), Claims: resourcelisters.NewResourceClaimLister(claimIdx),
		Classes: resourcelisters.NewDeviceClassLister(classIdx)}
	var ic InventoryCache
	b.ReportAllocs()
	for b.Loop() {
		inv, err := ic.Inventory(l)
		if err != nil {
			b.Fatal(err)
		}
		takeHundred(b, inv, ns)
	}
}

// fleet is 1,000 nodes of eight GPUs each, seven of each node's allocated.
func fleet() ([]*resourcev1.ResourceSlice, []*resourcev1.ResourceClaim, []*corev1.Node) {
	const nodes, gpus = 1000, 8
	slices := make([]*resourcev1.ResourceSlice, nodes)
	claims := make([]*resourcev1.ResourceClaim, 0, nodes*(gpus-1))
	ns := make([]*corev1.Node, nodes)
	for i := range nodes {
		name := fmt.Sprintf("gpu-%04d", i)
		ns[i] = node(name, nil)
		devs := make([]resourcev1.Device, gpus)
		for j := range devs {
			devs[j] = gpu(fmt.Sprintf("gpu-%d", j), "a100")
			if j > 0 {
				claims = append(claims, allocated(fmt.Sprintf("%s-%d", name, j), name, devs[j].Name))
			}
		}
		slices[i] = nodeSlice(name, 1, devs...)
	}
	return slices, claims, ns
}

// takeHundred takes a one-GPU replacement for each of 100 stalls on the first node with a free GPU.
func takeHundred(b *testing.B, inv *Inventory, ns []*corev1.Node) {
	need, next := Extended(class, 1), 0
	for range 100 {
		for next < len(ns) && inv.Take(ns[next], need, false).Verdict != Fits {
			next++
		}
	}
	if next != 99 {
		b.Fatalf("the 100th replacement went to node %d, want 99", next)
	}
}

// BenchmarkCacheBytes is the heap a cached ResourceSlice and ResourceClaim take, as the API returns
// them (managedFields included) and as Slim keeps them: 1,000 of each decoded from JSON, as an
// informer decodes them. The slice is one node of eight GPUs with the attributes the NVIDIA DRA
// driver publishes; the claim an allocated one-GPU claim with opaque driver configuration.
func BenchmarkCacheBytes(b *testing.B) {
	devs := make([]resourcev1.Device, 8)
	for i := range devs {
		devs[i] = gpu(fmt.Sprintf("gpu-%d", i), "NVIDIA H100 80GB HBM3")
		for k, v := range map[resourcev1.QualifiedName]string{"architecture": "Hopper", "brand": "Nvidia", "type": "gpu",
			"uuid": fmt.Sprintf("GPU-%08d-1f2e-3d4c-5b6a-%012d", i, i), "driverVersion": "570.124.6", "cudaDriverVersion": "12.8.0",
			"cudaComputeCapability": "9.0", "resource.kubernetes.io/pcieRoot": fmt.Sprintf("pci0000:%02x", i)} {
			devs[i].Attributes[k] = resourcev1.DeviceAttribute{StringValue: ptr.To(v)}
		}
		devs[i].Capacity = map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}}
	}
	managed := []metav1.ManagedFieldsEntry{{Manager: "gpu-kubelet-plugin", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "resource.k8s.io/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:devices":{},"f:driver":{},"f:nodeName":{},"f:pool":{"f:generation":{},"f:name":{},"f:resourceSliceCount":{}}}}`)}}}
	slice := nodeSlice("gpu-a", 1, devs...)
	slice.ManagedFields = managed
	claim := allocated("llm-5d8f7-x2v9q-gpu-7hjkq", "gpu-a", "gpu-0")
	claim.ManagedFields = managed
	claim.Spec.Devices = exactly(1, "")
	claim.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
		Driver: driver, Parameters: runtimepkg.RawExtension{Raw: []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`)}}}}}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "llm-5d8f7-x2v9q", UID: "0b9c1f7e-5d4c-4b3a-9f8e-7d6c5b4a3f2e"}}
	for _, tc := range []struct {
		kind   string
		obj    any
		decode func([]byte) (any, error)
	}{
		{"resourceslice", slice, func(raw []byte) (any, error) { var o resourcev1.ResourceSlice; return &o, json.Unmarshal(raw, &o) }},
		{"resourceclaim", claim, func(raw []byte) (any, error) { var o resourcev1.ResourceClaim; return &o, json.Unmarshal(raw, &o) }},
	} {
		raw, err := json.Marshal(tc.obj)
		if err != nil {
			b.Fatal(err)
		}
		for _, variant := range []string{"full", "slim"} {
			b.Run(tc.kind+"/"+variant, func(b *testing.B) {
				const n = 1000
				for b.Loop() {
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					kept := make([]any, n)
					for i := range kept {
						o, err := tc.decode(raw)
						if err != nil {
							b.Fatal(err)
						}
						if variant == "slim" {
							o, _ = Slim(o)
						}
						kept[i] = o
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/object")
					runtime.KeepAlive(kept)
				}
			})
		}
	}
}
