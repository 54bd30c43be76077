package blocking

import (
	"strconv"

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

// Grouped reports whether p is a pod of a LeaderWorkerSet group: lws labels every pod of a group
// with its key.
func Grouped(p *podinfo.Pod) bool {
	_, ok := p.Labels[lwsGroupKeyLabel]
	return ok
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
