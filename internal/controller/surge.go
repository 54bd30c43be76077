package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// leaveFirstCost is the deletion cost given to the surplus pods on nodes that still have to update.
const leaveFirstCost = "-1000"

// notServedRetry is how soon a Surge whose target API is not served (or synced) is looked at again.
const notServedRetry = 30 * time.Second

// surgeCase is one Surge with the live objects it was verified against.
type surgeCase struct {
	s      *v1alpha1.Surge
	target *workload.Target
	obj    *workload.Object
	// owner is nil when the pod owner is gone.
	owner *workload.PodOwnerState
	pods  []*podinfo.Pod
}

// syncSurge moves one Surge along: verify it against the live objects, observe, decide, execute one
// write.
func (c *Controller) syncSurge(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	s, err := c.surges.Get(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		c.flight.forget(key)
		c.writing.forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	sc, retry, err := c.verify(s)
	if errors.Is(err, errTargetGone) {
		return 0, c.targetGone(ctx, s)
	}
	if sc == nil {
		return retry, err
	}
	obs := c.observe(sc)
	c.reportDrainFailed(sc, obs)
	action := guardian.Decide(c.cfg, obs)
	c.log.Debug("decided", zap.String("surge", key.String()), zap.String("phase", string(s.PhaseOf())),
		zap.String("action", string(action.Kind)), zap.String("reason", action.Reason))
	after, err := c.execute(ctx, sc, obs, action)
	if isConflict(err) {
		// The decision was made on a stale object: the informer brings the new one; decide again.
		c.log.Debug("conflict; deciding again", zap.String("surge", key.String()), zap.Error(err))
		return time.Second, nil
	}
	return after, err
}

// execute carries out one decision; each case is at most one write (a restore also steers the
// scale-down with pod deletion costs first).
func (c *Controller) execute(ctx context.Context, sc *surgeCase, obs guardian.Observation, a guardian.Action) (time.Duration, error) {
	s, obj := sc.s, sc.obj
	switch a.Kind {
	case guardian.ActWriteFields:
		return time.Second, c.exec.patchTarget(ctx, obj, workload.SurgePatch(obj, s.Spec.Fields), "surge "+describeFields(s.Spec.Fields))
	case guardian.ActMarkSurged:
		return 0, c.setPhase(ctx, s, v1alpha1.PhaseSurged, "Written", fmt.Sprintf("Surged %s; waiting for %d replacement %s to be Ready off node %s", describeFields(s.Spec.Fields), s.Spec.Delta, unitsOf(s), s.Spec.Node), obs.Now)
	case guardian.ActDiscard:
		return 0, c.discard(ctx, sc)
	case guardian.ActMarkReady, guardian.ActMarkEvictionDue:
		return c.markReady(ctx, sc, obs, a)
	case guardian.ActEvict:
		return c.evict(ctx, obj.ObjectReference(), s, sc.pods)
	case guardian.ActMarkResolved:
		return 0, c.markResolved(ctx, sc, obs, a)
	case guardian.ActStartRestore:
		return 0, c.startRestore(ctx, sc, a, obs.Now)
	case guardian.ActRestoreFields:
		patch := workload.RestorePatch(obj, s.Spec.Fields, a.RemoveExplicit)
		if patch == nil {
			return time.Second, nil
		}
		return time.Second, c.exec.patchTarget(ctx, obj, patch, "restore "+describeRestore(s.Spec.Fields, nil))
	case guardian.ActFinish:
		return 0, c.finish(ctx, sc, obs)
	case guardian.ActForget:
		return 0, c.exec.deleteSurge(ctx, s)
	}
	return a.After, nil
}

// discard deletes a Surge whose fields someone else changed before the surge was written.
func (c *Controller) discard(ctx context.Context, sc *surgeCase) error {
	if err := c.exec.deleteSurge(ctx, sc.s); err != nil {
		return err
	}
	c.event(sc.obj.ObjectReference(), corev1.EventTypeNormal, ReasonExternalChange, actionSurge,
		"%s changed by someone else before the surge was written: not surging", describeFields(sc.s.Spec.Fields))
	return nil
}

// markReady records that the replacements are Ready (ActMarkReady) or that the eviction is due
// (ActMarkEvictionDue), then evicts the blocked pod when the decision says now.
func (c *Controller) markReady(ctx context.Context, sc *surgeCase, obs guardian.Observation, a guardian.Action) (time.Duration, error) {
	s, eref := sc.s, sc.obj.ObjectReference()
	next := s.DeepCopy()
	if a.Kind == guardian.ActMarkReady {
		next = withPhase(s, v1alpha1.PhaseReady, "ReplacementReady", fmt.Sprintf("%d replacement(s) Ready off node %s", s.Spec.Delta, s.Spec.Node), obs.Now)
	}
	if a.EvictionDue || a.Kind == guardian.ActMarkEvictionDue {
		setEvictionDue(next, obs.Now)
	}
	if err := c.exec.updateStatus(ctx, next); err != nil {
		return 0, err
	}
	if a.Kind == guardian.ActMarkReady {
		took := obs.Now.Sub(s.Spec.StartTime.Time)
		c.metrics.ReplacementReady.WithLabelValues(s.Spec.Target.Kind).Observe(took.Seconds())
		c.event(eref, corev1.EventTypeNormal, ReasonReplacementReady, actionSurge,
			"%d replacement %s Ready off node %s after %s", s.Spec.Delta, unitsOf(s), s.Spec.Node, took.Round(time.Second))
	}
	if a.EvictNow {
		return c.evict(ctx, eref, s, sc.pods)
	}
	if a.Kind == guardian.ActMarkEvictionDue {
		return a.After, nil
	}
	return 0, nil
}

// markResolved records that the stall is over and the surge is held until it is safe to restore.
func (c *Controller) markResolved(ctx context.Context, sc *surgeCase, obs guardian.Observation, a guardian.Action) error {
	s := sc.s
	what := fmt.Sprintf("No pod of this workload is left on node %s", s.Spec.Node)
	if a.Reason == guardian.ReasonDrainOver {
		what = fmt.Sprintf("The drain of node %s is over", s.Spec.Node)
	}
	if err := c.setPhase(ctx, s, v1alpha1.PhaseResolved, "DrainUnblocked", what+"; holding the surge until it is safe to restore", obs.Now); err != nil {
		return err
	}
	c.observeResolved(s, s.Spec.Target.Kind, obs.Now)
	if guardian.Trigger(s.Spec.Trigger) == guardian.TriggerMCOPredicted {
		c.metrics.Lookahead.WithLabelValues(lookaheadHit).Inc()
	}
	c.event(sc.obj.ObjectReference(), corev1.EventTypeNormal, ReasonStallResolved, actionSurge,
		"%s; the drain can proceed. The surge is held until %s", what, c.holdUntil(s))
	return nil
}

// holdUntil says in words what the restore waits for.
func (c *Controller) holdUntil(s *v1alpha1.Surge) string {
	switch {
	case s.Spec.Pool == "" || guardian.Trigger(s.Spec.Trigger) == guardian.TriggerCordoned:
		return "the node is uncordoned"
	case guardian.Trigger(s.Spec.Trigger) == guardian.TriggerPrepared:
		return "the pool is Updated (prepared ahead of its update)"
	case c.cfg.Restore == guardian.RestoreNode:
		return "the node is updated"
	case c.cfg.Restore == guardian.RestoreAuto:
		if groups(s) {
			return fmt.Sprintf("%d complete group(s) are Ready on nodes this update will not drain again, or the pool is Updated", max(s.Spec.Replicas, 1))
		}
		return fmt.Sprintf("%d pod(s) are Ready on nodes this update will not drain again, or the pool is Updated", max(s.Spec.Replicas, 1))
	}
	return "the pool is Updated"
}

// setPhase moves the Surge to a phase, stamping its time and condition.
func (c *Controller) setPhase(ctx context.Context, s *v1alpha1.Surge, phase v1alpha1.Phase, reason, message string, now time.Time) error {
	return c.exec.updateStatus(ctx, withPhase(s, phase, reason, message, now))
}

// withPhase is a copy of the Surge moved to a phase, with its time and condition.
func withPhase(s *v1alpha1.Surge, phase v1alpha1.Phase, reason, message string, now time.Time) *v1alpha1.Surge {
	next := s.DeepCopy()
	t := metav1.NewTime(now)
	next.Status.Phase, next.Status.Message = phase, message
	condition := map[v1alpha1.Phase]string{
		v1alpha1.PhaseSurged: guardian.ConditionSurged, v1alpha1.PhaseReady: "ReplacementReady", v1alpha1.PhaseResolved: "DrainUnblocked",
		v1alpha1.PhaseRestoring: "Restoring", v1alpha1.PhaseFailed: "Restored",
	}[phase]
	switch phase {
	case v1alpha1.PhaseReady:
		next.Status.ReadyTime = &t
	case v1alpha1.PhaseResolved:
		next.Status.ResolvedTime = &t
	}
	meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{Type: condition, Status: metav1.ConditionTrue, Reason: reason, Message: message, LastTransitionTime: t, ObservedGeneration: s.Generation})
	return next
}

