//go:build e2e_sim

package mcosim

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclientset "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// TestSimulatorOnRealControlPlane runs the simulator against a real API
// server, controller-manager, scheduler and kwok nodes (go test -tags e2e_sim).
// A single-replica Deployment protected by a minAvailable: 1 PDB blocks the
// drain of its node for real (the Eviction API answers 429); scaling it to two
// replicas, the manual fix, lets the rollout finish.
func TestSimulatorOnRealControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), Out: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	kube := cp.Client()
	mcfg, err := mcfgclientset.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	workerRole := map[string]string{"node-role.kubernetes.io/worker": ""}
	for _, n := range []struct{ name, zone string }{{"worker-a1", "zone-a"}, {"worker-a2", "zone-a"}, {"worker-b1", "zone-b"}} {
		if _, err := cp.AddFakeNode(ctx, n.name, workerRole, n.zone, 1, "8", "32Gi"); err != nil {
			t.Fatal(err)
		}
	}
	pool := &mcfgv1.MachineConfigPool{
		ObjectMeta: metav1.ObjectMeta{Name: WorkerPool},
		Spec: mcfgv1.MachineConfigPoolSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: workerRole},
		},
	}
	pool.Spec.Configuration.Name = "rendered-worker-1"
	if _, err := mcfg.MachineconfigurationV1().MachineConfigPools().Create(ctx, pool, metav1.CreateOptions{}); err != nil {
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

	getPool := func() *mcfgv1.MachineConfigPool {
		p, err := mcfg.MachineconfigurationV1().MachineConfigPools().Get(ctx, WorkerPool, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	eventually(t, 2*time.Minute, "the new nodes to join the pool", func() bool {
		p := getPool()
		return PoolUpdated(p) && p.Status.MachineCount == 3
	})

	// A single-replica model server with a PDB that forbids any disruption.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "models"}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "model"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: "models"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "server", Image: "example.com/model:1"}},
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
							TopologyKey:   corev1.LabelHostname,
						}},
					}},
				},
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
	var modelNode string
	eventually(t, 2*time.Minute, "the model pod to run and its PDB to allow no disruption", func() bool {
		pods, err := kube.CoreV1().Pods("models").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return false
		}
		p, err := kube.PolicyV1().PodDisruptionBudgets("models").Get(ctx, "model", metav1.GetOptions{})
		if err != nil || p.Status.ObservedGeneration != p.Generation || p.Status.CurrentHealthy != 1 || p.Status.DisruptionsAllowed != 0 {
			return false
		}
		modelNode = pods.Items[0].Spec.NodeName
		return true
	})

	// Roll out a new config. Other nodes may go first; the model's node
	// then stays cordoned with its drain failing.
	const next = "rendered-worker-2"
	patch := []byte(`{"spec":{"configuration":{"name":"` + next + `"}}}`)
	if _, err := mcfg.MachineconfigurationV1().MachineConfigPools().Patch(ctx, WorkerPool, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	getNode := func(name string) *corev1.Node {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually(t, 5*time.Minute, "the drain of "+modelNode+" to start", func() bool {
		n := getNode(modelNode)
		return DrainInProgress(n) && n.Spec.Unschedulable
	})
	// For the next 15 s (several failed attempts at this time scale) the
	// node must stay cordoned with its drain unfinished.
	blockedUntil := time.Now().Add(15 * time.Second)
	for time.Now().Before(blockedUntil) {
		n := getNode(modelNode)
		if !DrainInProgress(n) || !n.Spec.Unschedulable {
			t.Fatalf("the drain of %s finished although the PDB allows no eviction: %v", modelNode, n.Annotations)
		}
		time.Sleep(time.Second)
	}
	if PoolUpdated(getPool()) {
		t.Fatal("pool Updated while a node cannot be drained")
	}

	// The manual fix: a second replica on another node lets the PDB allow
	// one disruption, the next attempt evicts the old pod.
	scale := []byte(`{"spec":{"replicas":2}}`)
	if _, err := kube.AppsV1().Deployments("models").Patch(ctx, "model", types.MergePatchType, scale, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Minute, "the pool to be Updated", func() bool { return PoolUpdated(getPool()) })
	for _, name := range []string{"worker-a1", "worker-a2", "worker-b1"} {
		n := getNode(name)
		if !NodeUpdatedTo(n, next) || n.Spec.Unschedulable {
			t.Errorf("%s: updated %v, cordoned %v", name, NodeUpdatedTo(n, next), n.Spec.Unschedulable)
		}
	}
}
