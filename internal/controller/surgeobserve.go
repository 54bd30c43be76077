package controller

import (
	"slices"
	"strconv"
	"strings"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// observe gathers what Decide needs from the listers.
func (r *surgeReconciler) observe(sc *surgeCase) guardian.Observation {
	s := sc.s
	now := r.clock.Now()
	obs := guardian.Observation{Now: now, Surge: s, Fields: workload.States(sc.obj, s.Spec.Fields), PodOwnerGone: sc.owner == nil}
	pools := r.newPoolLookup()
	if n, err := r.nodes.Get(s.Spec.Node); err == nil {
		obs.Node = n
		pool := pools.of(n)
		r.observeDrain(&obs, r.surgeDrain(n, pool, now))
	}
	if s.Spec.Pool != "" && r.pools != nil {
		obs.Pool, _ = r.pools.Get(s.Spec.Pool)
	}
	obs.CapacityWanted = r.demand.capacityWanted(s.Spec.Pool)
	if guardian.Trigger(s.Spec.Trigger) == guardian.TriggerPrepared {
		// A prepared surge only uses capacity no stall needs, whichever pool the stall is in.
		obs.CapacityWanted = r.demand.anyCapacityWanted()
		obs.PrepareWithdrawn = obs.Pool != nil && (!guardian.PrepareRequested(obs.Pool) || !r.poolSelector.Matches(labels.Set(obs.Pool.Labels)))
	}
	var groupSize int32
	if sc.owner != nil {
		groupSize = sc.owner.GroupSize
	}
	observePods(&obs, sc.pods, s.Spec.Node, groupSize)
	r.observeRefusals(&obs, sc)
	obs.ReadyOnSafeNodes, obs.ReadySurvivors = r.countSurvivors(s, sc.pods, pools, groupSize)
	obs.Groups = groupSize > 0
	if sc.owner != nil {
		for _, f := range s.Spec.Fields {
			if f.ExplicitBeforeRemove != nil {
				obs.CaughtUp = sc.owner.CaughtUp(int32(*f.ExplicitBeforeRemove))
			}
		}
	}
	if s.PhaseOf() == v1alpha1.PhasePending {
		obs.WritingSince = r.writing.since(s, now)
		obs.WriteUnseen = r.writing.unseen(s, sc.obj.Meta.GetResourceVersion())
	} else {
		r.writing.forget(keyOf(s))
	}
	r.flight.holding(s, heldResources(s, sc.pods, groupSize))
	return obs
}

// observeRefusals fills what says a surge cannot progress: the replacements refused by the pod
// owner's controller (Surged), another PDB selecting the blocked pod (Ready).
func (r *surgeReconciler) observeRefusals(obs *guardian.Observation, sc *surgeCase) {
	s, owner := sc.s, sc.owner
	switch {
	case owner == nil:
	case s.PhaseOf() == v1alpha1.PhaseSurged && owner.StatusReplicas < owner.Replicas:
		obs.ReplacementRefused = owner.ReplicaFailure
	case s.PhaseOf() == v1alpha1.PhaseReady && obs.LiveOnNode > 0:
		obs.OtherPDB = r.otherPDB(s, sc.pods)
	}
}

// otherPDB names a PDB, other than the one the Surge was made for, that selects a live pod of the
// workload on the Surge's node while the Surge's own PDB allows a disruption; "" when there is none.
func (v *view) otherPDB(s *v1alpha1.Surge, pods []*podinfo.Pod) string {
	own, err := v.pdbs.PodDisruptionBudgets(s.Namespace).Get(s.Spec.PDB)
	if err != nil || own.Status.DisruptionsAllowed < 1 || own.Status.ObservedGeneration < own.Generation {
		return ""
	}
	pdbs, err := v.pdbs.PodDisruptionBudgets(s.Namespace).List(labels.Everything())
	if err != nil {
		return ""
	}
	for _, p := range pods {
		if p.Spec.NodeName != s.Spec.Node || blocking.Skip(p) {
			continue
		}
		for _, pdb := range pdbs {
			if pdb.Name != s.Spec.PDB && v.selectors.Selects(pdb, p) {
				return pdb.Name
			}
		}
	}
	return ""
}

// nodeDrain is NodeTrigger's answer for the node, of the given pool, now.
func (b *base) nodeDrain(n *corev1.Node, pool *mcfgv1.MachineConfigPool, predicted bool, now time.Time) guardian.NodeDrain {
	return b.nodeTrigger(n, pool, predicted, b.answers.need(n, pool).Need, now)
}

// nodeTrigger is NodeTrigger with the time the node was first seen cordoned.
func (b *base) nodeTrigger(n *corev1.Node, pool *mcfgv1.MachineConfigPool, predicted bool, need mco.Need, now time.Time) guardian.NodeDrain {
	var seen time.Time
	if n.Spec.Unschedulable {
		seen = b.cordons.firstSeen(n.Name, now)
	}
	return guardian.NodeTrigger(b.cfg, n, pool, predicted, need, now, seen)
}

// surgeDrain is nodeDrain for the node of an existing surge, where an update whose drain is not
// answered yet counts as one that drains. A look-ahead surge's node is targeted before its daemon
// says whether the update drains (about a second later), often when no other node of the update
// is left to answer for it: taking that second for a missed prediction would undo the surge the
// coming drain needs, while holding it that long costs nothing. A no-drain answer still ends it.
func (b *base) surgeDrain(n *corev1.Node, pool *mcfgv1.MachineConfigPool, now time.Time) guardian.NodeDrain {
	need := b.answers.need(n, pool).Need
	if need == mco.NeedUnknown {
		need = mco.NeedDrain
	}
	return b.nodeTrigger(n, pool, b.predicted(n, pool), need, now)
}

// countSurvivors counts the workload's Ready pods, not being deleted, that a restore keeps: on nodes
// this update will not drain again (safe), and on schedulable nodes the MCO is not updating now
// (survivors, a superset). A StatefulSet's scale-down removes its highest ordinals whatever their
// node, so only ordinals below the original count are counted for it. A LeaderWorkerSet (groupSize
// > 0) counts complete Ready groups the same way (see countGroupSurvivors).
func (v *view) countSurvivors(s *v1alpha1.Surge, pods []*podinfo.Pod, pools *poolLookup, groupSize int32) (safe, survivors int32) {
	if groupSize > 0 {
		return v.countGroupSurvivors(s, pods, pools, int(groupSize))
	}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || !p.Ready() {
			continue
		}
		if s.Spec.PodOwner.Kind == string(workload.KindStatefulSet) {
			if ord, ok := ordinal(p); !ok || ord >= int(s.Spec.Replicas) {
				continue
			}
		}
		node, err := v.nodes.Get(p.Spec.NodeName)
		if err != nil {
			continue
		}
		if v.updatingNow(node) {
			continue
		}
		survivors++
		if v.willNotDrain(node, pools) {
			safe++
		}
	}
	return safe, survivors
}

