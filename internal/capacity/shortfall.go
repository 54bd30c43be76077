package capacity

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
)

// Shortfall is what the copies of a pod that fit nowhere lack.
type Shortfall struct {
	// Resources is what they request: resources by name, devices of a DeviceClass as
	// DeviceClassResource.
	Resources corev1.ResourceList
	// Unsure says why devices the count cannot judge were not counted (see Devices.UnknownFits).
	Unsure string
	// Refused says why devices were refused for a reason other than their number: a claim or
	// template not found, a shared claim's devices out of the node's reach.
	Refused string
	// Nodes, for groups (FitGroups), counts the pods of the groups that fit nowhere: each needs a
	// node of its own; PerNode is what the first of them requests.
	Nodes   int
	PerNode corev1.ResourceList
	// Domain, for groups with an exclusive topology, says why no topology domain could take one.
	Domain string
}

// DescribeResources lists resources as "1 device of class gpu.example.com, 1 nvidia.com/gpu, 4 cpu",
// devices first, then extended resources: what a NoCapacity report says is missing.
func DescribeResources(rl corev1.ResourceList) string {
	names := make([]string, 0, len(rl))
	for name := range rl {
		names = append(names, string(name))
	}
	rank := func(name string) int {
		switch {
		case IsDevices(name):
			return 0
		case IsExtended(name):
			return 1
		}
		return 2
	}
	sort.Slice(names, func(i, j int) bool {
		if ri, rj := rank(names[i]), rank(names[j]); ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	parts := make([]string, 0, len(names))
	for _, n := range names {
		q := rl[corev1.ResourceName(n)]
		if class, ok := strings.CutPrefix(n, resourcev1.ResourceDeviceClassPrefix); ok {
			unit := "device"
			if q.Value() != 1 {
				unit = "devices"
			}
			parts = append(parts, fmt.Sprintf("%s %s of class %s", q.String(), unit, class))
			continue
		}
		parts = append(parts, q.String()+" "+n)
	}
	if len(parts) == 0 {
		return "nothing measurable (taints, affinity or node readiness keep the replacements out)"
	}
	return strings.Join(parts, ", ")
}
