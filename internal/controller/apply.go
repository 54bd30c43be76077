package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/trigger"
)

// stallReport is how a stall reason is reported, once per stall (see stallKey): the Event's type and
// action, and whether it counts in drain_guardian_stalls_failed_total or as a skipped look-ahead.
type stallReport struct {
	eventType, action string
	failed, skipped   bool
}

// stallReports is the table from a stall decision's reason to its report. Reasons not listed
// (scope, opt-out, PDB status lag, an owner that could not be read, a Surge that failed and was
// reported then) record nothing.
var stallReports = map[guardian.StallReason]stallReport{
	guardian.StallUnsupportedOwner: {eventType: corev1.EventTypeWarning, action: actionReport, failed: true},
	guardian.StallMissingRBAC:      {eventType: corev1.EventTypeWarning, action: actionReport, failed: true},
	guardian.StallMultiplePDBs:     {eventType: corev1.EventTypeWarning, action: actionReport, failed: true},
	guardian.StallUnsatisfiablePDB: {eventType: corev1.EventTypeWarning, action: actionReport, failed: true},
	guardian.StallNoCapacity:       {eventType: corev1.EventTypeWarning, action: actionReport, failed: true},
	guardian.StallSurgeTooLarge:    {eventType: corev1.EventTypeWarning, action: actionReport, failed: true},
	guardian.StallNotSteady:        {eventType: corev1.EventTypeWarning, action: actionReport, failed: true},
	guardian.StallDeferred:         {eventType: corev1.EventTypeNormal, action: actionSurge},
	guardian.StallLookaheadSkipped: {skipped: true},
}

// applyStalls carries out the node's stall decisions: the only place on the stall path that records
// Events, metrics, gauges and one-off reports. It returns when to look at the node again.
func (r *nodeReconciler) applyStalls(ctx context.Context, obs *nodeObservation, decisions []guardian.Decision, starts map[int]*surgeStart) (time.Duration, error) {
	stats := &nodeStats{pool: obs.pool, unresolvable: map[unresolvable]int{}}
	var missing corev1.ResourceList
	var after time.Duration
	var errs []error
	for i, d := range decisions {
		st := &obs.wave.Stalls[i]
		countStall(stats, obs, d)
		if d.SameAs >= 0 {
			continue
		}
		retry, err := r.applyStall(ctx, obs, st, d, starts[i])
		after = shorter(after, retry)
		if err != nil {
			errs = append(errs, err)
		}
		if d.Reason == guardian.StallNoCapacity {
			missing = addResources(missing, d.Missing)
		}
	}
	r.drains.setNode(obs.node.Name, stats, missing)
	if missing != nil {
		// Capacity may free up: surges of the pool whose survivors are safe give theirs back (see
		// guardian's lifecycle); the stall looks again after DeferRetry.
		r.enqueueSurges(func(s *v1alpha1.Surge) bool { return s.Spec.Pool == obs.pool })
	}
	return after, errors.Join(errs...)
}

// countStall adds a decision to the node's gauges: a blocked pod in scope (a predicted node blocks
// nothing yet), and the reason no surge helps it.
func countStall(stats *nodeStats, obs *nodeObservation, d guardian.Decision) {
	if d.InScope && !obs.wave.Drain.Lookahead() {
		stats.blocked++
	}
	if !d.Reason.Unresolvable() {
		return
	}
	label := d.Reason.EventReason()
	if d.Reason == guardian.StallSurgeFailed && d.Existing != nil {
		label = d.Existing.Status.Reason
	}
	stats.unresolvable[unresolvable{reason: label, verdict: d.Reason.String()}]++
}

// applyStall carries out one workload's decision.
func (r *nodeReconciler) applyStall(ctx context.Context, obs *nodeObservation, st *guardian.Stall, d guardian.Decision, start *surgeStart) (time.Duration, error) {
	// A stall deferred for a slot queues for the next free one (see guardian's slot rule).
	if d.Reason == guardian.StallDeferred {
		r.flight.wait(guardian.WorkloadOf(st.Pod), st.Pod.Namespace)
	} else {
		r.flight.unwait(guardian.WorkloadOf(st.Pod))
	}
	switch d.Outcome {
	case guardian.OutcomeSurge:
		return r.applyStart(obs, st, d, start)
	case guardian.OutcomeCovered:
		r.enqueueSurge(d.Existing)
	case guardian.OutcomeCleanup:
		r.enqueueSurge(d.Existing)
		return d.RetryAfter, r.exec.deleteSurge(ctx, d.Existing)
	case guardian.OutcomeIgnore:
		if d.InScope {
			r.log.Debug("workload opted out", zap.String("pod", st.Pod.Namespace+"/"+st.Pod.Name), zap.String("node", obs.node.Name))
		}
	case guardian.OutcomeDefer, guardian.OutcomeUnresolvable:
		if d.Reason == guardian.StallUnknown {
			return 0, fmt.Errorf("pod %s/%s: %w", st.Pod.Namespace, st.Pod.Name, st.Owner.Err)
		}
		if d.Existing != nil {
			r.enqueueSurge(d.Existing)
		}
		r.reportStall(obs, st, d)
	}
	return d.RetryAfter, nil
}

