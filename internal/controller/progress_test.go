package controller

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// The tests of this file: no surge holds a slot when it cannot progress, whatever a tenant does.

// updateDeployment applies mutate to the model's Deployment in the fake cluster and the caches.
func (h *harness) updateDeployment(mutate func(*appsv1.Deployment)) {
	h.t.Helper()
	d := h.deployment(ns, "model")
	mutate(d)
	if _, err := h.kube.AppsV1().Deployments(ns).Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.refresh()
}

// Tenant A's Deployment wants 2000000000 replicas and a quota holds it at one pod: a surge would add
// a replica that is never created, and hold a slot for --ready-timeout. It is not surged until it runs
// what it asks for, and its informer re-examines the node when it does.
func TestWorkloadNotAtRestIsNotSurged(t *testing.T) {
	objs := stalled()
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			d.Spec.Replicas = ptr.To(int32(2_000_000_000))
		}
	}
	h := newHarness(t, nil, objs...)
	if after := h.syncNode("w1"); after <= 0 {
		t.Fatalf("a stall deferred as NotSteady must be looked at again (after %s)", after)
	}
	if s := h.surge(depSurge); s != nil {
		t.Fatalf("Surge %s made on a workload that does not run its count", s.Name)
	}
	requireEvent(t, h.events(), "Warning", guardian.ReasonNotSteady, "model-abc-a", "2000000000 replicas wanted, 1 running")
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", guardian.ReasonNotSteady)); v != 1 {
		t.Fatalf("stalls_failed_total{%s} = %v, want 1", guardian.ReasonNotSteady, v)
	}

	// The tenant scales back to what runs: the Deployment's event queues the node, which is surged.
	for h.c.queue.Len() > 0 {
		k, _ := h.c.queue.Get()
		h.c.queue.Done(k)
	}
	h.updateDeployment(func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(1)) })
	h.c.onScalable(workload.KindDeployment)(h.deployment(ns, "model"))
	if !queued(h, key{Node: "w1"}) {
		t.Fatal("the workload settling does not re-examine the node under drain")
	}
	h.surgeNode("w1", depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseSurged || h.replicas() != 2 {
		t.Fatalf("Surge %s, replicas %d; want Surged to 2 once the workload is at rest", h.phase(depSurge), h.replicas())
	}
}

// queued reports whether k is in the controller's queue.
func queued(h *harness, k key) bool {
	found := false
	for n := h.c.queue.Len(); n > 0; n-- {
		got, _ := h.c.queue.Get()
		found = found || got == k
		h.c.queue.Done(got)
	}
	return found
}

// The replacement is refused by the tenant's quota (the Deployment controller copies the ReplicaSet's
// FailedCreate): the surge fails within guardian.ReplacementRefusedTimeout and frees its slot, instead
// of holding it for --ready-timeout.
func TestRefusedReplacementFreesTheSlotWithinTheBound(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.surgeNode("w1", depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseSurged || h.inFlight() != 1 {
		t.Fatalf("Surge %s holding %d slot(s), want Surged holding 1", h.phase(depSurge), h.inFlight())
	}
	surged := h.clock.Now()
	quota := `pods "model-abc-x" is forbidden: exceeded quota: one-pod, requested: pods=1, used: pods=1, limited: pods=1`
	h.updateDeployment(func(d *appsv1.Deployment) {
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue,
			Reason: workload.ReasonFailedCreate, Message: quota}}
	})
	for h.phase(depSurge) == v1alpha1.PhaseSurged {
		if h.clock.Now().Sub(surged) > time.Minute {
			t.Fatal("the surge whose replacement is refused still holds its slot a minute later")
		}
		h.clock.Step(h.syncSurge(depSurge))
		h.refresh()
	}
	if took := h.clock.Now().Sub(surged); took < guardian.ReplacementRefusedTimeout {
		t.Fatalf("failed after %s, before the %s bound", took, guardian.ReplacementRefusedTimeout)
	}
	h.settle(depSurge)
	s := h.mustSurge(depSurge)
	if s.PhaseOf() != v1alpha1.PhaseFailed || s.Status.Reason != guardian.ReasonReplacementRefused || h.replicas() != 1 || h.inFlight() != 0 {
		t.Fatalf("Surge %s (%s), replicas %d, slots %d; want Failed (%s), restored to 1, no slot", s.PhaseOf(), s.Status.Reason,
			h.replicas(), h.inFlight(), guardian.ReasonReplacementRefused)
	}
	requireEvent(t, h.events(), "Warning", ReasonReplacementRefused, "exceeded quota: one-pod", "model-abc-a", "w1")
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", guardian.ReasonReplacementRefused)); v != 1 {
		t.Fatalf("stalls_failed_total{%s} = %v, want 1", guardian.ReasonReplacementRefused, v)
	}
}

