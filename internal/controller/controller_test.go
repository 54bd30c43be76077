package controller

import (
	"context"
	"testing"
	"time"

	mcfgfake "github.com/openshift/client-go/machineconfiguration/clientset/versioned/fake"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// stalled is the canonical stall: a single-replica model on w1, which the MCO is draining, a
// minAvailable 1 PDB, and two more GPU workers.
func stalled(extra ...runtime.Object) []runtime.Object {
	objs := []runtime.Object{namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), gpuNode("w3"), workerPool(true), pdb(0, 1, 1)}
	objs = append(objs, model(1, "w1")...)
	return append(objs, extra...)
}

func recordOf(t *testing.T, annotations map[string]string) *workload.Record {
	t.Helper()
	s, ok := annotations[workload.RecordAnnotation]
	if !ok {
		t.Fatalf("no surge record in %v", annotations)
	}
	r, err := workload.DecodeRecord(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
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

func TestStallLifecycleSurgesEvictsAndRestoresAfterPoolUpdate(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.allowEvictions()

	h.syncNode("w1")
	d := h.deployment(ns, "model")
	if got := *d.Spec.Replicas; got != 2 {
		t.Fatalf("replicas after surge = %d, want 2", got)
	}
	rec := recordOf(t, d.Annotations)
	if rec.Node != "w1" || rec.Pool != "worker" || rec.Trigger != "MCODrain" || rec.Drain != "rendered-2" ||
		len(rec.Fields) != 1 || *rec.Fields[0].Original != 1 || rec.Fields[0].Set != 2 || rec.PDB != "model" {
		t.Fatalf("surge record = %+v", rec)
	}
	evs := h.events()
	requireEvent(t, evs, "Normal", ReasonStallDetected, "model-abc-a", "w1")
	requireEvent(t, evs, "Normal", ReasonSurgeStarted, "spec.replicas from 1 to 2")
	if v := testutil.ToFloat64(h.metrics.StallsDetected.WithLabelValues("worker", "Deployment", "MCODrain")); v != 1 {
		t.Fatalf("stalls_detected_total = %v, want 1", v)
	}
	if v := testutil.ToFloat64(h.metrics.SurgesActive.WithLabelValues("worker", "Deployment")); v != 1 {
		t.Fatalf("surges_active = %v, want 1", v)
	}
	if v := testutil.ToFloat64(h.metrics.BlockedPods.WithLabelValues("worker")); v != 1 {
		t.Fatalf("blocked_pods = %v, want 1", v)
	}

	// The same stall seen again (resync, restart of the sync) is not surged twice.
	h.refresh()
	patches := len(h.writes())
	h.syncNode("w1")
	if got := len(h.writes()); got != patches {
		t.Fatalf("second sync of the stalled node wrote again: %v", h.writes()[patches:])
	}

	// Replacement not Ready yet: wait.
	h.addPod(modelPod("model-abc-b", "w2", false))
	h.refresh()
	if after := h.syncWorkload(depRef); after <= 0 {
		t.Fatalf("waiting for the replacement should requeue, got %v", after)
	}
	if recordOf(t, h.deployment(ns, "model").Annotations).ReadyTime != nil {
		t.Fatal("replacement marked Ready while not Ready")
	}

	// Replacement Ready on w2.
	h.deletePod("model-abc-b")
	h.addPod(modelPod("model-abc-b", "w2", true))
	h.clock.Step(40 * time.Second)
	h.refresh()
	h.syncWorkload(depRef)
	if recordOf(t, h.deployment(ns, "model").Annotations).ReadyTime == nil {
		t.Fatal("replacement Ready but not recorded")
	}
	requireEvent(t, h.events(), "Normal", ReasonReplacementReady, "w1")
	if n := testutil.CollectAndCount(h.metrics.ReplacementReady); n != 1 {
		t.Fatalf("replacement_ready histogram series = %d", n)
	}

	// Node cordoned and draining: the blocked pod is evicted through the Eviction API.
	h.refresh()
	h.syncWorkload(depRef)
	evicted := false
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "create" && a.GetSubresource() == "eviction" {
			evicted = true
		}
		if a.GetVerb() == "delete" && a.GetResource().Resource == "pods" && a.GetSubresource() == "" {
			// Only the test itself deletes pods (simulating the kubelet); make sure it was not the guardian.
			continue
		}
	}
	if !evicted {
		t.Fatalf("no eviction requested; writes: %v", h.writes())
	}
	requireEvent(t, h.events(), "Normal", ReasonPodEvicted, "model-abc-a")

	// The pod left the node: resolved.
	h.deletePod("model-abc-a")
	h.refresh()
	h.syncWorkload(depRef)
	if recordOf(t, h.deployment(ns, "model").Annotations).ResolvedTime == nil {
		t.Fatal("stall not marked resolved")
	}
	if v := testutil.ToFloat64(h.metrics.StallsResolved.WithLabelValues("worker", "Deployment")); v != 1 {
		t.Fatalf("stalls_resolved_total = %v", v)
	}

	// Held while the pool updates.
	h.refresh()
	h.syncWorkload(depRef)
	if *h.deployment(ns, "model").Spec.Replicas != 2 {
		t.Fatal("surge restored before the pool was updated")
	}

	// Pool Updated: restored exactly, record gone.
	h.updatePool(true)
	h.refresh()
	h.syncWorkload(depRef)
	d = h.deployment(ns, "model")
	if *d.Spec.Replicas != 1 {
		t.Fatalf("replicas after restore = %d, want 1", *d.Spec.Replicas)
	}
	if _, ok := d.Annotations[workload.RecordAnnotation]; ok {
		t.Fatal("surge record left behind")
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, "spec.replicas to 1", "PoolUpdated")
	if v := testutil.ToFloat64(h.metrics.SurgesActive.WithLabelValues("worker", "Deployment")); v != 0 {
		t.Fatalf("surges_active after restore = %v", v)
	}
	for _, w := range h.writes() {
		if w == "delete pods" {
			continue // the test's own deletions
		}
		if w == "update nodes" || w == "patch nodes" || w == "delete pods/eviction" {
			t.Fatalf("guardian wrote to a node or deleted a pod: %v", h.writes())
		}
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
	h.syncNode("w1")
	d := h.deployment(ns, "model")
	if *d.Spec.Replicas != 2 || recordOf(t, d.Annotations).Trigger != "MCOTargeted" {
		t.Fatalf("pre-emptive surge missing: replicas %d", *d.Spec.Replicas)
	}
	requireEvent(t, h.events(), "Normal", ReasonStallPredicted, "would block")

	// Ready replacement, but the node is not cordoned yet: no eviction before the MCO drains.
	h.allowEvictions()
	h.addPod(modelPod("model-abc-b", "w2", true))
	h.refresh()
	h.syncWorkload(depRef) // MarkReady
	h.refresh()
	h.syncWorkload(depRef)
	for _, a := range h.kube.Actions() {
		if a.GetSubresource() == "eviction" {
			t.Fatal("evicted from a node that is only targeted, not cordoned")
		}
	}
}

func TestHPAManagedDeploymentSurgesTheHPAAndRestoresAbsentMin(t *testing.T) {
	h := newHarness(t, nil, stalled(hpaFor(nil, 1))...)
	h.syncNode("w1")
	hpa, err := h.kube.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), "model", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 2 {
		t.Fatalf("HPA after surge: min %v max %d, want 2/2", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
	if *h.deployment(ns, "model").Spec.Replicas != 1 {
		t.Fatal("the Deployment behind an HPA was scaled directly")
	}
	h.updatePool(true)
	h.refresh()
	h.syncWorkload(workload.Ref{Kind: workload.KindHPA, Namespace: ns, Name: "model", UID: "hpa-uid"})
	hpa, _ = h.kube.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), "model", metav1.GetOptions{})
	if hpa.Spec.MinReplicas != nil || hpa.Spec.MaxReplicas != 1 {
		t.Fatalf("HPA after restore: min %v max %d, want absent/1", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
	if _, ok := hpa.Annotations[workload.RecordAnnotation]; ok {
		t.Fatal("record left on the HPA")
	}
}

func TestStatefulSetIsSurgedByReplicas(t *testing.T) {
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, UID: "ss-uid", ResourceVersion: "1"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labelsModel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labelsModel}}},
	}
	pod := modelPod("db-0", "w1", true)
	pod.OwnerReferences[0] = metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "ss-uid", Controller: ptr.To(true)}
	h := newHarness(t, nil, namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), workerPool(true), pdb(0, 1, 1), ss, pod)
	h.syncNode("w1")
	got, _ := h.kube.AppsV1().StatefulSets(ns).Get(context.Background(), "db", metav1.GetOptions{})
	if *got.Spec.Replicas != 2 {
		t.Fatalf("statefulset replicas = %d, want 2", *got.Spec.Replicas)
	}
	recordOf(t, got.Annotations)
}

