// Package dra counts the devices Dynamic Resource Allocation (resource.k8s.io/v1) can give a
// replacement pod: per node, the devices ResourceSlices publish, minus those allocated to existing
// ResourceClaims and those booked for the replacements already counted. It is pure: the caller
// reads slices, claims, classes and templates from listers.
//
// It follows the scheduler's structured allocator (k8s.io/dynamic-resource-allocation v0.34
// structured/internal/stable: pools_stable.go, allocator_stable.go) where that is decidable from
// the cached objects, and answers Unknown where it is not (device taints, partitionable devices,
// consumable capacity, devices shared between claims, binding conditions, constraints between the
// devices of a claim). Unlike the allocator it does not backtrack: requests are satisfied greedily
// in order, which can only answer DoesNotFit where the scheduler would find a place, never the
// reverse.
package dra

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// DeviceID names a device as an allocation result does.
type DeviceID struct{ Driver, Pool, Device string }

// Verdict is whether a need fits on a node.
type Verdict int

const (
	// DoesNotFit: not enough free devices the count can tell match.
	DoesNotFit Verdict = iota
	// Fits: enough free devices that match for certain.
	Fits
	// Unknown: it fits only if devices the count cannot judge match (see Result.Reason).
	Unknown
)

func (v Verdict) String() string {
	switch v {
	case Fits:
		return "Fits"
	case Unknown:
		return "Unknown"
	}
	return "DoesNotFit"
}

// Result is the answer for one need on one node.
type Result struct {
	Verdict Verdict
	// Missing is, per DeviceClass, how many devices are short (DoesNotFit); for allocationMode All,
	// one. A need that fails for another reason (a pinned claim) has no entry.
	Missing map[string]int64
	// Reason says why a need is Unknown or does not fit for a reason other than missing devices.
	Reason string
	// Devices are the devices the need takes on the node (those Take books).
	Devices []DeviceID
}

type device struct {
	id       DeviceID
	node     string
	selector *nodeaffinity.LazyErrorNodeSelector
	all      bool
	api      *resourcev1.Device
	// unsure says why the count cannot tell whether the scheduler would allocate the device.
	unsure string
	index  int // into Inventory.taken
	// incomplete: the device's pool has fewer slices of its newest generation than it announces
	// (its driver is republishing it). The scheduler allocates such devices by count, but refuses
	// allocationMode All while any pool the node reaches is incomplete.
	incomplete bool
}

// Inventory is the cluster's devices, which are taken, and what the count booked. It is not safe
// for concurrent use.
type Inventory struct {
	// taken: allocated to a claim or booked by Take, by device index. The devices themselves are
	// never changed after NewInventory, so that a Clone shares them.
	taken    []bool
	byNode   map[string][]*device // devices on one node (spec.nodeName)
	anywhere []*device            // devices with a node selector or on all nodes
	classes  map[string]*resourcev1.DeviceClass
	extended map[string]string
	matcher  *matcher
}

// NewInventory indexes the devices of the newest generation of every pool, marks those allocated by
// claims, and reads the classes (their selectors and extended resource names).
func NewInventory(slices []*resourcev1.ResourceSlice, claims []*resourcev1.ResourceClaim, classes []*resourcev1.DeviceClass) *Inventory {
	inv := &Inventory{byNode: map[string][]*device{}, classes: map[string]*resourcev1.DeviceClass{}, matcher: newMatcher()}
	for _, c := range classes {
		inv.classes[c.Name] = c
	}
	inv.extended = extendedNames(classes)
	allocated := make(map[DeviceID]bool, len(claims))
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			allocated[DeviceID{r.Driver, r.Pool, r.Device}] = true
		}
	}
	for _, p := range newestPools(slices) {
		for _, s := range p.slices {
			for i := range s.Spec.Devices {
				d := newDevice(s, &s.Spec.Devices[i], p.incomplete)
				d.index = len(inv.taken)
				inv.taken = append(inv.taken, allocated[d.id])
				if d.node != "" {
					inv.byNode[d.node] = append(inv.byNode[d.node], d)
				} else {
					inv.anywhere = append(inv.anywhere, d)
				}
			}
		}
	}
	return inv
}

