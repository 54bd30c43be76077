package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgfake "github.com/openshift/client-go/machineconfiguration/clientset/versioned/fake"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// stalled is the canonical stall: a single-replica model on w1, which the MCO is draining, a
// minAvailable 1 PDB, and two more GPU workers.
func stalled(extra ...runtime.Object) []runtime.Object {
	objs := []runtime.Object{namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), gpuNode("w3"), workerPool(true), pdb(0, 1, 1)}
	objs = append(objs, model(1, "w1")...)
	return append(objs, extra...)
}

// surgeNode syncs the node and lets the Surge it created run to where it waits.
func (h *harness) surgeNode(node, surge string) {
	h.t.Helper()
	h.syncNode(node)
	h.refresh()
	h.settle(surge)
}

// mustSurge returns the Surge, failing the test when there is none.
func (h *harness) mustSurge(name string) *v1alpha1.Surge {
	h.t.Helper()
	s := h.surge(name)
	if s == nil {
		h.t.Fatalf("no Surge %s", name)
	}
	return s
}

func (h *harness) addPod(p *corev1.Pod) {
	h.t.Helper()
	if _, err := h.kube.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) deletePod(name string) {
	h.t.Helper()
	if err := h.kube.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) updatePool(updated bool) {
	h.t.Helper()
	p, err := h.mco.MachineconfigurationV1().MachineConfigPools().Get(context.Background(), "worker", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	setPoolUpdated(p, updated)
	if _, err := h.mco.MachineconfigurationV1().MachineConfigPools().Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) allowEvictions() {
	h.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return a.GetSubresource() == "eviction", nil, nil
	})
}

// refuseEvictions makes the API server refuse every eviction, as a budget allowing no disruption does.
func (h *harness) refuseEvictions() {
	h.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return a.GetSubresource() == "eviction", nil, apierrors.NewTooManyRequests("budget", 10)
	})
}

// readySurge surges the model for the drain of w1 and runs its replacement Ready on w2.
func (h *harness) readySurge() {
	h.t.Helper()
	h.surgeNode("w1", depSurge)
	h.addPod(modelPod("model-abc-b", "w2", true))
	h.refresh()
	h.settle(depSurge)
}

