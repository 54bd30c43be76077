// Package capacity decides whether the replacement pods of a surge fit on the cluster's other nodes,
// counting what earlier placements take.
//
// Everything here is pure: callers pass objects read from informer listers. It imports blocking (for
// Skip and Group) and never the other way round: blocking finds the blocked pods, capacity places
// their replacements.
package capacity

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/drain-guardian/drain-guardian/internal/blocking"
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
	// Nodes, for groups (FitGroups), counts the pods of the groups that fit nowhere: each needs a
	// node of its own; PerNode is what the first of them requests.
	Nodes   int
	PerNode corev1.ResourceList
	// Domain, for groups with an exclusive topology, says why no topology domain could take one.
	Domain string
}

// Fit places, in order, the pending pods (replacements other surges are waiting for, which the
// scheduler will place first) and then n copies of pod, each on the first candidate other than pod's
// own node that fits it, counting what the earlier placements take, devices (nil: none) included.
// It returns how many copies of pod found a place and what the others lack. Preemption is never
// counted on: a replacement has the priority of the pod it replaces.
func Fit(pod *podinfo.Pod, n int, pending []*podinfo.Pod, candidates []Candidate, devices *Devices) (int, Shortfall) {
	f := newFitter(candidates, devices)
	for _, p := range pending {
		f.place(p, "", nil)
	}
	placed := 0
	short := Shortfall{Resources: corev1.ResourceList{}}
	f.book.forget() // only the pod's own placements explain its shortfall
	for range n {
		if f.place(pod, pod.Spec.NodeName, nil) {
			placed++
			continue
		}
		addTo(short.Resources, f.book.missing(pod))
	}
	short.Unsure, short.Refused = f.book.reasons()
	return placed, short
}

// fitter places pods on the candidates one after the other, counting what the earlier placements
// take. Placements add to a node's pods and used resources: they go to a copy of the node's candidate
// made on its first placement, never to the caller's, which the next stall reuses. A thousand
// candidates are not copied for the few that take a placement. Devices are booked on a clone.
type fitter struct {
	candidates []Candidate
	placedOn   map[int]*Candidate
	book       *deviceBook
	// log records the placements since the last mark, for undo.
	log []placement
}

type placement struct {
	i        int
	requests corev1.ResourceList
}

func newFitter(candidates []Candidate, devices *Devices) *fitter {
	return &fitter{candidates: candidates, placedOn: map[int]*Candidate{}, book: newDeviceBook(devices)}
}

// candidate returns the candidate at i as the placements so far left it.
func (f *fitter) candidate(i int) *Candidate {
	if c, ok := f.placedOn[i]; ok {
		return c
	}
	return &f.candidates[i]
}

// place puts p on the first candidate that fits it, other than exclude, among those keep accepts
// (nil: all).
func (f *fitter) place(p *podinfo.Pod, exclude string, keep func(*corev1.Node) bool) bool {
	claims := f.book.claims(p)
	for i := range f.candidates {
		c, ok := f.placedOn[i]
		if !ok {
			c = &f.candidates[i]
		}
		if keep != nil && !keep(c.Node) {
			continue
		}
		requests, need := f.book.split(p, claims, c.Node)
		if !fits(p, requests, exclude, *c) || !f.book.take(c.Node, need) {
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
			f.placedOn[i] = c
		}
		c.Pods = append(c.Pods, p)
		addTo(c.Used, requests)
		f.log = append(f.log, placement{i: i, requests: requests})
		return true
	}
	return false
}

// mark starts a transaction: undo takes back every placement made after it.
func (f *fitter) mark() (undo func()) {
	f.log = f.log[:0]
	var inv = f.book.inventory()
	return func() {
		for j := len(f.log) - 1; j >= 0; j-- {
			pl := f.log[j]
			c := f.placedOn[pl.i]
			c.Pods = c.Pods[:len(c.Pods)-1]
			for name, q := range pl.requests {
				v := c.Used[name]
				v.Sub(q)
				c.Used[name] = v
			}
		}
		f.log = f.log[:0]
		f.book.restore(inv)
	}
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
			if blocking.Skip(other) {
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