func TestConflictOnSurgeIsRetriedWithoutSideEffects(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	conflicts := 1
	h.kube.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "model", nil)
		}
		return false, nil, nil
	})
	if _, err := h.c.syncNode(context.Background(), "w1"); !apierrors.IsConflict(err) {
		t.Fatalf("syncNode error = %v, want a conflict to retry", err)
	}
	if evs := h.events(); len(evs) != 0 {
		t.Fatalf("events after a failed write: %v", evs)
	}
	if v := testutil.ToFloat64(h.metrics.StallsDetected.WithLabelValues("worker", "Deployment", "MCODrain")); v != 0 {
		t.Fatalf("stall counted although the surge was not written: %v", v)
	}
	if *h.deployment(ns, "model").Spec.Replicas != 1 {
		t.Fatal("replicas changed by a conflicting write")
	}
	h.syncNode("w1")
	if *h.deployment(ns, "model").Spec.Replicas != 2 {
		t.Fatal("retry after the conflict did not surge")
	}
}

func TestStaleCacheWriteIsRejectedByTheResourceVersionTest(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	// Someone else changes the Deployment after the cache was filled: our patch must not apply.
	d := h.deployment(ns, "model")
	d.ResourceVersion = "2"
	d.Spec.Replicas = ptr.To(int32(3))
	if _, err := h.kube.AppsV1().Deployments(ns).Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.syncNode(context.Background(), "w1"); err == nil {
		t.Fatal("a write based on a stale object succeeded")
	}
	if got := h.deployment(ns, "model"); *got.Spec.Replicas != 3 || got.Annotations[workload.RecordAnnotation] != "" {
		t.Fatalf("stale write changed the object: replicas %d", *got.Spec.Replicas)
	}
}

