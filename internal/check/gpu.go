package check

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/trigger"
)

// GPUDriverUpgradePool names the pseudo-pool of the nodes an NVIDIA GPU Operator driver upgrade
// drains: the nodes carrying its state label, in the order the upgrade controller is predicted to
// take them, as many at a time as its policy lets it.
const GPUDriverUpgradePool = "(gpu driver upgrade)"

// gpuDrain is the drain id of the daemon's Surges for a driver upgrade (see trigger.GPUDriverUpgrades):
// a Surge that failed for it is not made again.
const gpuDrain = "gpu-driver-upgrade"

// gpuUpgrade predicts the stalls a driver upgrade meets: the one under way (nodes upgrading, then
// the next picks, then the other waiting nodes by name) or, when none is, the next one, every
// managed node not skipped, by name. Nodes in a MachineConfigPool --pool-selector leaves out are out
// of scope, as for an MCO update. ok is false when no node is managed by the upgrade controller.
func (a *analysis) gpuUpgrade(policy trigger.UpgradePolicy) (Pool, bool) {
	plan := trigger.PredictGPUUpgrades(a.cl.Nodes, policy)
	var order []*corev1.Node
	for _, n := range append(append(append([]*corev1.Node{}, plan.Upgrading...), plan.Next...), plan.Candidates...) {
		if n.Labels[trigger.GPUUpgradeStateLabel] != trigger.GPUStateFailed {
			order = append(order, n)
		}
	}
	if len(order) == 0 {
		for _, n := range a.cl.Nodes {
			if g := trigger.ReadGPUNode(n); g.Managed() && !g.Skip {
				order = append(order, n)
			}
		}
		sort.Slice(order, func(i, j int) bool { return order[i].Name < order[j].Name })
	}
	if len(order) == 0 && len(plan.Skipped) == 0 {
		return Pool{}, false
	}
	width := max(plan.MaxUnavailable, 1)
	if policy.MaxParallelUpgrades > 0 {
		width = min(width, policy.MaxParallelUpgrades)
	}
	return a.pool(GPUDriverUpgradePool, true, gpuDrain, width, a.inScope(order), nil), true
}

// inScope keeps the nodes whose MachineConfigPool (if any) --pool-selector selects.
func (a *analysis) inScope(nodes []*corev1.Node) []*corev1.Node {
	if a.cfg.PoolSelector == nil || a.cl.Pools == nil {
		return nodes
	}
	var out []*corev1.Node
	for _, n := range nodes {
		if p := mco.PoolForNode(n, a.cl.Pools); p == nil || a.cfg.PoolSelector.Matches(labels.Set(p.Labels)) {
			out = append(out, n)
		}
	}
	return out
}
