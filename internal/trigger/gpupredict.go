package trigger

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// UpgradePlan is what the GPU Operator's upgrade controller will do next with the nodes in
// upgrade-required, predicted as the in-place upgrade decides it (NVIDIA/k8s-operator-libs
// pkg/upgrade/upgrade_inplace.go ProcessUpgradeRequiredNodes, pkg/upgrade/common_manager.go
// GetUpgradesAvailable, GetUpgradesInProgress, GetCurrentUnavailableNodes).
//
// Unlike the MCO, the upgrade controller fixes no order among the nodes waiting: it walks them in
// the order its informer cache lists the driver pods (upgrade_state.go BuildState). So the plan
// says which nodes are certain to be picked next, and how many of the others will be.
type UpgradePlan struct {
	// Upgrading lists the nodes past upgrade-required and not done, upgrade-failed included: each
	// takes one of maxParallelUpgrades until it is done.
	Upgrading []*corev1.Node
	// Next lists the nodes certain to be picked at the controller's next sync: the cordoned ones
	// (the controller moves a node someone else cordoned even when no slot is free), and all the
	// waiting ones when the free slots cover them.
	Next []*corev1.Node
	// Candidates lists the other nodes waiting in upgrade-required, by name.
	Candidates []*corev1.Node
	// Slots is how many of Candidates the next sync picks at most, in an order nobody can tell in
	// advance (fewer when cordoned nodes in Next take some of the slots first).
	Slots int
	// Skipped lists the nodes in upgrade-required that carry the skip label.
	Skipped []*corev1.Node
	// MaxUnavailable is maxUnavailable scaled to the managed nodes.
	MaxUnavailable int
}

// Predicted returns up to n nodes to surge ahead of the upgrade controller: the nodes certain to
// be picked next, then the other candidates only if all of them fit in n. When the controller's
// choice among them is open, surging some would bet on its order; surging all covers whichever it
// picks.
func (p UpgradePlan) Predicted(n int) []*corev1.Node {
	out := append([]*corev1.Node{}, p.Next...)
	if len(out)+len(p.Candidates) <= n {
		out = append(out, p.Candidates...)
	}
	if len(out) > n {
		out = out[:max(n, 0)]
	}
	return out
}

// PredictGPUUpgrades predicts the upgrade controller's next picks among nodes (every node of the
// cluster may be passed; only the ones carrying the state label count). Nodes that run a driver
// pod but carry no state label yet, which the controller labels at its next sync, are not seen.
// Requestor mode (NVIDIA's maintenance operator schedules the drains) is not modelled: the
// controller then hands over every waiting node at once and the NodeMaintenance objects say the
// rest.
func PredictGPUUpgrades(nodes []*corev1.Node, policy UpgradePolicy) UpgradePlan {
	var plan UpgradePlan
	if !policy.AutoUpgrade {
		return plan
	}
	var total, done, unavailable, cordonRequired int
	var waiting, cordonedWaiting []*corev1.Node
	for _, node := range nodes {
		n := ReadGPUNode(node)
		if !n.Managed() {
			continue
		}
		if unavailableForUpgrade(node) {
			unavailable++
		}
		switch n.State {
		case GPUStateNodeMaintenanceRequired, GPUStatePostMaintenanceRequired:
			// GetTotalManagedNodes leaves these two states out of the total.
			plan.Upgrading = append(plan.Upgrading, node)
			continue
		case GPUStateDone:
			done++
		case GPUStateUpgradeRequired:
			switch {
			case n.Skip:
				plan.Skipped = append(plan.Skipped, node)
			case node.Spec.Unschedulable:
				cordonedWaiting = append(cordonedWaiting, node)
			default:
				waiting = append(waiting, node)
			}
		case GPUStateCordonRequired:
			cordonRequired++
			plan.Upgrading = append(plan.Upgrading, node)
		default:
			if _, known := gpuPhases[n.State]; !known {
				// A state this version does not know is not counted, as the controller's total
				// does not count it.
				continue
			}
			plan.Upgrading = append(plan.Upgrading, node)
		}
		total++
	}
	pending := len(waiting) + len(cordonedWaiting) + len(plan.Skipped)
	inProgress := total - done - pending
	plan.MaxUnavailable = scaledMaxUnavailable(policy.MaxUnavailable, total)
	slots := upgradesAvailable(policy.MaxParallelUpgrades, pending, inProgress, unavailable+cordonRequired,
		plan.MaxUnavailable, total)

	sortByName(waiting)
	sortByName(cordonedWaiting)
	plan.Next = cordonedWaiting
	free := slots - len(cordonedWaiting)
	if free >= len(waiting) {
		plan.Next = append(plan.Next, waiting...)
	} else {
		plan.Candidates = waiting
		// A cordoned node takes a slot only if the controller meets it before the slots run out.
		plan.Slots = min(max(slots, 0), len(waiting))
	}
	sortByName(plan.Upgrading)
	sortByName(plan.Skipped)
	return plan
}

// upgradesAvailable is GetUpgradesAvailable: how many waiting nodes the controller starts now.
func upgradesAvailable(maxParallel, pending, inProgress, unavailable, maxUnavailable, total int) int {
	available := maxParallel - inProgress
	if maxParallel == 0 {
		available = pending
	}
	available = min(available, maxUnavailable)
	switch {
	case unavailable >= maxUnavailable:
		available = 0
	case maxUnavailable < total && unavailable+available > maxUnavailable:
		available = maxUnavailable - unavailable
	}
	return available
}

// scaledMaxUnavailable scales maxUnavailable to total nodes, rounding up; nil means all nodes. The
// policy was validated by ReadUpgradePolicy; a value that still fails to scale counts as 1.
func scaledMaxUnavailable(v *intstr.IntOrString, total int) int {
	if v == nil {
		return total
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, true)
	if err != nil || n < 0 {
		return 1
	}
	return n
}

// unavailableForUpgrade is GetCurrentUnavailableNodes' test: cordoned, or not Ready.
func unavailableForUpgrade(node *corev1.Node) bool {
	if node.Spec.Unschedulable {
		return true
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func sortByName(nodes []*corev1.Node) {
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
}
