package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// steerRestore readies the scale-down of a restore about to start (see steerScaleDown). A Pending
// Surge wrote no fields: there is no scale-down to steer.
func (r *surgeReconciler) steerRestore(ctx context.Context, sc *surgeCase) error {
	s := sc.s
	if s.Spec.PodOwner.Kind != string(workload.KindDeployment) || s.PhaseOf() == v1alpha1.PhasePending {
		return nil
	}
	return r.steerScaleDown(ctx, s, sc.pods)
}

// restored is what a restore put back, for its Events.
func restored(o *outcome) string { return guardian.DescribeRestore(o.s.Spec.Fields, o.step.Kept) }

// recordRestored tells about each field someone else changed during the surge, which the restore
// kept, and counts the stall resolved if its node emptied without the Surge seeing it Resolved.
func recordRestored(r *surgeReconciler, o *outcome) {
	s := o.s
	for _, f := range o.step.Kept {
		cur, present := o.obj.Int(f.Path)
		now := "unset"
		if present {
			now = fmt.Sprint(cur)
		}
		r.event(o.regarding(), corev1.EventTypeNormal, ReasonExternalChange, actionRestore,
			"%s was changed by someone else during the surge (the guardian set %d, it is now %s): keeping their value",
			guardian.FieldName(f.Path), f.Set, now)
	}
	if s.Status.ReadyTime != nil && s.Status.ResolvedTime == nil && o.obs.LiveOnNode == 0 {
		r.observeResolved(s, o.obs.Now)
	}
}

// recordFailed is recordRestored for a surge that did not help, counted as a failed stall.
func recordFailed(r *surgeReconciler, o *outcome) {
	recordRestored(r, o)
	r.metrics.StallsFailed.WithLabelValues(o.s.Spec.Pool, o.s.Spec.Target.Kind, o.s.Status.Reason).Inc()
}

// recordFailedAgain is recordFailed for a failure the stall decision reports anew once the Surge is
// Failed (the refused replacement, the second PDB): the node's stalls are looked at again now.
func recordFailedAgain(r *surgeReconciler, o *outcome) {
	recordFailed(r, o)
	r.enqueueNode(o.s.Spec.Node)
}

func noteRestored(_ *surgeReconciler, o *outcome) string {
	return fmt.Sprintf("Restored %s (%s) after %s", restored(o), o.s.Status.Reason, o.obs.Now.Sub(o.s.Spec.StartTime.Time).Round(time.Second))
}

func noteFailed(_ *surgeReconciler, o *outcome) string {
	s := o.s
	return fmt.Sprintf("Surge for node %s failed (%s): restored %s; pod %s still blocks the drain", s.Spec.Node, s.Status.Reason, restored(o), s.Spec.BlockedPod)
}

func noteExpired(r *surgeReconciler, o *outcome) string {
	return fmt.Sprintf("Surge held longer than --max-surge-duration=%s: restored %s", r.opts.MaxSurgeDuration, restored(o))
}

func noteNotWritten(_ *surgeReconciler, o *outcome) string {
	s := o.s
	return fmt.Sprintf("%s could not be written for %s (refused, or changed by someone else at every attempt): not surging for node %s; pod %s still blocks the drain",
		guardian.DescribeFields(s.Spec.Fields), guardian.PendingTimeout, s.Spec.Node, s.Spec.BlockedPod)
}

func noteEvictTimeout(r *surgeReconciler, o *outcome) string {
	s := o.s
	return fmt.Sprintf("Pod %s did not leave node %s within --evict-timeout=%s of its replacement being Ready: the workload's own disruption budgets refuse it. Restored %s",
		s.Spec.BlockedPod, s.Spec.Node, r.cfg.EvictTimeout, restored(o))
}

func noteRefused(_ *surgeReconciler, o *outcome) string {
	s := o.s
	return fmt.Sprintf("The replacement pod(s) were refused for %s (%s). Restored %s; pod %s still blocks the drain of node %s",
		guardian.ReplacementRefusedTimeout, guardian.RestoreDetail(s), restored(o), s.Spec.BlockedPod, s.Spec.Node)
}

func noteMultiplePDBs(_ *surgeReconciler, o *outcome) string {
	s := o.s
	return fmt.Sprintf("Pod %s cannot be evicted from node %s although PDB %s allows it: %s, and the Eviction API refuses a pod that two PDBs select. Restored %s",
		s.Spec.BlockedPod, s.Spec.Node, s.Spec.PDB, guardian.RestoreDetail(s), restored(o))
}

// steerScaleDown sets a low pod-deletion-cost on the surplus pods that sit on nodes still to update
// so that the ReplicaSet removes those when the count goes back down. (The ReplicaSet removes
// unscheduled and not-Ready pods before it looks at the cost: steering only works between Ready pods.)
func (r *surgeReconciler) steerScaleDown(ctx context.Context, s *v1alpha1.Surge, pods []*podinfo.Pod) error {
	var live []*podinfo.Pod
	for _, p := range pods {
		if !blocking.Skip(p) {
			live = append(live, p)
		}
	}
	surplus := int(s.Spec.Delta)
	if len(live) <= surplus {
		return nil
	}
	// Unscheduled pods go first, then pods on nodes being updated now, then on nodes the update will
	// still drain, never the others.
	pools := r.newPoolLookup()
	rank := func(p *podinfo.Pod) int {
		n, err := r.nodes.Get(p.Spec.NodeName)
		switch {
		case p.Spec.NodeName == "" || err != nil:
			return 0
		case r.updatingNow(n):
			return 1
		case !r.willNotDrain(n, pools):
			return 2
		}
		return rankSafe
	}
	sort.SliceStable(live, func(i, j int) bool { return rank(live[i]) < rank(live[j]) })
	for _, p := range live[:surplus] {
		if rank(p) == rankSafe || p.Annotations[podinfo.DeletionCostAnnotation] == leaveFirstCost {
			continue
		}
		if err := r.exec.setDeletionCost(ctx, p, leaveFirstCost); err != nil && !errors.Is(err, errDryRun) {
			return err
		}
	}
	return nil
}

// rankSafe is steerScaleDown's rank of a pod on a node this update will not drain again.
const rankSafe = 3
