package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// The tests of this file are the ways a tenant with edit in its own namespace could crash, hold or
// borrow the guardian that serves every tenant.

// A Deployment of two billion replicas held at one pod (by a ResourceQuota, say) is surged like any
// other; what the guardian books for it is the one replica the surge adds. One stand-in pod per
// missing replica would need terabytes: the guardian would crash-loop for everyone.
func TestHugeReplicaCountBooksOnlyWhatTheSurgeAdds(t *testing.T) {
	objs := stalled()
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			// At rest as far as the cache says (see TestWorkloadNotAtRestIsNotSurged for one that is
			// not): the count is the tenant's, the booking must not follow it.
			d.Spec.Replicas = ptr.To(int32(2_000_000_000))
			d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas = 2_000_000_000, 2_000_000_000, 2_000_000_000
		}
	}
	h := newHarness(t, nil, objs...)
	h.surgeNode("w1", depSurge)
	s := h.mustSurge(depSurge)
	if s.PhaseOf() != v1alpha1.PhaseSurged || s.Spec.Replicas != 2_000_000_000 {
		t.Fatalf("Surge %s with replicas %d, want Surged with 2000000000", s.PhaseOf(), s.Spec.Replicas)
	}
	pending := h.booked()
	if len(pending) != int(s.Spec.Delta) {
		t.Fatalf("%d replacements booked for a surge of %d", len(pending), s.Spec.Delta)
	}
	if pending[0].Spec.NodeName != "" || pending[0].Namespace != ns {
		t.Fatalf("booked %s/%s on %q, want an unscheduled copy of the model's pod", pending[0].Namespace, pending[0].Name, pending[0].Spec.NodeName)
	}
}

// A held surge whose replica a drain evicted gets it back as a Pending pod, which the scheduler places
// before any replacement surged later: the capacity ledger books it, or the next stall's surge would
// count on the same free GPU and go Unschedulable.
func TestHeldSurgeBooksItsPendingPod(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.allowEvictions()
	h.readySurge()
	h.deletePod("model-abc-a")
	h.refresh()
	h.settle(depSurge)
	if p := h.phase(depSurge); p != v1alpha1.PhaseResolved {
		t.Fatalf("Surge %s, want Resolved (held until safe to restore)", p)
	}
	h.addPod(modelPod("model-abc-c", "", false))
	h.refresh()
	if got := h.booked(); len(got) != 1 || got[0].Name != "model-abc-c" {
		t.Fatalf("booked %v, want the held surge's Pending pod", got)
	}
}

// A Surge the guardian no longer acts on (the workload opted out after the surge) serves no stall:
// it books no capacity, whichever pod (a finished one requesting GPUs) its selector lists first.
func TestRejectedSurgeBooksNoCapacity(t *testing.T) {
	done := modelPod("model-abc-done", "w2", false)
	done.Status.Phase = corev1.PodSucceeded
	done.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = gpuNode("w2").Status.Allocatable["nvidia.com/gpu"]
	h := newHarness(t, nil, append([]runtime.Object{done}, stalled()...)...)
	h.surgeNode("w1", depSurge)
	if n := len(h.booked()); n != 1 {
		t.Fatalf("a trusted surge in flight books %d replacements, want 1", n)
	}
	d := h.deployment(ns, "model")
	d.Annotations = map[string]string{workload.IgnoreAnnotation: "true"}
	if _, err := h.kube.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.syncSurge(depSurge)
	requireEvent(t, h.events(), "Warning", ReasonUntrustedSurge, "OptedOut")
	if got := h.booked(); len(got) != 0 {
		t.Fatalf("a rejected Surge books %d replacements (%s)", len(got), got[0].Name)
	}
}