// updateNode applies mutate to the node in the fake cluster.
func (h *harness) updateNode(name string, mutate func(*corev1.Node)) {
	h.t.Helper()
	n, err := h.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	mutate(n)
	if _, err := h.kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// nodeUpdated marks the node as done with its update to rendered-2 and schedulable again.
func nodeUpdated(n *corev1.Node) {
	n.Annotations[mco.CurrentConfigAnnotation] = "rendered-2"
	n.Annotations[mco.DesiredConfigAnnotation] = "rendered-2"
	n.Annotations[mco.StateAnnotation] = mco.StateDone
	n.Annotations[mco.DesiredDrainAnnotation] = "uncordon-rendered-2"
	n.Annotations[mco.LastAppliedDrainAnnotation] = "uncordon-rendered-2"
	n.Spec.Unschedulable = false
}

func (h *harness) replicas() int32 {
	h.t.Helper()
	return *h.deployment(ns, "model").Spec.Replicas
}

func TestStallLifecycleSurgesEvictsAndRestoresAfterPoolUpdate(t *testing.T) {
	h := newHarness(t, func(o *options.Options) { o.Restore = "pool" }, stalled()...)
	h.allowEvictions()

	h.syncNode("w1")
	s := h.mustSurge(depSurge)
	if s.PhaseOf() != v1alpha1.PhasePending || h.replicas() != 1 {
		t.Fatalf("the Surge must be persisted before the fields are written: phase %s, replicas %d", s.PhaseOf(), h.replicas())
	}
	sp := s.Spec
	if sp.Node != "w1" || sp.Pool != "worker" || sp.Trigger != "MCODrain" || sp.Drain != "rendered-2" || sp.PDB != "model" ||
		len(sp.Fields) != 1 || *sp.Fields[0].Original != 1 || sp.Fields[0].Set != 2 || sp.Replicas != 1 ||
		sp.Target.UID != "dep-uid" || sp.PodOwner.Name != "model" || s.Namespace != ns {
		t.Fatalf("Surge spec = %+v", sp)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "dep-uid" {
		t.Fatalf("the Surge is not owned by the surged workload: %v", s.OwnerReferences)
	}
	evs := h.events()
	requireEvent(t, evs, "Normal", ReasonStallDetected, "model-abc-a", "w1")
	requireEvent(t, evs, "Normal", ReasonSurgeStarted, "spec.replicas from 1 to 2")
	if v := testutil.ToFloat64(h.metrics.StallsDetected.WithLabelValues("worker", "Deployment", "MCODrain")); v != 1 {
		t.Fatalf("stalls_detected_total = %v, want 1", v)
	}
	if v := testutil.ToFloat64(h.metrics.BlockedPods.WithLabelValues("worker")); v != 1 {
		t.Fatalf("blocked_pods = %v, want 1", v)
	}

	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 2 || h.phase(depSurge) != v1alpha1.PhaseSurged {
		t.Fatalf("after the Surge's sync: replicas %d, phase %s; want 2, Surged", h.replicas(), h.phase(depSurge))
	}
	if v := testutil.ToFloat64(h.metrics.SurgesActive.WithLabelValues("worker", "Deployment")); v != 1 {
		t.Fatalf("surges_active = %v, want 1", v)
	}
	if v := testutil.ToFloat64(h.metrics.Surges.WithLabelValues("Surged")); v != 1 {
		t.Fatalf("surges{phase=Surged} = %v, want 1", v)
	}

	// The same stall seen again (resync, restart of the sync) is not surged twice.
	writes := len(h.writes())
	h.syncNode("w1")
	if got := len(h.writes()); got != writes {
		t.Fatalf("second sync of the stalled node wrote again: %v", h.writes()[writes:])
	}

	// Replacement not Ready yet: wait.
	h.addPod(modelPod("model-abc-b", "w2", false))
	h.refresh()
	if after := h.settle(depSurge); after <= 0 || h.phase(depSurge) != v1alpha1.PhaseSurged {
		t.Fatalf("waiting for the replacement: requeue %v, phase %s", after, h.phase(depSurge))
	}

	// Replacement Ready on w2: Ready, then the blocked pod is evicted through the Eviction API.
	h.deletePod("model-abc-b")
	h.addPod(modelPod("model-abc-b", "w2", true))
	h.clock.Step(40 * time.Second)
	h.refresh()
	h.settle(depSurge)
	if s := h.mustSurge(depSurge); s.PhaseOf() != v1alpha1.PhaseReady || s.Status.ReadyTime == nil {
		t.Fatalf("replacement Ready but the Surge is %s", s.PhaseOf())
	}
	requireEvent(t, h.events(), "Normal", ReasonReplacementReady, "w1")
	evicted := false
	for _, a := range h.kube.Actions() {
		evicted = evicted || (a.GetVerb() == "create" && a.GetSubresource() == "eviction")
	}
	if !evicted {
		t.Fatalf("no eviction requested; writes: %v", h.writes())
	}

	// The pod left the node: resolved, then held while the pool updates.
	h.deletePod("model-abc-a")
	h.refresh()
	h.settle(depSurge)
	if s := h.mustSurge(depSurge); s.PhaseOf() != v1alpha1.PhaseResolved || s.Status.ResolvedTime == nil || h.replicas() != 2 {
		t.Fatalf("after the pod left: phase %s, replicas %d; want Resolved and held at 2", s.PhaseOf(), h.replicas())
	}
	if v := testutil.ToFloat64(h.metrics.StallsResolved.WithLabelValues("worker", "Deployment")); v != 1 {
		t.Fatalf("stalls_resolved_total = %v", v)
	}

	// Pool Updated: Restoring, fields back, Surge deleted.
	h.updatePool(true)
	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 1 || h.surge(depSurge) != nil {
		t.Fatalf("after the pool update: replicas %d, Surge %v; want 1 and none", h.replicas(), h.surge(depSurge))
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, "spec.replicas to 1", "PoolUpdated")
	if v := testutil.ToFloat64(h.metrics.SurgesActive.WithLabelValues("worker", "Deployment")); v != 0 {
		t.Fatalf("surges_active after restore = %v", v)
	}
	for _, w := range h.writes() {
		if w == "update nodes" || w == "patch nodes" {
			t.Fatalf("guardian wrote to a node: %v", h.writes())
		}
	}
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "delete" && a.GetResource().Resource == "pods" && a.GetSubresource() == "" {
			if n := a.(k8stesting.DeleteAction).GetName(); n != "model-abc-a" && n != "model-abc-b" {
				t.Fatalf("a pod the test did not delete was deleted: %s", n)
			}
		}
	}
}

// With --restore=auto the surge is undone as soon as the workload's original pods are Ready on nodes
// this update will not drain again: the capacity goes to the next node's stall.
func TestAutoRestoreOnceTheSurvivorRunsOnAnUpdatedNode(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.allowEvictions()
	h.readySurge()
	h.deletePod("model-abc-a")
	h.refresh()
	h.settle(depSurge)
	if h.phase(depSurge) != v1alpha1.PhaseResolved || h.replicas() != 2 {
		t.Fatalf("the survivor on w2 (still to update) must hold the surge: phase %s, replicas %d", h.phase(depSurge), h.replicas())
	}
	// w1 is updated and the Deployment's second replica runs there: safe to restore.
	h.updateNode("w1", nodeUpdated)
	h.addPod(modelPod("model-abc-c", "w1", true))
	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 1 || h.surge(depSurge) != nil {
		t.Fatalf("not restored once a replica was Ready on an updated node: replicas %d", h.replicas())
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, "SurvivorsOnUpdatedNodes")
	onW2, _ := h.kube.CoreV1().Pods(ns).Get(context.Background(), "model-abc-b", metav1.GetOptions{})
	if onW2.Annotations[podinfo.DeletionCostAnnotation] != leaveFirstCost {
		t.Fatal("the pod on the node still to update was not marked to go first")
	}
}

// A crash between any two writes of the lifecycle resumes where it stopped: a fresh guardian (empty
// memory, same cluster) takes over after every single write, and the surge still ends exactly
// restored, with the count never raised twice.
func TestCrashBetweenEveryPairOfWritesResumes(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	var maxReplicas int32
	step := func(what string, act func(*harness)) {
		t.Helper()
		act(h)
		h.refresh()
		maxReplicas = max(maxReplicas, h.replicas())
		// Crash after every write: the next guardian knows only the cluster.
		h = restart(t, nil, h.kube, h.mco, h.dyn)
		h.allowEvictions()
		t.Logf("after %s: phase %q replicas %d", what, h.phase(depSurge), h.replicas())
	}
	one := func(h *harness) { h.syncSurge(depSurge) }
	step("syncNode", func(h *harness) { h.syncNode("w1") })
	for _, want := range []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseSurged} {
		step("sync", one)
		if got := h.phase(depSurge); got != want {
			t.Fatalf("phase %s, want %s", got, want)
		}
	}
	step("syncNode again", func(h *harness) { h.syncNode("w1") })
	step("replacement", func(h *harness) { h.addPod(modelPod("model-abc-b", "w2", true)) })
	step("sync", one) // Ready
	step("sync", one) // evict
	step("pod gone", func(h *harness) { h.deletePod("model-abc-a") })
	step("sync", one) // Resolved
	step("pool updated", func(h *harness) { h.updatePool(true) })
	for range 3 { // Restoring, fields back, deleted
		step("sync", one)
	}
	if h.surge(depSurge) != nil || h.replicas() != 1 {
		t.Fatalf("end: Surge %v, replicas %d; want none and 1", h.surge(depSurge), h.replicas())
	}
	if maxReplicas != 2 {
		t.Fatalf("replicas peaked at %d across the crashes, want exactly one surge to 2", maxReplicas)
	}
}

