package blocking

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// Candidate is a node with the pods that run on it, as read from the listers.
type Candidate struct {
	Node *corev1.Node
	Pods []*podinfo.Pod
	// Used is what Pods request (see UsedBy); nil means "add it up from Pods". A caller that checks
	// many pods against one snapshot computes it once per node instead of once per check.
	Used corev1.ResourceList
}

// UsedBy adds up what the pods request, skipping those that finished (Succeeded, Failed): the
// scheduler's view of a node's used resources.
func UsedBy(pods []*podinfo.Pod) corev1.ResourceList {
	used := corev1.ResourceList{}
	for _, p := range pods {
		if p.Finished() {
			continue
		}
		addTo(used, p.Spec.Requests)
	}
	return used
}

func addTo(sum, add corev1.ResourceList) {
	for name, q := range add {
		v := sum[name]
		v.Add(q)
		sum[name] = v
	}
}

// FitsElsewhere reports whether a copy of pod could be scheduled on one of the candidates other than
// the node it runs on, and on which. It checks what the scheduler would check and what is knowable
// without running it: the node is Ready and schedulable, untolerated NoSchedule/NoExecute taints,
// nodeSelector and required node affinity, required pod anti-affinity on the hostname, and free
// allocatable resources for every resource the pod requests (nvidia.com/gpu included).
func FitsElsewhere(pod *podinfo.Pod, candidates []Candidate) (string, bool) {
	for _, c := range candidates {
		if fits(pod, pod.Spec.Requests, pod.Spec.NodeName, c) {
			return c.Node.Name, true
		}
	}
	return "", false
}

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
}

// Fit places, in order, the pending pods (replacements other surges are waiting for, which the
// scheduler will place first) and then n copies of pod, each on the first candidate other than pod's
// own node that fits it, counting what the earlier placements take, devices (nil: none) included.
// It returns how many copies of pod found a place and what the others lack. Preemption is never
// counted on: a replacement has the priority of the pod it replaces.
func Fit(pod *podinfo.Pod, n int, pending []*podinfo.Pod, candidates []Candidate, devices *Devices) (int, Shortfall) {
	// Placements add to a node's pods and used resources: they go to a copy of the node's candidate
	// made on its first placement, never to the caller's, which the next stall reuses. A thousand
	// candidates are not copied for the few that take a placement. Devices are booked on a clone.
	placedOn := map[int]*Candidate{}
	book := newDeviceBook(devices)
	place := func(p *podinfo.Pod, exclude string) bool {
		claims := book.claims(p)
		for i := range candidates {
			c, ok := placedOn[i]
			if !ok {
				c = &candidates[i]
			}
			requests, need := book.split(p, claims, c.Node)
			if !fits(p, requests, exclude, *c) || !book.take(c.Node, need) {
				continue
			}
			if !ok {
				used := corev1.ResourceList{}
				if c.Used != nil {
					addTo(used, c.Used)
				} else {
					used = UsedBy(c.Pods)
				}
				c = &Candidate{Node: c.Node, Pods: c.Pods[:len(c.Pods):len(c.Pods)], Used: used}
				placedOn[i] = c
			}
			c.Pods = append(c.Pods, p)
			addTo(c.Used, requests)
			return true
		}
		return false
	}
	for _, p := range pending {
		place(p, "")
	}
	placed := 0
	short := Shortfall{Resources: corev1.ResourceList{}}
	book.forget() // only the pod's own placements explain its shortfall
	for range n {
		if place(pod, pod.Spec.NodeName) {
			placed++
			continue
		}
		addTo(short.Resources, book.missing(pod))
	}
	short.Unsure, short.Refused = book.reasons()
	return placed, short
}

// fits reports whether a copy of pod could be scheduled on the candidate, which must not be the
// excluded node (the one the pod is to leave), with requests taken from the node's allocatable.
func fits(pod *podinfo.Pod, requests corev1.ResourceList, exclude string, c Candidate) bool {
	n := c.Node
	if n.Name == exclude || n.Spec.Unschedulable || !NodeReady(n) {
		return false
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(n.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}); untolerated {
		return false
	}
	if !pod.Spec.MatchesNode(n) {
		return false
	}
	if antiAffinityConflict(pod, c.Pods) {
		return false
	}
	used := c.Used
	if used == nil {
		used = UsedBy(c.Pods)
	}
	return resourcesFit(requests, n.Status.Allocatable, used)
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// resourcesFit reports whether requests fit in allocatable minus used.
func resourcesFit(requests, allocatable, used corev1.ResourceList) bool {
	for name, want := range requests {
		if want.IsZero() {
			continue
		}
		free, ok := allocatable[name]
		if !ok {
			return false
		}
		free = free.DeepCopy()
		free.Sub(used[name])
		if free.Cmp(want) < 0 {
			return false
		}
	}
	return true
}

// antiAffinityConflict reports whether a required pod anti-affinity term on the hostname topology
// excludes a node running pods. Other topology keys need the scheduler's view of every domain and are
// left to it.
func antiAffinityConflict(pod *podinfo.Pod, onNode []*podinfo.Pod) bool {
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.PodAntiAffinity == nil {
		return false
	}
	for _, term := range pod.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey != corev1.LabelHostname {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err != nil {
			continue
		}
		namespaces := map[string]bool{pod.Namespace: len(term.Namespaces) == 0 && term.NamespaceSelector == nil}
		for _, ns := range term.Namespaces {
			namespaces[ns] = true
		}
		for _, other := range onNode {
			if Skip(other) {
				continue
			}
			if (namespaces[other.Namespace] || term.NamespaceSelector != nil) && sel.Matches(labels.Set(other.Labels)) {
				return true
			}
		}
	}
	return false
}

// IsExtended reports whether a resource name is an extended resource (nvidia.com/gpu), as the API
// server defines it: outside the kubernetes.io domain and not a quota "requests." name.
func IsExtended(name string) bool {
	if !strings.Contains(name, "/") || strings.HasPrefix(name, "requests.") {
		return false
	}
	domain, _, _ := strings.Cut(name, "/")
	return domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
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
