// Package capacity decides whether the replacement pods of a surge fit on the cluster's other nodes,
// counting what earlier placements take.
//
// Everything here is pure: callers pass objects read from informer listers. It imports blocking (for
// Skip and Group) and never the other way round: blocking finds the blocked pods, capacity places
// their replacements.
package capacity

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// Candidate is a node with the pods that run on it, as read from the listers.
type Candidate struct {
	Node *corev1.Node
	Pods []*podinfo.Pod
	// Used is what Pods request of the node's allocatable (see UsedBy); nil means "add it up from
	// Pods". A caller that checks many pods against one snapshot computes it once per node instead
	// of once per check. A placement adds the requests no source claimed (see Ask.Claim).
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

// Capacity is what the candidates can take, as the sources count it: the one value the ledger, a
// prediction and the daemon place replacements on.
type Capacity struct {
	candidates []Candidate
	sources    Sources
}

// New returns the capacity of the candidates as the sources count it (see Standard). It keeps the
// slice; the caller must not change it afterwards. Placements never write into it.
func New(candidates []Candidate, sources ...Source) *Capacity {
	return &Capacity{candidates: candidates, sources: sources}
}

// Where returns the capacity of the candidates keep accepts (nil: c itself), counted by the same
// sources.
func (c *Capacity) Where(keep func(*corev1.Node) bool) *Capacity {
	if keep == nil {
		return c
	}
	var cands []Candidate
	for _, cand := range c.candidates {
		if keep(cand.Node) {
			cands = append(cands, cand)
		}
	}
	return &Capacity{candidates: cands, sources: c.sources}
}

// FitsElsewhere reports whether a copy of pod could be scheduled on one of the candidates other than
// the node it runs on, and on which. It checks what the scheduler would check and what is knowable
// without running it: the node is Ready and schedulable, untolerated NoSchedule/NoExecute taints,
// nodeSelector and required node affinity, required pod anti-affinity on the hostname, and what
// every source counts (node allocatable for every resource the pod requests, nvidia.com/gpu
// included).
func (c *Capacity) FitsElsewhere(pod *podinfo.Pod) (string, bool) {
	if i := c.fitter().place(pod, pod.Spec.NodeName, nil); i >= 0 {
		return c.candidates[i].Node.Name, true
	}
	return "", false
}

// Fit places, in order, the pending pods (replacements other surges are waiting for, which the
// scheduler will place first) and then n copies of pod, each on the first candidate other than pod's
// own node that fits it, counting what the earlier placements take on every source. It returns how
// many copies of pod found a place and what the others lack. Preemption is never counted on: a
// replacement has the priority of the pod it replaces.
func (c *Capacity) Fit(pod *podinfo.Pod, n int, pending []*podinfo.Pod) (int, Shortfall) {
	f := c.fitter()
	for _, p := range pending {
		f.place(p, "", nil)
	}
	placed := 0
	short := Shortfall{Resources: corev1.ResourceList{}}
	f.books.forget() // only the pod's own placements explain its shortfall
	for range n {
		if f.place(pod, pod.Spec.NodeName, nil) >= 0 {
			placed++
			continue
		}
		addTo(short.Resources, c.sources.Asks(pod))
	}
	short.Unsure, short.Refused = f.books.reasons()
	return placed, short
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
