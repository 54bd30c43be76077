package controller

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// The LeaderWorkerSet "big" runs one group of two pods, each taking a whole two-GPU node; lws names
// the leader StatefulSet as the set and each group's worker StatefulSet <set>-<group>.
var lwsGVR = schema.GroupVersionResource{Group: workload.LWSGroup, Version: "v1", Resource: "leaderworkersets"}

const lwsSurge = "leaderworkerset-big"

func lwsSet() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": workload.LWSGroup + "/v1", "kind": "LeaderWorkerSet",
		"metadata": map[string]any{"name": "big", "namespace": ns, "uid": "lws-uid", "resourceVersion": "1"},
		"spec":     map[string]any{"replicas": int64(1), "leaderWorkerTemplate": map[string]any{"size": int64(2)}},
		"status":   map[string]any{"replicas": int64(1), "updatedReplicas": int64(1), "readyReplicas": int64(1)},
	}}
}

func lwsStatefulSet(name string, owner metav1.OwnerReference) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(name + "-ss-uid"), ResourceVersion: "1",
		OwnerReferences: []metav1.OwnerReference{owner}}}
}

// groupMember is a pod of the group on node (unscheduled when ""), taking two GPUs; a leader's
// controller is the leader StatefulSet, a worker's its group's StatefulSet.
func groupMember(group string, worker bool, node string, ready bool) *corev1.Pod {
	name, ss := "big-"+group, "big"
	if worker {
		name, ss = "big-"+group+"-1", "big-"+group
	}
	p := modelPod(name, node, ready)
	p.Labels = map[string]string{workload.LWSSetNameLabel: "big", workload.LWSGroupIndexLabel: group, workload.LWSGroupKeyLabel: "key-" + group}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: ss, UID: types.UID(ss + "-ss-uid"), Controller: ptr.To(true)}}
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	if node == "" {
		p.Status.Phase = corev1.PodPending
	}
	return p
}

// addGroup adds the StatefulSets and pods lws creates for a group: the worker StatefulSet is
// controlled by the leader pod.
func (h *harness) addGroup(group string, leaderNode, workerNode string, workerReady bool) {
	h.t.Helper()
	leader := groupMember(group, false, leaderNode, true)
	h.addPod(leader)
	ss := lwsStatefulSet("big-"+group, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: leader.Name, UID: leader.UID, Controller: ptr.To(true)})
	if _, err := h.kube.AppsV1().StatefulSets(ns).Create(context.Background(), ss, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.addPod(groupMember(group, true, workerNode, workerReady))
}

func (h *harness) setReplicas() int64 {
	h.t.Helper()
	u, err := h.dyn.Resource(lwsGVR).Namespace(ns).Get(context.Background(), "big", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	n, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
	return n
}

// A multi-node model's surge adds a whole group, is Ready only when every pod of the new group is,
// evicts the old group's pod from the drained node, and is restored only once the original group
// runs complete on nodes this update will not drain again: the scale-down removes the highest group,
// never the only Ready one.
func TestLeaderWorkerSetGroupSurge(t *testing.T) {
	lwsOwner := metav1.OwnerReference{APIVersion: workload.LWSGroup + "/v1", Kind: "LeaderWorkerSet", Name: "big", UID: "lws-uid", Controller: ptr.To(true)}
	budget := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns, ResourceVersion: "1"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{workload.LWSSetNameLabel: "big"}}},
		Status: policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2},
	}
	// w3 and w4 run the update's config already: the new group is safe there from the start, and
	// only the group index rule keeps the restore from removing it while group 0 is not back.
	h := newHarness(t, nil, namespace(ns), draining(gpuNode("w1")), gpuNode("w2"), updatedGPUNode("w3"), updatedGPUNode("w4"), workerPool(true), budget,
		lwsStatefulSet("big", lwsOwner))
	if _, err := h.dyn.Resource(lwsGVR).Namespace(ns).Create(context.Background(), lwsSet(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.addGroup("0", "w1", "w2", true)
	h.allowEvictions()
	h.refresh()

	h.surgeNode("w1", lwsSurge)
	if h.setReplicas() != 2 || h.phase(lwsSurge) != v1alpha1.PhaseSurged {
		t.Fatalf("after the stall: set replicas %d, phase %s; want 2 groups, Surged", h.setReplicas(), h.phase(lwsSurge))
	}
	if s := h.mustSurge(lwsSurge); s.Spec.Delta != 1 || s.Spec.Replicas != 1 || s.Spec.PodOwner.APIVersion != workload.LWSGroup+"/v1" {
		t.Errorf("Surge delta %d, replicas %d, pod owner %s; want 1 group added to 1, owned by the set", s.Spec.Delta, s.Spec.Replicas, s.Spec.PodOwner.APIVersion)
	}

	// The new group's leader is Ready, its worker not yet: the group does not serve.
	h.addGroup("1", "w3", "w4", false)
	h.refresh()
	h.settle(lwsSurge)
	if h.phase(lwsSurge) != v1alpha1.PhaseSurged {
		t.Fatalf("phase %s with the new group half Ready; want Surged", h.phase(lwsSurge))
	}
	if evictionAsked(h) {
		t.Fatal("a pod was evicted before the new group was Ready")
	}
	h.updatePodReady("big-1-1", true)
	h.settle(lwsSurge)
	if h.phase(lwsSurge) != v1alpha1.PhaseReady || !evictionAsked(h) {
		t.Fatalf("phase %s, evicted %v with the new group Ready; want Ready and the old group's pod on w1 evicted", h.phase(lwsSurge), evictionAsked(h))
	}

	// lws recreates group 0 once its pod left w1: its leader on w2, its worker waiting for a node.
	h.deletePod("big-0")
	h.deletePod("big-0-1")
	h.addPod(groupMember("0", false, "w2", true))
	h.addPod(groupMember("0", true, "", false))
	h.refresh()
	h.settle(lwsSurge)
	if h.phase(lwsSurge) != v1alpha1.PhaseResolved || h.setReplicas() != 2 {
		t.Fatalf("phase %s, set replicas %d while group 0 is incomplete; want Resolved and both groups held", h.phase(lwsSurge), h.setReplicas())
	}

	// w1 is updated and takes group 0's worker: group 0 is complete, but w2 is still to be drained.
	h.updateNode("w1", nodeUpdated)
	h.deletePod("big-0-1")
	h.addPod(groupMember("0", true, "w1", true))
	h.refresh()
	h.settle(lwsSurge)
	if h.setReplicas() != 2 {
		t.Fatal("restored while group 0 still runs on a node the update will drain: its drain would leave no Ready group")
	}

	// w2 is updated as well: group 0 runs complete on updated nodes, the surge is restored.
	h.updateNode("w2", nodeUpdated)
	h.refresh()
	h.settle(lwsSurge)
	if h.setReplicas() != 1 || h.surge(lwsSurge) != nil {
		t.Fatalf("set replicas %d, Surge %v once group 0 is safe; want 1 and no Surge", h.setReplicas(), h.surge(lwsSurge))
	}
	requireEvent(t, h.events(), "Normal", ReasonSurgeRestored, "spec.replicas to 1", guardian.ReasonSurvivorsSafe)
}

func evictionAsked(h *harness) bool {
	for _, w := range h.writes() {
		if w == "create pods/eviction" {
			return true
		}
	}
	return false
}

func (h *harness) updatePodReady(name string, ready bool) {
	h.t.Helper()
	p, err := h.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if _, err := h.kube.CoreV1().Pods(ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.refresh()
}