func TestPreemptiveSurgeWhenTheMCOTargetsTheNode(t *testing.T) {
	targeted := gpuNode("w1")
	targeted.Annotations[mco.DesiredConfigAnnotation] = "rendered-2"
	objs := []runtime.Object{namespace(ns), targeted, gpuNode("w2"), workerPool(true), pdb(0, 1, 1)}
	objs = append(objs, model(1, "w1")...)

	off := newHarness(t, func(o *options.Options) { o.Preemptive = false }, objs...)
	off.syncNode("w1")
	if w := off.writes(); len(w) != 0 {
		t.Fatalf("--preemptive=false surged a merely targeted node: %v", w)
	}

	h := newHarness(t, nil, objs...)
	// Until the machine-config daemon says whether the update drains, nothing is surged: most
	// updates that do not drain (SSH keys, pull secret) would otherwise raise every model.
	h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("surged before the daemon said the update drains: %v", w)
	}
	h.answer("w1", true)
	h.surgeNode("w1", depSurge)
	if h.replicas() != 2 || h.mustSurge(depSurge).Spec.Trigger != "MCOTargeted" {
		t.Fatalf("pre-emptive surge missing: replicas %d", h.replicas())
	}
	requireEvent(t, h.events(), "Normal", ReasonStallPredicted, "would block")

	// Ready replacement, but the node is not cordoned yet: no eviction before the MCO drains.
	h.allowEvictions()
	h.addPod(modelPod("model-abc-b", "w2", true))
	h.refresh()
	h.settle(depSurge)
	for _, a := range h.kube.Actions() {
		if a.GetSubresource() == "eviction" {
			t.Fatal("evicted from a node that is only targeted, not cordoned")
		}
	}
	if h.phase(depSurge) != v1alpha1.PhaseReady {
		t.Fatalf("phase %s, want Ready", h.phase(depSurge))
	}
}

