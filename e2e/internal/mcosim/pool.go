package mcosim

import (
	"fmt"
	"sort"
	"strings"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// This file holds the node controller's decisions as pure functions over
// nodes and pools, following machine-config-controller's pkg/controller/node
// and pkg/helpers.

// PoolsForNode returns the pools node belongs to, its primary pool first, or
// nil if no pool selects it. As in the MCO: a pool whose nodeSelector is nil
// or empty selects nothing; a node matched by a custom pool belongs to it
// first and to worker second; master wins over a custom pool and over worker;
// a node matched by two custom pools is an error, and the node is left alone.
func PoolsForNode(node *corev1.Node, pools []*mcfgv1.MachineConfigPool) ([]*mcfgv1.MachineConfigPool, error) {
	// Windows nodes are never managed by the MCO.
	if node.Labels[corev1.LabelOSStable] == "windows" {
		return nil, nil
	}
	var master, worker *mcfgv1.MachineConfigPool
	var custom []*mcfgv1.MachineConfigPool
	for _, p := range pools {
		selector, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector)
		if err != nil {
			return nil, fmt.Errorf("pool %s: invalid node selector: %w", p.Name, err)
		}
		if selector.Empty() || !selector.Matches(labels.Set(node.Labels)) {
			continue
		}
		switch p.Name {
		case MasterPool:
			master = p
		case WorkerPool:
			worker = p
		default:
			custom = append(custom, p)
		}
	}
	switch {
	case len(custom) > 1:
		names := make([]string, 0, len(custom))
		for _, p := range custom {
			names = append(names, p.Name)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("node %s belongs to %d custom roles (%s), cannot proceed with this Node",
			node.Name, len(custom), strings.Join(names, ", "))
	case len(custom) == 1:
		primary := custom[0]
		if master != nil {
			primary = master
		}
		result := []*mcfgv1.MachineConfigPool{primary}
		if worker != nil {
			result = append(result, worker)
		}
		return result, nil
	case master != nil:
		return []*mcfgv1.MachineConfigPool{master}, nil
	case worker != nil:
		return []*mcfgv1.MachineConfigPool{worker}, nil
	}
	return nil, nil
}

// NodesForPool returns the nodes whose primary pool is pool, sorted by name.
// Nodes whose membership is ambiguous (an error from PoolsForNode) are left
// out, as the MCO does.
func NodesForPool(pool *mcfgv1.MachineConfigPool, pools []*mcfgv1.MachineConfigPool, nodes []*corev1.Node) []*corev1.Node {
	var members []*corev1.Node
	for _, n := range nodes {
		ps, err := PoolsForNode(n, pools)
		if err != nil || len(ps) == 0 || ps[0].Name != pool.Name {
			continue
		}
		members = append(members, n)
	}
	sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
	return members
}

// checkNodeReady returns why a node cannot take workloads, or nil. Like the
// MCO it looks only at the conditions the node reports, and treats a
// cordoned node as not ready.
func checkNodeReady(node *corev1.Node) error {
	for _, c := range node.Status.Conditions {
		switch {
		case c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue:
			return fmt.Errorf("node %s is reporting NotReady=%v", node.Name, c.Status)
		case c.Type == corev1.NodeDiskPressure && c.Status != corev1.ConditionFalse:
			return fmt.Errorf("node %s is reporting OutOfDisk=%v", node.Name, c.Status)
		case c.Type == corev1.NodeNetworkUnavailable && c.Status != corev1.ConditionFalse:
			return fmt.Errorf("node %s is reporting NetworkUnavailable=%v", node.Name, c.Status)
		}
	}
	if node.Spec.Unschedulable {
		return fmt.Errorf("node %s is reporting Unschedulable", node.Name)
	}
	return nil
}

// nodeDoneAt reports whether node has finished updating to pool's target.
func nodeDoneAt(node *corev1.Node, pool *mcfgv1.MachineConfigPool) bool {
	return NodeUpdated(node) && node.Annotations[DesiredConfigAnnotation] == pool.Spec.Configuration.Name
}

// nodeMCDFailing reports whether the daemon failed to apply the node's
// desired config.
func nodeMCDFailing(node *corev1.Node) bool {
	a := node.Annotations
	if a[CurrentConfigAnnotation] == a[DesiredConfigAnnotation] {
		return false
	}
	return a[StateAnnotation] == StateDegraded || a[StateAnnotation] == StateUnreconcilable
}

// nodeUnavailable reports whether node counts against the pool's
// maxUnavailable: it is NotReady or cordoned, or its daemon is working (or
// about to start) on an update. A failing daemon does not count, so that the
// node can be retargeted.
func nodeUnavailable(node *corev1.Node) bool {
	if checkNodeReady(node) != nil {
		return true
	}
	if NodeUpdated(node) {
		return false
	}
	return !nodeMCDFailing(node)
}

// nodeDegraded reports whether the daemon on node reports a failure.
func nodeDegraded(node *corev1.Node) bool {
	a := node.Annotations
	if a[DesiredConfigAnnotation] == "" {
		return false
	}
	return a[StateAnnotation] == StateDegraded || a[StateAnnotation] == StateUnreconcilable
}

// maxUnavailable resolves pool.spec.maxUnavailable (default 1, percentages
// rounded down, never less than 1) against the pool's node count.
func maxUnavailable(pool *mcfgv1.MachineConfigPool, nodeCount int) (int, error) {
	v := intstr.FromInt32(1)
	if pool.Spec.MaxUnavailable != nil {
		v = *pool.Spec.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, nodeCount, false)
	if err != nil {
		return 0, fmt.Errorf("pool %s: invalid maxUnavailable: %w", pool.Name, err)
	}
	if n <= 0 {
		n = 1
	}
	return n, nil
}

// NodesToTarget returns the nodes of pool (its members, see NodesForPool) on
// which the node controller sets desiredConfig now, in rollout order. A paused
// or unconfigured pool targets nothing. Unavailable nodes (see
// nodeUnavailable) and nodes already targeted whose daemon is failing use up
// maxUnavailable; candidates are the nodes not yet targeted at the pool's
// config, ordered by SortNodesForUpdate.
func NodesToTarget(pool *mcfgv1.MachineConfigPool, nodes []*corev1.Node) ([]*corev1.Node, error) {
	target := pool.Spec.Configuration.Name
	if pool.Spec.Paused || target == "" {
		return nil, nil
	}
	maxUnavail, err := maxUnavailable(pool, len(nodes))
	if err != nil {
		return nil, err
	}
	unavailable := 0
	for _, n := range nodes {
		if nodeUnavailable(n) {
			unavailable++
		}
	}
	if unavailable >= maxUnavail {
		return nil, nil
	}
	capacity := maxUnavail - unavailable
	failingThisConfig := 0
	var candidates []*corev1.Node
	for _, n := range nodes {
		if n.Annotations[DesiredConfigAnnotation] == target {
			// Nodes failing to reach this config also count against
			// availability: if the failure clears, they must not update at
			// the same time as new candidates.
			if nodeMCDFailing(n) {
				failingThisConfig++
			}
			continue
		}
		candidates = append(candidates, n)
	}
	if failingThisConfig >= capacity {
		return nil, nil
	}
	capacity -= failingThisConfig
	candidates = SortNodesForUpdate(candidates)
	if len(candidates) > capacity {
		candidates = candidates[:capacity]
	}
	return candidates, nil
}

// SortNodesForUpdate sorts nodes in the MCO's rollout order, in place, and
// returns them: nodes with a zone label first, by zone, then the nodes without
// one; within each group oldest creationTimestamp first. Names break ties so
// that the order is deterministic.
func SortNodesForUpdate(nodes []*corev1.Node) []*corev1.Node {
	sort.SliceStable(nodes, func(i, j int) bool {
		zi, iok := nodes[i].Labels[ZoneLabel]
		zj, jok := nodes[j].Labels[ZoneLabel]
		if iok != jok {
			return iok
		}
		if iok && zi != zj {
			return zi < zj
		}
		ti, tj := nodes[i].CreationTimestamp.Time, nodes[j].CreationTimestamp.Time
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return nodes[i].Name < nodes[j].Name
	})
	return nodes
}

// needsUpdateInProgressTaint reports whether node should carry the
// UpdateInProgress taint: the MCO keeps it on every node of the pool that has
// not been targeted at the pool's config yet, and removes it once the node
// controller targets the node (the drain's cordon then keeps pods away).
func needsUpdateInProgressTaint(node *corev1.Node, pool *mcfgv1.MachineConfigPool) bool {
	return node.Annotations[DesiredConfigAnnotation] != pool.Spec.Configuration.Name
}

// hasUpdateInProgressTaint reports whether node carries the UpdateInProgress taint.
func hasUpdateInProgressTaint(node *corev1.Node) bool {
	t := UpdateInProgressTaint()
	for i := range node.Spec.Taints {
		if node.Spec.Taints[i].MatchTaint(&t) {
			return true
		}
	}
	return false
}

// initialAnnotations returns the annotations a node joining pool gets when it
// has never run the daemon (no currentConfig), or nil. A real node gets them
// from the config it booted with, which the machine-config-server renders from
// the pool's current target.
func initialAnnotations(node *corev1.Node, pool *mcfgv1.MachineConfigPool) map[string]string {
	target := pool.Spec.Configuration.Name
	if target == "" || node.Annotations[CurrentConfigAnnotation] != "" {
		return nil
	}
	return map[string]string{
		CurrentConfigAnnotation: target,
		DesiredConfigAnnotation: target,
		StateAnnotation:         StateDone,
	}
}

// CalculatePoolStatus computes the status the node controller writes for pool
// given its member nodes. now stamps conditions whose status changes.
//
// Counts: updated = Done at the pool's target; ready = updated and able to
// take workloads; unavailable = see nodeUnavailable; degraded = the daemon
// reports Degraded or Unreconcilable. Updated is True only when updated ==
// ready == machineCount and unavailable == 0, and only then does
// status.configuration move to the target. Updating is True while not all
// are updated, except on a paused pool.
func CalculatePoolStatus(pool *mcfgv1.MachineConfigPool, nodes []*corev1.Node, now metav1.Time) mcfgv1.MachineConfigPoolStatus {
	var updated, ready, unavailable, degraded int32
	var degradedReasons []string
	for _, n := range nodes {
		if nodeDoneAt(n, pool) {
			updated++
			if checkNodeReady(n) == nil {
				ready++
			}
		}
		if nodeUnavailable(n) {
			unavailable++
		}
		if nodeDegraded(n) {
			degraded++
			if reason := n.Annotations[ReasonAnnotation]; reason != "" {
				degradedReasons = append(degradedReasons, fmt.Sprintf("Node %s is reporting: %q", n.Name, reason))
			}
		}
	}
	machineCount := int32(len(nodes))
	status := mcfgv1.MachineConfigPoolStatus{
		ObservedGeneration:      pool.Generation,
		MachineCount:            machineCount,
		UpdatedMachineCount:     updated,
		ReadyMachineCount:       ready,
		UnavailableMachineCount: unavailable,
		DegradedMachineCount:    degraded,
		Configuration:           *pool.Status.Configuration.DeepCopy(),
		CertExpirys:             pool.Status.CertExpirys,
		PoolSynchronizersStatus: pool.Status.PoolSynchronizersStatus,
	}
	for _, c := range pool.Status.Conditions {
		status.Conditions = append(status.Conditions, *c.DeepCopy())
	}

	target := "MachineConfig " + pool.Spec.Configuration.Name
	allUpdated := updated == machineCount && ready == machineCount && unavailable == 0
	if allUpdated {
		setPoolCondition(&status, newPoolCondition(mcfgv1.MachineConfigPoolUpdated, corev1.ConditionTrue, "",
			"All nodes are updated with "+target, now))
		setPoolCondition(&status, newPoolCondition(mcfgv1.MachineConfigPoolUpdating, corev1.ConditionFalse, "", "", now))
		if status.Configuration.Name != pool.Spec.Configuration.Name ||
			!equality.Semantic.DeepEqual(status.Configuration.Source, pool.Spec.Configuration.Source) {
			status.Configuration = *pool.Spec.Configuration.DeepCopy()
		}
	} else {
		setPoolCondition(&status, newPoolCondition(mcfgv1.MachineConfigPoolUpdated, corev1.ConditionFalse, "", "", now))
		if pool.Spec.Paused {
			setPoolCondition(&status, newPoolCondition(mcfgv1.MachineConfigPoolUpdating, corev1.ConditionFalse, "",
				"Pool is paused; will not update to "+target, now))
		} else {
			setPoolCondition(&status, newPoolCondition(mcfgv1.MachineConfigPoolUpdating, corev1.ConditionTrue, "",
				"All nodes are updating to "+target, now))
		}
	}

	nodeDegradedCond := newPoolCondition(mcfgv1.MachineConfigPoolNodeDegraded, corev1.ConditionFalse, "", "", now)
	if degraded > 0 {
		nodeDegradedCond = newPoolCondition(mcfgv1.MachineConfigPoolNodeDegraded, corev1.ConditionTrue,
			fmt.Sprintf("%d nodes are reporting degraded status on sync", degraded), strings.Join(degradedReasons, ", "), now)
	}
	setPoolCondition(&status, nodeDegradedCond)

	// The MCO's pool Degraded is NodeDegraded or RenderDegraded; nothing
	// renders here, but a RenderDegraded set by someone else is honoured.
	degradedCond := newPoolCondition(mcfgv1.MachineConfigPoolDegraded, corev1.ConditionFalse, "", "", now)
	if degraded > 0 || poolConditionTrue(pool.Status.Conditions, mcfgv1.MachineConfigPoolRenderDegraded) {
		degradedCond = newPoolCondition(mcfgv1.MachineConfigPoolDegraded, corev1.ConditionTrue, "", "", now)
		if degraded > 0 {
			degradedCond.Message = nodeDegradedCond.Message
		}
	}
	setPoolCondition(&status, degradedCond)
	return status
}

func newPoolCondition(t mcfgv1.MachineConfigPoolConditionType, s corev1.ConditionStatus, reason, message string, now metav1.Time) mcfgv1.MachineConfigPoolCondition {
	return mcfgv1.MachineConfigPoolCondition{Type: t, Status: s, LastTransitionTime: now, Reason: reason, Message: message}
}

// setPoolCondition sets cond in status, keeping the previous
// lastTransitionTime when the condition's status does not change (as the MCO's
// apihelpers.SetMachineConfigPoolCondition does). The updated condition moves
// to the end of the list.
func setPoolCondition(status *mcfgv1.MachineConfigPoolStatus, cond mcfgv1.MachineConfigPoolCondition) {
	var kept []mcfgv1.MachineConfigPoolCondition
	for _, c := range status.Conditions {
		if c.Type != cond.Type {
			kept = append(kept, c)
			continue
		}
		if c.Status == cond.Status && c.Reason == cond.Reason && c.Message == cond.Message {
			return
		}
		if c.Status == cond.Status {
			cond.LastTransitionTime = c.LastTransitionTime
		}
	}
	status.Conditions = append(kept, cond)
}
