package dra

import (
	"sort"
	"strings"
	"unique"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Slim is an informer transform for the resource.k8s.io/v1 kinds the count reads: each keeps its
// identity and what the Inventory and NeedOf read, and drops the rest (managed fields, opaque driver
// configuration of up to 10 KiB per entry, device status data, a claim's consumers, binding
// conditions). Any other object is returned unchanged.
func Slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *resourcev1.ResourceSlice:
		return SlimSlice(o), nil
	case *resourcev1.ResourceClaim:
		return SlimClaim(o), nil
	case *resourcev1.ResourceClaimTemplate:
		return &resourcev1.ResourceClaimTemplate{ObjectMeta: slimMeta(o.ObjectMeta),
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: slimClaimSpec(o.Spec.Spec)}}, nil
	case *resourcev1.DeviceClass:
		return &resourcev1.DeviceClass{ObjectMeta: slimMeta(o.ObjectMeta),
			Spec: resourcev1.DeviceClassSpec{Selectors: o.Spec.Selectors, ExtendedResourceName: o.Spec.ExtendedResourceName}}, nil
	}
	return obj, nil
}

// slimMeta keeps the identity, the creation time (which class wins an extended resource name) and
// the owners (a generated claim's pod).
func slimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp, OwnerReferences: m.OwnerReferences}
}

// SlimSlice keeps the driver, the pool, where the devices are reachable and, per device, its name,
// attributes and capacity (what CEL selectors read), where it is reachable, and the fields that make
// the count unsure of it (taints, counters, multiple allocations, binding conditions) reduced to
// their presence: the pool's shared counters are dropped. Devices of the slice with the same
// capacities share one map (the cache is read, never written).
func SlimSlice(s *resourcev1.ResourceSlice) *resourcev1.ResourceSlice {
	out := &resourcev1.ResourceSlice{ObjectMeta: slimMeta(s.ObjectMeta), Spec: resourcev1.ResourceSliceSpec{
		Driver: s.Spec.Driver, Pool: s.Spec.Pool, NodeName: s.Spec.NodeName, NodeSelector: s.Spec.NodeSelector,
		AllNodes: s.Spec.AllNodes, PerDeviceNodeSelection: s.Spec.PerDeviceNodeSelection,
		Devices: make([]resourcev1.Device, len(s.Spec.Devices)),
	}}
	capacities := map[string]map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{}
	for i, d := range s.Spec.Devices {
		sd := resourcev1.Device{Name: d.Name, Attributes: internAttributes(d.Attributes), Capacity: shareCapacity(capacities, d.Capacity),
			NodeName: d.NodeName, NodeSelector: d.NodeSelector, AllNodes: d.AllNodes,
			Taints: d.Taints, AllowMultipleAllocations: d.AllowMultipleAllocations, BindsToNode: d.BindsToNode}
		if len(d.ConsumesCounters) > 0 {
			sd.ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: d.ConsumesCounters[0].CounterSet}}
		}
		if len(d.BindingConditions) > 0 {
			sd.BindingConditions = []string{d.BindingConditions[0]}
		}
		out.Spec.Devices[i] = sd
	}
	return out
}

// SlimClaim keeps the requests and constraints (a shared claim not yet allocated is counted from
// them) and, of the status, the allocated devices and the node selector of the allocation.
func SlimClaim(c *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
	out := &resourcev1.ResourceClaim{ObjectMeta: slimMeta(c.ObjectMeta), Spec: slimClaimSpec(c.Spec)}
	if a := c.Status.Allocation; a != nil {
		results := make([]resourcev1.DeviceRequestAllocationResult, len(a.Devices.Results))
		for i, r := range a.Devices.Results {
			results[i] = resourcev1.DeviceRequestAllocationResult{Request: r.Request, Driver: r.Driver, Pool: r.Pool,
				Device: r.Device, AdminAccess: r.AdminAccess, ShareID: r.ShareID}
		}
		out.Status.Allocation = &resourcev1.AllocationResult{NodeSelector: a.NodeSelector,
			Devices: resourcev1.DeviceAllocationResult{Results: results}}
	}
	return out
}

func slimClaimSpec(s resourcev1.ResourceClaimSpec) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: s.Devices.Requests, Constraints: s.Devices.Constraints}}
}

// shareCapacity returns the map of seen equal to capacity, or capacity after adding it: the GPUs of
// a node mostly have the same memory, and a decoded map costs more than the rest of the device. A
// map with a request policy (consumable capacity, per device) is kept as it is.
func shareCapacity(seen map[string]map[resourcev1.QualifiedName]resourcev1.DeviceCapacity, capacity map[resourcev1.QualifiedName]resourcev1.DeviceCapacity) map[resourcev1.QualifiedName]resourcev1.DeviceCapacity {
	if len(capacity) == 0 {
		return capacity
	}
	names := make([]string, 0, len(capacity))
	for name, c := range capacity {
		if c.RequestPolicy != nil {
			return capacity
		}
		names = append(names, string(name))
	}
	sort.Strings(names)
	var key strings.Builder
	for _, name := range names {
		key.WriteString(name)
		key.WriteByte('=')
		value := capacity[resourcev1.QualifiedName(name)].Value
		key.WriteString(value.String())
		key.WriteByte(0)
	}
	if shared, ok := seen[key.String()]; ok {
		return shared
	}
	seen[key.String()] = capacity
	return capacity
}

// internAttributes copies a device's attributes with their names and string values interned: the
// devices of a node, and the nodes of a fleet, repeat the same names and mostly the same values
// (model, architecture, driver version), which decoding allocates anew for every device.
func internAttributes(in map[resourcev1.QualifiedName]resourcev1.DeviceAttribute) map[resourcev1.QualifiedName]resourcev1.DeviceAttribute {
	if in == nil {
		return nil
	}
	out := make(map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, len(in))
	for k, v := range in {
		if v.StringValue != nil {
			s := unique.Make(*v.StringValue).Value()
			v.StringValue = &s
		}
		if v.VersionValue != nil {
			s := unique.Make(*v.VersionValue).Value()
			v.VersionValue = &s
		}
		out[resourcev1.QualifiedName(unique.Make(string(k)).Value())] = v
	}
	return out
}
