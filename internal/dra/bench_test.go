package dra

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
)

// BenchmarkInventory is one analysis on a 1,000-node GPU fleet: 1,000 slices of eight GPUs, seven
// of each node's allocated, the inventory built, then a one-GPU replacement taken on the first node
// with a free device for each of 100 stalls (the class's CEL selector evaluated once per device).
func BenchmarkInventory(b *testing.B) {
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
	classes := []*resourcev1.DeviceClass{gpuClass()}
	need := Extended(class, 1)
	b.ReportAllocs()
	for b.Loop() {
		inv := NewInventory(slices, claims, classes)
		next := 0
		for range 100 {
			for next < nodes && inv.Take(ns[next], need, false).Verdict != Fits {
				next++
			}
		}
		if next != 99 {
			b.Fatalf("the 100th replacement went to node %d, want 99", next)
		}
	}
}