func TestHPAManagedDeploymentSurgesTheHPAAndRestoresAbsentMin(t *testing.T) {
	h := newHarness(t, nil, stalled(hpaFor(nil, 1))...)
	h.surgeNode("w1", "horizontalpodautoscaler-model")
	hpa, err := h.kube.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), "model", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 2 {
		t.Fatalf("HPA after surge: min %v max %d, want 2/2", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
	if h.replicas() != 1 {
		t.Fatal("the Deployment behind an HPA was scaled directly")
	}
	h.updatePool(true)
	h.refresh()
	h.settle("horizontalpodautoscaler-model")
	hpa, _ = h.kube.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), "model", metav1.GetOptions{})
	if hpa.Spec.MinReplicas != nil || hpa.Spec.MaxReplicas != 1 {
		t.Fatalf("HPA after restore: min %v max %d, want absent/1", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
	if h.surge("horizontalpodautoscaler-model") != nil {
		t.Fatal("Surge left behind")
	}
}

func TestStatefulSetIsSurgedByReplicas(t *testing.T) {
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, UID: "ss-uid", ResourceVersion: "1"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labelsModel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labelsModel}}},
		Status: appsv1.StatefulSetStatus{Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1},
	}
	pod := modelPod("db-0", "w1", true)
	pod.OwnerReferences[0] = metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "ss-uid", Controller: ptr.To(true)}
	h := newHarness(t, nil, namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), workerPool(true), pdb(0, 1, 1), ss, pod)
	h.surgeNode("w1", "statefulset-db")
	got, _ := h.kube.AppsV1().StatefulSets(ns).Get(context.Background(), "db", metav1.GetOptions{})
	if *got.Spec.Replicas != 2 || h.phase("statefulset-db") != v1alpha1.PhaseSurged {
		t.Fatalf("statefulset replicas = %d, phase %s; want 2, Surged", *got.Spec.Replicas, h.phase("statefulset-db"))
	}
}

// Writes made against a stale object are refused by the API server (409, or 422 for a failed JSON
// patch test); the guardian reads again and decides again, with no side effects in between.
func TestConflictOnFieldWriteIsDecidedAgain(t *testing.T) {
	for name, refusal := range map[string]error{
		"409": apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "model", nil),
		// What k8s.io/apiserver answers when a JSON patch's test operation fails.
		"422 failed test": apierrors.NewGenericServerResponse(422, "", schema.GroupResource{}, "",
			"testing value /metadata/resourceVersion failed: test failed", 0, false),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil, stalled()...)
			refusals := 1
			h.kube.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
				if refusals > 0 {
					refusals--
					return true, nil, refusal
				}
				return false, nil, nil
			})
			h.syncNode("w1")
			h.refresh()
			after, err := h.c.reconcile.surge.sync(context.Background(), types.NamespacedName{Namespace: ns, Name: depSurge})
			if err != nil || after <= 0 {
				t.Fatalf("a conflict must requeue quietly to decide again: after %v, err %v", after, err)
			}
			if h.replicas() != 1 || h.phase(depSurge) != v1alpha1.PhasePending {
				t.Fatalf("state after the refused write: replicas %d, phase %s", h.replicas(), h.phase(depSurge))
			}
			if v := testutil.ToFloat64(h.metrics.WriteErrors.WithLabelValues("deployment", "Conflict")); v != 1 {
				t.Fatalf("write_errors_total{Conflict} = %v, want 1", v)
			}
			h.settle(depSurge)
			if h.replicas() != 2 || h.phase(depSurge) != v1alpha1.PhaseSurged {
				t.Fatalf("after deciding again: replicas %d, phase %s", h.replicas(), h.phase(depSurge))
			}
		})
	}
}

func TestExternalChangeBeforeTheFieldsAreWrittenDropsTheSurge(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.syncNode("w1")
	d := h.deployment(ns, "model")
	d.Spec.Replicas = ptr.To(int32(3))
	if _, err := h.kube.AppsV1().Deployments(ns).Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 3 || h.surge(depSurge) != nil {
		t.Fatalf("replicas %d, Surge %v: want their 3 and no Surge", h.replicas(), h.surge(depSurge))
	}
	requireEvent(t, h.events(), "Normal", ReasonExternalChange, "not surging")
}

