package mco

import (
	"sort"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ZoneLabel orders the node controller's rollout: zone by zone, nodes without it last.
const ZoneLabel = "topology.kubernetes.io/zone"

// Machine-config daemon states that count a node as failing its target config.
const (
	stateDegraded       = "Degraded"
	stateUnreconcilable = "Unreconcilable"
)

// Plan is what the MCO's node controller will do next with a pool, predicted from the pool and its
// nodes as the controller itself decides it (openshift/machine-config-operator
// pkg/controller/node/node_controller.go: getAllCandidateMachines, updateCandidateMachines,
// sortNodeList, maxUnavailable; pkg/controller/common/layered_node_state.go for node readiness and
// candidacy). Layered (image-based) pools are not modelled: their candidacy also compares images.
type Plan struct {
	// Updating lists the nodes already on their way to the target config (targeted, working or
	// rebooting), in update order.
	Updating []*corev1.Node
	// Now lists the candidates the node controller targets at its next sync: as many as
	// maxUnavailable leaves room for.
	Now []*corev1.Node
	// Later lists the other candidates, in the order they will be targeted as room frees up.
	Later []*corev1.Node
	// Skipped lists the nodes that still have to update but are no candidate now: not Ready,
	// cordoned (by someone else: the MCO skips them until they are schedulable again) or failing.
	Skipped []*corev1.Node
	// MaxUnavailable is the pool's maxUnavailable scaled to its size (at least 1).
	MaxUnavailable int
}

// Next returns up to n nodes the node controller will target next, in order: the candidates it
// targets now, then the later ones.
func (p Plan) Next(n int) []*corev1.Node {
	all := append(append([]*corev1.Node{}, p.Now...), p.Later...)
	if n < len(all) {
		all = all[:n]
	}
	return all
}

// Order is the whole update order of the pool's remaining nodes: the ones updating, the candidates
// in the order they will be targeted, then the skipped ones (updated whenever they become
// candidates).
func (p Plan) Order() []*corev1.Node {
	return append(append(append(append([]*corev1.Node{}, p.Updating...), p.Now...), p.Later...), p.Skipped...)
}

// PredictTargets predicts the node controller's next moves for pool, whose nodes are members (see
// NodesInPool). A paused pool, or one without a target config, targets nothing: every node still to
// update is Skipped.
func PredictTargets(pool *mcfgv1.MachineConfigPool, members []*corev1.Node) Plan {
	target := pool.Spec.Configuration.Name
	plan := Plan{MaxUnavailable: maxUnavailable(pool, len(members))}
	unavailable, failing := 0, 0
	var candidates []*corev1.Node
	for _, n := range members {
		s := ReadNode(n)
		if unavailableForUpdate(n, s) {
			unavailable++
		}
		switch {
		case s.DesiredConfig == target && target != "":
			// Not a candidate: it targets the pool's config already (done, or on its way).
			if s.CurrentConfig != s.DesiredConfig || s.State != StateDone {
				if failingConfig(s) {
					failing++
					plan.Skipped = append(plan.Skipped, n)
				} else {
					plan.Updating = append(plan.Updating, n)
				}
			}
		case target == "" || pool.Spec.Paused || !schedulableReady(n):
			plan.Skipped = append(plan.Skipped, n)
		default:
			candidates = append(candidates, n)
		}
	}
	sortForUpdate(plan.Updating)
	sortForUpdate(candidates)
	sortForUpdate(plan.Skipped)
	room := plan.MaxUnavailable - unavailable - failing
	if target == "" || pool.Spec.Paused {
		room = 0
	}
	room = max(0, min(room, len(candidates)))
	plan.Now, plan.Later = candidates[:room], candidates[room:]
	return plan
}

// NodesInPool returns the nodes that pool owns, by the MCO's rules (PoolForNode).
func NodesInPool(pool *mcfgv1.MachineConfigPool, pools []*mcfgv1.MachineConfigPool, nodes []*corev1.Node) []*corev1.Node {
	var out []*corev1.Node
	for _, n := range nodes {
		if p := PoolForNode(n, pools); p != nil && p.Name == pool.Name {
			out = append(out, n)
		}
	}
	return out
}

// PoolsByNode maps every node to its pool (PoolForNode) in one pass: one lookup per sync instead of
// one selector match per node and pool each time.
func PoolsByNode(pools []*mcfgv1.MachineConfigPool, nodes []*corev1.Node) map[string]*mcfgv1.MachineConfigPool {
	out := make(map[string]*mcfgv1.MachineConfigPool, len(nodes))
	for _, n := range nodes {
		if p := PoolForNode(n, pools); p != nil {
			out[n.Name] = p
		}
	}
	return out
}

// maxUnavailable scales the pool's maxUnavailable (default 1) to its node count, rounding down, and
// never below 1, as the node controller does.
func maxUnavailable(pool *mcfgv1.MachineConfigPool, nodes int) int {
	v := intstr.FromInt32(1)
	if pool.Spec.MaxUnavailable != nil {
		v = *pool.Spec.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, nodes, false)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// unavailableForUpdate mirrors the MCO's IsUnavailableForUpdate: a node that is not Ready or
// schedulable, or whose daemon is still working towards its desired config, takes one of the pool's
// maxUnavailable slots; a failing one (Degraded, Unreconcilable) is counted separately.
func unavailableForUpdate(n *corev1.Node, s NodeState) bool {
	if !schedulableReady(n) {
		return true
	}
	if s.CurrentConfig != "" && s.CurrentConfig == s.DesiredConfig && s.State == StateDone {
		return false
	}
	return !failingConfig(s)
}

// failingConfig mirrors the MCO's IsNodeMCDFailing.
func failingConfig(s NodeState) bool {
	return s.CurrentConfig != s.DesiredConfig && (s.State == stateDegraded || s.State == stateUnreconcilable)
}

// schedulableReady mirrors the MCO's CheckNodeReady: Ready, no disk pressure, network available and
// not cordoned.
func schedulableReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		switch {
		case c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue,
			c.Type == corev1.NodeDiskPressure && c.Status != corev1.ConditionFalse,
			c.Type == corev1.NodeNetworkUnavailable && c.Status != corev1.ConditionFalse:
			return false
		}
	}
	return !n.Spec.Unschedulable
}

// sortForUpdate orders nodes as the node controller's sortNodeList does: by zone label, nodes
// without one last, then oldest first. Names break remaining ties so that the order is stable.
func sortForUpdate(nodes []*corev1.Node) {
	sort.SliceStable(nodes, func(i, j int) bool {
		zi, iok := nodes[i].Labels[ZoneLabel]
		zj, jok := nodes[j].Labels[ZoneLabel]
		if iok != jok {
			return iok
		}
		if zi != zj {
			return zi < zj
		}
		ti, tj := nodes[i].CreationTimestamp, nodes[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return nodes[i].Name < nodes[j].Name
	})
}
