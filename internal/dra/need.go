package dra

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
)

// Need is what a replacement pod asks of Dynamic Resource Allocation beyond what its original has.
type Need struct {
	// Requests are the device requests of the claims the replacement gets of its own: one claim per
	// ResourceClaimTemplate, allocated anew for the new pod.
	Requests []Request
	// Pinned are the node selectors of the allocated ResourceClaims the replacement shares with its
	// original: no new device, but the replacement runs only where those devices are reachable (for
	// a device on the original's node: nowhere else).
	Pinned []*corev1.NodeSelector
	// Constrained: a claim constrains its devices to each other (matchAttribute,
	// distinctAttribute), which the count does not evaluate: a fit is only Unknown.
	Constrained bool
	// Unresolved says why the scheduler cannot place the replacement at all (a template or shared
	// claim that does not exist); empty when everything was found.
	Unresolved string
}

// Request is one request of a claim: the alternatives in order of preference (one for
// spec.devices.requests[].exactly, the subrequests of firstAvailable otherwise).
type Request struct {
	Name         string
	Alternatives []Alternative
}

// Alternative is one way to satisfy a request: devices of a class that pass the selectors.
type Alternative struct {
	Class string
	// Selectors are the request's CEL expressions; the class's are added by the Inventory.
	Selectors []string
	// All asks for every matching device reachable from the node (allocationMode All); otherwise
	// Count devices.
	All   bool
	Count int64
	// Capacity: the request consumes a share of a device's capacity (KEP-5075), not evaluated.
	Capacity bool
}

// Objects looks up the claims and templates of the pod's namespace, from listers.
type Objects interface {
	ResourceClaim(namespace, name string) (*resourcev1.ResourceClaim, bool)
	ResourceClaimTemplate(namespace, name string) (*resourcev1.ResourceClaimTemplate, bool)
}

// NeedOf is what a replacement for a pod of namespace with claims (spec.resourceClaims) needs: a
// claim from a template is a new claim per pod (new devices, as the template asks them), a named
// claim is shared with the original (no new device, but its allocation pins the node).
func NeedOf(namespace string, claims []corev1.PodResourceClaim, objs Objects) Need {
	var need Need
	for _, pc := range claims {
		switch {
		case pc.ResourceClaimTemplateName != nil:
			t, ok := objs.ResourceClaimTemplate(namespace, *pc.ResourceClaimTemplateName)
			if !ok {
				need.Unresolved = fmt.Sprintf("ResourceClaimTemplate %s/%s not found", namespace, *pc.ResourceClaimTemplateName)
				continue
			}
			need.add(t.Spec.Spec.Devices)
		case pc.ResourceClaimName != nil:
			c, ok := objs.ResourceClaim(namespace, *pc.ResourceClaimName)
			switch {
			case !ok:
				need.Unresolved = fmt.Sprintf("ResourceClaim %s/%s not found", namespace, *pc.ResourceClaimName)
			case c.Status.Allocation == nil:
				// Not allocated yet (its pods are not running): the first pod scheduled allocates it.
				need.add(c.Spec.Devices)
			case c.Status.Allocation.NodeSelector != nil:
				need.Pinned = append(need.Pinned, c.Status.Allocation.NodeSelector)
			}
		}
	}
	return need
}

func (n *Need) add(dc resourcev1.DeviceClaim) {
	if len(dc.Constraints) > 0 {
		n.Constrained = true
	}
	for _, r := range dc.Requests {
		req := Request{Name: r.Name}
		if e := r.Exactly; e != nil {
			if e.AdminAccess != nil && *e.AdminAccess {
				continue // admin access monitors devices in use: it allocates none
			}
			req.Alternatives = []Alternative{alternative(e.DeviceClassName, e.Selectors, e.AllocationMode, e.Count, e.Capacity)}
		}
		for _, s := range r.FirstAvailable {
			req.Alternatives = append(req.Alternatives, alternative(s.DeviceClassName, s.Selectors, s.AllocationMode, s.Count, s.Capacity))
		}
		if len(req.Alternatives) > 0 {
			n.Requests = append(n.Requests, req)
		}
	}
}

func alternative(class string, sel []resourcev1.DeviceSelector, mode resourcev1.DeviceAllocationMode, count int64,
	capacity *resourcev1.CapacityRequirements) Alternative {
	a := Alternative{Class: class, All: mode == resourcev1.DeviceAllocationModeAll, Count: count,
		Capacity: capacity != nil && len(capacity.Requests) > 0}
	if !a.All && a.Count <= 0 {
		a.Count = 1 // the API server's default for ExactCount
	}
	for _, s := range sel {
		if s.CEL != nil {
			a.Selectors = append(a.Selectors, s.CEL.Expression)
		}
	}
	return a
}

// ExtendedNeed splits a pod's requests on node: the extended resources DRA serves there (mapped to a
// DeviceClass, see ExtendedClass, and absent from the node's allocatable) become a Need, one request
// per resource; the rest is returned for the allocatable check. A node that lists the resource, even
// at zero, keeps it for its device plugin, as the scheduler does (KEP-5004, Filter).
func (inv *Inventory) ExtendedNeed(requests corev1.ResourceList, node *corev1.Node) (Need, corev1.ResourceList) {
	var need Need
	var rest corev1.ResourceList
	for name, q := range requests {
		class, ok := inv.ExtendedClass(name)
		if _, plugin := node.Status.Allocatable[name]; ok && !plugin && q.Value() > 0 {
			need.Requests = append(need.Requests, Request{Name: string(name), Alternatives: []Alternative{{Class: class, Count: q.Value()}}})
			continue
		}
		if rest == nil {
			rest = make(corev1.ResourceList, len(requests))
		}
		rest[name] = q
	}
	sort.Slice(need.Requests, func(i, j int) bool { return need.Requests[i].Name < need.Requests[j].Name })
	return need, rest
}

// Extended is the need of an extended resource request (KEP-5004, alpha in Kubernetes 1.34 behind
// the DRAExtendedResource gate) served by DRA devices: count devices of the class the Inventory
// maps the name to (see Inventory.ExtendedClass). The scheduler serves such a request from DRA only
// on a node that does not list the resource in its allocatable (a device plugin's node keeps it).
func Extended(class string, count int64) Need {
	return Need{Requests: []Request{{Name: "extended", Alternatives: []Alternative{{Class: class, Count: count}}}}}
}