// A tenant who changes its Deployment in a loop makes every guarded write of the surge a conflict.
// The Pending Surge holds a --max-concurrent-surges slot: after guardian.PendingTimeout it fails
// with its own reason, the slot goes back, and the Failed Surge keeps this drain from being surged
// again.
func TestPendingSurgeWhoseWritesKeepConflictingFails(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.kube.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "model", nil)
	})
	h.syncNode("w1")
	h.refresh()
	for range 200 {
		if h.phase(depSurge) != v1alpha1.PhasePending {
			break
		}
		after := h.syncSurge(depSurge)
		if h.phase(depSurge) != v1alpha1.PhasePending {
			break
		}
		if after <= 0 {
			t.Fatalf("a Pending Surge was not requeued (after %v)", after)
		}
		if in := h.inFlight(); in != 1 {
			t.Fatalf("a Pending Surge counts %d against --max-concurrent-surges, want 1", in)
		}
		h.clock.Step(after)
		h.refresh()
	}
	h.settle(depSurge)
	s := h.mustSurge(depSurge)
	if s.PhaseOf() != v1alpha1.PhaseFailed || s.Status.Reason != guardian.ReasonWriteTimeout {
		t.Fatalf("Surge %s (%s), want Failed (%s)", s.PhaseOf(), s.Status.Reason, guardian.ReasonWriteTimeout)
	}
	if waited := h.clock.Now().Sub(t0); waited < guardian.PendingTimeout || waited > 2*guardian.PendingTimeout {
		t.Fatalf("failed after %s, want about %s", waited, guardian.PendingTimeout)
	}
	if h.replicas() != 1 {
		t.Fatalf("replicas %d, want the original 1", h.replicas())
	}
	if in := h.inFlight(); in != 0 {
		t.Fatalf("a Failed Surge still holds %d slot(s)", in)
	}
	requireEvent(t, h.events(), "Warning", ReasonSurgeNotWritten, "spec.replicas", "w1", "model-abc-a")
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", guardian.ReasonWriteTimeout)); v != 1 {
		t.Fatalf("stalls_failed_total{%s} = %v, want 1", guardian.ReasonWriteTimeout, v)
	}
	writes := len(h.writes())
	h.syncNode("w1")
	if w := h.writes(); len(w) != writes {
		t.Fatalf("the same drain was surged again: %v", w[writes:])
	}
}

// A tenant whose own budgets refuse the eviction for good (minAvailable raised: a 429; or a second
// PDB over the pod, which the API server refuses with a 500 whatever the budgets) holds a Ready
// surge: after --evict-timeout it is restored, reported with its own reason, and gives its slot back.
// Either refusal is retried on the surge's schedule, not as a write error with growing backoff.
func TestReadySurgeWhoseEvictionIsRefusedIsRestoredAfterEvictTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refusal error
	}{
		{"budget", apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)},
		{"second PDB", apierrors.NewInternalError(errors.New("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))},
	} {
		t.Run(tc.name, func(t *testing.T) { testEvictionRefusedForGood(t, tc.refusal) })
	}
}

func testEvictionRefusedForGood(t *testing.T, refusal error) {
	h := newHarness(t, func(o *options.Options) { o.EvictTimeout = 10 * time.Minute }, stalled()...)
	evictions := 0
	h.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		evictions++
		return true, nil, refusal
	})
	h.readySurge()
	s := h.mustSurge(depSurge)
	if s.PhaseOf() != v1alpha1.PhaseReady || meta.FindStatusCondition(s.Status.Conditions, guardian.ConditionEvictionDue) == nil {
		t.Fatalf("Surge %s with conditions %v, want Ready with %s", s.PhaseOf(), s.Status.Conditions, guardian.ConditionEvictionDue)
	}
	for h.phase(depSurge) == v1alpha1.PhaseReady {
		if h.clock.Now().Sub(t0) > time.Hour {
			t.Fatal("the Ready surge is still held an hour later")
		}
		after := h.syncSurge(depSurge)
		h.clock.Step(after)
		h.refresh()
	}
	if waited := h.clock.Now().Sub(t0); waited < 10*time.Minute || waited > 11*time.Minute {
		t.Fatalf("restored after %s, want about --evict-timeout", waited)
	}
	if evictions < 2 {
		t.Fatalf("evicted %d times: the eviction must be retried until the timeout", evictions)
	}
	if blocked, failed := testutil.ToFloat64(h.metrics.Evictions.WithLabelValues("blocked")), testutil.ToFloat64(h.metrics.Evictions.WithLabelValues("error")); blocked != float64(evictions) || failed != 0 {
		t.Fatalf("evictions blocked %v, error %v; want every one of the %d refusals counted blocked", blocked, failed, evictions)
	}
	h.settle(depSurge)
	s = h.mustSurge(depSurge)
	if s.PhaseOf() != v1alpha1.PhaseFailed || s.Status.Reason != guardian.ReasonEvictTimeout || h.replicas() != 1 {
		t.Fatalf("Surge %s (%s), replicas %d; want Failed (%s), restored to 1", s.PhaseOf(), s.Status.Reason, h.replicas(), guardian.ReasonEvictTimeout)
	}
	requireEvent(t, h.events(), "Warning", ReasonEvictionRefused, "model-abc-a", "w1", "--evict-timeout=10m0s")
	if v := testutil.ToFloat64(h.metrics.StallsFailed.WithLabelValues("worker", "Deployment", guardian.ReasonEvictTimeout)); v != 1 {
		t.Fatalf("stalls_failed_total{%s} = %v, want 1", guardian.ReasonEvictTimeout, v)
	}
	if in := h.inFlight(); in != 0 {
		t.Fatalf("the restored surge still holds %d slot(s)", in)
	}
}

