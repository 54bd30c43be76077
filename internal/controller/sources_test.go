package controller

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/trigger"
)

// gpuUpgrade is the canonical driver-upgrade stall: the upgrade controller picked w1
// (cordon-required, not cordoned yet), the MCO pool is idle, a single-replica model runs on w1.
func gpuUpgrade(extra ...runtime.Object) []runtime.Object {
	w1 := gpuNode("w1")
	w1.Labels[trigger.GPUUpgradeStateLabel] = trigger.GPUStateCordonRequired
	objs := []runtime.Object{namespace(ns), w1, gpuNode("w2"), gpuNode("w3"), workerPool(false), pdb(0, 1, 1)}
	objs = append(objs, model(1, "w1")...)
	return append(objs, extra...)
}

// gpuState moves the node to an upgrade state; cordoned says whether the upgrade controller has
// cordoned it by then.
func gpuState(state string, cordoned bool) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Labels[trigger.GPUUpgradeStateLabel] = state
		n.Spec.Unschedulable = cordoned
	}
}

func (h *harness) evictions() int {
	n := 0
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "create" && a.GetSubresource() == "eviction" {
			n++
		}
	}
	return n
}

// A driver upgrade is surged when the node is picked, evicted from only once the upgrade controller
// deletes the GPU pods, and restored when the node is upgrade-done, whatever the MCO pool says.
func TestGPUDriverUpgradeSurgesAtSelectionEvictsWhileDeletingAndRestoresWhenDone(t *testing.T) {
	h := newHarness(t, nil, gpuUpgrade()...)
	h.allowEvictions()

	h.surgeNode("w1", depSurge)
	s := h.mustSurge(depSurge)
	if s.Spec.Trigger != string(guardian.Trigger(trigger.GPUDriverUpgrade)) || s.Spec.Drain != "gpu-driver-upgrade" || h.replicas() != 2 {
		t.Fatalf("Surge trigger %q drain %q, replicas %d; want GPUDriverUpgrade, gpu-driver-upgrade, 2", s.Spec.Trigger, s.Spec.Drain, h.replicas())
	}
	requireEvent(t, h.events(), "Normal", ReasonStallPredicted, "would block the coming driver upgrade of node w1")
	if v := testutil.ToFloat64(h.metrics.StallsDetected.WithLabelValues("worker", "Deployment", "GPUDriverUpgrade")); v != 1 {
		t.Fatalf("stalls_detected_total{trigger=GPUDriverUpgrade} = %v, want 1", v)
	}

	// Replacement Ready while the node is only picked: Ready, not evicted.
	h.addPod(modelPod("model-abc-b", "w2", true))
	h.refresh()
	h.settle(depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseReady || h.evictions() != 0 {
		t.Fatalf("picked node: phase %s, evictions %d; want Ready and none", h.phase(depSurge), h.evictions())
	}
	// Cordoned, waiting for jobs: still not the pod-deletion step.
	h.updateNode("w1", gpuState(trigger.GPUStateWaitForJobsRequired, true))
	h.refresh()
	h.settle(depSurge)
	if h.evictions() != 0 {
		t.Fatalf("evicted before the upgrade controller deletes the GPU pods")
	}
	h.updateNode("w1", gpuState(trigger.GPUStatePodDeletionRequired, true))
	h.refresh()
	h.settle(depSurge)
	if h.evictions() == 0 {
		t.Fatalf("no eviction during pod-deletion-required; writes %v", h.writes())
	}

	// Pod gone, driver reloading: held.
	h.deletePod("model-abc-a")
	h.updateNode("w1", gpuState(trigger.GPUStatePodRestartRequired, true))
	h.refresh()
	h.settle(depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseResolved || h.replicas() != 2 {
		t.Fatalf("driver reloading: phase %s, replicas %d; want Resolved, held at 2", h.phase(depSurge), h.replicas())
	}
	h.updateNode("w1", gpuState(trigger.GPUStateUncordonRequired, false))
	h.refresh()
	h.settle(depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseResolved {
		t.Fatalf("uncordon-required: phase %s; want held", h.phase(depSurge))
	}

	h.updateNode("w1", gpuState(trigger.GPUStateDone, false))
	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 1 || h.surge(depSurge) != nil {
		t.Fatalf("upgrade-done: replicas %d, Surge %v; want 1 and none", h.replicas(), h.surge(depSurge))
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, guardian.ReasonNodeBack)
}

// A node whose driver upgrade fails with a Surge in flight is reported once (Event and metric), and
// the surge is held: nothing evicts the pods of a failed node any more, and the node stays cordoned.
func TestGPUDriverUpgradeFailedWithASurgeInFlightIsReported(t *testing.T) {
	h := newHarness(t, nil, gpuUpgrade()...)
	h.surgeNode("w1", depSurge)
	h.events()

	h.updateNode("w1", gpuState(trigger.GPUStateFailed, true))
	h.refresh()
	h.settle(depSurge)
	h.syncNode("w1")
	h.settle(depSurge)
	requireEvent(t, h.events(), "Warning", ReasonDrainFailed, "GPUDriverUpgrade", "w1", "upgrade-failed")
	if v := testutil.ToFloat64(h.metrics.DrainsFailed.WithLabelValues("GPUDriverUpgrade")); v != 1 {
		t.Fatalf("drains_failed_total = %v, want 1 (reported once)", v)
	}
	if h.phase(depSurge) != v1alpha1.PhaseSurged || h.replicas() != 2 {
		t.Fatalf("failed node: phase %s, replicas %d; want the surge held", h.phase(depSurge), h.replicas())
	}
}

// With --gpu-driver-upgrades=false the state label is not a trigger.
func TestGPUDriverUpgradesSwitchedOff(t *testing.T) {
	h := newHarness(t, func(o *options.Options) { o.SetSource(trigger.GPUDriverUpgrade, false) }, gpuUpgrade()...)
	h.syncNode("w1")
	if h.surge(depSurge) != nil {
		t.Fatalf("surged with --gpu-driver-upgrades=false")
	}
}

// An MCO drain and a driver upgrade of the same node at once make one surge, and the surge made
// for the MCO's drain is not ended while the MCO still drains the node.
func TestMCODrainAndDriverUpgradeOfOneNodeSurgeOnce(t *testing.T) {
	objs := stalled()
	objs[1].(*corev1.Node).Labels[trigger.GPUUpgradeStateLabel] = trigger.GPUStatePodDeletionRequired
	h := newHarness(t, nil, objs...)
	h.surgeNode("w1", depSurge)
	h.syncNode("w1")
	h.refresh()
	surges, err := h.dyn.Resource(v1alpha1.SurgesResource).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(surges.Items) != 1 || h.replicas() != 2 {
		t.Fatalf("%d Surges, replicas %d; want one surge of one replica", len(surges.Items), h.replicas())
	}
	if s := h.mustSurge(depSurge); s.Spec.Trigger != string(guardian.TriggerMCODrain) {
		t.Fatalf("trigger %q; the MCO wins a tie", s.Spec.Trigger)
	}
	// The replacement is Ready: the surge made for the MCO's drain stays Ready (not DrainOver).
	h.addPod(modelPod("model-abc-b", "w2", true))
	h.refresh()
	h.settle(depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseReady {
		t.Fatalf("phase %s; want Ready", h.phase(depSurge))
	}
}

// nodeMaintenance is a medik8s NodeMaintenance of node in the given status phase.
func nodeMaintenance(node, phase string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
		"metadata": map[string]any{"name": "nm-" + node, "uid": "nm-uid"},
		"spec":     map[string]any{"nodeName": node, "reason": "firmware"},
	}}
	if phase != "" {
		_ = unstructured.SetNestedField(u.Object, phase, "status", "phase")
	}
	return u
}

// A NodeMaintenance drains its node with the model available throughout: surge, evict once the
// replacement is Ready, restore once the object is deleted and the node uncordoned.
func TestNodeMaintenanceSurgesEvictsAndRestoresAfterDeletion(t *testing.T) {
	h := newHarness(t, nil, gpuUpgrade()...)
	h.updateNode("w1", func(n *corev1.Node) { delete(n.Labels, trigger.GPUUpgradeStateLabel); n.Spec.Unschedulable = true })
	nm := trigger.Medik8sNodeMaintenanceGVR
	if _, err := h.dyn.Resource(nm).Create(context.Background(), nodeMaintenance("w1", trigger.Medik8sPhaseRunning), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.allowEvictions()
	h.refresh()
	h.surgeNode("w1", depSurge)
	if s := h.mustSurge(depSurge); s.Spec.Trigger != string(guardian.Trigger(trigger.NodeMaintenance)) || s.Spec.Drain != "nodemaintenance/nm-w1/nm-uid" {
		t.Fatalf("Surge trigger %q drain %q", s.Spec.Trigger, s.Spec.Drain)
	}
	requireEvent(t, h.events(), "Normal", ReasonStallDetected, "blocks the maintenance drain of node w1")

	h.addPod(modelPod("model-abc-b", "w2", true))
	h.refresh()
	h.settle(depSurge)
	if h.evictions() == 0 {
		t.Fatalf("no eviction while the maintenance drains the node")
	}
	h.deletePod("model-abc-a")
	h.refresh()
	h.settle(depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseResolved || h.replicas() != 2 {
		t.Fatalf("maintenance under way: phase %s, replicas %d; want Resolved, held", h.phase(depSurge), h.replicas())
	}
	if err := h.dyn.Resource(nm).Delete(context.Background(), "nm-w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.updateNode("w1", func(n *corev1.Node) { n.Spec.Unschedulable = false })
	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 1 || h.surge(depSurge) != nil {
		t.Fatalf("after the maintenance: replicas %d, Surge %v; want restored", h.replicas(), h.surge(depSurge))
	}
}

// gpuAhead: the driver upgrade waits to pick w2, which runs the model; w1 and w3 are upgraded
// already (the spare GPUs). The MCO pool is idle.
func gpuAhead(states ...string) []runtime.Object {
	nodes := []*corev1.Node{gpuNode("w1"), gpuNode("w2"), gpuNode("w3")}
	for i, n := range nodes {
		n.Labels[trigger.GPUUpgradeStateLabel] = states[i]
	}
	objs := []runtime.Object{namespace(ns), nodes[0], nodes[1], nodes[2], workerPool(false), pdb(0, 1, 1)}
	return append(objs, model(1, "w2")...)
}

// The next node the upgrade controller will pick is surged ahead, on spare capacity of nodes the
// upgrade will not drain; a node waiting with the skip label is not; nor is one when every spare
// GPU sits on a node the upgrade has still to drain.
func TestGPUDriverUpgradeLookahead(t *testing.T) {
	done, waiting := trigger.GPUStateDone, trigger.GPUStateUpgradeRequired
	h := newHarness(t, nil, gpuAhead(done, waiting, done)...)
	h.syncNode("w2")
	s := h.mustSurge(depSurge)
	if s.Spec.Trigger != string(guardian.Trigger(trigger.GPUDriverUpgrade)) || s.Spec.Drain != "gpu-driver-upgrade" || h.lookahead(lookaheadSurged) != 1 {
		t.Fatalf("look-ahead: trigger %q drain %q, lookahead surged %v", s.Spec.Trigger, s.Spec.Drain, h.lookahead(lookaheadSurged))
	}
	requireEvent(t, h.events(), "Normal", ReasonStallPredicted, "would block the driver upgrade of the GPU Operator's next pick, node w2")

	skipped := newHarness(t, nil, gpuAhead(done, waiting, done)...)
	skipped.updateNode("w2", func(n *corev1.Node) { n.Labels[trigger.GPUUpgradeSkipLabel] = "true" })
	skipped.refresh()
	skipped.syncNode("w2")
	if skipped.surge(depSurge) != nil {
		t.Fatalf("surged a node that opted out of driver upgrades")
	}

	lookahead2 := func(o *options.Options) { o.Lookahead = 2 }
	noSpare := newHarness(t, lookahead2, gpuAhead(trigger.GPUStateCordonRequired, waiting, waiting)...)
	noSpare.syncNode("w2")
	if noSpare.surge(depSurge) != nil || noSpare.lookahead(lookaheadSkipped) != 1 {
		t.Fatalf("surged ahead onto a node the upgrade will drain: Surge %v, skipped %v", noSpare.surge(depSurge), noSpare.lookahead(lookaheadSkipped))
	}
}

// A node another source has picked or drains counts as updating now: a replica there is no
// survivor a restore may rely on, and the first a restore removes.
func TestNodesOtherSourcesDrainAreUpdatingNow(t *testing.T) {
	h := newHarness(t, nil, gpuUpgrade()...)
	for state, want := range map[string]bool{
		trigger.GPUStateUpgradeRequired: false, trigger.GPUStateCordonRequired: true,
		trigger.GPUStatePodRestartRequired: true, trigger.GPUStateDone: false, trigger.GPUStateFailed: false,
	} {
		h.updateNode("w1", gpuState(state, false))
		h.refresh()
		n, err := h.c.nodes.Get("w1")
		if err != nil {
			t.Fatal(err)
		}
		if got := h.c.updatingNow(n); got != want {
			t.Errorf("%s: updatingNow = %v, want %v", state, got, want)
		}
	}
	if _, err := h.dyn.Resource(trigger.Medik8sNodeMaintenanceGVR).Create(context.Background(), nodeMaintenance("w2", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	if n, _ := h.c.nodes.Get("w2"); !h.c.updatingNow(n) {
		t.Errorf("a node a NodeMaintenance is about to drain is not updating now")
	}
}

// lifecycle sets a Node lifecycle condition (KEP-5683) on the node, True or gone.
func lifecycle(t corev1.NodeConditionType, on bool) func(*corev1.Node) {
	return func(n *corev1.Node) {
		var kept []corev1.NodeCondition
		for _, c := range n.Status.Conditions {
			if c.Type != t {
				kept = append(kept, c)
			}
		}
		if on {
			kept = append(kept, corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)})
		}
		n.Status.Conditions = kept
	}
}

// A maintenance announced by Node lifecycle conditions: the model is surged ahead while it is only
// planned (on spare capacity, off the planned node), its pod evicted once the drain is in
// progress, and the surge restored once the conditions are gone and the node is schedulable.
func TestNodeLifecycleSurgesWhenPlannedEvictsWhileDrainingAndRestores(t *testing.T) {
	h := newHarness(t, nil, gpuUpgrade()...)
	h.updateNode("w1", func(n *corev1.Node) { delete(n.Labels, trigger.GPUUpgradeStateLabel) })
	h.updateNode("w1", lifecycle(trigger.ConditionMaintenancePlanned, true))
	h.allowEvictions()
	h.refresh()
	h.surgeNode("w1", depSurge)
	s := h.mustSurge(depSurge)
	if s.Spec.Trigger != string(guardian.Trigger(trigger.NodeLifecycle)) || s.Spec.Drain != "lifecycle-"+t0.UTC().Format("2006-01-02T15:04:05Z07:00") || h.replicas() != 2 {
		t.Fatalf("Surge trigger %q drain %q replicas %d; want NodeLifecycle, the plan's time, 2", s.Spec.Trigger, s.Spec.Drain, h.replicas())
	}
	requireEvent(t, h.events(), "Normal", ReasonStallPredicted, "would block the maintenance drain of a node planned for maintenance")

	h.addPod(modelPod("model-abc-b", "w2", true))
	h.refresh()
	h.settle(depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseReady || h.evictions() != 0 {
		t.Fatalf("planned only: phase %s, evictions %d; want Ready and none", h.phase(depSurge), h.evictions())
	}
	h.updateNode("w1", func(n *corev1.Node) {
		lifecycle(trigger.ConditionDrainInProgress, true)(n)
		n.Spec.Unschedulable = true
	})
	h.refresh()
	h.settle(depSurge)
	if h.evictions() == 0 {
		t.Fatalf("no eviction while the drain is in progress; writes %v", h.writes())
	}
	h.deletePod("model-abc-a")
	h.refresh()
	h.settle(depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseResolved || h.replicas() != 2 {
		t.Fatalf("maintenance under way: phase %s, replicas %d; want Resolved, held", h.phase(depSurge), h.replicas())
	}
	h.updateNode("w1", func(n *corev1.Node) {
		lifecycle(trigger.ConditionDrainInProgress, false)(n)
		lifecycle(trigger.ConditionMaintenancePlanned, false)(n)
		n.Spec.Unschedulable = false
	})
	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 1 || h.surge(depSurge) != nil {
		t.Fatalf("after the maintenance: replicas %d, Surge %v; want restored", h.replicas(), h.surge(depSurge))
	}

	off := newHarness(t, func(o *options.Options) { o.SetSource(trigger.NodeLifecycle, false) }, gpuUpgrade()...)
	off.updateNode("w1", func(n *corev1.Node) {
		delete(n.Labels, trigger.GPUUpgradeStateLabel)
		lifecycle(trigger.ConditionDrainInProgress, true)(n)
	})
	off.refresh()
	before := len(off.writes())
	off.syncNode("w1")
	if w := off.writes(); len(w) != before {
		t.Fatalf("--node-lifecycle=false acted on DrainInProgress: %v", w)
	}
}
