package controller

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/options"
)

// aheadPool: w1 is being drained, w2 is the next node the MCO will target, w3 is a spare GPU node
// already updated. The "model" Deployment runs on w2.
func aheadPool(extra ...runtime.Object) []runtime.Object {
	objs := []runtime.Object{namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), updatedGPUNode("w3"), workerPool(true), pdb(0, 1, 1)}
	objs = append(objs, model(1, "w2")...)
	return append(objs, extra...)
}

func (h *harness) lookahead(result string) float64 {
	return testutil.ToFloat64(h.metrics.Lookahead.WithLabelValues(result))
}

// While w1 drains, the model on w2 (the MCO's next target) is surged: its replacement is Ready
// before the MCO reaches w2, nothing is evicted from w2 before its drain, and once the MCO drains w2
// the surge goes on like any other.
func TestLookaheadSurgesTheNextNodeBeforeTheMCOTargetsIt(t *testing.T) {
	h := newHarness(t, nil, aheadPool()...)
	h.allowEvictions()
	h.surgeNode("w2", depSurge)
	s := h.mustSurge(depSurge)
	if guardian.Trigger(s.Spec.Trigger) != guardian.TriggerMCOPredicted || s.Spec.Drain != "rendered-2" || h.replicas() != 2 {
		t.Fatalf("look-ahead surge: trigger %q drain %q replicas %d; want MCOPredicted, rendered-2, 2", s.Spec.Trigger, s.Spec.Drain, h.replicas())
	}
	requireEvent(t, h.events(), "Normal", ReasonStallPredicted, "w2", "next target")
	if h.lookahead(lookaheadSurged) != 1 {
		t.Fatalf("lookahead_total{surged} = %v, want 1", h.lookahead(lookaheadSurged))
	}
	if v := testutil.ToFloat64(h.metrics.BlockedPods.WithLabelValues("worker")); v != 0 {
		t.Fatalf("blocked_pods = %v: a predicted node blocks nothing yet", v)
	}

	h.addPod(modelPod("model-abc-b", "w3", true))
	h.refresh()
	h.settle(depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseReady {
		t.Fatalf("phase %s, want Ready ahead of the drain", h.phase(depSurge))
	}
	for _, w := range h.writes() {
		if w == "create pods/eviction" {
			t.Fatal("evicted from a node the MCO has not even targeted")
		}
	}

	// The MCO finishes w1 and drains w2: the Surge made ahead serves this drain.
	h.updateNode("w1", nodeUpdated)
	h.updateNode("w2", func(n *corev1.Node) { draining(n) })
	h.refresh()
	h.settle(depSurge)
	evicted := 0
	for _, w := range h.writes() {
		if w == "create pods/eviction" {
			evicted++
		}
	}
	if evicted == 0 {
		t.Fatal("the blocked pod was not evicted once the MCO drained w2")
	}
	h.deletePod("model-abc-a")
	h.refresh()
	h.settle(depSurge)
	// The replacement runs on w3, already updated: the stall is resolved and the surge restored.
	if h.surge(depSurge) != nil || h.replicas() != 1 {
		t.Fatalf("not resolved and restored: phase %q, replicas %d", h.phase(depSurge), h.replicas())
	}
	requireEvent(t, h.events(), "Normal", ReasonStallResolved, "w2")
	if h.lookahead(lookaheadHit) != 1 {
		t.Fatalf("lookahead_total{hit} = %v, want 1", h.lookahead(lookaheadHit))
	}
	// Every API write of the stall's life is counted (what make bench-scale reports per stall).
	var counted float64
	for _, rv := range [][2]string{{"deployment", "patch"}, {"surges", "create"}, {"surges/status", "update"}, {"surges", "delete"}, {"pods/eviction", "create"}, {"pods", "patch"}} {
		counted += testutil.ToFloat64(h.metrics.APIWrites.WithLabelValues(rv[0], rv[1]))
	}
	var guardian []string
	for _, w := range h.writes() {
		switch w {
		case "create pods", "update nodes", "delete pods": // the test playing kubelet, MCO and ReplicaSet
		default:
			guardian = append(guardian, w)
		}
	}
	if counted != float64(len(guardian)) {
		t.Fatalf("api_writes_total sums to %v, the guardian wrote %d times: %v", counted, len(guardian), guardian)
	}
}

func TestLookaheadOffSurgesNothingAhead(t *testing.T) {
	h := newHarness(t, func(o *options.Options) { o.Lookahead = 0 }, aheadPool()...)
	h.syncNode("w2")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("--lookahead=0 surged a node the MCO has not targeted: %v", w)
	}
}

