//go:build e2e_sim

package gpuopsim

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// TestSimulatorOnRealControlPlane runs the simulator against a real API
// server, controller-manager, scheduler and kwok nodes (go test -tags
// e2e_sim). All three GPU nodes upgrade at once; the one running a
// single-replica model behind a minAvailable: 1 PDB cannot evict it (the
// Eviction API answers 429 until the pod deletion timeout) and ends in
// upgrade-failed, still cordoned, its model pod still there: the control case
// of a driver upgrade without the guardian. The other two finish.
func TestSimulatorOnRealControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), Out: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	kube := cp.Client()
	nodes := []string{"gpu-a", "gpu-b", "gpu-c"}
	for _, n := range nodes {
		if _, err := cp.AddFakeNode(ctx, n, nil, "", 1, "8", "32Gi"); err != nil {
			t.Fatal(err)
		}
	}
	policy := clusterPolicy("550.90", map[string]any{"maxParallelUpgrades": int64(0), "maxUnavailable": "100%"})
	if _, err := cp.Dynamic().Resource(ClusterPolicyGVR).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
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
	state := func(name string) (string, bool) {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels[StateLabel], n.Spec.Unschedulable
	}
	eventually(t, 2*time.Minute, "every node upgrade-done", func() bool {
		for _, n := range nodes {
			if s, _ := state(n); s != StateDone {
				return false
			}
		}
		return true
	})

	modelNode := startBlockedModel(ctx, t, cp)

	patch := []byte(`{"spec":{"driver":{"version":"560.35"}}}`)
	if _, err := cp.Dynamic().Resource(ClusterPolicyGVR).Patch(ctx, "cluster-policy", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The default 300 s pod deletion timeout is 15 s at this scale.
	eventually(t, 5*time.Minute, modelNode+" to fail its upgrade", func() bool {
		s, _ := state(modelNode)
		return s == StateFailed
	})
	for _, n := range nodes {
		if n == modelNode {
			continue
		}
		eventually(t, 3*time.Minute, n+" to finish its upgrade", func() bool {
			s, cordoned := state(n)
			return s == StateDone && !cordoned
		})
	}
	// Resyncs come every 6 s: three of them change nothing.
	until := time.Now().Add(20 * time.Second)
	for time.Now().Before(until) {
		if s, cordoned := state(modelNode); s != StateFailed || !cordoned {
			t.Fatalf("%s: state %q cordoned %v, want upgrade-failed and cordoned", modelNode, s, cordoned)
		}
		time.Sleep(time.Second)
	}
	pods, err := kube.CoreV1().Pods("models").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != modelNode || pods.Items[0].DeletionTimestamp != nil {
		t.Errorf("model pods %v, want the one pod still on %s", podNames(pods.Items), modelNode)
	}
	events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + modelNode + ",reason=" + EventReason})
	if err != nil {
		t.Fatal(err)
	}
	var messages []string
	for _, e := range events.Items {
		messages = append(messages, e.Message)
	}
	if !slices.Contains(messages, "Successfully updated node state label to "+StateFailed) {
		t.Errorf("events on %s: %v", modelNode, messages)
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
	gpu := corev1.ResourceList{GPUResource: resource.MustParse("1")}
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

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+"@"+p.Spec.NodeName)
	}
	return out
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