func TestExternalChangeDuringSurgeIsKept(t *testing.T) {
	h := newHarness(t, func(o *options.Options) { o.Restore = "pool" }, stalled()...)
	h.surgeNode("w1", depSurge)
	d := h.deployment(ns, "model")
	d.Spec.Replicas = ptr.To(int32(4))
	if _, err := h.kube.AppsV1().Deployments(ns).Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.updatePool(true)
	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 4 || h.surge(depSurge) != nil {
		t.Fatalf("replicas = %d, Surge %v; want their 4 kept and no Surge", h.replicas(), h.surge(depSurge))
	}
	evs := h.events()
	requireEvent(t, evs, "Normal", ReasonExternalChange, "spec.replicas", "now 4")
	requireEvent(t, evs, "Normal", ReasonSurgeRestored, "spec.replicas kept as changed by someone else")
}

func TestDryRunWritesNothing(t *testing.T) {
	h := newHarness(t, func(o *options.Options) { o.DryRun = true }, stalled()...)
	h.syncNode("w1")
	h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("dry run wrote: %v", w)
	}
	evs := h.events()
	requireEvent(t, evs, "Normal", ReasonDryRun, "would surge spec.replicas from 1 to 2")
	if len(evs) != 1 {
		t.Fatalf("dry-run decision reported %d times: %v", len(evs), evs)
	}
}

// A guardian restarted with --dry-run after a run that left a prepared surge behind writes nothing
// at all, whatever it finds: no restore when the preparation is withdrawn, no status, no delete of
// the Surge, not even of a Surge whose workload is gone.
func TestDryRunLeavesAnEarlierRunsStateAlone(t *testing.T) {
	h := preparedAndReady(t)
	h.c.reconcile.node.exec.dryRun = true
	h.kube.ClearActions()
	h.dyn.ClearActions()
	h.events()

	h.editPool(func(p *mcfgv1.MachineConfigPool) { delete(p.Annotations, guardian.PrepareAnnotation) })
	h.syncPool()
	h.syncSurge(depSurge)
	h.syncSurge(depSurge)
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("dry run wrote on a withdrawn preparation: %v", w)
	}
	if h.replicas() != 2 || h.surge(depSurge) == nil {
		t.Fatalf("replicas %d, Surge %v: the dry run restored", h.replicas(), h.surge(depSurge))
	}
	requireEvent(t, h.events(), "Normal", ReasonDryRun, "would")

	if err := h.kube.AppsV1().Deployments(ns).Delete(context.Background(), "model", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.kube.ClearActions()
	h.refresh()
	h.syncSurge(depSurge)
	if w := h.writes(); len(w) != 0 || h.surge(depSurge) == nil {
		t.Fatalf("dry run wrote %v for a Surge whose workload is gone (Surge kept: %v)", w, h.surge(depSurge) != nil)
	}
}

// One restore is told once: syncs that still see the deleted Surge in their cache (the informer
// has not delivered the delete yet) find it gone and report nothing again.
func TestOneRestoreIsReportedOnce(t *testing.T) {
	h := preparedAndReady(t)
	h.editPool(func(p *mcfgv1.MachineConfigPool) { delete(p.Annotations, guardian.PrepareAnnotation) })
	for range 12 {
		h.syncSurge(depSurge)
		if h.surge(depSurge) == nil {
			break
		}
		h.refresh()
	}
	if h.surge(depSurge) != nil || h.replicas() != 1 {
		t.Fatalf("not restored: phase %q, replicas %d", h.phase(depSurge), h.replicas())
	}
	// The cache still holds the Surge as it was before its delete.
	h.syncSurge(depSurge)
	h.syncSurge(depSurge)
	restored := 0
	for _, e := range h.events() {
		if strings.HasPrefix(e, "Normal "+ReasonSurgeRestored+" ") {
			restored++
		}
	}
	if restored != 1 {
		t.Fatalf("one restore reported %d times", restored)
	}
}

