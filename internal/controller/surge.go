package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// deletionCostAnnotation steers which pod a ReplicaSet removes first on scale-down (lowest cost first).
const deletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"

// leaveFirstCost is the deletion cost given to the surplus pods on nodes that still have to update.
const leaveFirstCost = "-1000"

// syncWorkload moves one surge along: it reads the record from the object carrying it, observes the
// pods, node and pool, and carries out guardian.Decide's answer. ref is the record's carrier.
func (c *Controller) syncWorkload(ctx context.Context, ref workload.Ref) (time.Duration, error) {
	carrier, err := c.store.Get(ref)
	if apierrors.IsNotFound(err) {
		if t, ok := c.state.get(ref); ok {
			c.state.untrack(ref)
			c.metrics.StallsFailed.WithLabelValues(t.pool, string(ref.Kind), guardian.ReasonPodOwnerGone).Inc()
			c.event(ref.ObjectReference(), corev1.EventTypeWarning, ReasonWorkloadDeleted, actionRestore,
				"%s was deleted during its surge for node %s: its surge record went with it, nothing is left to restore", ref, t.node)
		}
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	rec, err := carrier.Record()
	if err != nil {
		c.reportMalformed(carrier, err)
		return 0, nil
	}
	if rec == nil {
		c.state.untrack(ref)
		return 0, nil
	}
	s := &surge{carrier: carrier, target: carrier, rec: rec}
	if rec.Target != nil {
		if s.target, err = c.store.Get(*rec.Target); apierrors.IsNotFound(err) {
			// The surged object is gone (its Deployment follows by garbage collection): drop the record.
			if done, err := c.write(ctx, carrier, workload.FinishPatch(carrier, nil), "drop the record of a deleted "+string(rec.Target.Kind)); !done {
				return c.ignoreGone(done, err)
			}
			c.state.untrack(ref)
			c.metrics.StallsFailed.WithLabelValues(rec.Pool, string(rec.Target.Kind), guardian.ReasonPodOwnerGone).Inc()
			c.event(rec.Target.ObjectReference(), corev1.EventTypeWarning, ReasonWorkloadDeleted, actionRestore,
				"%s was deleted during its surge for node %s: surge record dropped from %s", *rec.Target, rec.Node, ref)
			return 0, nil
		} else if err != nil {
			return 0, err
		}
		if rec.Pending {
			return c.completeSurge(ctx, s)
		}
	}
	obs := guardian.Observation{Now: c.clock.Now(), Record: rec}
	tracked := trackedSurge{ref: carrier.Ref, target: s.target.Ref, node: rec.Node, pool: rec.Pool, podOwner: rec.PodOwner, start: rec.StartTime.Time}
	var pods []*corev1.Pod
	owner, err := c.store.PodOwner(rec.PodOwner)
	switch {
	case apierrors.IsNotFound(err):
		obs.PodOwnerGone = true
	case err != nil:
		return 0, err
	default:
		tracked.selector = owner.Selector
		if pods, err = c.pods.Pods(rec.PodOwner.Namespace).List(owner.Selector); err != nil {
			return 0, err
		}
		obs.ScaledDown = owner.StatusReplicas <= owner.Replicas
	}
	c.state.track(tracked)
	if obs.Node, err = c.nodes.Get(rec.Node); err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	if rec.Pool != "" && c.pools != nil {
		if obs.Pool, err = c.pools.Get(rec.Pool); err != nil && !apierrors.IsNotFound(err) {
			return 0, err
		}
	}
	observePods(&obs, pods, rec.Node)
	if rec.Target != nil && rec.Restoring != "" {
		// A split restore continues whatever the pods do: its count comes down when the owner decides.
		return c.restore(ctx, s, guardian.Action{Kind: guardian.ActFinishRestore}, pods, obs)
	}

	action := guardian.Decide(c.cfg, obs)
	c.log.Debug("decided", zap.Stringer("workload", ref), zap.String("node", rec.Node),
		zap.String("action", string(action.Kind)), zap.String("reason", action.Reason))
	eref := s.target.ObjectReference()
	kind := string(s.target.Ref.Kind)
	switch action.Kind {
	case guardian.ActMarkReady:
		if done, err := c.stamp(ctx, s, "record the Ready replacement", func(r *workload.Record, now *metav1.Time) { r.ReadyTime = now }, obs.Now); !done {
			return 0, err
		}
		took := obs.Now.Sub(rec.StartTime.Time)
		c.metrics.ReplacementReady.WithLabelValues(kind).Observe(took.Seconds())
		c.event(eref, corev1.EventTypeNormal, ReasonReplacementReady, actionSurge,
			"%d replacement replica(s) Ready off node %s after %s", rec.Delta, rec.Node, took.Round(time.Second))
		return 0, nil
	case guardian.ActMarkResolved:
		if done, err := c.stamp(ctx, s, "record the resolved stall", func(r *workload.Record, now *metav1.Time) { r.ResolvedTime = now }, obs.Now); !done {
			return 0, err
		}
		c.observeResolved(rec, kind, obs.Now)
		c.event(eref, corev1.EventTypeNormal, ReasonStallResolved, actionSurge,
			"No pod of this workload is left on node %s; the drain can proceed. The surge is held until the %s is updated",
			rec.Node, map[bool]string{true: "node", false: "pool"}[c.cfg.RestoreOnNode || rec.Pool == ""])
		return 0, nil
	case guardian.ActEvict:
		return c.evict(ctx, eref, rec, pods)
	case guardian.ActRestore, guardian.ActFinishRestore:
		return c.restore(ctx, s, action, pods, obs)
	}
	return action.After, nil
}

// surge is one surge's record with the object carrying it and the object whose fields it changed
// (the same object unless the record names a Target).
type surge struct {
	carrier, target *workload.Object
	rec             *workload.Record
}

func (s *surge) split() bool { return s.rec.Target != nil }

// completeSurge writes a pending surge's fields on its target, then marks the record complete. Each
// call does one write; a crash in between resumes here.
func (c *Controller) completeSurge(ctx context.Context, s *surge) (time.Duration, error) {
	switch workload.FieldsState(s.target, s.rec) {
	case workload.AtOriginal:
		if done, err := c.write(ctx, s.target, workload.FieldsPatch(s.target, s.rec.Fields), "surge "+describeFields(s.rec.Fields)); !done {
			return 0, err
		}
		// The record's carrier changes only on the next write: look again soon rather than wait for an event.
		return time.Second, nil
	case workload.AtSet:
		next := *s.rec
		next.Pending = false
		_, err := c.write(ctx, s.carrier, workload.RecordPatch(s.carrier, &next), "record the written surge")
		return 0, err
	}
	// Someone changed the fields between the record and our write: theirs now, no surge.
	if done, err := c.write(ctx, s.carrier, workload.FinishPatch(s.carrier, nil), "drop the surge record"); !done {
		return 0, err
	}
	c.state.untrack(s.carrier.Ref)
	c.event(s.target.ObjectReference(), corev1.EventTypeNormal, ReasonExternalChange, actionSurge,
		"%s changed by someone else before the surge was written: not surging", describeFields(s.rec.Fields))
	return 0, nil
}

// stamp records a moment of the surge's life in its record.
func (c *Controller) stamp(ctx context.Context, s *surge, what string, set func(*workload.Record, *metav1.Time), at time.Time) (bool, error) {
	next := *s.rec
	now := metav1.NewTime(at)
	set(&next, &now)
	return c.write(ctx, s.carrier, workload.RecordPatch(s.carrier, &next), what)
}

func (c *Controller) ignoreGone(_ bool, err error) (time.Duration, error) {
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	return 0, err
}

// observePods fills the pod-derived parts of the observation.
func observePods(obs *guardian.Observation, pods []*corev1.Pod, node string) {
	obs.ReadyElsewhere = readyElsewhere(pods, node)
	for _, p := range pods {
		if p.Spec.NodeName == node && !blocking.Skip(p) {
			obs.LiveOnNode++
		}
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				// The pod exists since creation; its scheduling has failed since the condition's transition.
				since := p.CreationTimestamp.Time
				if !cond.LastTransitionTime.IsZero() && cond.LastTransitionTime.Time.Before(since) {
					since = cond.LastTransitionTime.Time
				}
				if obs.UnschedulableSince == nil || since.Before(*obs.UnschedulableSince) {
					t := since
					obs.UnschedulableSince = &t
				}
			}
		}
	}
}