type pool struct {
	slices     []*resourcev1.ResourceSlice
	incomplete bool
}

// newestPools groups the slices by driver and pool and keeps those of each pool's newest generation:
// a driver republishing a pool bumps the generation, and the scheduler ignores older slices. A pool
// with fewer slices of that generation than it announces is still being published.
func newestPools(slices []*resourcev1.ResourceSlice) []pool {
	type key struct{ driver, name string }
	newest := map[key]*pool{}
	gen := map[key]int64{}
	var order []key
	for _, s := range slices {
		k := key{s.Spec.Driver, s.Spec.Pool.Name}
		p, ok := newest[k]
		switch {
		case !ok:
			order = append(order, k)
			newest[k], gen[k] = &pool{slices: []*resourcev1.ResourceSlice{s}}, s.Spec.Pool.Generation
		case s.Spec.Pool.Generation > gen[k]:
			p.slices, gen[k] = []*resourcev1.ResourceSlice{s}, s.Spec.Pool.Generation
		case s.Spec.Pool.Generation == gen[k]:
			p.slices = append(p.slices, s)
		}
	}
	out := make([]pool, 0, len(order))
	for _, k := range order {
		p := newest[k]
		sort.Slice(p.slices, func(i, j int) bool { return p.slices[i].Name < p.slices[j].Name })
		p.incomplete = int64(len(p.slices)) != p.slices[0].Spec.Pool.ResourceSliceCount
		out = append(out, *p)
	}
	return out
}

func newDevice(s *resourcev1.ResourceSlice, api *resourcev1.Device, incomplete bool) *device {
	d := &device{id: DeviceID{s.Spec.Driver, s.Spec.Pool.Name, api.Name}, api: api, incomplete: incomplete}
	nodeName, sel, all := s.Spec.NodeName, s.Spec.NodeSelector, s.Spec.AllNodes
	if s.Spec.PerDeviceNodeSelection != nil && *s.Spec.PerDeviceNodeSelection {
		nodeName, sel, all = api.NodeName, api.NodeSelector, api.AllNodes
	}
	switch {
	case nodeName != nil:
		d.node = *nodeName
	case sel != nil:
		d.selector = nodeaffinity.NewLazyErrorNodeSelector(sel)
	case all != nil && *all:
		d.all = true
	}
	switch {
	case len(api.Taints) > 0:
		d.unsure = "device taints"
	case len(api.ConsumesCounters) > 0:
		d.unsure = "partitionable device"
	case api.AllowMultipleAllocations != nil && *api.AllowMultipleAllocations:
		d.unsure = "device shared between claims"
	case api.BindsToNode != nil && *api.BindsToNode, len(api.BindingConditions) > 0:
		d.unsure = "device with binding conditions"
	}
	return d
}

// reachable lists the devices a pod on node could be given.
func (inv *Inventory) reachable(node *corev1.Node) []*device {
	out := append([]*device(nil), inv.byNode[node.Name]...)
	for _, d := range inv.anywhere {
		if d.all {
			out = append(out, d)
		} else if d.selector != nil {
			if ok, err := d.selector.Match(node); err == nil && ok {
				out = append(out, d)
			}
		}
	}
	return out
}

// ExtendedClass is the DeviceClass whose devices serve an extended resource name (KEP-5004): the
// class naming it in spec.extendedResourceName (the newest class when several do, then the first by
// name), or the class the implicit name deviceclass.resource.kubernetes.io/<class> names. Whether
// the scheduler serves such names (the DRAExtendedResource gate, alpha and off in Kubernetes 1.34)
// is not visible here; a running original that got its devices this way shows it does.
func (inv *Inventory) ExtendedClass(resource corev1.ResourceName) (string, bool) {
	if c, ok := inv.extended[string(resource)]; ok {
		return c, true
	}
	name := string(resource)
	if len(name) > len(resourcev1.ResourceDeviceClassPrefix) && name[:len(resourcev1.ResourceDeviceClassPrefix)] == resourcev1.ResourceDeviceClassPrefix {
		class := name[len(resourcev1.ResourceDeviceClassPrefix):]
		_, ok := inv.classes[class]
		return class, ok
	}
	return "", false
}