func TestUnschedulableReplacementIsRolledBackAndNotRetriedForTheSameDrain(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.surgeNode("w1", depSurge)
	pending := modelPod("model-abc-b", "", false)
	pending.Status.Phase = corev1.PodPending
	pending.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(t0)}}
	h.addPod(pending)
	h.refresh()
	h.clock.Step(4 * time.Minute)
	h.settle(depSurge)
	if h.replicas() != 2 {
		t.Fatal("rolled back before --schedule-timeout")
	}
	h.clock.Step(2 * time.Minute)
	h.settle(depSurge)
	s := h.mustSurge(depSurge)
	if h.replicas() != 1 || s.PhaseOf() != v1alpha1.PhaseFailed || s.Status.Reason != "Unschedulable" || !s.Status.Failed {
		t.Fatalf("after a failed surge: replicas %d, Surge %s/%s; want 1 and a Failed Surge kept", h.replicas(), s.PhaseOf(), s.Status.Reason)
	}
	requireEvent(t, h.events(), "Warning", ReasonSurgeFailed, "Unschedulable")
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", "Unschedulable")); v != 1 {
		t.Fatalf("stalls_failed_total{Unschedulable} = %v", v)
	}
	writes := len(h.writes())
	h.syncNode("w1")
	h.refresh()
	h.settle(depSurge)
	if len(h.writes()) != writes {
		t.Fatalf("the same stall was surged again after failing: %v", h.writes()[writes:])
	}
	if v := testutil.ToFloat64(h.metrics.UnresolvableBlocks.WithLabelValues("worker", "Unschedulable", "surge-failed")); v != 1 {
		t.Fatalf("unresolvable_blocked_pods = %v", v)
	}
	// The node's drain ends: the failure memory is dropped.
	h.updateNode("w1", nodeUpdated)
	h.refresh()
	h.settle(depSurge)
	if h.surge(depSurge) != nil {
		t.Fatal("a Failed Surge outlived the drain it was made for")
	}
}

func TestNoCapacityIsReportedWithWhatIsMissing(t *testing.T) {
	full := gpuNode("w2")
	hog := modelPod("hog", "w2", true)
	hog.Labels = map[string]string{"app": "other"}
	hog.OwnerReferences = nil
	hog.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = full.Status.Allocatable["nvidia.com/gpu"]
	objs := []runtime.Object{namespace(ns), draining(gpuNode("w1")), full, hog, workerPool(true), pdb(0, 1, 1)}
	h := newHarness(t, nil, append(objs, model(1, "w1")...)...)
	if after := h.syncNode("w1"); after <= 0 {
		t.Fatal("no capacity should be re-checked later")
	}
	h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("surged without capacity: %v", w)
	}
	evs := h.events()
	requireEvent(t, evs, "Warning", ReasonNoCapacity, "w1", "missing 1 nvidia.com/gpu")
	if len(evs) != 1 {
		t.Fatalf("NoCapacity reported %d times: %v", len(evs), evs)
	}
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", "NoCapacity")); v != 1 {
		t.Fatalf("stalls_failed_total{NoCapacity} = %v", v)
	}
	if v := testutil.ToFloat64(h.metrics.MissingCapacity.WithLabelValues("worker", "nvidia.com/gpu")); v != 1 {
		t.Fatalf("missing_capacity{nvidia.com/gpu} = %v, want 1", v)
	}
}

func TestUnsatisfiablePDBIsReportedNotSurged(t *testing.T) {
	p := pdb(0, 1, 1)
	p.Spec.MinAvailable = nil
	p.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(0))
	objs := []runtime.Object{namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), workerPool(true), p}
	h := newHarness(t, nil, append(objs, model(1, "w1")...)...)
	h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("surged for an unsatisfiable PDB: %v", w)
	}
	requireEvent(t, h.events(), "Warning", ReasonUnsatisfiablePDB, "maxUnavailable 0")
	if v := testutil.ToFloat64(h.metrics.UnresolvableBlocks.WithLabelValues("worker", "UnsatisfiablePDB", "unsatisfiable-pdb")); v != 1 {
		t.Fatalf("unresolvable_blocked_pods = %v", v)
	}
}

func TestWorkloadDeletedDuringSurgeDropsTheSurge(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.surgeNode("w1", depSurge)
	if err := h.kube.AppsV1().Deployments(ns).Delete(context.Background(), "model", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	if after := h.syncSurge(depSurge); after != 0 {
		t.Fatalf("a deleted workload is requeued: %v", after)
	}
	h.refresh()
	if h.surge(depSurge) != nil {
		t.Fatal("the Surge of a deleted workload is left")
	}
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", "WorkloadDeleted")); v != 1 {
		t.Fatalf("stalls_failed_total{WorkloadDeleted} = %v", v)
	}
	requireEvent(t, h.events(), "Warning", ReasonWorkloadDeleted, "deleted during its surge for node w1")
	if after := h.syncSurge(depSurge); after != 0 {
		t.Fatalf("a deleted Surge is requeued on the next sync: %v", after)
	}
	if evs := h.events(); len(evs) != 0 {
		t.Fatalf("the deletion was reported again: %v", evs)
	}
}