// setEvictionDue records that the Surge's node is being drained while its replacement is Ready:
// --evict-timeout runs from now.
func setEvictionDue(s *v1alpha1.Surge, now time.Time) {
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: guardian.ConditionEvictionDue, Status: metav1.ConditionTrue,
		Reason: "NodeDraining", Message: fmt.Sprintf("Node %s is being drained: the blocked pod is to leave it", s.Spec.Node),
		LastTransitionTime: metav1.NewTime(now), ObservedGeneration: s.Generation})
}

// evict asks the Eviction API to remove the workload's pods from the drained node now that the
// replacement is Ready, so that their grace period runs before the MCO's next drain attempt.
func (c *Controller) evict(ctx context.Context, eref *corev1.ObjectReference, s *v1alpha1.Surge, pods []*podinfo.Pod) (time.Duration, error) {
	for _, p := range pods {
		if p.Spec.NodeName != s.Spec.Node || blocking.Skip(p) {
			continue
		}
		res, err := c.exec.evict(ctx, eref, p, s.Spec.Node)
		switch {
		case err != nil:
			return 0, err
		case res == evicted:
			c.event(eref, corev1.EventTypeNormal, ReasonPodEvicted, actionEvict,
				"Evicted pod %s from node %s: its replacement is Ready elsewhere", p.Name, s.Spec.Node)
		case res == evictRefused:
			c.log.Info("eviction refused by the PDB for now; retrying", zap.String("pod", p.Namespace+"/"+p.Name))
		}
	}
	return 5 * time.Second, nil
}

func describeFields(fields []workload.Field) string {
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		from := "unset"
		if f.Original != nil {
			from = fmt.Sprint(*f.Original)
		}
		parts = append(parts, fmt.Sprintf("%s from %s to %d", fieldName(f.Path), from, f.Set))
	}
	return strings.Join(parts, ", ")
}

// fieldName turns a JSON pointer into the dotted form people write.
func fieldName(pointer string) string {
	return strings.ReplaceAll(strings.TrimPrefix(pointer, "/"), "/", ".")
}

// surgeRef is the reference Events about a Surge itself are recorded against.
func surgeRef(s *v1alpha1.Surge) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Surge", Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}
}