func extendedNames(classes []*resourcev1.DeviceClass) map[string]string {
	out := map[string]string{}
	winner := map[string]*resourcev1.DeviceClass{}
	for _, c := range classes {
		if c.Spec.ExtendedResourceName == nil {
			continue
		}
		name := *c.Spec.ExtendedResourceName
		w, ok := winner[name]
		if !ok || c.CreationTimestamp.After(w.CreationTimestamp.Time) ||
			(c.CreationTimestamp.Equal(&w.CreationTimestamp) && c.Name < w.Name) {
			winner[name], out[name] = c, c.Name
		}
	}
	return out
}

// Free counts, per DeviceClass, the devices reachable from node that are neither allocated nor
// booked and match the class; maybe counts those the count cannot judge (see Result.Reason). A
// device with a node selector or on all nodes is counted on every node it reaches.
func (inv *Inventory) Free(node *corev1.Node) (sure, maybe map[string]int64) {
	sure, maybe = map[string]int64{}, map[string]int64{}
	devs := inv.reachable(node)
	for name := range inv.classes {
		for _, d := range devs {
			if inv.taken[d.index] {
				continue
			}
			switch {
			case !inv.match(d, Alternative{Class: name}):
			case d.unsure == "":
				sure[name]++
			default:
				maybe[name]++
			}
		}
	}
	return sure, maybe
}

// FreeOn counts, per DeviceClass, the devices reachable from any of the nodes that are neither
// allocated nor booked and that match the class for certain; a device several nodes reach counts
// once.
func (inv *Inventory) FreeOn(nodes []*corev1.Node) map[string]int64 {
	out := map[string]int64{}
	seen := map[*device]bool{}
	for _, n := range nodes {
		for _, d := range inv.reachable(n) {
			if seen[d] || inv.taken[d.index] || d.unsure != "" {
				continue
			}
			seen[d] = true
			for name := range inv.classes {
				if inv.match(d, Alternative{Class: name}) {
					out[name]++
				}
			}
		}
	}
	return out
}

// Fit reports whether need fits on node, counting what earlier Takes booked.
func (inv *Inventory) Fit(node *corev1.Node, need Need) Result {
	r, _ := inv.place(node, need)
	return r
}

// Take is Fit that books the devices the need takes when it fits, or when it is Unknown and
// unknown is true (the operator opted in to surging on what the count cannot judge): the next Fit
// or Take no longer counts them.
func (inv *Inventory) Take(node *corev1.Node, need Need, unknown bool) Result {
	r, devs := inv.place(node, need)
	if r.Verdict == Fits || (r.Verdict == Unknown && unknown) {
		for _, d := range devs {
			inv.taken[d.index] = true
		}
	}
	return r
}

// Clone returns an inventory that books apart from inv: what either Takes afterwards the other does
// not see. The devices and the selectors' verdicts are shared (the clone costs a bit per device),
// so inv and its clones must not be used concurrently. A caller that places the same replacements
// again on every check (capacity.Capacity.Fit starts over each time) takes them on a clone of one inventory.
func (inv *Inventory) Clone() *Inventory {
	c := *inv
	c.taken = append([]bool(nil), inv.taken...)
	return &c
}

// Fork is Clone for another goroutine: it shares only what neither writes (the devices, the
// classes), so inv and its forks may be used concurrently; the fork's selector verdicts start over.
func (inv *Inventory) Fork() *Inventory {
	c := inv.Clone()
	c.matcher = newMatcher()
	return c
}
