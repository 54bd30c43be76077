//go:build e2e_sim

package nmosim

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// TestSimulatorOnRealControlPlane runs the simulator against a real API
// server, controller-manager, scheduler and kwok nodes (go test -tags
// e2e_sim). A NodeMaintenance on the node of a single-replica model behind a
// minAvailable: 1 PDB cordons the node and keeps failing to drain it;
// scaling the model to two replicas, the manual fix, lets the next attempt
// evict the pod; deleting the NodeMaintenance gives the node back.
func TestSimulatorOnRealControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), Out: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	kube := cp.Client()
	for _, n := range []string{"gpu-a", "gpu-b"} {
		if _, err := cp.AddFakeNode(ctx, n, nil, "", 1, "8", "32Gi"); err != nil {
			t.Fatal(err)
		}
	}
	simCtx, stopSim := context.WithCancel(klog.NewContext(ctx, klog.Background()))
	simDone := make(chan error, 1)
	go func() { simDone <- Run(simCtx, cp.RESTConfig(), 0.05) }()
	defer func() {
		stopSim()
		if err := <-simDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	modelNode := startBlockedModel(ctx, t, cp)
	nms := cp.Dynamic().Resource(NodeMaintenanceGVR)
	nm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
		"metadata": map[string]any{"name": "nm-" + modelNode},
		"spec":     map[string]any{"nodeName": modelNode, "reason": "replace a DIMM"},
	}}
	if _, err := nms.Create(ctx, nm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	get := func() *nodeMaintenance {
		obj, err := nms.Get(ctx, "nm-"+modelNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := &nodeMaintenance{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	node := func() *corev1.Node {
		n, err := kube.CoreV1().Nodes().Get(ctx, modelNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually(t, 2*time.Minute, "a failed drain attempt", func() bool {
		s := get().Status
		return s.Phase == PhaseRunning && s.LastError != "" && len(s.PendingPods) == 1
	})
	// For the next 15 s (several attempts, kubectl waiting 5 s after each
	// refusal) the node stays cordoned and the pod stays.
	until := time.Now().Add(15 * time.Second)
	for time.Now().Before(until) {
		if n := node(); !n.Spec.Unschedulable || get().Status.Phase != PhaseRunning {
			t.Fatalf("maintenance of %s ended although the PDB allows no eviction", modelNode)
		}
		time.Sleep(time.Second)
	}
	if n := node(); n.Labels[ExcludeFromRemediationLabel] != "true" ||
		!slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == DrainTaintKey }) {
		t.Errorf("node under maintenance: labels %v taints %v", n.Labels, n.Spec.Taints)
	}
	lease, err := kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, LeaseName(modelNode), metav1.GetOptions{})
	if err != nil || ptr.Deref(lease.Spec.HolderIdentity, "") != LeaseHolder {
		t.Errorf("lease: %v %v", lease, err)
	}

	// The manual fix: a second replica on the other node lets the PDB allow
	// one disruption.
	if _, err := kube.AppsV1().Deployments("models").Patch(ctx, "model", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the maintenance to succeed", func() bool { return get().Status.Phase == PhaseSucceeded })
	if s := get().Status; s.DrainProgress != 100 || len(s.PendingPods) != 0 {
		t.Errorf("status = %+v", s)
	}

	if err := nms.Delete(ctx, "nm-"+modelNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the NodeMaintenance to be gone", func() bool {
		_, err := nms.Get(ctx, "nm-"+modelNode, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	n := node()
	if n.Spec.Unschedulable || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == DrainTaintKey }) {
		t.Errorf("after the delete: unschedulable %v taints %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	if _, err := kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, LeaseName(modelNode), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("lease after the delete: %v", err)
	}
	events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range events.Items {
		if e.Source.Component == eventComponent {
			reasons = append(reasons, e.Reason)
		}
	}
	for _, want := range []string{EventBeginMaintenance, EventSucceedMaintenance, EventUncordonNode, EventRemovedMaintenance} {
		if !slices.Contains(reasons, want) {
			t.Errorf("events %s, want %s among them", strings.Join(reasons, ","), want)
		}
	}
}

// startBlockedModel starts a single-replica GPU Deployment behind a
// minAvailable: 1 PDB and returns its node once the PDB allows no
// disruption.
func startBlockedModel(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	kube := cp.Client()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "models"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "model"}
	gpu := corev1.ResourceList{controlplane.GPUResource: resource.MustParse("1")}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: "models"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "server", Image: "example.com/model:1",
					Resources: corev1.ResourceRequirements{Limits: gpu, Requests: gpu},
				}}},
			},
		},
	}
	if _, err := kube.AppsV1().Deployments("models").Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: "models"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	if _, err := kube.PolicyV1().PodDisruptionBudgets("models").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node string
	eventually(t, 2*time.Minute, "the model pod to run and its PDB to allow no disruption", func() bool {
		pods, err := kube.CoreV1().Pods("models").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return false
		}
		p, err := kube.PolicyV1().PodDisruptionBudgets("models").Get(ctx, "model", metav1.GetOptions{})
		if err != nil || p.Status.ObservedGeneration != p.Generation || p.Status.CurrentHealthy != 1 || p.Status.DisruptionsAllowed != 0 {
			return false
		}
		node = pods.Items[0].Spec.NodeName
		return true
	})
	return node
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
