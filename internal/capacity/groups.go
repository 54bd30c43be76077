package capacity

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// FitGroups places the pending pods first (see Fit), then n copies of the group, each whole or not at
// all, counting every source: every pod of a copy on a candidate other than exclude (the node being drained) and, with an
// exclusive topology, all of them in one domain that no other group runs in. It returns how many
// copies fit and what the others lack: Nodes counts the pods without a place in the attempt that
// came closest, PerNode what one of them requests.
func (c *Capacity) FitGroups(g *blocking.Group, n int, exclude string, pending []*podinfo.Pod) (int, Shortfall) {
	f := c.fitter()
	for _, p := range pending {
		f.place(p, "", nil)
	}
	f.books.forget()
	short := Shortfall{Resources: corev1.ResourceList{}}
	placed := 0
	for ; placed < n; placed++ {
		missing, domain := f.placeGroup(g, exclude)
		if len(missing) == 0 {
			continue
		}
		// The copies left fit no better than this one: each misses what this one does.
		for range n - placed {
			for _, p := range missing {
				addTo(short.Resources, c.sources.Asks(p))
			}
			short.Nodes += len(missing)
		}
		short.PerNode = c.sources.Asks(missing[0])
		short.Domain = domain
		break
	}
	short.Unsure, short.Refused = f.books.reasons()
	return placed, short
}

// placeGroup places one copy of the group, or nothing; it returns the pods that found no place in
// the attempt that came closest (none when the copy is placed) and, with an exclusive topology, why
// no domain took it.
func (f *fitter) placeGroup(g *blocking.Group, exclude string) ([]*podinfo.Pod, string) {
	if g.TopologyKey == "" {
		undo := f.mark()
		var missing []*podinfo.Pod
		for _, p := range g.Pods {
			if f.place(p, exclude, nil) < 0 {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			undo()
		}
		return missing, ""
	}
	best := g.Pods
	domains, free := f.domains(g)
	for _, d := range free {
		undo := f.mark()
		keep := func(n *corev1.Node) bool { return n.Labels[g.TopologyKey] == d }
		var missing []*podinfo.Pod
		for _, p := range g.Pods {
			if f.place(p, exclude, keep) < 0 {
				missing = append(missing, p)
			}
		}
		if len(missing) == 0 {
			return nil, ""
		}
		undo()
		if len(missing) < len(best) {
			best = missing
		}
	}
	return best, fmt.Sprintf("%d of %d %s domain(s) run no group", len(free), domains, g.TopologyKey)
}

// domains lists the values of the group's topology key among the candidates, in candidate order,
// and those no pod of a group (of this or another set with exclusive placement, in the group's
// namespace) runs in: the pod anti-affinity lws puts on each group keeps every other domain out.
func (f *fitter) domains(g *blocking.Group) (int, []string) {
	ns := g.Pods[0].Namespace
	seen := map[string]bool{}
	taken := map[string]bool{}
	var order []string
	for i := range f.candidates {
		c := f.candidate(i)
		d, ok := c.Node.Labels[g.TopologyKey]
		if !ok {
			continue
		}
		if !seen[d] {
			seen[d] = true
			order = append(order, d)
		}
		for _, p := range c.Pods {
			if blocking.Grouped(p) && p.Namespace == ns && !blocking.Skip(p) {
				taken[d] = true
				break
			}
		}
	}
	var free []string
	for _, d := range order {
		if !taken[d] {
			free = append(free, d)
		}
	}
	return len(order), free
}