func TestOptOutAndScopeAreRespected(t *testing.T) {
	optedOut := namespace(ns)
	optedOut.Annotations = map[string]string{workload.IgnoreAnnotation: "true"}
	objs := []runtime.Object{optedOut, draining(gpuNode("w1")), gpuNode("w2"), workerPool(true), pdb(0, 1, 1)}
	h := newHarness(t, nil, append(objs, model(1, "w1")...)...)
	h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("acted in an opted-out namespace: %v", w)
	}
	h = newHarness(t, func(o *options.Options) { o.PoolSelector = "tier=gpu" }, stalled()...)
	h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("acted on a pool outside --pool-selector: %v", w)
	}
}

func TestMaxConcurrentSurgesDefersNewSurges(t *testing.T) {
	h := newHarness(t, func(o *options.Options) { o.MaxConcurrentSurge = 1 }, stalled()...)
	h.c.reconcile.node.flight.created(&v1alpha1.Surge{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "deployment-x"}}, nil)
	if after := h.syncNode("w1"); after <= 0 {
		t.Fatal("a deferred surge must be retried")
	}
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("surged beyond --max-concurrent-surges: %v", w)
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeDeferred, "max-concurrent-surges=1")
}

func TestRestoreSteersScaleDownOffNodesStillToUpdate(t *testing.T) {
	h := newHarness(t, func(o *options.Options) { o.Restore = "node" }, stalled()...)
	h.allowEvictions()
	h.readySurge()
	h.deletePod("model-abc-a")
	h.refresh()
	h.settle(depSurge)
	// w1 finished its update; the replacement runs on w2, which is next in line.
	h.updateNode("w1", nodeUpdated)
	h.updateNode("w2", func(n *corev1.Node) { n.Annotations[mco.DesiredConfigAnnotation] = "rendered-2" })
	h.addPod(modelPod("model-abc-c", "w1", true))
	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 1 {
		t.Fatal("not restored once the node was updated (--restore=node)")
	}
	onW2, _ := h.kube.CoreV1().Pods(ns).Get(context.Background(), "model-abc-b", metav1.GetOptions{})
	onW1, _ := h.kube.CoreV1().Pods(ns).Get(context.Background(), "model-abc-c", metav1.GetOptions{})
	if onW2.Annotations[podinfo.DeletionCostAnnotation] != leaveFirstCost {
		t.Fatalf("pod on the node still to update has deletion cost %q", onW2.Annotations[podinfo.DeletionCostAnnotation])
	}
	if _, ok := onW1.Annotations[podinfo.DeletionCostAnnotation]; ok {
		t.Fatal("the pod on the updated node was marked to go")
	}
}

func TestPodUnderTwoPDBsIsReportedNotSurged(t *testing.T) {
	second := pdb(1, 1, 1)
	second.Name = "model-extra"
	h := newHarness(t, nil, stalled(second)...)
	h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("surged a pod the Eviction API refuses whatever the budgets: %v", w)
	}
	requireEvent(t, h.events(), "Warning", ReasonUnsatisfiablePDB, "more than one PDB")
}

// On plain Kubernetes (no MachineConfigPool API) MCO detection is off; --cordoned-nodes still finds a
// drain once a node has been cordoned for the grace period, and the surge is restored on uncordon.
func TestPlainKubernetesCordonTrigger(t *testing.T) {
	cordoned := gpuNode("w1")
	cordoned.Annotations = nil
	cordoned.Spec.Unschedulable = true
	objs := append([]runtime.Object{namespace(ns), cordoned, gpuNode("w2"), pdb(0, 1, 1)}, model(1, "w1")...)
	plain := func() *fake.Clientset {
		k := fake.NewClientset(objs...)
		k.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{surgeAPI}
		return k
	}

	off := restart(t, nil, plain(), mcfgfake.NewClientset(), newSurgeClient())
	if off.c.pools != nil {
		t.Fatal("MCO detection on although the cluster serves no MachineConfigPools")
	}
	off.syncNode("w1")
	if w := off.writes(); len(w) != 0 {
		t.Fatalf("acted on a cordoned node without --cordoned-nodes: %v", w)
	}

	h := restart(t, func(o *options.Options) { o.CordonedNodes = true; o.CordonGracePeriod = time.Minute },
		plain(), mcfgfake.NewClientset(), newSurgeClient())
	if after := h.syncNode("w1"); after <= 0 || len(h.writes()) != 0 {
		t.Fatalf("acted before the grace period (recheck after %v, writes %v)", after, h.writes())
	}
	// A sync in the middle of the grace period (a pod event, a resync) does not restart it.
	h.clock.Step(30 * time.Second)
	h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("acted before the grace period: %v", w)
	}
	h.clock.Step(30 * time.Second)
	h.surgeNode("w1", depSurge)
	if h.replicas() != 2 || h.mustSurge(depSurge).Spec.Trigger != "Cordoned" {
		t.Fatalf("no surge for a node cordoned past the grace period (replicas %d)", h.replicas())
	}
	h.updateNode("w1", func(n *corev1.Node) { n.Spec.Unschedulable = false })
	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 1 {
		t.Fatalf("not restored after the uncordon: replicas %d", h.replicas())
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, "Uncordoned")
}

