package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/check"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/options"
)

// preparedPool: the worker pool is paused with rendered-2 pending (the render controller moved its
// spec) and asked to be prepared; the model runs on w1, w2 is another node of the pool.
func preparedPool(extra ...runtime.Object) []runtime.Object {
	pool := workerPool(true)
	pool.Spec.Paused = true
	pool.Status.Conditions[1].Status = corev1.ConditionFalse // a paused pool is not Updating
	pool.Annotations = map[string]string{guardian.PrepareAnnotation: "true"}
	objs := []runtime.Object{namespace(ns), gpuNode("w1"), gpuNode("w2"), pool, pdb(0, 1, 1)}
	objs = append(objs, model(1, "w1")...)
	return append(objs, extra...)
}

func (h *harness) syncPool() {
	h.t.Helper()
	if _, err := h.c.reconcile.pool.sync(context.Background(), "worker"); err != nil && !errors.Is(err, errDryRun) && !errors.Is(err, errSurgeGone) {
		h.t.Fatalf("syncPool: %v", err)
	}
	h.refresh()
}

// preparedAndReady is a harness whose prepared pool's model has its second replica Ready.
func preparedAndReady(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, nil, preparedPool()...)
	h.syncPool()
	h.settle(depSurge)
	h.readyReplacement()
	h.settle(depSurge)
	if h.replicas() != 2 || h.phase(depSurge) != v1alpha1.PhaseReady {
		t.Fatalf("replicas %d, phase %q; want a Ready prepared surge", h.replicas(), h.phase(depSurge))
	}
	return h
}