func TestRestartedGuardianResumesFromTheRecord(t *testing.T) {
	first := newHarness(t, nil, stalled()...)
	first.syncNode("w1")
	// "Crash": a new guardian with empty memory starts against the same cluster state, where the
	// replacement has meanwhile become Ready.
	first.addPod(modelPod("model-abc-b", "w2", true))
	second := restart(t, nil, first.kube, first.mco)
	second.syncNode("w1")
	if got := second.deployment(ns, "model"); *got.Spec.Replicas != 2 {
		t.Fatalf("restart changed the surge: replicas %d", *got.Spec.Replicas)
	}
	second.syncWorkload(depRef)
	if recordOf(t, second.deployment(ns, "model").Annotations).ReadyTime == nil {
		t.Fatal("the restarted guardian did not resume the surge")
	}
	if v := testutil.ToFloat64(second.metrics.SurgesActive.WithLabelValues("worker", "Deployment")); v != 1 {
		t.Fatalf("surges_active after restart = %v", v)
	}
}

func TestExternalChangeDuringSurgeIsKept(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.syncNode("w1")
	d := h.deployment(ns, "model")
	d.Spec.Replicas = ptr.To(int32(4))
	if _, err := h.kube.AppsV1().Deployments(ns).Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.updatePool(true)
	h.refresh()
	h.syncWorkload(depRef)
	got := h.deployment(ns, "model")
	if *got.Spec.Replicas != 4 {
		t.Fatalf("replicas = %d, want their 4 kept", *got.Spec.Replicas)
	}
	if _, ok := got.Annotations[workload.RecordAnnotation]; ok {
		t.Fatal("record not dropped")
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

func TestUnschedulableReplacementIsRolledBackAndNotRetriedForTheSameDrain(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.syncNode("w1")
	pending := modelPod("model-abc-b", "", false)
	pending.Status.Phase = corev1.PodPending
	pending.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(t0)}}
	h.addPod(pending)
	h.refresh()
	h.clock.Step(4 * time.Minute)
	h.syncWorkload(depRef)
	if *h.deployment(ns, "model").Spec.Replicas != 2 {
		t.Fatal("rolled back before --schedule-timeout")
	}
	h.clock.Step(2 * time.Minute)
	h.syncWorkload(depRef)
	d := h.deployment(ns, "model")
	if *d.Spec.Replicas != 1 {
		t.Fatalf("replicas after failed surge = %d, want 1", *d.Spec.Replicas)
	}
	if f := workload.DecodeFailure(d.Annotations[workload.FailureAnnotation]); f == nil || f.Reason != "Unschedulable" || f.Node != "w1" {
		t.Fatalf("failure not remembered: %v", d.Annotations)
	}
	requireEvent(t, h.events(), "Warning", ReasonSurgeFailed, "Unschedulable")
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", "Unschedulable")); v != 1 {
		t.Fatalf("stalls_failed_total{Unschedulable} = %v", v)
	}
	h.refresh()
	writes := len(h.writes())
	h.syncNode("w1")
	if len(h.writes()) != writes {
		t.Fatalf("the same stall was surged again after failing: %v", h.writes()[writes:])
	}
	if v := testutil.ToFloat64(h.metrics.UnresolvableBlocks.WithLabelValues("worker", "Unschedulable")); v != 1 {
		t.Fatalf("unresolvable_blocked_pods = %v", v)
	}
}