// --evict-timeout survives a restart: it runs from the EvictionDue condition on the Surge, not from
// anything in memory.
func TestEvictTimeoutRunsAcrossARestart(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.refuseEvictions()
	h.readySurge()
	h = restart(t, nil, h.kube, h.mco, h.dyn)
	h.clock.SetTime(t0.Add(h.c.reconcile.node.cfg.EvictTimeout))
	h.refresh()
	h.syncSurge(depSurge)
	if s := h.mustSurge(depSurge); s.PhaseOf() != v1alpha1.PhaseRestoring || s.Status.Reason != guardian.ReasonEvictTimeout {
		t.Fatalf("after a restart past --evict-timeout: %s (%s), want Restoring (%s)", s.PhaseOf(), s.Status.Reason, guardian.ReasonEvictTimeout)
	}
}

// A pod belongs to a surge when its controller chain leads to the Surge's pod owner. A decoy with
// the workload's labels, Ready on another node, does not make the surge Ready; one on the drained
// node is not evicted.
func TestDecoyPodWithTheWorkloadsLabelsCountsForNothing(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	evicted := map[string]bool{}
	h.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		evicted[a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name] = true
		return true, nil, nil
	})
	h.surgeNode("w1", depSurge)
	bare := modelPod("decoy-ready", "w2", true)
	bare.OwnerReferences = nil
	other := modelPod("decoy-on-w1", "w1", true)
	other.OwnerReferences[0].UID, other.OwnerReferences[0].Name = "other-rs-uid", "other-rs"
	h.addPod(bare)
	h.addPod(other)
	h.refresh()
	h.settle(depSurge)
	if p := h.phase(depSurge); p != v1alpha1.PhaseSurged {
		t.Fatalf("a decoy pod made the surge %s", p)
	}
	h.addPod(modelPod("model-abc-b", "w2", true))
	h.refresh()
	h.settle(depSurge)
	if p := h.phase(depSurge); p != v1alpha1.PhaseReady {
		t.Fatalf("the real replacement is Ready, the surge %s", p)
	}
	if !evicted["model-abc-a"] || evicted["decoy-on-w1"] {
		t.Fatalf("evicted %v, want only model-abc-a", evicted)
	}
}

// Surge names are one per target and never shared: the prefill of LLMInferenceService m and the main
// component of m-prefill, or a long name and a workload named after its hash, get Surges of their own.
func TestSurgeNamesDoNotCollide(t *testing.T) {
	llm := func(name, component string) *workload.Target {
		return &workload.Target{Ref: workload.Ref{Kind: workload.KindLLMInferenceService, Namespace: ns, Name: name}, Component: component}
	}
	dep := func(name string) *workload.Target {
		return &workload.Target{Ref: workload.Ref{Kind: workload.KindDeployment, Namespace: ns, Name: name}}
	}
	long := dep(strings.Repeat("a", 250))
	hashed := surgeName(long)
	namedAfterHash := dep(strings.TrimPrefix(hashed, "deployment-"))
	for _, pair := range [][2]*workload.Target{
		{llm("m", workload.ComponentPrefill), llm("m-prefill", workload.ComponentMain)},
		{llm("m", workload.ComponentPrefill), llm("m-prefill", "")},
		{long, namedAfterHash},
		{dep("m"), dep("m-0123456789abcdef")},
	} {
		a, b := surgeName(pair[0]), surgeName(pair[1])
		if a == b {
			t.Errorf("%s and %s share the Surge name %s", pair[0].Ref, pair[1].Ref, a)
		}
		for _, n := range []string{a, b} {
			if len(n) > maxNameLength || validation.IsDNS1123Subdomain(n) != nil {
				t.Errorf("invalid Surge name %q: %v", n, validation.IsDNS1123Subdomain(n))
			}
		}
	}
	if n := surgeName(dep("model")); n != depSurge {
		t.Errorf("a plain Deployment's Surge is %s, want the readable %s", n, depSurge)
	}
}