// editPool applies mutate to the worker pool in the fake cluster.
func (h *harness) editPool(mutate func(*mcfgv1.MachineConfigPool)) {
	h.t.Helper()
	pools := h.mco.MachineconfigurationV1().MachineConfigPools()
	p, err := pools.Get(context.Background(), "worker", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	mutate(p)
	if _, err := pools.Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.refresh()
}

// readyReplacement is the scheduler and kubelet: the surged replica runs Ready on w2, and the PDB's
// status counts it (it now allows one disruption: the model no longer blocks).
func (h *harness) readyReplacement() {
	h.t.Helper()
	h.addPod(modelPod("model-abc-b", "w2", true))
	if _, err := h.kube.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(context.Background(), pdb(1, 2, 2), metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.refresh()
}

func (h *harness) prepared(state string) float64 {
	return testutil.ToFloat64(h.metrics.PreparedWorkloads.WithLabelValues("worker", state))
}

// The window workflow: the paused pool is prepared, the model gets its second replica before the
// window; unpaused, the MCO's drain of w1 finds it covered, and both replicas are held until the
// pool is Updated, then restored.
func TestPreparePoolSurgesAheadAndHoldsUntilUpdated(t *testing.T) {
	h := newHarness(t, nil, preparedPool()...)
	h.allowEvictions()
	h.syncPool()
	s := h.mustSurge(depSurge)
	if guardian.Trigger(s.Spec.Trigger) != guardian.TriggerPrepared || s.Spec.Drain != "rendered-2" || s.Spec.Node != "w1" {
		t.Fatalf("prepared Surge: trigger %q drain %q node %q; want Prepared, rendered-2, w1", s.Spec.Trigger, s.Spec.Drain, s.Spec.Node)
	}
	requireEvent(t, h.events(), "Normal", ReasonPoolPreparing, "0 of 1", "1 preparing")
	h.settle(depSurge)
	if h.replicas() != 2 || h.phase(depSurge) != v1alpha1.PhaseSurged {
		t.Fatalf("replicas %d phase %s, want 2 Surged", h.replicas(), h.phase(depSurge))
	}

	h.readyReplacement()
	h.settle(depSurge)
	h.syncPool()
	requireEvent(t, h.events(), "Normal", ReasonPoolPrepared, "1 of 1")
	if h.prepared(metrics.PreparedReady) != 1 || h.prepared(metrics.PreparedWaiting) != 0 {
		t.Fatalf("prepared_workloads: prepared %v waiting %v, want 1 and 0", h.prepared(metrics.PreparedReady), h.prepared(metrics.PreparedWaiting))
	}
	if h.phase(depSurge) != v1alpha1.PhaseReady {
		t.Fatalf("phase %s, want Ready while the pool waits for its window", h.phase(depSurge))
	}
	for _, w := range h.writes() {
		if w == "create pods/eviction" {
			t.Fatal("evicted from a node nobody drains")
		}
	}

	// The window: unpaused, the MCO drains w1; the prepared Surge covers the stall.
	h.editPool(func(p *mcfgv1.MachineConfigPool) { p.Spec.Paused = false; setPoolUpdated(p, false) })
	h.updateNode("w1", func(n *corev1.Node) { draining(n) })
	h.refresh()
	h.syncNode("w1")
	h.refresh()
	if got := h.mustSurge(depSurge); got.UID != s.UID {
		t.Fatal("the drain made a Surge of its own instead of using the prepared one")
	}
	h.deletePod("model-abc-a")
	h.updateNode("w1", nodeUpdated)
	h.refresh()
	h.settle(depSurge)
	if h.surge(depSurge) == nil || h.replicas() != 2 {
		t.Fatalf("restored before the pool is Updated: replicas %d", h.replicas())
	}

	h.updatePool(true)
	h.refresh()
	h.settle(depSurge)
	if h.surge(depSurge) != nil || h.replicas() != 1 {
		t.Fatalf("not restored at pool Updated: phase %q replicas %d", h.phase(depSurge), h.replicas())
	}
}

// A workload queued for a slot behind the pool's own prepared surges is preparing, not waiting: it
// starts by itself once they are Ready, and an admin about to unpause must not read "0 preparing".
func TestPrepareQueuedForASlotCountsAsPreparing(t *testing.T) {
	h := newHarness(t, func(o *options.Options) { o.MaxConcurrentSurge, o.MaxConcurrentSurgePerNamespace = 2, 2 },
		preparedPool(append(otherModel("w2"), gpuNode("w3"))...)...)
	h.syncPool()
	if h.surge(depSurge) == nil || h.surge("deployment-other") != nil {
		t.Fatal("want the first node's model prepared and the second queued for the last slot")
	}
	requireEvent(t, h.events(), "Normal", ReasonPoolPreparing, "0 of 2", "2 preparing, 0 waiting")
	if h.prepared(metrics.PreparedStarting) != 2 || h.prepared(metrics.PreparedWaiting) != 0 {
		t.Fatalf("prepared_workloads: preparing %v waiting %v, want 2 and 0", h.prepared(metrics.PreparedStarting), h.prepared(metrics.PreparedWaiting))
	}
	requireCheckAgrees(t, h)
	h.settle(depSurge)
	h.readyReplacement()
	h.settle(depSurge)
	h.syncPool()
	if h.surge("deployment-other") == nil {
		t.Fatal("the queued workload was not prepared once the slot was free")
	}
}

// Removing the annotation withdraws the request: the prepared surge is restored, the gauge goes.
func TestPrepareWithdrawnRestores(t *testing.T) {
	h := preparedAndReady(t)
	h.editPool(func(p *mcfgv1.MachineConfigPool) { delete(p.Annotations, guardian.PrepareAnnotation) })
	h.settle(depSurge)
	if h.surge(depSurge) != nil || h.replicas() != 1 {
		t.Fatalf("not restored on withdrawal: phase %q replicas %d", h.phase(depSurge), h.replicas())
	}
	h.syncPool()
	if n := testutil.CollectAndCount(h.metrics.PreparedWorkloads); n != 0 {
		t.Fatalf("%d prepared_workloads series left for a pool no longer prepared", n)
	}
}

// A pool with no pending update has nothing to prepare, and says so.
func TestPrepareNothingPending(t *testing.T) {
	objs := preparedPool()
	pool := objs[3].(*mcfgv1.MachineConfigPool)
	setPoolUpdated(pool, true)
	h := newHarness(t, nil, objs...)
	h.syncPool()
	if h.surge(depSurge) != nil {
		t.Fatal("surged for a pool with nothing pending")
	}
	requireEvent(t, h.events(), "Normal", ReasonNothingToPrepare, "no pending update")
}

// A pool whose pending update is known to be applied without a drain is not prepared: preparing it
// would raise every model for an update that moves none. Here the daemon of a node the pool
// updated before its pause answered for the same rendered-1 -> rendered-2 update.
func TestPrepareNothingForAnUpdateWithoutDrain(t *testing.T) {
	for _, drain := range []bool{false, true} {
		answered := gpuNode("w0")
		answered.Annotations[mco.DesiredConfigAnnotation] = "rendered-2"
		h := newHarness(t, nil, preparedPool(answered, mcdAnswer("w0", drain))...)
		h.syncPool()
		if surged := h.surge(depSurge) != nil; surged != drain {
			t.Fatalf("update drains %v: surged %v", drain, surged)
		}
		if !drain {
			requireEvent(t, h.events(), "Normal", ReasonNothingToPrepare, "applied without cordon or drain", "MachineConfigNode w0: Drain Required: false")
			if pr := requireCheckAgrees(t, h); pr.Prepared+pr.Preparing+len(pr.Waiting)+len(pr.Unresolvable) != 0 {
				t.Fatalf("check's prepare section %+v, want nothing", pr)
			}
		}
	}
}

// A pool that NVIDIA's maintenance operator paused while it drains one node is not in an update
// window: its update resumes once the maintenance ends, and nothing is prepared for it.
func TestPrepareNothingForAPoolPausedForMaintenance(t *testing.T) {
	objs := preparedPool()
	objs[3].(*mcfgv1.MachineConfigPool).Annotations[mco.MaintenancePausedAnnotation] = "true"
	h := newHarness(t, nil, objs...)
	h.syncPool()
	if h.surge(depSurge) != nil {
		t.Fatal("prepared a pool paused by the maintenance operator")
	}
	requireEvent(t, h.events(), "Normal", ReasonNothingToPrepare, "paused by NVIDIA's maintenance operator")
}

// A prepared surge only uses capacity no stall needs: with a stall waiting for capacity, nothing is
// prepared, and the pool says what waits.
func TestPrepareYieldsToAStallWaitingForCapacity(t *testing.T) {
	h := newHarness(t, nil, preparedPool()...)
	h.c.drains.setNode("other", &nodeStats{pool: "infra"}, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")})
	h.syncPool()
	if h.surge(depSurge) != nil {
		t.Fatal("prepared with capacity a stall waits for")
	}
	requireEvent(t, h.events(), "Normal", ReasonPoolPartlyPrepared, "0 of 1", "1 waiting", "a stall waits for capacity")
	if h.prepared(metrics.PreparedWaiting) != 1 {
		t.Fatalf("prepared_workloads{waiting} = %v, want 1", h.prepared(metrics.PreparedWaiting))
	}
	if pr := requireCheckAgrees(t, h); len(pr.Waiting) != 1 || !strings.Contains(pr.Waiting[0], "Deployment models/model on w1: ") ||
		!strings.Contains(pr.Waiting[0], "a stall waits for capacity") {
		t.Errorf("check's waiting workloads: %q", pr.Waiting)
	}
}

// A guardian restarted after creating a prepared Surge (before writing its fields) makes no second
// one: its sync finds the Surge and finishes it.
func TestPrepareAfterRestartFinishesTheSurgeMade(t *testing.T) {
	h := newHarness(t, nil, preparedPool()...)
	h.syncPool()
	h2 := restart(t, nil, h.kube, h.mco, h.dyn)
	h2.syncPool()
	h2.settle(depSurge)
	creates := 0
	for _, w := range h2.writes() {
		if w == "create surges" {
			creates++
		}
	}
	if creates != 1 || h2.replicas() != 2 {
		t.Fatalf("%d Surges created, replicas %d; want one Surge and 2 replicas", creates, h2.replicas())
	}
}

// checkPrepare is what `check` says of the worker pool being prepared.
func (h *harness) checkPrepare() *check.Prepare {
	h.t.Helper()
	r, err := h.c.reconcile.pool.predict(PredictOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range r.Pools {
		if p.Name == "worker" {
			return p.Prepare
		}
	}
	h.t.Fatal("no worker pool in the report")
	return nil
}

// requireCheckAgrees fails unless `check` counts the pool's workloads as the guardian's gauge does.
func requireCheckAgrees(t *testing.T, h *harness) *check.Prepare {
	t.Helper()
	pr := h.checkPrepare()
	got := map[string]int{metrics.PreparedReady: pr.Prepared, metrics.PreparedStarting: pr.Preparing,
		metrics.PreparedWaiting: len(pr.Waiting), metrics.PreparedUnresolvable: len(pr.Unresolvable)}
	for state, n := range got {
		if want := h.prepared(state); float64(n) != want {
			t.Errorf("check: %d %s, prepared_workloads{state=%q} = %v", n, state, state, want)
		}
	}
	return pr
}

// check says per pool being prepared how many workloads are prepared and which still wait.
func TestCheckReportsPrepare(t *testing.T) {
	h := newHarness(t, nil, preparedPool()...)
	prepareOf := h.checkPrepare
	// The guardian's next sync surges it: check says preparing, as the daemon's Event will.
	if pr := prepareOf(); pr == nil || pr.Prepared != 0 || pr.Preparing != 1 || len(pr.Waiting) != 0 {
		t.Fatalf("before the guardian prepared anything: %+v", pr)
	}
	h.syncPool()
	h.settle(depSurge)
	if pr := prepareOf(); pr.Preparing != 1 || len(pr.Waiting) != 0 {
		t.Fatalf("surged, replacement not Ready: %+v", pr)
	}
	h.readyReplacement()
	h.settle(depSurge)
	pr := prepareOf()
	if pr.Prepared != 1 || pr.Preparing != 0 || len(pr.Waiting) != 0 {
		t.Fatalf("replacement Ready: %+v, want 1 prepared", pr)
	}
	var out strings.Builder
	if err := check.Render(&out, &check.Report{Mode: "mco", Pools: []check.Pool{{Name: "worker", Prepare: pr}}}, "table"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "PREPARED: 1 of 1 workloads") {
		t.Errorf("table does not say the pool is prepared:\n%s", out.String())
	}
}

// The replacement just turned Ready and the PDB's status has not counted it yet: the workload is
// prepared, counted once, not also waiting.
func TestPreparedWhilePDBStatusLags(t *testing.T) {
	h := newHarness(t, nil, preparedPool()...)
	h.syncPool()
	h.settle(depSurge)
	h.addPod(modelPod("model-abc-b", "w2", true))
	h.refresh()
	h.settle(depSurge)
	h.syncPool()
	requireEvent(t, h.events(), "Normal", ReasonPoolPrepared, "1 of 1")
}

// renderedConfig is a rendered MachineConfig with the given SSH key and kernel arguments.
func renderedConfig(name, sshKey string, kargs ...string) *mcfgv1.MachineConfig {
	ign := fmt.Sprintf(`{"ignition":{"version":"3.5.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":[%q]}]},`+
		`"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,hello"}}]}}`, sshKey)
	return &mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec: mcfgv1.MachineConfigSpec{OSImageURL: "quay.io/rhcos@sha256:1", KernelArguments: kargs, Config: runtime.RawExtension{Raw: []byte(ign)}}}
}

// machineConfiguration is MachineConfiguration cluster with the MCO's default SSH key policy
// (None) published and observed.
func machineConfiguration() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
		"metadata": map[string]any{"name": "cluster", "generation": int64(2)},
		"status": map[string]any{"observedGeneration": int64(2), "nodeDisruptionPolicyStatus": map[string]any{"clusterPolicies": map[string]any{
			"sshkey": map[string]any{"actions": []any{map[string]any{"type": "None"}}},
		}}},
	}}
	return u
}

