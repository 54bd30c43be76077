package controller

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// The annotation records of the first version are neither written nor read: a tenant who forges one
// on a workload they may edit steers nothing.
func TestForgedSurgeAnnotationCausesNoWrite(t *testing.T) {
	objs := []runtime.Object{namespace(ns), gpuNode("w1"), gpuNode("w2"), workerPool(true), pdb(1, 1, 1)}
	objs = append(objs, model(1, "w1")...)
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			d.Annotations = map[string]string{
				"drain-guardian.io/surge": `{"version":1,"fields":[{"path":"/spec/replicas","original":0,"set":1}],` +
					`"podOwner":{"kind":"Deployment","namespace":"kube-system","name":"coredns"},"node":"w1","trigger":"Cordoned",` +
					`"startTime":"2026-01-01T00:00:00Z","target":{"kind":"Deployment","namespace":"kube-system","name":"coredns"},"restoring":"PoolUpdated"}`,
				"drain-guardian.io/last-failure": "{}",
			}
		}
	}
	h := newHarness(t, nil, objs...)
	h.c.enqueueAll()
	for h.c.queue.Len() > 0 {
		k, _ := h.c.queue.Get()
		if k.Node != "" {
			h.syncNode(k.Node)
		} else {
			h.syncSurge(k.Surge.Name)
		}
		h.c.queue.Done(k)
	}
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("a forged annotation made the guardian write: %v", w)
	}
}

// A Surge that does not check out against the live objects is reported once and left alone, and it
// never counts against --max-concurrent-surges.
func TestUntrustedSurgeIsReportedAndLeftAlone(t *testing.T) {
	valid := func() *v1alpha1.Surge {
		return &v1alpha1.Surge{
			ObjectMeta: metav1.ObjectMeta{Name: depSurge, Namespace: ns, UID: "s-uid", ResourceVersion: "1"},
			Spec: v1alpha1.SurgeSpec{
				Target:   v1alpha1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "model", UID: "dep-uid"},
				PodOwner: v1alpha1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "model", UID: "dep-uid"},
				Fields:   []v1alpha1.Field{{Path: "/spec/replicas", Original: ptr.To(int64(1)), Set: 2}},
				Node:     "w1", Pool: "worker", Trigger: "MCODrain", Drain: "rendered-2", Delta: 1, Replicas: 1,
				StartTime: metav1.NewTime(t0),
			},
			Status: v1alpha1.SurgeStatus{Phase: v1alpha1.PhaseRestoring, Reason: "PoolUpdated"},
		}
	}
	for name, tc := range map[string]struct {
		mutate func(*v1alpha1.Surge)
		reason string
		opts   func(*options.Options)
	}{
		"target UID of another object": {mutate: func(s *v1alpha1.Surge) { s.Spec.Target.UID = "someone-else" }, reason: "UIDMismatch"},
		"a field the guardian never writes": {mutate: func(s *v1alpha1.Surge) {
			s.Spec.Fields = []v1alpha1.Field{{Path: "/spec/template/spec/securityContext/runAsUser", Set: 0}}
		}, reason: "UnknownField"},
		// The HPA exists but scales another Deployment.
		"pod owner not controlled by the target": {mutate: func(s *v1alpha1.Surge) {
			s.Spec.Target = v1alpha1.ObjectReference{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler", Name: "model", UID: "hpa-uid"}
			s.Spec.Fields = []v1alpha1.Field{{Path: "/spec/minReplicas", Set: 0}}
		}, reason: "OwnerMismatch"},
		"namespace out of scope": {mutate: func(*v1alpha1.Surge) {}, reason: "OutOfScope",
			opts: func(o *options.Options) { o.NamespaceSelector = "team=gpu" }},
	} {
		t.Run(name, func(t *testing.T) {
			s := valid()
			tc.mutate(s)
			u, err := surgeObject(s)
			if err != nil {
				t.Fatal(err)
			}
			elsewhere := hpaFor(nil, 1)
			elsewhere.Spec.ScaleTargetRef.Name = "not-model"
			objs := []runtime.Object{namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), workerPool(false), pdb(0, 1, 1), elsewhere}
			objs = append(objs, model(2, "w1")...)
			kube := newHarness(t, tc.opts, objs...).kube
			h := restart(t, func(o *options.Options) {
				o.MaxConcurrentSurge = 1
				if tc.opts != nil {
					tc.opts(o)
				}
			}, kube, newHarness(t, nil, workerPool(false)).mco, newSurgeClient(u))
			h.refresh()
			writes := len(h.writes())
			h.syncSurge(depSurge)
			h.syncSurge(depSurge)
			if w := h.writes(); len(w) != writes {
				t.Fatalf("acted on an untrusted Surge: %v", w[writes:])
			}
			if h.replicas() != 2 || h.surge(depSurge) == nil {
				t.Fatal("an untrusted Surge changed the workload or was deleted")
			}
			evs := h.events()
			requireEvent(t, evs, "Warning", ReasonUntrustedSurge, "not acted on")
			if len(evs) != 1 {
				t.Fatalf("reported %d times: %v", len(evs), evs)
			}
			if tc.reason != "" {
				if v := testutil.ToFloat64(h.metrics.SurgesRejected.WithLabelValues(tc.reason)); v != 1 {
					t.Fatalf("surges_rejected_total{%s} = %v", tc.reason, v)
				}
			}
			if n := h.c.reconcile.node.flight.view(h.c.surges.List()).count; n != 0 {
				t.Fatalf("an untrusted Surge counts %d against --max-concurrent-surges", n)
			}
		})
	}
}

