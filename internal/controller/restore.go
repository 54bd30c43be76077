package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// startRestore commits to restoring: the surplus pods on nodes still to update are marked to go
// first, then the Surge moves to Restoring with its reason.
func (c *Controller) startRestore(ctx context.Context, sc *surgeCase, a guardian.Action, now time.Time) error {
	s := sc.s
	// A Pending Surge wrote no fields: there is no scale-down to steer.
	if s.Spec.PodOwner.Kind == string(workload.KindDeployment) && s.PhaseOf() != v1alpha1.PhasePending {
		if err := c.steerScaleDown(ctx, s, sc.pods); err != nil {
			return err
		}
	}
	if a.Reason == guardian.ReasonPredictionMissed && guardian.Trigger(s.Spec.Trigger) == guardian.TriggerMCOPredicted {
		c.metrics.Lookahead.WithLabelValues(lookaheadMissed).Inc()
	}
	if s.Status.ResolvedTime != nil {
		c.metrics.SurgeHeld.WithLabelValues(s.Spec.Pool, s.Spec.Target.Kind).Observe(now.Sub(s.Status.ResolvedTime.Time).Seconds())
	}
	next := s.DeepCopy()
	t := metav1.NewTime(now)
	next.Status.Phase, next.Status.Reason, next.Status.Failed, next.Status.RestoreTime = v1alpha1.PhaseRestoring, a.Reason, a.Failed, &t
	next.Status.Message = "Restoring " + describeRestore(s.Spec.Fields, nil) + " (" + a.Reason + ")"
	if a.Detail != "" {
		next.Status.Message += ": " + a.Detail
	}
	meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{Type: "Restoring", Status: metav1.ConditionTrue, Reason: a.Reason, Message: next.Status.Message, LastTransitionTime: t, ObservedGeneration: s.Generation})
	return c.exec.updateStatus(ctx, next)
}

// finish ends a restore: a successful surge's Surge is deleted; a failed one's is kept as Failed,
// the memory that this drain of this node was tried.
func (c *Controller) finish(ctx context.Context, sc *surgeCase, obs guardian.Observation) error {
	s, obj := sc.s, sc.obj
	if s.PhaseOf() == v1alpha1.PhasePending {
		c.log.Info("stall ended before the surge was written; dropping the Surge", zap.String("surge", s.Namespace+"/"+s.Name))
		return c.exec.deleteSurge(ctx, s)
	}
	var kept []workload.Field
	for i, f := range s.Spec.Fields {
		if obs.Fields[i] == workload.FieldChanged {
			kept = append(kept, f)
		}
	}
	var err error
	if s.Status.Failed {
		err = c.setPhase(ctx, s, v1alpha1.PhaseFailed, s.Status.Reason, fmt.Sprintf("Surge for node %s failed (%s); restored %s", s.Spec.Node, s.Status.Reason, describeRestore(s.Spec.Fields, kept)), obs.Now)
	} else {
		err = c.exec.deleteSurge(ctx, s)
	}
	if err != nil {
		return err
	}
	c.reportRestored(s, obj, kept, obs)
	return nil
}