var machineConfigurationAPI = &metav1.APIResourceList{
	GroupVersion: "operator.openshift.io/v1",
	APIResources: []metav1.APIResource{{Name: "machineconfigurations", Kind: "MachineConfiguration"}},
}

// With --read-machineconfigs the drain decision is known before any node is targeted: a pool whose
// pending update changes only SSH keys is not prepared, and check says no-drain with the reason;
// without the read it is prepared (drain-unknown), and an update of a kernel argument is prepared
// either way.
func TestReadMachineConfigsKnowsAheadThatAnUpdateDoesNotDrain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		read      bool
		kargs     []string
		wantSurge bool
	}{
		{"SSH keys only, read", true, nil, false},
		{"SSH keys only, not read", false, nil, true},
		{"kernel argument, read", true, []string{"nosmt"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := preparedPool(renderedConfig("rendered-1", "ssh-ed25519 AAAA one"), renderedConfig("rendered-2", "ssh-ed25519 AAAA two", tc.kargs...))
			h := newHarnessServing(t, func(o *options.Options) { o.ReadMachineConfigs = tc.read }, []*metav1.APIResourceList{machineConfigurationAPI}, objs...)
			if _, err := h.dyn.Resource(machineConfigurationGVR).Create(context.Background(), machineConfiguration(), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			h.refresh()
			h.syncPool()
			if surged := h.surge(depSurge) != nil; surged != tc.wantSurge {
				t.Fatalf("surged %v, want %v", surged, tc.wantSurge)
			}
			report, err := h.c.reconcile.pool.predict(PredictOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.wantSurge {
				requireEvent(t, h.events(), "Normal", ReasonNothingToPrepare, "rendered MachineConfigs: SSH keys only")
				if p := report.Pools[0]; p.Drain != "no-drain" || !strings.Contains(p.DrainReason, "SSH keys only") {
					t.Fatalf("check: pool %s drain %q (%s), want no-drain for SSH keys", p.Name, p.Drain, p.DrainReason)
				}
			}
		})
	}
}

// A computed answer the daemon then contradicts is undone at once: the daemon's own answer is what
// the node does.
func TestComputedDrainDeniedByTheDaemonIsRestored(t *testing.T) {
	targeted := gpuNode("w1")
	targeted.Annotations[mco.DesiredConfigAnnotation] = "rendered-2"
	objs := []runtime.Object{namespace(ns), targeted, gpuNode("w2"), workerPool(true), pdb(0, 1, 1),
		renderedConfig("rendered-1", "ssh-ed25519 AAAA one"), renderedConfig("rendered-2", "ssh-ed25519 AAAA one", "nosmt")}
	objs = append(objs, model(1, "w1")...)
	h := newHarnessServing(t, func(o *options.Options) { o.ReadMachineConfigs = true }, []*metav1.APIResourceList{machineConfigurationAPI}, objs...)
	if _, err := h.dyn.Resource(machineConfigurationGVR).Create(context.Background(), machineConfiguration(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.surgeNode("w1", depSurge)
	if h.replicas() != 2 {
		t.Fatalf("a computed drain (kernel argument) was not surged: replicas %d", h.replicas())
	}
	h.answer("w1", false)
	h.settle(depSurge)
	if h.surge(depSurge) != nil || h.replicas() != 1 {
		t.Fatalf("the daemon said no drain: Surge %v, replicas %d; want restored", h.surge(depSurge), h.replicas())
	}
}
