package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
)

// TestSurgeReportsCoverActions: every action the lifecycle can answer has its entry in
// surgeReports, and a restore (started or finished) has one whether it failed or not.
func TestSurgeReportsCoverActions(t *testing.T) {
	for _, k := range guardian.ActionKinds() {
		if _, ok := surgeReports[surgeKey{kind: k}]; !ok {
			t.Errorf("surgeReports has no entry for %s", k)
		}
	}
	for _, k := range []guardian.ActionKind{guardian.ActStartRestore, guardian.ActFinish} {
		if _, ok := surgeReports[surgeKey{kind: k, failed: true}]; !ok {
			t.Errorf("surgeReports has no entry for a failed %s", k)
		}
	}
	for key, r := range surgeReports {
		switch {
		case r.reason == "" && r.note != nil:
			t.Errorf("%+v: a note and no Event reason", key)
		case r.reason == "":
		case r.note == nil || r.action == "" || (r.eventType != corev1.EventTypeNormal && r.eventType != corev1.EventTypeWarning):
			t.Errorf("%+v: Event %s needs a type, an action and a note", key, r.reason)
		}
	}
}

// TestSurgeReportsEvents: the Event each finished restore, and each step that has one, records.
func TestSurgeReportsEvents(t *testing.T) {
	cases := []struct {
		name      string
		step      guardian.Step
		typ, want string
	}{
		{name: "discard", step: step(guardian.ActDiscard, "", false), typ: corev1.EventTypeNormal, want: ReasonExternalChange},
		{name: "ready", step: step(guardian.ActMarkReady, "", false), typ: corev1.EventTypeNormal, want: ReasonReplacementReady},
		{name: "resolved", step: step(guardian.ActMarkResolved, guardian.ReasonDrainOver, false), typ: corev1.EventTypeNormal, want: ReasonStallResolved},
		{name: "restored", step: step(guardian.ActFinish, guardian.ReasonPoolUpdated, false), typ: corev1.EventTypeNormal, want: ReasonSurgeRestored},
		{name: "failed", step: step(guardian.ActFinish, guardian.ReasonUnschedulable, true), typ: corev1.EventTypeWarning, want: ReasonSurgeFailed},
		{name: "expired", step: step(guardian.ActFinish, guardian.ReasonMaxDuration, true), typ: corev1.EventTypeWarning, want: ReasonSurgeExpired},
		{name: "not written", step: step(guardian.ActFinish, guardian.ReasonWriteTimeout, true), typ: corev1.EventTypeWarning, want: ReasonSurgeNotWritten},
		{name: "evict timeout", step: step(guardian.ActFinish, guardian.ReasonEvictTimeout, true), typ: corev1.EventTypeWarning, want: ReasonEvictionRefused},
		{name: "refused", step: step(guardian.ActFinish, guardian.ReasonReplacementRefused, true), typ: corev1.EventTypeWarning, want: ReasonReplacementRefused},
		{name: "two PDBs", step: step(guardian.ActFinish, guardian.ReasonMultiplePDBs, true), typ: corev1.EventTypeWarning, want: ReasonMultiplePDBs},
		{name: "target gone", step: step(actTargetGone, "", false), typ: corev1.EventTypeWarning, want: ReasonWorkloadDeleted},
		{name: "dropped unwritten", step: step(guardian.ActFinish, guardian.ReasonUnwritten, false)},
		{name: "restore started", step: step(guardian.ActStartRestore, guardian.ReasonReadyTimeout, true)},
		{name: "marked surged", step: step(guardian.ActMarkSurged, "", false)},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.c.reconcile.surge.report(&outcome{step: tt.step, s: reportedSurge(), obs: guardian.Observation{Now: t0, LiveOnNode: 1}})
			evs := h.events()
			if tt.want == "" {
				if len(evs) != 0 {
					t.Fatalf("events = %q, want none", evs)
				}
				return
			}
			if len(evs) != 1 {
				t.Fatalf("events = %q, want one %s", evs, tt.want)
			}
			requireEvent(t, evs, tt.typ, tt.want)
		})
	}
}

// TestSurgeReportsMetrics: the counts of the restore and look-ahead outcomes.
func TestSurgeReportsMetrics(t *testing.T) {
	h := newHarness(t, nil)
	s := reportedSurge()
	s.Spec.Trigger = string(guardian.TriggerMCOPredicted)
	obs := guardian.Observation{Now: t0}
	h.c.reconcile.surge.report(&outcome{step: step(guardian.ActStartRestore, guardian.ReasonPredictionMissed, false), s: s, obs: obs})
	h.c.reconcile.surge.report(&outcome{step: step(guardian.ActFinish, guardian.ReasonEvictTimeout, true), s: s, obs: obs})
	h.c.reconcile.surge.report(&outcome{step: step(guardian.ActForget, "", false), s: s, obs: obs})
	if v := testutil.ToFloat64(h.metrics.Lookahead.WithLabelValues(lookaheadMissed)); v != 1 {
		t.Errorf("missed look-aheads = %v, want 1", v)
	}
	if n := testutil.CollectAndCount(h.metrics.SurgeHeld); n != 1 {
		t.Errorf("surge-held observations = %d, want 1", n)
	}
	// The count is labelled with the Surge's own reason, as its status says.
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", guardian.ReasonReadyTimeout)); v != 1 {
		t.Errorf("failed stalls = %v, want 1", v)
	}
}

func step(kind guardian.ActionKind, reason string, failed bool) guardian.Step {
	return guardian.Step{Action: guardian.Action{Kind: kind, Reason: reason, Failed: failed}}
}

// reportedSurge is a Resolved-then-restoring Surge of Deployment models/llm for node-a.
func reportedSurge() *v1alpha1.Surge {
	one := int64(1)
	ref := v1alpha1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "llm", UID: "llm-uid"}
	resolved := metav1.NewTime(t0.Add(-time.Minute))
	return &v1alpha1.Surge{
		ObjectMeta: metav1.ObjectMeta{Namespace: "models", Name: "deployment-llm-node-a"},
		Spec: v1alpha1.SurgeSpec{
			Target: ref, PodOwner: ref, Fields: []v1alpha1.Field{{Path: "/spec/replicas", Original: &one, Set: 2}},
			Node: "node-a", Pool: "worker", Trigger: string(guardian.TriggerMCODrain), Drain: "rendered-b", PDB: "llm",
			BlockedPod: "llm-x", Delta: 1, Replicas: 1, StartTime: metav1.NewTime(t0.Add(-time.Hour)),
		},
		Status: v1alpha1.SurgeStatus{Phase: v1alpha1.PhaseRestoring, Reason: guardian.ReasonReadyTimeout, Failed: true, ResolvedTime: &resolved},
	}
}