// --max-concurrent-surges bounds stalls in flight: surges held only for safety (Resolved) never
// block the next node's stall. Four single-replica models on four nodes with the limit at 3 used to
// deadlock on the fourth node.
func TestResolvedSurgesDoNotCountAgainstTheLimit(t *testing.T) {
	h := newHarness(t, func(o *options.Options) { o.Restore = "pool"; o.MaxConcurrentSurge = 3 }, stalled()...)
	for i, name := range []string{"a", "b", "c"} {
		held := &v1alpha1.Surge{ObjectMeta: metav1.ObjectMeta{Name: "deployment-" + name, Namespace: ns, UID: types.UID("held-" + string(rune('0'+i)))},
			Status: v1alpha1.SurgeStatus{Phase: v1alpha1.PhaseResolved}}
		u, _ := surgeObject(held)
		if _, err := h.dyn.Resource(v1alpha1.SurgesResource).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.c.reconcile.node.flight.verified(held)
	}
	h.refresh()
	h.syncNode("w1")
	if h.surge(depSurge) == nil {
		t.Fatal("three held surges blocked the fourth stall")
	}
}

// With --restore=pool a held surge whose survivors are safe is restored when another stall of the
// pool waits for capacity; the stall is then surged.
func TestHeldSurgeIsRestoredToMakeRoomForTheNextStall(t *testing.T) {
	// One GPU per node: w1 (updated) runs model's survivor, w3 (still to update) its surplus replica,
	// and w2 drains with other's pod on it.
	gpu1 := func(n *corev1.Node) *corev1.Node {
		n.Status.Allocatable["nvidia.com/gpu"] = n.Status.Allocatable["nvidia.com/gpu"].DeepCopy()
		q := n.Status.Allocatable["nvidia.com/gpu"]
		q.Set(1)
		n.Status.Allocatable["nvidia.com/gpu"] = q
		return n
	}
	w1 := gpu1(gpuNode("w1"))
	nodeUpdated(w1)
	objs := []runtime.Object{namespace(ns), w1, gpu1(draining(gpuNode("w2"))), gpu1(gpuNode("w3")), workerPool(true), pdb(1, 2, 2)}
	objs = append(objs, model(2, "w1", "w3")...)
	objs = append(objs, otherModel("w2")...)
	h := newHarness(t, func(o *options.Options) { o.Restore = "pool" }, objs...)
	held := &v1alpha1.Surge{
		ObjectMeta: metav1.ObjectMeta{Name: depSurge, Namespace: ns, UID: "held", ResourceVersion: "1"},
		Spec: v1alpha1.SurgeSpec{
			Target:   v1alpha1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "model", UID: "dep-uid"},
			PodOwner: v1alpha1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "model", UID: "dep-uid"},
			Fields:   []v1alpha1.Field{{Path: "/spec/replicas", Original: ptr.To(int64(1)), Set: 2}},
			Node:     "w1", Pool: "worker", Trigger: "MCODrain", Drain: "rendered-2", Delta: 1, Replicas: 1, StartTime: metav1.NewTime(t0),
		},
		Status: v1alpha1.SurgeStatus{Phase: v1alpha1.PhaseResolved},
	}
	u, _ := surgeObject(held)
	if _, err := h.dyn.Resource(v1alpha1.SurgesResource).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 2 {
		t.Fatal("--restore=pool restored before anything needed the capacity")
	}
	// w2 drains: other's pod is blocked and no GPU is free.
	h.syncNode("w2")
	requireEvent(t, h.events(), "Warning", ReasonNoCapacity, "missing 1 nvidia.com/gpu")
	h.refresh()
	h.settle(depSurge)
	if h.replicas() != 1 {
		t.Fatalf("the held surge was not restored to make room: replicas %d", h.replicas())
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, "CapacityNeeded")
	// The ReplicaSet removes the surplus pod on w3 (its deletion cost says so): the GPU is free.
	onW3, _ := h.kube.CoreV1().Pods(ns).Get(context.Background(), "model-abc-b", metav1.GetOptions{})
	if onW3.Annotations[podinfo.DeletionCostAnnotation] != leaveFirstCost {
		t.Fatal("the surplus pod on the node still to update was not marked to go first")
	}
	h.deletePod("model-abc-b")
	h.refresh()
	h.syncNode("w2")
	if h.surge("deployment-other") == nil {
		t.Fatal("the waiting stall was not surged once the capacity was back")
	}
}

// otherModel is a second single-replica Deployment "other" with its pod on node and a blocking PDB.
func otherModel(node string) []runtime.Object {
	objs := model(1, node)
	d := objs[0].(*appsv1.Deployment)
	d.Name, d.UID = "other", "other-uid"
	d.Spec.Selector.MatchLabels = map[string]string{"app": "other"}
	d.Spec.Template.Labels = map[string]string{"app": "other"}
	rs := objs[1].(*appsv1.ReplicaSet)
	rs.Name, rs.UID = "other-abc", "other-rs-uid"
	rs.OwnerReferences[0].Name, rs.OwnerReferences[0].UID = "other", "other-uid"
	p := objs[2].(*corev1.Pod)
	p.Name, p.UID, p.Labels = "other-abc-a", "other-a-uid", map[string]string{"app": "other"}
	p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "other-abc", "other-rs-uid"
	b := pdb(0, 1, 1)
	b.Name = "other"
	b.Spec.Selector.MatchLabels = map[string]string{"app": "other"}
	return append(objs, b)
}
