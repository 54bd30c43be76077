package capacity

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drain-guardian/drain-guardian/internal/dra"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// Devices is the source that counts the devices of Dynamic Resource Allocation: the cluster's devices
// (see dra.Inventory) and the claims and templates pods refer to. A nil *Devices, or one without an
// Inventory, is a cluster that serves no DRA: it counts nothing.
type Devices struct {
	Inventory *dra.Inventory
	Objects   dra.Objects
	// UnknownFits places a replacement on devices the count cannot judge (dra.Unknown: device taints,
	// partitionable devices, constraints…), as --dra-unknown-fits asks; otherwise such a replacement
	// fits nowhere and the shortfall says why.
	UnknownFits bool
}

// DeviceClassResource names the devices of a DeviceClass in a list of missing resources, as the
// scheduler's implicit extended resource name does (KEP-5004): deviceclass.resource.kubernetes.io/<class>.
func DeviceClassResource(class string) corev1.ResourceName {
	return corev1.ResourceName(resourcev1.ResourceDeviceClassPrefix + class)
}

// Open implements Source: the run books on a clone of the inventory. Without DRA (nil) the run
// counts nothing.
func (d *Devices) Open() Book {
	if d == nil || d.Inventory == nil {
		return none{}
	}
	return &deviceBook{d: d, inv: d.Inventory.Clone(), unknown: map[string]bool{}, refused: map[string]bool{}}
}

// Asks implements Source: per DeviceClass (named as DeviceClassResource), the devices the pod's
// claims ask anew (the first alternative of each request; one for allocationMode All).
func (d *Devices) Asks(pod *podinfo.Pod, into corev1.ResourceList) {
	if d == nil || d.Inventory == nil {
		return
	}
	for _, r := range dra.NeedOf(pod.Namespace, pod.Spec.ResourceClaims, d.Objects).Requests {
		a := r.Alternatives[0]
		n := a.Count
		if a.All {
			n = 1
		}
		name := DeviceClassResource(a.Class)
		q := into[name]
		q.Add(*resource.NewQuantity(n, resource.DecimalSI))
		into[name] = q
	}
}

// Free implements Source: per DeviceClass, the devices free for certain on any of the candidates
// (see dra.Inventory.FreeOn).
func (d *Devices) Free(candidates []Candidate, into map[string]int64) {
	if d == nil || d.Inventory == nil {
		return
	}
	nodes := make([]*corev1.Node, len(candidates))
	for i, c := range candidates {
		nodes[i] = c.Node
	}
	for class, n := range d.Inventory.FreeOn(nodes) {
		into[string(DeviceClassResource(class))] += n
	}
}

// IsDevices reports whether a resource name counts the devices of a DeviceClass (see
// DeviceClassResource).
func IsDevices(name string) bool {
	return strings.HasPrefix(name, resourcev1.ResourceDeviceClassPrefix)
}

// deviceBook is one run's view of the devices: a clone of the inventory that the placements of that
// run book on; why placements the count could not judge were refused (unknown), and why others were
// refused for a reason other than missing devices (refused: a claim not found, a shared claim's
// devices out of reach).
type deviceBook struct {
	d                *Devices
	inv              *dra.Inventory
	unknown, refused map[string]bool
}

// Ask implements Book: the need of the pod's own claims (see dra.NeedOf) is the same on every node.
func (b *deviceBook) Ask(pod *podinfo.Pod) Ask {
	return &deviceAsk{b: b, claims: dra.NeedOf(pod.Namespace, pod.Spec.ResourceClaims, b.d.Objects)}
}

// Mark implements Book: undo puts back the devices as they were booked now.
func (b *deviceBook) Mark() (undo func()) {
	inv := b.inv.Clone()
	return func() { b.inv = inv }
}

// Forget implements Book.
func (b *deviceBook) Forget() {
	clear(b.unknown)
	clear(b.refused)
}

// Reasons implements Book: sorted, why placements on devices the count cannot judge were refused,
// and why others were refused for a reason other than missing devices.
func (b *deviceBook) Reasons() (unsure, refused string) {
	return joinSorted(b.unknown), joinSorted(b.refused)
}

func joinSorted(set map[string]bool) string {
	out := make([]string, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// deviceAsk is the pod's DRA need: its claims, and on the node last claimed on, the extended
// resources DRA serves there (see dra.ExtendedNeed).
type deviceAsk struct {
	b      *deviceBook
	claims dra.Need
	need   dra.Need
}

// Claim implements Ask: the extended resources DRA serves on node join the pod's claims.
func (a *deviceAsk) Claim(node *corev1.Node, requests corev1.ResourceList) corev1.ResourceList {
	ext, rest := a.b.inv.ExtendedNeed(requests, node)
	a.need = a.claims
	if len(ext.Requests) > 0 {
		a.need.Requests = append(a.claims.Requests[:len(a.claims.Requests):len(a.claims.Requests)], ext.Requests...)
	}
	return rest
}

// Fits implements Ask: the need claimed on c's node fits (or is unknown and the operator opted in).
func (a *deviceAsk) Fits(c *Candidate, _ corev1.ResourceList) bool {
	if empty(a.need) {
		return true
	}
	r := a.b.inv.Fit(c.Node, a.need)
	switch {
	case r.Verdict == dra.Unknown && !a.b.d.UnknownFits:
		a.b.unknown[r.Reason] = true
	case r.Verdict == dra.DoesNotFit && r.Reason != "":
		a.b.refused[r.Reason] = true
	}
	return r.Verdict == dra.Fits || (r.Verdict == dra.Unknown && a.b.d.UnknownFits)
}

// Take implements Ask: books the devices Fits found.
func (a *deviceAsk) Take(c *Candidate) {
	if !empty(a.need) {
		a.b.inv.Take(c.Node, a.need, a.b.d.UnknownFits)
	}
}

func empty(n dra.Need) bool {
	return len(n.Requests) == 0 && len(n.Pinned) == 0 && n.Unresolved == ""
}
