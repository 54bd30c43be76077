package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/internal/check"
)

// TestPredictReadsOnly checks that Predict analyses the informer caches with the daemon's own
// resolution and writes nothing, records no Event.
func TestPredictReadsOnly(t *testing.T) {
	objs := append(model(1, "gpu-a"), namespace(ns), gpuNode("gpu-a"), gpuNode("gpu-b"), workerPool(false), pdb(0, 1, 1))
	h := newHarness(t, nil, objs...)
	r, err := h.c.reconcile.pool.predict(PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != "mco" || len(r.Pools) != 1 || r.Pools[0].Name != "worker" {
		t.Fatalf("report %+v, want the worker pool", r)
	}
	blocks := r.Blocks()
	if len(blocks) != 1 || blocks[0].Pod != "model-abc-a" || blocks[0].Verdict != check.ResolvableWithCapacity || blocks[0].Workload != "Deployment model" {
		t.Fatalf("blocks %+v, want model-abc-a resolvable-with-capacity", blocks)
	}
	if r.ExitCode() != check.ExitResolvable {
		t.Errorf("exit code %d, want %d", r.ExitCode(), check.ExitResolvable)
	}
	if w := h.writes(); len(w) != 0 {
		t.Errorf("Predict wrote %v", w)
	}
	if evs := h.events(); len(evs) != 0 {
		t.Errorf("Predict recorded %v", evs)
	}
}

// TestPredictWithoutPools is cordon mode: a cluster that serves no MachineConfigPools.
func TestPredictWithoutPools(t *testing.T) {
	objs := append(model(1, "gpu-b"), namespace(ns), gpuNode("gpu-b"), gpuNode("gpu-a"), pdb(0, 1, 1))
	h := newHarness(t, nil, objs...)
	h.c.pools = nil
	r, err := h.c.reconcile.pool.predict(PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != "cordon" || len(r.Pools) != 1 || r.Pools[0].Name != check.NoPool || r.Pools[0].Nodes[0].Name != "gpu-a" {
		t.Fatalf("report %+v, want one pseudo-pool ordered by name", r)
	}
}

// TestPredictionGaugesAndEvents checks the daemon side: the gauges carry every verdict per pool, and a
// workload that will stall gets one Warning Event per finding, again once it comes back.
func TestPredictionGaugesAndEvents(t *testing.T) {
	unsatisfiable := pdb(0, 1, 1)
	unsatisfiable.Spec.MinAvailable, unsatisfiable.Spec.MaxUnavailable = nil, ptr.To(intstr.FromInt32(0))
	objs := append(model(1, "gpu-a"), namespace(ns), gpuNode("gpu-a"), gpuNode("gpu-b"), workerPool(false), unsatisfiable)
	h := newHarness(t, nil, objs...)
	p := h.c.newPredictor()

	p.predict()
	if got := testutil.ToFloat64(h.metrics.PredictedBlocks.WithLabelValues("worker", string(check.UnsatisfiablePDB))); got != 1 {
		t.Errorf("predicted_blocks{verdict=unsatisfiable-pdb} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.metrics.PredictedBlocks.WithLabelValues("worker", string(check.Resolvable))); got != 0 {
		t.Errorf("predicted_blocks{verdict=resolvable} = %v, want an explicit 0", got)
	}
	requireEvent(t, h.events(), corev1.EventTypeWarning, ReasonUpdateWillStall, "model-abc-a", "gpu-a", "pool worker", "unsatisfiable-pdb")

	p.predict()
	if evs := h.events(); len(evs) != 0 {
		t.Errorf("the same finding was reported again: %v", evs)
	}

	// The PDB is fixed: nothing stalls, and the finding is forgotten.
	fixed := pdb(0, 1, 1)
	if _, err := h.kube.PolicyV1().PodDisruptionBudgets(ns).Update(t.Context(), fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	p.predict()
	if got := testutil.ToFloat64(h.metrics.PredictedBlocks.WithLabelValues("worker", string(check.UnsatisfiablePDB))); got != 0 {
		t.Errorf("after the fix predicted_blocks{verdict=unsatisfiable-pdb} = %v, want 0", got)
	}
	if len(p.reported) != 0 {
		t.Errorf("findings still remembered after the fix: %v", p.reported)
	}
}

// TestPredictedMissingCapacity: a GPU model whose replacement finds no free GPU.
func TestPredictedMissingCapacity(t *testing.T) {
	full := gpuNode("gpu-b")
	full.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("0")
	objs := append(model(1, "gpu-a"), namespace(ns), gpuNode("gpu-a"), full, workerPool(false), pdb(0, 1, 1))
	h := newHarness(t, nil, objs...)
	p := h.c.newPredictor()
	p.predict()
	if got := testutil.ToFloat64(h.metrics.PredictedBlocks.WithLabelValues("worker", string(check.NoCapacity))); got != 1 {
		t.Errorf("predicted_blocks{verdict=no-capacity} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.metrics.PredictedMissingCapacity.WithLabelValues("worker", "nvidia.com/gpu")); got != 1 {
		t.Errorf("predicted_missing_capacity = %v, want 1", got)
	}
	requireEvent(t, h.events(), corev1.EventTypeWarning, ReasonUpdateWillStall, "no-capacity", "missing 1 nvidia.com/gpu")
}

// A one-off `check` has no stalls of its own in memory: a pod blocking a drain under way with no room
// for its replacement is the stall waiting for capacity that keeps prepared surges back.
func TestStallWantsCapacityOnlyForDrainsUnderWay(t *testing.T) {
	report := func(stage string, v check.Verdict) *check.Report {
		return &check.Report{Pools: []check.Pool{{Name: "gpu", Nodes: []check.Node{{Name: "g1", Stage: stage, Blocks: []check.Block{{Pod: "m", Verdict: v}}}}}}}
	}
	for _, tc := range []struct {
		stage   string
		verdict check.Verdict
		want    bool
	}{
		{check.StageUpdating, check.NoCapacity, true},
		{check.StageUpdating, check.Resolvable, false},
		{check.StageNext, check.NoCapacity, false},
		{check.StageLater, check.NoCapacity, false},
	} {
		if got := stallWantsCapacity(report(tc.stage, tc.verdict)); got != tc.want {
			t.Errorf("%s node, %s: %v, want %v", tc.stage, tc.verdict, got, tc.want)
		}
	}
}

// A workload predicted not steady (here its Deployment's status lags one replica behind) is counted at
// once, and reported only once it has stayed so for notSteadyReportAfter: one that settles sooner,
// like a model just Ready whose controller's status lags, gets no Event.
func TestNotSteadyPredictionIsReportedOnceItLasts(t *testing.T) {
	objs := append(model(1, "gpu-a"), namespace(ns), gpuNode("gpu-a"), gpuNode("gpu-b"), workerPool(false), pdb(0, 1, 1))
	h := newHarness(t, nil, objs...)
	setReady := func(ready int32) {
		h.updateDeployment(func(d *appsv1.Deployment) { d.Status.ReadyReplicas = ready })
	}
	p := h.c.newPredictor()
	setReady(0)
	p.predict()
	if got := testutil.ToFloat64(h.metrics.PredictedBlocks.WithLabelValues("worker", string(check.NotSteady))); got != 1 {
		t.Fatalf("predicted_blocks{verdict=not-steady} = %v, want 1", got)
	}
	if evs := h.events(); len(evs) != 0 {
		t.Fatalf("a workload not steady for a moment was reported: %v", evs)
	}

	// It settles before the grace ends, then is not steady again: the grace starts over.
	h.clock.Step(notSteadyReportAfter - time.Second)
	setReady(1)
	p.predict()
	setReady(0)
	h.clock.Step(time.Second)
	p.predict()
	if evs := h.events(); len(evs) != 0 {
		t.Fatalf("a workload that settled in between was reported: %v", evs)
	}

	// It stays not steady for the whole grace: reported once.
	h.clock.Step(notSteadyReportAfter)
	p.predict()
	requireEvent(t, h.events(), corev1.EventTypeWarning, ReasonUpdateWillStall, "model-abc-a", "not-steady")
	h.clock.Step(time.Minute)
	p.predict()
	if evs := h.events(); len(evs) != 0 {
		t.Errorf("the same finding was reported again: %v", evs)
	}
}
