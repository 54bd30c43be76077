package blocking

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// The LeaderWorkerSet pod labels a group is read from (kubernetes-sigs/lws v0.8.0,
// pkg/webhooks/pod_webhook.go sets them on every pod of a group).
const (
	lwsGroupIndexLabel = "leaderworkerset.sigs.k8s.io/group-index"
	lwsGroupKeyLabel   = "leaderworkerset.sigs.k8s.io/group-key"
)

// Group is what one new group of a multi-node workload (a LeaderWorkerSet) runs: a copy of each pod
// of a group, leader and workers, placed together or not at all.
type Group struct {
	// Pods are the group's pods, one per member (Size of them).
	Pods []*podinfo.Pod
	// TopologyKey is the set's exclusive topology: every pod of a group in one domain of this node
	// label, and at most one group per domain. "" when the set has none.
	TopologyKey string
}

// GroupIndex is the index of a LeaderWorkerSet pod's group.
func GroupIndex(p *podinfo.Pod) (int, bool) {
	v, ok := p.Labels[lwsGroupIndexLabel]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 0
}

// GroupModel returns the group a surge of the blocked pod's set adds: copies of the live pods of
// the blocked pod's group (leader and workers may request differently), completed with copies of
// the blocked pod up to size pods. size is bounded by the caller (workload.MaxGroupSize).
func GroupModel(blocked *podinfo.Pod, pods []*podinfo.Pod, size int, topologyKey string) *Group {
	g := &Group{TopologyKey: topologyKey}
	idx, ok := GroupIndex(blocked)
	for _, p := range pods {
		if len(g.Pods) == size {
			break
		}
		if Skip(p) || !ok {
			continue
		}
		if i, iok := GroupIndex(p); iok && i == idx {
			g.Pods = append(g.Pods, p)
		}
	}
	for len(g.Pods) < size {
		g.Pods = append(g.Pods, blocked)
	}
	if topologyKey != "" {
		// lws's pod controller pins a group's workers to their leader's domain with a node selector
		// (pkg/controllers/pod_controller.go, setNodeSelectorForWorkerPods): a new group is pinned to
		// the domain its own leader lands in, not the old group's.
		for i, p := range g.Pods {
			g.Pods[i] = p.WithoutNodeSelector(topologyKey)
		}
	}
	return g
}

// CompleteGroups returns, by group index, the live pods of the groups that run complete: size pods
// bound to a node, Ready and not being deleted. A group is the unit a multi-node model serves with:
// one pod short, it serves nothing.
func CompleteGroups(pods []*podinfo.Pod, size int) map[int][]*podinfo.Pod {
	byIndex := map[int][]*podinfo.Pod{}
	ready := map[int]int{}
	for _, p := range pods {
		i, ok := GroupIndex(p)
		if !ok || Skip(p) {
			continue
		}
		byIndex[i] = append(byIndex[i], p)
		if p.Spec.NodeName != "" && p.Ready() {
			ready[i]++
		}
	}
	for i := range byIndex {
		if ready[i] < size {
			delete(byIndex, i)
		}
	}
	return byIndex
}

// FitGroups places the pending pods first (see Fit), then n copies of the group, each whole or not at
// all: every pod of a copy on a candidate other than exclude (the node being drained) and, with an
// exclusive topology, all of them in one domain that no other group runs in. It returns how many
// copies fit and what the others lack: Nodes counts the pods without a place in the attempt that
// came closest, PerNode what one of them requests.
func FitGroups(g *Group, n int, exclude string, pending []*podinfo.Pod, candidates []Candidate, devices *Devices) (int, Shortfall) {
	f := newFitter(candidates, devices)
	for _, p := range pending {
		f.place(p, "", nil)
	}
	f.book.forget()
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
				addTo(short.Resources, f.book.missing(p))
			}
			short.Nodes += len(missing)
		}
		short.PerNode = f.book.missing(missing[0])
		short.Domain = domain
		break
	}
	short.Unsure, short.Refused = f.book.reasons()
	return placed, short
}

// placeGroup places one copy of the group, or nothing; it returns the pods that found no place in
// the attempt that came closest (none when the copy is placed) and, with an exclusive topology, why
// no domain took it.
func (f *fitter) placeGroup(g *Group, exclude string) ([]*podinfo.Pod, string) {
	if g.TopologyKey == "" {
		undo := f.mark()
		var missing []*podinfo.Pod
		for _, p := range g.Pods {
			if !f.place(p, exclude, nil) {
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
			if !f.place(p, exclude, keep) {
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
func (f *fitter) domains(g *Group) (int, []string) {
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
			if _, grouped := p.Labels[lwsGroupKeyLabel]; grouped && p.Namespace == ns && !Skip(p) {
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

// ReadyGroupsOff counts the complete groups (see CompleteGroups) none of whose pods is on node: the
// groups that serve whatever happens to node. A group with one pod there is torn down with it.
func ReadyGroupsOff(pods []*podinfo.Pod, size int, node string) int32 {
	var n int32
	for _, g := range CompleteGroups(pods, size) {
		off := true
		for _, p := range g {
			if p.Spec.NodeName == node {
				off = false
				break
			}
		}
		if off {
			n++
		}
	}
	return n
}