func TestTwoBlockedPodsOfOneWorkloadAreOneSurge(t *testing.T) {
	objs := []runtime.Object{namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), gpuNode("w3"), workerPool(true), pdb(0, 2, 2)}
	objs[len(objs)-1].(*policyv1.PodDisruptionBudget).Spec.MinAvailable = ptr.To(intstr.FromInt32(2))
	objs[len(objs)-1].(*policyv1.PodDisruptionBudget).Status.DesiredHealthy = 2
	h := newHarness(t, nil, append(objs, model(2, "w1", "w1")...)...)
	h.surgeNode("w1", depSurge)
	patches := 0
	for _, w := range h.writes() {
		if w == "patch deployments" || w == "create surges" {
			patches++
		}
	}
	if patches != 2 {
		t.Fatalf("%d Surge creates and surge writes for one workload with two blocked pods, want 1 of each: %v", patches, h.writes())
	}
	if got := h.replicas(); got != 3 {
		t.Fatalf("replicas = %d, want 3 (minAvailable 2 needs one more healthy replica)", got)
	}
	if v := testutil.ToFloat64(h.metrics.BlockedPods.WithLabelValues("worker")); v != 2 {
		t.Fatalf("blocked_pods = %v, want both pods counted", v)
	}
}

// A pod that just turned Ready is not counted yet by the PDB's status (the disruption controller lags
// behind): the drain is about to go through, so the stale "0 allowed" is no stall. Seen on the test
// bed when the MCO targeted the node of an HPA's second replica the moment it turned Ready.
func TestStalePDBStatusIsNoStall(t *testing.T) {
	h := newHarness(t, nil, stalled(modelPod("model-abc-b", "w2", true))...)
	after := h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("surged on a PDB status that lags behind its pods: %v", w)
	}
	if after <= 0 || after > 5*time.Second {
		t.Fatalf("the node must be looked at again soon, got %v", after)
	}
	// The status catches up and says 1 allowed: nothing blocks.
	p, _ := h.kube.PolicyV1().PodDisruptionBudgets(ns).Get(context.Background(), "model", metav1.GetOptions{})
	p.Status.CurrentHealthy, p.Status.DisruptionsAllowed = 2, 1
	if _, err := h.kube.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.syncNode("w1")
	if w := h.writes(); len(w) != 1 || w[0] != "update poddisruptionbudgets/status" {
		t.Fatalf("writes %v, want only the test's own status update", w)
	}
}

// A surge marked Ready only after its node went through the drain (its leader died in between, or it
// was slow), with a pod of the workload placed back on the updated node, is resolved by the drain's
// end, not held in Ready until the node empties: that held the cluster's spare GPU, and the pool,
// forever in the chaos suite.
func TestReadySurgeResolvedWhenTheDrainIsOverWithAPodBackOnTheNode(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.readySurge()
	if h.phase(depSurge) != v1alpha1.PhaseReady {
		t.Fatalf("replacement Ready but the Surge is %s", h.phase(depSurge))
	}
	// The MCO's drain evicts the pod, the node reboots into the new config and comes back, and the
	// ReplicaSet's next pod lands on it.
	h.deletePod("model-abc-a")
	h.updateNode("w1", nodeUpdated)
	h.addPod(modelPod("model-abc-c", "w1", true))
	h.refresh()
	h.settle(depSurge)
	if s := h.surge(depSurge); s != nil && s.PhaseOf() == v1alpha1.PhaseReady {
		t.Fatalf("the Surge is still Ready after its drain ended")
	}
	requireEvent(t, h.events(), "Normal", ReasonStallResolved, "The drain of node w1 is over")
}