func TestNoCapacityIsReportedNotSurged(t *testing.T) {
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
	requireEvent(t, evs, "Warning", ReasonNoCapacity, "w1")
	if len(evs) != 1 {
		t.Fatalf("NoCapacity reported %d times: %v", len(evs), evs)
	}
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", "NoCapacity")); v != 1 {
		t.Fatalf("stalls_failed_total{NoCapacity} = %v", v)
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
	if v := testutil.ToFloat64(h.metrics.UnresolvableBlocks.WithLabelValues("worker", "UnsatisfiablePDB")); v != 1 {
		t.Fatalf("unresolvable_blocked_pods = %v", v)
	}
}

func TestMalformedRecordIsReportedAndLeftAlone(t *testing.T) {
	objs := stalled()
	d := objs[6].(*appsv1.Deployment)
	d.Annotations = map[string]string{workload.RecordAnnotation: "{not json"}
	h := newHarness(t, nil, objs...)
	h.syncWorkload(depRef)
	h.syncNode("w1")
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("wrote despite a malformed record: %v", w)
	}
	evs := h.events()
	requireEvent(t, evs, "Warning", ReasonMalformedRecord, workload.RecordAnnotation)
	if len(evs) != 1 {
		t.Fatalf("malformed record reported %d times: %v", len(evs), evs)
	}
}