// countGroupSurvivors is countSurvivors for a LeaderWorkerSet: its scale-down removes the highest
// group indexes whatever their nodes (the StatefulSet ordinal rule, per group), so only complete
// Ready groups of an index below the original count are counted, and a group counts only when every
// one of its pods is on a node that keeps it: a group one pod short serves nothing.
func (v *view) countGroupSurvivors(s *v1alpha1.Surge, pods []*podinfo.Pod, pools *poolLookup, size int) (safe, survivors int32) {
	for idx, g := range blocking.CompleteGroups(pods, size) {
		if idx >= int(s.Spec.Replicas) {
			continue
		}
		survives, isSafe := true, true
		for _, p := range g {
			node, err := v.nodes.Get(p.Spec.NodeName)
			if err != nil || v.updatingNow(node) {
				survives = false
				break
			}
			if !v.willNotDrain(node, pools) {
				isSafe = false
			}
		}
		if survives {
			survivors++
			if isSafe {
				safe++
			}
		}
	}
	return safe, survivors
}

// updatingNow is updatingNow, or another source has picked or is draining the node (see
// sources.drainingNow).
func (v *view) updatingNow(n *corev1.Node) bool {
	return updatingNow(n) || v.sources.drainingNow(n)
}

// updatingNow reports whether the node is cordoned, or targeted or drained by the MCO: its pods are
// about to leave.
func updatingNow(n *corev1.Node) bool {
	st := mco.ReadNode(n)
	return n.Spec.Unschedulable || st.Targeted() || st.Draining()
}

// ordinal is a StatefulSet pod's ordinal: its apps.kubernetes.io/pod-index label, or the number its
// name ends with.
func ordinal(p *podinfo.Pod) (int, bool) {
	v, ok := p.Labels[appsv1.PodIndexLabel]
	if !ok {
		i := strings.LastIndex(p.Name, "-")
		if i < 0 {
			return 0, false
		}
		v = p.Name[i+1:]
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 0
}

// heldResources is what the surge's extra replicas request of extended resources (GPUs and the like).
// A finished pod requests nothing the scheduler counts: the first live pod is the model.
func heldResources(s *v1alpha1.Surge, pods []*podinfo.Pod, groupSize int32) corev1.ResourceList {
	i := slices.IndexFunc(pods, func(p *podinfo.Pod) bool { return !blocking.Skip(p) })
	if s.PhaseOf() == v1alpha1.PhaseFailed || i < 0 {
		return nil
	}
	out := corev1.ResourceList{}
	for name, q := range pods[i].Spec.Requests {
		if !strings.Contains(string(name), "/") {
			continue
		}
		total := q.DeepCopy()
		total.Set(q.Value() * int64(s.Spec.Delta) * int64(max(groupSize, 1)))
		out[name] = total
	}
	return out
}

// observePods fills the pod-derived parts of the observation.
func observePods(obs *guardian.Observation, pods []*podinfo.Pod, node string, groupSize int32) {
	obs.ReadyElsewhere = readyElsewhere(pods, node, groupSize)
	for _, p := range pods {
		if p.Spec.NodeName == node && !blocking.Skip(p) {
			obs.LiveOnNode++
		}
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
			continue
		}
		if p.Status.Unschedulable {
			// The pod exists since creation; its scheduling has failed since the condition's transition.
			since := p.CreationTimestamp.Time
			if t := p.Status.UnschedulableSince; !t.IsZero() && t.Time.Before(since) {
				since = t.Time
			}
			if obs.UnschedulableSince == nil || since.Before(*obs.UnschedulableSince) {
				obs.UnschedulableSince = &since
			}
		}
	}
}
