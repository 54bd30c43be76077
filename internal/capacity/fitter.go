package capacity

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// fitter places pods on the candidates one after the other, counting what the earlier placements
// take. Placements add to a node's pods and used resources: they go to a copy of the node's candidate
// made on its first placement, never to the caller's, which the next stall reuses. A thousand
// candidates are not copied for the few that take a placement. The sources book on their own Books.
type fitter struct {
	candidates []Candidate
	placedOn   map[int]*Candidate
	books      books
	// log records the placements since the last mark, for undo.
	log []placement
}

type placement struct {
	i        int
	requests corev1.ResourceList
}

func (c *Capacity) fitter() *fitter {
	return &fitter{candidates: c.candidates, placedOn: map[int]*Candidate{}, books: c.sources.open()}
}

// candidate returns the candidate at i as the placements so far left it.
func (f *fitter) candidate(i int) *Candidate {
	if c, ok := f.placedOn[i]; ok {
		return c
	}
	return &f.candidates[i]
}

// place puts p on the first candidate that fits it, other than exclude, among those keep accepts
// (nil: all), and returns its index; -1 when none does. A candidate fits when p may run there (see
// schedulable) and every source's Fits accepts it, asked in the sources' order.
func (f *fitter) place(p *podinfo.Pod, exclude string, keep func(*corev1.Node) bool) int {
	asks := f.books.asks(p)
	for i := range f.candidates {
		c := f.candidate(i)
		if (keep != nil && !keep(c.Node)) || !schedulable(p, exclude, c) {
			continue
		}
		unclaimed := p.Spec.Requests
		for _, a := range asks {
			unclaimed = a.Claim(c.Node, unclaimed)
		}
		if fitsAll(asks, c, unclaimed) {
			f.take(i, p, asks, unclaimed)
			return i
		}
	}
	return -1
}

func fitsAll(asks []Ask, c *Candidate, unclaimed corev1.ResourceList) bool {
	for _, a := range asks {
		if !a.Fits(c, unclaimed) {
			return false
		}
	}
	return true
}

// take books p on the candidate at i: on its copy (made now on its first placement) the pod and the
// requests no source claimed, and on every source what it asks.
func (f *fitter) take(i int, p *podinfo.Pod, asks []Ask, unclaimed corev1.ResourceList) {
	c, ok := f.placedOn[i]
	if !ok {
		orig := &f.candidates[i]
		used := corev1.ResourceList{}
		if orig.Used != nil {
			addTo(used, orig.Used)
		} else {
			used = UsedBy(orig.Pods)
		}
		c = &Candidate{Node: orig.Node, Pods: orig.Pods[:len(orig.Pods):len(orig.Pods)], Used: used}
		f.placedOn[i] = c
	}
	c.Pods = append(c.Pods, p)
	addTo(c.Used, unclaimed)
	for _, a := range asks {
		a.Take(c)
	}
	f.log = append(f.log, placement{i: i, requests: unclaimed})
}

// mark starts a transaction: undo takes back every placement made after it.
func (f *fitter) mark() (undo func()) {
	f.log = f.log[:0]
	undoBooks := f.books.mark()
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
		undoBooks()
	}
}

// schedulable reports whether a copy of pod may run on the candidate, whatever it takes there: not
// the excluded node (the one the pod is to leave), Ready and schedulable, no untolerated
// NoSchedule/NoExecute taint, node selector and affinity matched, no anti-affinity conflict.
func schedulable(pod *podinfo.Pod, exclude string, c *Candidate) bool {
	n := c.Node
	if n.Name == exclude || n.Spec.Unschedulable || !NodeReady(n) {
		return false
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(n.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}); untolerated {
		return false
	}
	return pod.Spec.MatchesNode(n) && !antiAffinityConflict(pod, c.Pods)
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
