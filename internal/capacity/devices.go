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

// Devices is the Dynamic Resource Allocation side of a capacity check: the cluster's devices (see
// dra.Inventory) and the claims and templates pods refer to. A nil *Devices is a cluster that serves
// no DRA: only node allocatable counts.
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

// deviceBook is one Fit's view of the devices: a clone of the inventory that the placements of that
// Fit book on; why placements the count could not judge were refused (unknown), and why others were
// refused for a reason other than missing devices (refused: a claim not found, a shared claim's
// devices out of reach).
type deviceBook struct {
	d                *Devices
	inv              *dra.Inventory
	unknown, refused map[string]bool
}

func newDeviceBook(d *Devices) *deviceBook {
	if d == nil || d.Inventory == nil {
		return nil
	}
	return &deviceBook{d: d, inv: d.Inventory.Clone(), unknown: map[string]bool{}, refused: map[string]bool{}}
}

// claims is the need of the pod's own claims (see dra.NeedOf), the same on every node.
func (b *deviceBook) claims(pod *podinfo.Pod) dra.Need {
	if b == nil {
		return dra.Need{}
	}
	return dra.NeedOf(pod.Namespace, pod.Spec.ResourceClaims, b.d.Objects)
}

// split returns the pod's requests that node allocatable must hold, and its DRA need on the node:
// its claims and the extended resources DRA serves there (see dra.ExtendedNeed).
func (b *deviceBook) split(pod *podinfo.Pod, claims dra.Need, node *corev1.Node) (corev1.ResourceList, dra.Need) {
	if b == nil {
		return pod.Spec.Requests, claims
	}
	ext, rest := b.inv.ExtendedNeed(pod.Spec.Requests, node)
	if len(ext.Requests) > 0 {
		claims.Requests = append(claims.Requests[:len(claims.Requests):len(claims.Requests)], ext.Requests...)
	}
	return rest, claims
}

// take books need on node when it fits (or is unknown and the operator opted in).
func (b *deviceBook) take(node *corev1.Node, need dra.Need) bool {
	if b == nil || empty(need) {
		return true
	}
	r := b.inv.Take(node, need, b.d.UnknownFits)
	switch {
	case r.Verdict == dra.Unknown && !b.d.UnknownFits:
		b.unknown[r.Reason] = true
	case r.Verdict == dra.DoesNotFit && r.Reason != "":
		b.refused[r.Reason] = true
	}
	return r.Verdict == dra.Fits || (r.Verdict == dra.Unknown && b.d.UnknownFits)
}

func empty(n dra.Need) bool {
	return len(n.Requests) == 0 && len(n.Pinned) == 0 && n.Unresolved == ""
}

// missing is what one copy of pod that fits nowhere lacks (see Devices.Requests).
func (b *deviceBook) missing(pod *podinfo.Pod) corev1.ResourceList {
	if b == nil {
		return (*Devices)(nil).Requests(pod)
	}
	return b.d.Requests(pod)
}

// Requests is what one replacement of pod asks: its requests and, per DeviceClass (named as
// DeviceClassResource), the devices its claims ask anew (the first alternative of each request; one
// for allocationMode All). Without devices (nil), its requests.
func (d *Devices) Requests(pod *podinfo.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	addTo(out, pod.Spec.Requests)
	if d == nil {
		return out
	}
	for _, r := range dra.NeedOf(pod.Namespace, pod.Spec.ResourceClaims, d.Objects).Requests {
		a := r.Alternatives[0]
		n := a.Count
		if a.All {
			n = 1
		}
		name := DeviceClassResource(a.Class)
		q := out[name]
		q.Add(*resource.NewQuantity(n, resource.DecimalSI))
		out[name] = q
	}
	return out
}

// IsDevices reports whether a resource name counts the devices of a DeviceClass (see
// DeviceClassResource).
func IsDevices(name string) bool {
	return strings.HasPrefix(name, resourcev1.ResourceDeviceClassPrefix)
}

// reasons lists, sorted, why placements on devices the count cannot judge were refused, and why
// others were refused for a reason other than missing devices.
func (b *deviceBook) reasons() (unsure, refused string) {
	if b == nil {
		return "", ""
	}
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

// forget drops the reasons gathered so far.
func (b *deviceBook) forget() {
	if b != nil {
		clear(b.unknown)
		clear(b.refused)
	}
}

// inventory returns a clone of the devices booked so far, for restore; nil without devices.
func (b *deviceBook) inventory() *dra.Inventory {
	if b == nil {
		return nil
	}
	return b.inv.Clone()
}

// restore puts back the devices as inventory returned them.
func (b *deviceBook) restore(inv *dra.Inventory) {
	if b != nil && inv != nil {
		b.inv = inv
	}
}
