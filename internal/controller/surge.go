package controller

import (
	"context"
	"encoding/json"
	"fmt"
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

// syncWorkload moves one surge along: it reads the record from the surged object, observes the pods,
// node and pool, and carries out guardian.Decide's answer.
func (c *Controller) syncWorkload(ctx context.Context, ref workload.Ref) (time.Duration, error) {
	obj, err := c.store.Get(ref)
	if apierrors.IsNotFound(err) {
		if c.state.untrack(ref) {
			c.log.Warn("surged workload was deleted; its surge record went with it", zap.Stringer("workload", ref))
			c.metrics.StallsFailed.WithLabelValues("", string(ref.Kind), guardian.ReasonPodOwnerGone).Inc()
		}
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	rec, err := obj.Record()
	if err != nil {
		c.reportMalformed(obj, err)
		return 0, nil
	}
	if rec == nil {
		c.state.untrack(ref)
		return 0, nil
	}
	obs := guardian.Observation{Now: c.clock.Now(), Record: rec}
	tracked := trackedSurge{ref: obj.Ref, node: rec.Node, pool: rec.Pool, podOwner: rec.PodOwner, start: rec.StartTime.Time}
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

	action := guardian.Decide(c.cfg, obs)
	log := c.log.With(zap.Stringer("workload", ref), zap.String("node", rec.Node), zap.String("action", string(action.Kind)))
	log.Debug("decided", zap.String("reason", action.Reason))
	eref := obj.ObjectReference()
	kind := string(ref.Kind)
	switch action.Kind {
	case guardian.ActMarkReady:
		next := *rec
		now := metav1.NewTime(obs.Now)
		next.ReadyTime = &now
		if done, err := c.write(ctx, obj, workload.RecordPatch(obj, &next), "record the Ready replacement"); !done {
			return 0, err
		}
		took := obs.Now.Sub(rec.StartTime.Time)
		c.metrics.ReplacementReady.WithLabelValues(kind).Observe(took.Seconds())
		c.event(eref, corev1.EventTypeNormal, ReasonReplacementReady, actionSurge,
			"%d replacement replica(s) Ready off node %s after %s", rec.Delta, rec.Node, took.Round(time.Second))
		return 0, nil
	case guardian.ActMarkResolved:
		next := *rec
		now := metav1.NewTime(obs.Now)
		next.ResolvedTime = &now
		if done, err := c.write(ctx, obj, workload.RecordPatch(obj, &next), "record the resolved stall"); !done {
			return 0, err
		}
		c.observeResolved(rec, kind, obs.Now)
		c.event(eref, corev1.EventTypeNormal, ReasonStallResolved, actionSurge,
			"No pod of this workload is left on node %s; the drain can proceed. The surge is held until the %s is updated",
			rec.Node, map[bool]string{true: "node", false: "pool"}[c.cfg.RestoreOnNode || rec.Pool == ""])
		return 0, nil
	case guardian.ActEvict:
		return c.evict(ctx, eref, rec, pods)
	case guardian.ActRestore:
		return c.restore(ctx, obj, rec, action, pods, obs)
	case guardian.ActFinishRestore:
		return c.restore(ctx, obj, rec, action, pods, obs)
	}
	return action.After, nil
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
func (c *Controller) restore(ctx context.Context, obj *workload.Object, rec *workload.Record, action guardian.Action, pods []*corev1.Pod, obs guardian.Observation) (time.Duration, error) {
	eref := obj.ObjectReference()
	kind := string(obj.Ref.Kind)
	reason, failed := action.Reason, action.Failed
	if action.Kind == guardian.ActFinishRestore {
		reason, failed = rec.Restoring, rec.RestoreFailure != ""
		if failed {
			reason = rec.RestoreFailure
		}
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
	step := workload.PlanRestore(obj, rec, reason, failure)
	if done, err := c.write(ctx, obj, step.Patch, "restore "+describeRestore(rec)); !done {
		return 0, err
	}
	for _, f := range step.Kept {
		cur, present := obj.Int(f.Path)
		now := "unset"
		if present {
			now = fmt.Sprint(cur)
		}
		c.event(eref, corev1.EventTypeNormal, ReasonExternalChange, actionRestore,
			"%s was changed by someone else during the surge (the guardian set %d, it is now %s): keeping their value",
			fieldName(f.Path), f.Set, now)
	}
	if !step.Done {
		c.log.Info("restore step one written; waiting for the workload to scale down", zap.Stringer("workload", obj.Ref))
		return 5 * time.Second, nil
	}
	c.state.untrack(obj.Ref)
	if rec.ReadyTime != nil && rec.ResolvedTime == nil && obs.LiveOnNode == 0 {
		c.observeResolved(rec, kind, obs.Now)
	}
	switch {
	case failed && reason == guardian.ReasonMaxDuration:
		c.metrics.StallsFailed.WithLabelValues(rec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonSurgeExpired, actionRestore,
			"Surge held longer than --max-surge-duration=%s: restored %s", c.opts.MaxSurgeDuration, describeRestore(rec))
	case failed:
		c.metrics.StallsFailed.WithLabelValues(rec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonSurgeFailed, actionRestore,
			"Surge for node %s failed (%s): restored %s; pod %s still blocks the drain", rec.Node, reason, describeRestore(rec), rec.BlockedPod)
	default:
		c.event(eref, corev1.EventTypeNormal, ReasonSurgeRestored, actionRestore,
			"Restored %s (%s) after %s", describeRestore(rec), reason, obs.Now.Sub(rec.StartTime.Time).Round(time.Second))
	}
	return 0, nil
}

func describeRestore(rec *workload.Record) string {
	parts := make([]string, 0, len(rec.Fields))
	for _, f := range rec.Fields {
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