// A replacement that merely waits for the scheduler, with no refusal, keeps --schedule-timeout and
// --ready-timeout: a FailedCreate once the pods exist says nothing about this surge.
func TestStaleReplicaFailureOnAWorkloadRunningItsCountIsNoRefusal(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.surgeNode("w1", depSurge)
	h.updateDeployment(func(d *appsv1.Deployment) {
		d.Status.Replicas = 2
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue,
			Reason: workload.ReasonFailedCreate, Message: "stale"}}
	})
	h.clock.Step(2 * guardian.ReplacementRefusedTimeout)
	h.settle(depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseSurged {
		t.Fatalf("Surge %s, want still Surged: every wanted pod exists", h.phase(depSurge))
	}
}

// Tenant B adds a second PDB over its pod once the surge is Ready: the Eviction API refuses the pod
// whatever the budgets. The surge fails at once (MultiplePDBs) instead of retrying every 5 s for
// --evict-timeout.
func TestSecondPDBOverTheBlockedPodFailsTheSurgeAtOnce(t *testing.T) {
	h := newHarness(t, func(o *options.Options) { o.EvictTimeout = 10 * time.Minute }, stalled()...)
	h.refuseEvictions()
	h.readySurge()
	// The surge's own budget allows the disruption now; a second one pins the pod.
	own, err := h.kube.PolicyV1().PodDisruptionBudgets(ns).Get(context.Background(), "model", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own.Status.DisruptionsAllowed, own.Status.CurrentHealthy, own.Status.ExpectedPods = 1, 2, 2
	if _, err := h.kube.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(context.Background(), own, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pin := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "pin", Namespace: ns, UID: "pin-uid", ResourceVersion: "1"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{MatchLabels: labelsModel}}}
	if _, err := h.kube.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), pin, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	start := h.clock.Now()
	h.settle(depSurge)
	s := h.mustSurge(depSurge)
	if s.PhaseOf() != v1alpha1.PhaseFailed || s.Status.Reason != guardian.ReasonMultiplePDBs || h.replicas() != 1 || h.inFlight() != 0 {
		t.Fatalf("Surge %s (%s), replicas %d, slots %d; want Failed (%s), restored, no slot", s.PhaseOf(), s.Status.Reason,
			h.replicas(), h.inFlight(), guardian.ReasonMultiplePDBs)
	}
	if took := h.clock.Now().Sub(start); took > time.Minute {
		t.Fatalf("failed after %s, want at once", took)
	}
	requireEvent(t, h.events(), "Warning", ReasonMultiplePDBs, "PDB pin also selects the pod", "model-abc-a")
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", guardian.ReasonMultiplePDBs)); v != 1 {
		t.Fatalf("stalls_failed_total{%s} = %v, want 1", guardian.ReasonMultiplePDBs, v)
	}
	// The stall decision sees the Failed Surge of this drain: reported, not surged again.
	h.syncNode("w1")
	if s := h.mustSurge(depSurge); s.PhaseOf() != v1alpha1.PhaseFailed {
		t.Fatalf("the node's stall made Surge %s again", s.PhaseOf())
	}
}