// An existing Surge covers a stall only when it names the same object: a Surge left by a deleted
// namesake (its garbage collection pending) does not.
func TestSurgeOfAnotherObjectDoesNotCoverTheStall(t *testing.T) {
	stale := &v1alpha1.Surge{
		ObjectMeta: metav1.ObjectMeta{Name: depSurge, Namespace: ns, UID: "stale-surge"},
		Spec: v1alpha1.SurgeSpec{
			Target:   v1alpha1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "model", UID: "deleted-uid"},
			PodOwner: v1alpha1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "model", UID: "deleted-uid"},
			Fields:   []v1alpha1.Field{{Path: "/spec/replicas", Original: ptr.To(int64(1)), Set: 2}},
			Node:     "w1", Pool: "worker", Trigger: "MCODrain", Drain: "rendered-2", Delta: 1, Replicas: 1,
		},
		Status: v1alpha1.SurgeStatus{Phase: v1alpha1.PhaseSurged},
	}
	u, err := surgeObject(stale)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, nil, stalled()...)
	h = restart(t, nil, h.kube, h.mco, newSurgeClient(u))
	h.refresh()
	target := &workload.Target{Ref: workload.Ref{Kind: workload.KindDeployment, Namespace: ns, Name: "model", UID: "dep-uid"},
		PodOwner: workload.Ref{Kind: workload.KindDeployment, Namespace: ns, Name: "model", UID: "dep-uid"}}
	if s := h.c.surgeOf(target); s != nil {
		t.Fatalf("the Surge of a deleted namesake covers the stall: %s", s.Name)
	}
	if after := h.syncNode("w1"); after <= 0 {
		t.Fatal("the stall is taken as covered: it must be looked at again")
	}
	if writes := h.writes(); len(writes) != 1 || writes[0] != "create surges" {
		t.Fatalf("writes %v, want one attempt to create the workload's own Surge", writes)
	}
}

// The platform's namespaces are out of scope by default: a stall there is neither surged nor is a
// Surge there acted on.
func TestPlatformNamespacesAreOutOfScope(t *testing.T) {
	for _, platform := range []bool{false, true} {
		objs := []runtime.Object{namespace("openshift-ingress"), draining(gpuNode("w1")), gpuNode("w2"), workerPool(true)}
		for _, o := range append(model(1, "w1"), pdb(0, 1, 1)) {
			o.(metav1.Object).SetNamespace("openshift-ingress")
			objs = append(objs, o)
		}
		h := newHarness(t, func(o *options.Options) { o.PlatformNamespaces = platform }, objs...)
		h.syncNode("w1")
		if created := len(h.writes()) > 0; created != platform {
			t.Errorf("--platform-namespaces=%v: writes %v", platform, h.writes())
		}
	}
}

// The Pending deadline runs from this process's first attempt: a guardian back from an outage writes
// a Surge created before it rather than failing it unseen.
func TestPendingSurgeFromBeforeAnOutageIsWritten(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.syncNode("w1")
	h = restart(t, nil, h.kube, h.mco, h.dyn)
	h.clock.SetTime(t0.Add(10 * guardian.PendingTimeout))
	h.refresh()
	h.settle(depSurge)
	if p := h.phase(depSurge); p != v1alpha1.PhaseSurged || h.replicas() != 2 {
		t.Fatalf("after the outage: %s, replicas %d; want Surged at 2", p, h.replicas())
	}
}

// booked lists the replacements the Surges in flight wait for, as the next stall decision counts them.
func (h *harness) booked() []*podinfo.Pod {
	return h.c.booked(h.c.reconcile.node.flight.view(h.c.surges.List()))
}

// inFlight counts the Surges that hold a --max-concurrent-surges slot.
func (h *harness) inFlight() int { return h.c.reconcile.node.flight.view(h.c.surges.List()).count }