// A prediction that does not come true (here: the pool is paused before the MCO reaches w2) is
// undone, and counted.
func TestLookaheadMissedPredictionIsRestored(t *testing.T) {
	h := newHarness(t, nil, aheadPool()...)
	h.surgeNode("w2", depSurge)
	h.addPod(modelPod("model-abc-b", "w3", true))
	h.refresh()
	h.settle(depSurge)
	p, err := h.mco.MachineconfigurationV1().MachineConfigPools().Get(context.Background(), "worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Paused = true
	if _, err := h.mco.MachineconfigurationV1().MachineConfigPools().Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.settle(depSurge)
	if h.surge(depSurge) != nil || h.replicas() != 1 {
		t.Fatalf("missed prediction not restored: Surge %v, replicas %d", h.surge(depSurge) != nil, h.replicas())
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, guardian.ReasonPredictionMissed)
	if h.lookahead(lookaheadMissed) != 1 {
		t.Fatalf("lookahead_total{missed} = %v, want 1", h.lookahead(lookaheadMissed))
	}
}

// The MCO targets the predicted node once the node before it is done: no node of the update is
// under it any more, and w2's daemon has not answered yet whether its update drains. The surge made
// ahead is held through that second (an unknown answer is no missed prediction), and undone only
// once the daemon says the update does not drain.
func TestLookaheadSurgeHeldUntilTheTargetedNodesDaemonAnswers(t *testing.T) {
	h := newHarness(t, nil, aheadPool()...)
	h.surgeNode("w2", depSurge)
	h.addPod(modelPod("model-abc-b", "w3", true))
	h.refresh()
	h.settle(depSurge)
	h.updateNode("w1", nodeUpdated)
	h.updateNode("w2", func(n *corev1.Node) {
		n.Annotations[mco.DesiredConfigAnnotation] = "rendered-2"
		n.Annotations[mco.StateAnnotation] = "Working"
	})
	h.refresh()
	h.settle(depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseReady || h.replicas() != 2 {
		t.Fatalf("targeted, not answered yet: phase %q, replicas %d; want the Ready surge held", h.phase(depSurge), h.replicas())
	}
	h.answer("w2", false)
	h.settle(depSurge)
	if h.surge(depSurge) != nil || h.replicas() != 1 {
		t.Fatalf("the daemon said no drain: Surge %v, replicas %d; want restored", h.surge(depSurge) != nil, h.replicas())
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, guardian.ReasonPredictionMissed)
}

// Looking ahead is only for spare capacity. w1's stall (model "other", not surged yet) needs the
// spare node's only free GPU: the model on w2 is not surged ahead, and w1's stall still is.
func TestLookaheadLeavesTheSpareGPUToTheStallBeingServed(t *testing.T) {
	spare := updatedGPUNode("w3")
	spare.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("1")
	objs := []runtime.Object{namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), spare, workerPool(true), pdb(0, 1, 1)}
	objs = append(objs, model(1, "w2")...)
	objs = append(objs, otherModel("w1")...)
	h := newHarness(t, nil, objs...)
	h.syncNode("w2")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("surged ahead with the only spare GPU that w1's stall needs: %v", w)
	}
	if h.lookahead(lookaheadSkipped) != 1 {
		t.Fatalf("lookahead_total{skipped} = %v, want 1", h.lookahead(lookaheadSkipped))
	}
	h.syncNode("w1")
	h.refresh()
	if h.surge("deployment-other") == nil {
		t.Fatal("w1's stall was not surged")
	}
	// With w1's stall surged (its replacement not created yet), the spare GPU is still spoken for.
	h.syncNode("w2")
	h.refresh()
	if h.surge(depSurge) != nil {
		t.Fatal("surged ahead while w1's replacement waits for the spare GPU")
	}
}

// The only spare GPU is on a node the update has still to drain: a replacement there would just move
// the stall to that node's turn, so nothing is surged ahead.
func TestLookaheadNeedsCapacityOnAnUpdatedNode(t *testing.T) {
	objs := []runtime.Object{namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), gpuNode("w3"), workerPool(true), pdb(0, 1, 1)}
	h := newHarness(t, nil, append(objs, model(1, "w2")...)...)
	h.syncNode("w2")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("surged ahead onto a node still to update: %v", w)
	}
	if h.lookahead(lookaheadSkipped) != 1 {
		t.Fatalf("lookahead_total{skipped} = %v, want 1", h.lookahead(lookaheadSkipped))
	}
}

// updatedGPUNode is a GPU worker that already runs rendered-2.
func updatedGPUNode(name string) *corev1.Node {
	n := gpuNode(name)
	nodeUpdated(n)
	return n
}

// A look-ahead surge never takes the last --max-concurrent-surges slot.
func TestLookaheadKeepsTheLastSurgeSlotForAStall(t *testing.T) {
	h := newHarness(t, func(o *options.Options) { o.MaxConcurrentSurge = 1 }, aheadPool()...)
	h.syncNode("w2")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("look-ahead took the only surge slot: %v", w)
	}
}

// An update the machine-config daemon applies without a drain (SSH keys, the pull secret, a file
// whose node disruption policy is None) raises nothing: neither the targeted node's model nor, on
// the same update, the next node's. The same nodes on an update that drains are served, the next
// one ahead of its turn.
func TestUpdateWithoutDrainSurgesNothing(t *testing.T) {
	for _, on := range []string{"w1", "w2"} {
		targeted := gpuNode("w1")
		targeted.Annotations[mco.DesiredConfigAnnotation] = "rendered-2"
		objs := []runtime.Object{namespace(ns), targeted, gpuNode("w2"), updatedGPUNode("w3"), workerPool(true), pdb(0, 1, 1)}
		objs = append(objs, model(1, on)...)

		h := newHarness(t, nil, append(objs, mcdAnswer("w1", false))...)
		h.syncNode(on)
		if w := h.writes(); len(w) != 0 {
			t.Fatalf("model on %s: an update that does not drain made writes: %v", on, w)
		}
		if n := len(h.events()); n != 0 {
			t.Fatalf("model on %s: an update that does not drain recorded %d Events: %v", on, n, h.events())
		}

		h = newHarness(t, nil, append(objs, mcdAnswer("w1", true))...)
		h.surgeNode(on, depSurge)
		if h.replicas() != 2 {
			t.Fatalf("model on %s: the same update draining: replicas %d, want 2", on, h.replicas())
		}
	}
}