// stallKey names a one-off report about a stall; it is forgotten when the node's drain ends.
func stallKey(obs *nodeObservation, st *guardian.Stall, what string) string {
	return fmt.Sprintf("%s/%s/%s/%s", what, st.Pod.UID, obs.node.Name, obs.wave.Drain.Drain)
}

// reportStall reports a stall not surged, once, as stallReports says.
func (r *nodeReconciler) reportStall(obs *nodeObservation, st *guardian.Stall, d guardian.Decision) {
	rep, ok := stallReports[d.Reason]
	if !ok || !r.reports.once(obs.node.Name, stallKey(obs, st, d.Reason.String())) {
		return
	}
	if rep.skipped {
		r.metrics.Lookahead.WithLabelValues(lookaheadSkipped).Inc()
		r.log.Info("not surging ahead", zap.String("why", d.Detail),
			zap.String("pod", st.Pod.Namespace+"/"+st.Pod.Name), zap.String("node", obs.node.Name))
		return
	}
	if rep.failed {
		r.metrics.StallsFailed.WithLabelValues(obs.pool, d.Regarding.Kind, d.Reason.EventReason()).Inc()
	}
	r.event(d.Regarding, rep.eventType, d.Reason.EventReason(), rep.action, "Pod %s %s node %s (PDB %s allows no disruption) and is not surged: %s",
		st.Pod.Name, blocksVerb(obs.wave.Drain), obs.node.Name, st.PDB.Name, d.Detail)
}

// applyStart reports a surge started (or, in dry-run, one that would be).
func (r *nodeReconciler) applyStart(obs *nodeObservation, st *guardian.Stall, d guardian.Decision, start *surgeStart) (time.Duration, error) {
	pod, node, drain := st.Pod, obs.node.Name, obs.wave.Drain
	trigger := drain.Trigger
	change, kind := guardian.DescribeFields(d.Fields), d.Regarding.Kind
	switch {
	case errors.Is(start.err, errDryRun):
		if r.reports.once(node, stallKey(obs, st, ReasonDryRun)) {
			r.event(d.Regarding, corev1.EventTypeNormal, ReasonDryRun, actionSurge,
				"Dry run: pod %s %s node %s (PDB %s); would surge %s", pod.Name, blocksVerb(drain), node, st.PDB.Name, change)
			r.metrics.StallsDetected.WithLabelValues(obs.pool, kind, string(trigger)).Inc()
		}
		return 0, nil
	case apierrors.IsAlreadyExists(start.err):
		return time.Second, nil
	case start.err != nil:
		return 0, start.err
	}
	r.metrics.StallsDetected.WithLabelValues(obs.pool, kind, string(trigger)).Inc()
	detected := ReasonStallDetected
	if ahead(drain) {
		detected = ReasonStallPredicted
	}
	if drain.Lookahead() {
		r.metrics.Lookahead.WithLabelValues(lookaheadSurged).Inc()
	}
	r.event(d.Regarding, corev1.EventTypeNormal, detected, actionDetect,
		"Pod %s %s node %s: PDB %s allows no disruption", pod.Name, blocksVerb(drain), node, st.PDB.Name)
	r.event(d.Regarding, corev1.EventTypeNormal, ReasonSurgeStarted, actionSurge,
		"Surging %s so that a replacement runs elsewhere before node %s drains (Surge %s)", change, node, start.surge.Name)
	r.enqueueSurge(start.surge)
	return 0, nil
}

// ahead reports whether the drain has not started removing the node's pods yet.
func ahead(d guardian.NodeDrain) bool {
	return d.Trigger == guardian.TriggerMCOTargeted || d.Lookahead() || (guardian.FromSource(d.Trigger) && !d.Draining)
}

// blocksVerb says how a pod stands in the way of the node's drain, by trigger.
func blocksVerb(d guardian.NodeDrain) string {
	what := "drain of"
	if d.Trigger == guardian.TriggerMCOPredicted {
		return "would block the drain of the MCO's next target,"
	}
	if k, ok := trigger.KindOf(trigger.Name(d.Trigger)); ok {
		if d.Predicted && k.Next != "" {
			return "would block the " + k.Noun + " of " + k.Next + ","
		}
		what = k.Noun + " of"
	}
	if ahead(d) {
		return "would block the coming " + what
	}
	return "blocks the " + what
}

// shorter returns the shorter of two requeue delays, where 0 means none.
func shorter(a, b time.Duration) time.Duration {
	if b > 0 && (a == 0 || b < a) {
		return b
	}
	return a
}

// addResources adds add to sum, allocating sum on first use.
func addResources(sum, add corev1.ResourceList) corev1.ResourceList {
	if sum == nil {
		sum = corev1.ResourceList{}
	}
	for name, q := range add {
		v := sum[name]
		v.Add(q)
		sum[name] = v
	}
	return sum
}
