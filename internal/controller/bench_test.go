package controller

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/internal/options"
)

// bigCluster builds nodes×podsPerNode pods, each its own single-replica Deployment with a PDB that
// allows one disruption (two replicas would be needed to block), plus one draining node w0.
func bigCluster(nodes, podsPerNode int) []runtime.Object {
	objs := []runtime.Object{namespace(ns), workerPool(true)}
	for n := 0; n < nodes; n++ {
		node := gpuNode(fmt.Sprintf("w%d", n))
		if n == 0 {
			node = draining(node)
		}
		objs = append(objs, node)
		for p := 0; p < podsPerNode; p++ {
			name := fmt.Sprintf("app-%d-%d", n, p)
			labels := map[string]string{"app": name}
			objs = append(objs,
				&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(name), ResourceVersion: "1"},
					Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels}}},
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: "1", Labels: labels},
					Spec:   corev1.PodSpec{NodeName: node.Name},
					Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}},
				&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: "1"},
					Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}},
					Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1, CurrentHealthy: 2, DesiredHealthy: 1, ExpectedPods: 2}},
			)
		}
	}
	return objs
}

// BenchmarkSyncDrainingNode measures one reconcile of a draining node in a cluster of 200 nodes and
// 4000 PDB-protected pods: the work done on every pod or PDB change while a drain is under way.
func BenchmarkSyncDrainingNode(b *testing.B) {
	t := &testing.T{}
	h := newHarness(t, func(o *options.Options) { o.DryRun = true }, bigCluster(200, 20)...)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := h.c.reconcile.node.sync(b.Context(), "w0"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSyncIdleNode measures the reconcile of a node that is not being drained: the common case
// on every informer resync.
func BenchmarkSyncIdleNode(b *testing.B) {
	t := &testing.T{}
	h := newHarness(t, nil, bigCluster(200, 20)...)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := h.c.reconcile.node.sync(b.Context(), "w1"); err != nil {
			b.Fatal(err)
		}
	}
}