func (c *Controller) observeResolved(rec *workload.Record, kind string, now time.Time) {
	c.metrics.StallsResolved.WithLabelValues(rec.Pool, kind).Inc()
	c.metrics.StallResolution.WithLabelValues(rec.Pool, kind).Observe(now.Sub(rec.StartTime.Time).Seconds())
}

// write applies a patch unless in dry-run mode. done is false when the caller must stop: on error (to
// retry) or in dry-run (nothing was written; the decision was reported).
func (c *Controller) write(ctx context.Context, obj *workload.Object, patch []byte, what string) (bool, error) {
	if c.opts.DryRun {
		if c.state.once("", fmt.Sprintf("%s/%s/%s/%s", ReasonDryRun, obj.Ref.UID, obj.Meta.GetResourceVersion(), what)) {
			c.event(obj.ObjectReference(), corev1.EventTypeNormal, ReasonDryRun, actionSurge, "Dry run: would %s", what)
		}
		return false, nil
	}
	if err := c.store.Patch(ctx, obj.Ref, patch); err != nil {
		return false, fmt.Errorf("%s on %s: %w", what, obj.Ref, err)
	}
	return true, nil
}

// evict asks the Eviction API to remove the workload's pods from the drained node now that the
// replacement is Ready, so that their grace period runs before the MCO's next drain attempt. A 429 (the
// PDB does not allow it yet) is retried shortly; the guardian never deletes a pod.
func (c *Controller) evict(ctx context.Context, eref *corev1.ObjectReference, rec *workload.Record, pods []*corev1.Pod) (time.Duration, error) {
	for _, p := range pods {
		if p.Spec.NodeName != rec.Node || blocking.Skip(p) {
			continue
		}
		if c.opts.DryRun {
			if c.state.once(rec.Node, fmt.Sprintf("%s/evict/%s", ReasonDryRun, p.UID)) {
				c.event(eref, corev1.EventTypeNormal, ReasonDryRun, actionEvict, "Dry run: would evict pod %s from node %s", p.Name, rec.Node)
			}
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
		err := c.clients.Kube.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
		switch {
		case err == nil:
			c.metrics.Evictions.WithLabelValues("success").Inc()
			c.event(eref, corev1.EventTypeNormal, ReasonPodEvicted, actionEvict,
				"Evicted pod %s from node %s: its replacement is Ready elsewhere", p.Name, rec.Node)
		case apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			c.metrics.Evictions.WithLabelValues("blocked").Inc()
			c.log.Info("eviction refused by the PDB for now; retrying", zap.String("pod", p.Namespace+"/"+p.Name))
		default:
			c.metrics.Evictions.WithLabelValues("error").Inc()
			return 0, fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return 5 * time.Second, nil
}

// restore undoes the surge. Before the count goes down it marks the surplus pods on nodes that still
// have to update as the ones to remove first, so that the survivors sit on updated nodes. Fields
// someone else changed during the surge keep their value and are reported.
//
// A record on its target is restored in one write (or two for a count that must be explicit before it
// is removed, see workload.Field.ExplicitBeforeRemove). A split record is marked Restoring first, then the
// target's fields are restored, then the record is removed: one write per sync, each resumable.
func (c *Controller) restore(ctx context.Context, s *surge, action guardian.Action, pods []*corev1.Pod, obs guardian.Observation) (time.Duration, error) {
	rec := s.rec
	reason, failed := action.Reason, action.Failed
	if action.Kind == guardian.ActFinishRestore {
		reason, failed = rec.Restoring, rec.RestoreFailure != ""
	}
	var failure *workload.Failure
	if failed {
		failure = &workload.Failure{Node: rec.Node, Drain: rec.Drain, Reason: reason, Time: metav1.NewTime(obs.Now)}
	}
	if action.Kind == guardian.ActRestore && rec.PodOwner.Kind == workload.KindDeployment && !c.opts.DryRun {
		if err := c.steerScaleDown(ctx, rec, pods); err != nil {
			return 0, err
		}
	}
	var kept []workload.Field
	switch {
	case s.split() && action.Kind == guardian.ActRestore:
		next := *rec
		next.Restoring = reason
		if failed {
			next.RestoreFailure = reason
		}
		_, err := c.write(ctx, s.carrier, workload.RecordPatch(s.carrier, &next), "start restoring "+describeRestore(rec))
		return time.Second, err
	case s.split():
		patch, k := workload.RestoreFieldsPatch(s.target, rec)
		if patch != nil {
			if done, err := c.write(ctx, s.target, patch, "restore "+describeRestore(rec)); !done {
				return 0, err
			}
			return time.Second, nil
		}
		kept = k
		if done, err := c.write(ctx, s.carrier, workload.FinishPatch(s.carrier, failure), "remove the surge record"); !done {
			return 0, err
		}
	default:
		step := workload.PlanRestore(s.target, rec, reason, failure)
		if done, err := c.write(ctx, s.target, step.Patch, "restore "+describeRestore(rec)); !done {
			return 0, err
		}
		if !step.Done {
			c.log.Info("restore step one written; waiting for the workload to scale down", zap.Stringer("workload", s.target.Ref))
			return 5 * time.Second, nil
		}
		kept = step.Kept
	}
	c.finishRestore(s, kept, reason, failed, obs)
	return 0, nil
}

// finishRestore reports a completed restore.
func (c *Controller) finishRestore(s *surge, kept []workload.Field, reason string, failed bool, obs guardian.Observation) {
	rec := s.rec
	eref := s.target.ObjectReference()
	kind := string(s.target.Ref.Kind)
	for _, f := range kept {
		cur, present := s.target.Int(f.Path)
		now := "unset"
		if present {
			now = fmt.Sprint(cur)
		}
		c.event(eref, corev1.EventTypeNormal, ReasonExternalChange, actionRestore,
			"%s was changed by someone else during the surge (the guardian set %d, it is now %s): keeping their value",
			fieldName(f.Path), f.Set, now)
	}
	c.state.untrack(s.carrier.Ref)
	if rec.ReadyTime != nil && rec.ResolvedTime == nil && obs.LiveOnNode == 0 {
		c.observeResolved(rec, kind, obs.Now)
	}
	switch {
	case failed && reason == guardian.ReasonMaxDuration:
		c.metrics.StallsFailed.WithLabelValues(rec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonSurgeExpired, actionRestore,
			"Surge held longer than --max-surge-duration=%s: restored %s", c.opts.MaxSurgeDuration, describeRestore(rec, kept...))
	case failed:
		c.metrics.StallsFailed.WithLabelValues(rec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonSurgeFailed, actionRestore,
			"Surge for node %s failed (%s): restored %s; pod %s still blocks the drain", rec.Node, reason, describeRestore(rec, kept...), rec.BlockedPod)
	default:
		c.event(eref, corev1.EventTypeNormal, ReasonSurgeRestored, actionRestore,
			"Restored %s (%s) after %s", describeRestore(rec, kept...), reason, obs.Now.Sub(rec.StartTime.Time).Round(time.Second))
	}
}

func describeRestore(rec *workload.Record, kept ...workload.Field) string {
	parts := make([]string, 0, len(rec.Fields))
	for _, f := range rec.Fields {
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
// so that the ReplicaSet removes those when the count goes back down.
func (c *Controller) steerScaleDown(ctx context.Context, rec *workload.Record, pods []*corev1.Pod) error {
	var live []*corev1.Pod
	for _, p := range pods {
		if !blocking.Skip(p) {
			live = append(live, p)
		}
	}
	// The scale-down removes rec.Delta pods; mark that many, worst-placed first.
	surplus := int(rec.Delta)
	if len(live) <= surplus {
		return nil
	}
	// Unscheduled pods go first, then pods on nodes that still have to update, never those on updated nodes.
	rank := func(p *corev1.Pod) int {
		n, err := c.nodes.Get(p.Spec.NodeName)
		switch {
		case p.Spec.NodeName == "" || err != nil:
			return 0
		case n.Spec.Unschedulable || mco.ReadNode(n).Targeted() || hasUpdateTaint(n):
			return 1
		}
		return 2
	}
	sort.SliceStable(live, func(i, j int) bool { return rank(live[i]) < rank(live[j]) })
	for _, p := range live[:surplus] {
		if rank(p) == 2 || p.Annotations[deletionCostAnnotation] == leaveFirstCost {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": p.ResourceVersion,
			"annotations":     map[string]string{deletionCostAnnotation: leaveFirstCost},
		}})
		_, err := c.clients.Kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("setting the deletion cost of pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}

// hasUpdateTaint reports the MCO's taint on nodes that still have to update.
func hasUpdateTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == "UpdateInProgress" {
			return true
		}
	}
	return false
}
