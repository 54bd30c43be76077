package controller

import (
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// actTargetGone is the step of a Surge whose target was deleted (see targetGone): verify finds it
// before any decision, so it is no guardian action, but it is reported through surgeReports all the same.
const actTargetGone guardian.ActionKind = "TargetGone"

// outcome is a step carried out, as its report sees it.
type outcome struct {
	step guardian.Step
	// s is the Surge as read before the step's write; obj its target, nil when deleted.
	s   *v1alpha1.Surge
	obj *workload.Object
	obs guardian.Observation
	// pod is the pod an ActEvict evicted.
	pod *podinfo.Pod
}

// regarding is what the outcome's Events are recorded against: the Surge's target.
func (o *outcome) regarding() *corev1.ObjectReference {
	if o.obj == nil {
		return targetOf(o.s).Ref.ObjectReference()
	}
	return o.obj.ObjectReference()
}

// surgeKey picks a step's entry in surgeReports: its action kind, and its reason and failure where
// the report depends on them (see surgeReportOf).
type surgeKey struct {
	kind   guardian.ActionKind
	reason string
	failed bool
}

// surgeReport is how a step of the Surge lifecycle is reported once its write is made: its Event
// (type, CamelCase reason, action and message) and what it counts.
type surgeReport struct {
	// eventType, reason and action of the Event; none is recorded when reason is "".
	eventType, reason, action string
	// note is the Event's message.
	note func(r *surgeReconciler, o *outcome) string
	// record counts the outcome in metrics, and does whatever else its report takes (an Event per
	// field kept, the node's stalls looked at again); nil records nothing.
	record func(r *surgeReconciler, o *outcome)
}

// surgeReports is the table from a step of the Surge lifecycle to its report, the one place the
// lifecycle records Events and metrics. Every action kind has an entry, if only to say it reports
// nothing (TestSurgeReportsCoverActions).
var surgeReports = map[surgeKey]surgeReport{
	{kind: guardian.ActWait}:            {},
	{kind: guardian.ActWriteFields}:     {},
	{kind: guardian.ActMarkSurged}:      {},
	{kind: guardian.ActMarkEvictionDue}: {},
	{kind: guardian.ActRestoreFields}:   {},
	{kind: guardian.ActForget}:          {},
	{kind: guardian.ActDiscard}: {eventType: corev1.EventTypeNormal, reason: ReasonExternalChange, action: actionSurge,
		note: noteDiscarded},
	{kind: guardian.ActMarkReady}: {eventType: corev1.EventTypeNormal, reason: ReasonReplacementReady, action: actionSurge,
		note: noteReady, record: recordReady},
	{kind: guardian.ActEvict}: {eventType: corev1.EventTypeNormal, reason: ReasonPodEvicted, action: actionEvict,
		note: noteEvicted},
	{kind: guardian.ActMarkResolved}: {eventType: corev1.EventTypeNormal, reason: ReasonStallResolved, action: actionSurge,
		note: noteResolved, record: recordResolved},
	{kind: guardian.ActStartRestore}:                                          {record: recordHeld},
	{kind: guardian.ActStartRestore, failed: true}:                            {record: recordHeld},
	{kind: guardian.ActStartRestore, reason: guardian.ReasonPredictionMissed}: {record: recordMissed},
	{kind: guardian.ActFinish, reason: guardian.ReasonUnwritten}:              {record: recordUnwritten},
	{kind: guardian.ActFinish}: {eventType: corev1.EventTypeNormal, reason: ReasonSurgeRestored, action: actionRestore,
		note: noteRestored, record: recordRestored},
	{kind: guardian.ActFinish, failed: true}: {eventType: corev1.EventTypeWarning, reason: ReasonSurgeFailed, action: actionRestore,
		note: noteFailed, record: recordFailed},
	{kind: guardian.ActFinish, reason: guardian.ReasonMaxDuration, failed: true}: {eventType: corev1.EventTypeWarning,
		reason: ReasonSurgeExpired, action: actionRestore, note: noteExpired, record: recordFailed},
	{kind: guardian.ActFinish, reason: guardian.ReasonWriteTimeout, failed: true}: {eventType: corev1.EventTypeWarning,
		reason: ReasonSurgeNotWritten, action: actionRestore, note: noteNotWritten, record: recordFailed},
	{kind: guardian.ActFinish, reason: guardian.ReasonEvictTimeout, failed: true}: {eventType: corev1.EventTypeWarning,
		reason: ReasonEvictionRefused, action: actionRestore, note: noteEvictTimeout, record: recordFailed},
	{kind: guardian.ActFinish, reason: guardian.ReasonReplacementRefused, failed: true}: {eventType: corev1.EventTypeWarning,
		reason: ReasonReplacementRefused, action: actionRestore, note: noteRefused, record: recordFailedAgain},
	{kind: guardian.ActFinish, reason: guardian.ReasonMultiplePDBs, failed: true}: {eventType: corev1.EventTypeWarning,
		reason: ReasonMultiplePDBs, action: actionRestore, note: noteMultiplePDBs, record: recordFailedAgain},
	{kind: actTargetGone}: {eventType: corev1.EventTypeWarning, reason: ReasonWorkloadDeleted, action: actionRestore,
		note: noteTargetGone, record: recordTargetGone},
}

// surgeReportOf is the step's entry: the one for its kind, reason and failure, else the one for its
// kind and failure. A kind with no entry reports nothing.
func surgeReportOf(st guardian.Step) surgeReport {
	if r, ok := surgeReports[surgeKey{kind: st.Kind, reason: st.Reason, failed: st.Failed}]; ok {
		return r
	}
	return surgeReports[surgeKey{kind: st.Kind, failed: st.Failed}]
}

// report records a step's outcome as surgeReports says; its write is made.
func (r *surgeReconciler) report(o *outcome) {
	rep := surgeReportOf(o.step)
	if rep.record != nil {
		rep.record(r, o)
	}
	if rep.reason != "" {
		r.event(o.regarding(), rep.eventType, rep.reason, rep.action, "%s", rep.note(r, o))
	}
}

func noteDiscarded(_ *surgeReconciler, o *outcome) string {
	return fmt.Sprintf("%s changed by someone else before the surge was written: not surging", guardian.DescribeFields(o.s.Spec.Fields))
}

// readyAfter is how long the replacements took to be Ready, from the stall's detection.
func readyAfter(o *outcome) time.Duration { return o.obs.Now.Sub(o.s.Spec.StartTime.Time) }

func noteReady(_ *surgeReconciler, o *outcome) string {
	s := o.s
	return fmt.Sprintf("%d replacement %s Ready off node %s after %s", s.Spec.Delta, guardian.Units(s), s.Spec.Node, readyAfter(o).Round(time.Second))
}

func recordReady(r *surgeReconciler, o *outcome) {
	r.metrics.ReplacementReady.WithLabelValues(o.s.Spec.Target.Kind).Observe(readyAfter(o).Seconds())
}

func noteEvicted(_ *surgeReconciler, o *outcome) string {
	return fmt.Sprintf("Evicted pod %s from node %s: its replacement is Ready elsewhere", o.pod.Name, o.s.Spec.Node)
}

func noteResolved(r *surgeReconciler, o *outcome) string {
	return fmt.Sprintf("%s; the drain can proceed. The surge is held until %s", guardian.Unblocked(o.s, o.step.Reason), r.holdUntil(o.s))
}

func recordResolved(r *surgeReconciler, o *outcome) {
	r.observeResolved(o.s, o.obs.Now)
	if guardian.Trigger(o.s.Spec.Trigger) == guardian.TriggerMCOPredicted {
		r.metrics.Lookahead.WithLabelValues(lookaheadHit).Inc()
	}
}

// observeResolved counts a stall resolved, and how long it took from its detection.
func (r *surgeReconciler) observeResolved(s *v1alpha1.Surge, now time.Time) {
	kind := s.Spec.Target.Kind
	r.metrics.StallsResolved.WithLabelValues(s.Spec.Pool, kind).Inc()
	r.metrics.StallResolution.WithLabelValues(s.Spec.Pool, kind).Observe(now.Sub(s.Spec.StartTime.Time).Seconds())
}

// holdUntil says in words what the restore waits for.
func (r *surgeReconciler) holdUntil(s *v1alpha1.Surge) string {
	switch {
	case s.Spec.Pool == "" || guardian.Trigger(s.Spec.Trigger) == guardian.TriggerCordoned:
		return "the node is uncordoned"
	case guardian.Trigger(s.Spec.Trigger) == guardian.TriggerPrepared:
		return "the pool is Updated (prepared ahead of its update)"
	case r.cfg.Restore == guardian.RestoreNode:
		return "the node is updated"
	case r.cfg.Restore == guardian.RestoreAuto:
		if guardian.Groups(s) {
			return fmt.Sprintf("%d complete group(s) are Ready on nodes this update will not drain again, or the pool is Updated", max(s.Spec.Replicas, 1))
		}
		return fmt.Sprintf("%d pod(s) are Ready on nodes this update will not drain again, or the pool is Updated", max(s.Spec.Replicas, 1))
	}
	return "the pool is Updated"
}

// recordHeld counts how long a Resolved surge was held before its restore.
func recordHeld(r *surgeReconciler, o *outcome) {
	s := o.s
	if s.Status.ResolvedTime != nil {
		r.metrics.SurgeHeld.WithLabelValues(s.Spec.Pool, s.Spec.Target.Kind).Observe(o.obs.Now.Sub(s.Status.ResolvedTime.Time).Seconds())
	}
}

// recordMissed is recordHeld for a look-ahead that did not come true, counted as missed.
func recordMissed(r *surgeReconciler, o *outcome) {
	recordHeld(r, o)
	if guardian.Trigger(o.s.Spec.Trigger) == guardian.TriggerMCOPredicted {
		r.metrics.Lookahead.WithLabelValues(lookaheadMissed).Inc()
	}
}

func recordUnwritten(r *surgeReconciler, o *outcome) {
	r.log.Info("stall ended before the surge was written; dropping the Surge", zap.String("surge", o.s.Namespace+"/"+o.s.Name))
}

func noteTargetGone(_ *surgeReconciler, o *outcome) string {
	s := o.s
	return fmt.Sprintf("%s %s was deleted during its surge for node %s: nothing is left to restore", s.Spec.Target.Kind, s.Spec.Target.Name, s.Spec.Node)
}

func recordTargetGone(r *surgeReconciler, o *outcome) {
	r.metrics.StallsFailed.WithLabelValues(o.s.Spec.Pool, o.s.Spec.Target.Kind, guardian.ReasonPodOwnerGone).Inc()
}