// reportRestored tells the story of a finished restore in Events and metrics.
func (c *Controller) reportRestored(s *v1alpha1.Surge, obj *workload.Object, kept []workload.Field, obs guardian.Observation) {
	eref := obj.ObjectReference()
	kind, reason := s.Spec.Target.Kind, s.Status.Reason
	for _, f := range kept {
		cur, present := obj.Int(f.Path)
		now := "unset"
		if present {
			now = fmt.Sprint(cur)
		}
		c.event(eref, corev1.EventTypeNormal, ReasonExternalChange, actionRestore,
			"%s was changed by someone else during the surge (the guardian set %d, it is now %s): keeping their value",
			fieldName(f.Path), f.Set, now)
	}
	if s.Status.ReadyTime != nil && s.Status.ResolvedTime == nil && obs.LiveOnNode == 0 {
		c.observeResolved(s, kind, obs.Now)
	}
	switch {
	case s.Status.Failed && reason == guardian.ReasonMaxDuration:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonSurgeExpired, actionRestore,
			"Surge held longer than --max-surge-duration=%s: restored %s", c.opts.MaxSurgeDuration, describeRestore(s.Spec.Fields, kept))
	case s.Status.Failed && reason == guardian.ReasonWriteTimeout:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonSurgeNotWritten, actionRestore,
			"%s could not be written for %s (refused, or changed by someone else at every attempt): not surging for node %s; pod %s still blocks the drain",
			describeFields(s.Spec.Fields), guardian.PendingTimeout, s.Spec.Node, s.Spec.BlockedPod)
	case s.Status.Failed && reason == guardian.ReasonEvictTimeout:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonEvictionRefused, actionRestore,
			"Pod %s did not leave node %s within --evict-timeout=%s of its replacement being Ready: the workload's own disruption budgets refuse it. Restored %s",
			s.Spec.BlockedPod, s.Spec.Node, c.cfg.EvictTimeout, describeRestore(s.Spec.Fields, kept))
	case s.Status.Failed && reason == guardian.ReasonReplacementRefused:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonReplacementRefused, actionRestore,
			"The replacement pod(s) were refused for %s (%s). Restored %s; pod %s still blocks the drain of node %s",
			guardian.ReplacementRefusedTimeout, restoreDetail(s), describeRestore(s.Spec.Fields, kept), s.Spec.BlockedPod, s.Spec.Node)
		c.enqueueNode(s.Spec.Node)
	case s.Status.Failed && reason == guardian.ReasonMultiplePDBs:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonMultiplePDBs, actionRestore,
			"Pod %s cannot be evicted from node %s although PDB %s allows it: %s, and the Eviction API refuses a pod that two PDBs select. Restored %s",
			s.Spec.BlockedPod, s.Spec.Node, s.Spec.PDB, restoreDetail(s), describeRestore(s.Spec.Fields, kept))
		c.enqueueNode(s.Spec.Node)
	case s.Status.Failed:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonSurgeFailed, actionRestore,
			"Surge for node %s failed (%s): restored %s; pod %s still blocks the drain", s.Spec.Node, reason, describeRestore(s.Spec.Fields, kept), s.Spec.BlockedPod)
	default:
		c.event(eref, corev1.EventTypeNormal, ReasonSurgeRestored, actionRestore,
			"Restored %s (%s) after %s", describeRestore(s.Spec.Fields, kept), reason, obs.Now.Sub(s.Spec.StartTime.Time).Round(time.Second))
	}
}

// restoreDetail is what the decision to restore observed (guardian.Action.Detail), kept in the
// Restoring condition's message after the reason.
func restoreDetail(s *v1alpha1.Surge) string {
	c := meta.FindStatusCondition(s.Status.Conditions, "Restoring")
	if c == nil {
		return s.Status.Reason
	}
	if _, detail, ok := strings.Cut(c.Message, "("+s.Status.Reason+"): "); ok {
		return detail
	}
	return s.Status.Reason
}

func describeRestore(fields, kept []workload.Field) string {
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		if slices.ContainsFunc(kept, func(k workload.Field) bool { return k.Path == f.Path }) {
			parts = append(parts, fmt.Sprintf("%s kept as changed by someone else", fieldName(f.Path)))
			continue
		}
		to := "unset"
		if f.Original != nil {
			to = fmt.Sprint(*f.Original)
		}
		parts = append(parts, fmt.Sprintf("%s to %s", fieldName(f.Path), to))
	}
	return strings.Join(parts, ", ")
}

// steerScaleDown sets a low pod-deletion-cost on the surplus pods that sit on nodes still to update
// so that the ReplicaSet removes those when the count goes back down. (The ReplicaSet removes
// unscheduled and not-Ready pods before it looks at the cost: steering only works between Ready pods.)
func (c *Controller) steerScaleDown(ctx context.Context, s *v1alpha1.Surge, pods []*podinfo.Pod) error {
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
	pools := c.newPoolLookup()
	rank := func(p *podinfo.Pod) int {
		n, err := c.nodes.Get(p.Spec.NodeName)
		switch {
		case p.Spec.NodeName == "" || err != nil:
			return 0
		case c.updatingNow(n):
			return 1
		case !c.willNotDrain(n, pools):
			return 2
		}
		return rankSafe
	}
	sort.SliceStable(live, func(i, j int) bool { return rank(live[i]) < rank(live[j]) })
	for _, p := range live[:surplus] {
		if rank(p) == rankSafe || p.Annotations[podinfo.DeletionCostAnnotation] == leaveFirstCost {
			continue
		}
		if err := c.exec.setDeletionCost(ctx, p, leaveFirstCost); err != nil && !errors.Is(err, errDryRun) {
			return err
		}
	}
	return nil
}

// rankSafe is steerScaleDown's rank of a pod on a node this update will not drain again.
const rankSafe = 3