func TestWorkloadDeletedDuringSurgeDropsTheSurgeWithoutErrors(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.syncNode("w1")
	if err := h.kube.AppsV1().Deployments(ns).Delete(context.Background(), "model", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	if after := h.syncWorkload(depRef); after != 0 {
		t.Fatalf("a deleted workload is requeued: %v", after)
	}
	if v := testutil.ToFloat64(h.metrics.SurgesActive.WithLabelValues("worker", "Deployment")); v != 0 {
		t.Fatalf("surges_active = %v after deletion", v)
	}
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", "WorkloadDeleted")); v != 1 {
		t.Fatalf("stalls_failed_total{WorkloadDeleted} = %v", v)
	}
	requireEvent(t, h.events(), "Warning", ReasonWorkloadDeleted, "deleted during its surge for node w1")
	if after := h.syncWorkload(depRef); after != 0 {
		t.Fatalf("a deleted workload is requeued on the next sync: %v", after)
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
	h.c.state.track(trackedSurge{ref: workload.Ref{Kind: workload.KindDeployment, Namespace: "other", Name: "x"}})
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
	h.syncNode("w1")
	// w1 finished its update; the replacement runs on w2, which is next in line.
	n, _ := h.kube.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	n.Annotations[mco.CurrentConfigAnnotation] = "rendered-2"
	n.Annotations[mco.StateAnnotation] = mco.StateDone
	n.Annotations[mco.LastAppliedDrainAnnotation] = "drain-rendered-2"
	n.Spec.Unschedulable = false
	if _, err := h.kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w2, _ := h.kube.CoreV1().Nodes().Get(context.Background(), "w2", metav1.GetOptions{})
	w2.Annotations[mco.DesiredConfigAnnotation] = "rendered-2"
	if _, err := h.kube.CoreV1().Nodes().Update(context.Background(), w2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.deletePod("model-abc-a")
	h.addPod(modelPod("model-abc-b", "w2", true))
	h.addPod(modelPod("model-abc-c", "w1", true))
	h.refresh()
	h.syncWorkload(depRef)
	if *h.deployment(ns, "model").Spec.Replicas != 1 {
		t.Fatal("not restored once the node was updated (--restore=node)")
	}
	onW2, _ := h.kube.CoreV1().Pods(ns).Get(context.Background(), "model-abc-b", metav1.GetOptions{})
	onW1, _ := h.kube.CoreV1().Pods(ns).Get(context.Background(), "model-abc-c", metav1.GetOptions{})
	if onW2.Annotations[deletionCostAnnotation] != leaveFirstCost {
		t.Fatalf("pod on the node still to update has deletion cost %q", onW2.Annotations[deletionCostAnnotation])
	}
	if _, ok := onW1.Annotations[deletionCostAnnotation]; ok {
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

	off := restart(t, nil, fake.NewClientset(objs...), mcfgfake.NewClientset())
	if off.c.pools != nil {
		t.Fatal("MCO detection on although the cluster serves no MachineConfigPools")
	}
	off.syncNode("w1")
	if w := off.writes(); len(w) != 0 {
		t.Fatalf("acted on a cordoned node without --cordoned-nodes: %v", w)
	}

	h := restart(t, func(o *options.Options) { o.CordonedNodes = true; o.CordonGracePeriod = time.Minute },
		fake.NewClientset(objs...), mcfgfake.NewClientset())
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
	h.syncNode("w1")
	d := h.deployment(ns, "model")
	if *d.Spec.Replicas != 2 || recordOf(t, d.Annotations).Trigger != "Cordoned" {
		t.Fatalf("no surge for a node cordoned past the grace period (replicas %d)", *d.Spec.Replicas)
	}
	n, _ := h.kube.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	n.Spec.Unschedulable = false
	if _, err := h.kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.syncWorkload(depRef)
	if d := h.deployment(ns, "model"); *d.Spec.Replicas != 1 {
		t.Fatalf("not restored after the uncordon: replicas %d", *d.Spec.Replicas)
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, "Uncordoned")
}

func TestTwoBlockedPodsOfOneWorkloadAreOneSurge(t *testing.T) {
	objs := []runtime.Object{namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), gpuNode("w3"), workerPool(true), pdb(0, 2, 2)}
	objs[len(objs)-1].(*policyv1.PodDisruptionBudget).Spec.MinAvailable = ptr.To(intstr.FromInt32(2))
	objs[len(objs)-1].(*policyv1.PodDisruptionBudget).Status.DesiredHealthy = 2
	h := newHarness(t, nil, append(objs, model(2, "w1", "w1")...)...)
	h.syncNode("w1")
	patches := 0
	for _, w := range h.writes() {
		if w == "patch deployments" {
			patches++
		}
	}
	if patches != 1 {
		t.Fatalf("%d surge writes for one workload with two blocked pods, want 1", patches)
	}
	if got := *h.deployment(ns, "model").Spec.Replicas; got != 3 {
		t.Fatalf("replicas = %d, want 3 (minAvailable 2 needs one more healthy replica)", got)
	}
	if v := testutil.ToFloat64(h.metrics.BlockedPods.WithLabelValues("worker")); v != 2 {
		t.Fatalf("blocked_pods = %v, want both pods counted", v)
	}
}
