package scenarios

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drain-guardian/drain-guardian/e2e/internal/gpuopsim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/nmosim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// driverUpgradeTimeout bounds a driver upgrade of a four-node pool: at the default
// maxParallelUpgrades 1, one node after the other.
const driverUpgradeTimeout = 4 * time.Minute

// clusterPolicyName is the GPU Operator's one ClusterPolicy.
const clusterPolicyName = "cluster-policy"

// startOperator runs an operator simulator until the scenario ends.
func (s *scenario) startOperator(name string) {
	s.t.Helper()
	stop, err := testBed.StartOperator(name)
	if err != nil {
		s.fatalf("starting %s: %v", name, err)
	}
	s.t.Cleanup(stop)
	if !slices.Contains(s.logs, testBed.LogPath(name)) {
		s.logs = append(s.logs, testBed.LogPath(name))
	}
}

// startGPUOperator creates the ClusterPolicy with the Helm chart's upgrade policy
// (deployments/gpu-operator/values.yaml: one node at a time, maxUnavailable 25%, pod deletion within
// 300 s, no drain), runs the GPU Operator simulator and waits until every node of the pool runs the
// first driver (upgrade-done).
func (s *scenario) startGPUOperator() {
	s.t.Helper()
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
		"metadata": map[string]any{"name": clusterPolicyName},
		"spec": map[string]any{"driver": map[string]any{"version": "550.90", "upgradePolicy": map[string]any{
			"autoUpgrade": true, "maxParallelUpgrades": int64(1), "maxUnavailable": "25%",
			"podDeletion": map[string]any{"force": false, "timeoutSeconds": int64(300), "deleteEmptyDir": false},
			"drain":       map[string]any{"enable": false, "timeoutSeconds": int64(300)},
		}}},
	}}
	policies := testBed.CP.Dynamic().Resource(gpuopsim.ClusterPolicyGVR)
	if _, err := policies.Create(s.ctx, policy, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating the ClusterPolicy: %v", err)
	}
	s.t.Cleanup(func() {
		// The test's context is done by now; the next scenario creates the ClusterPolicy again.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.t.Context()), 30*time.Second)
		defer cancel()
		_ = policies.Delete(ctx, clusterPolicyName, metav1.DeleteOptions{})
		_ = wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
			_, err := policies.Get(ctx, clusterPolicyName, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})
	s.startOperator(testbed.GPUOperator)
	s.eventually(time.Minute, "every node to run the first driver", func() (bool, error) {
		states := s.gpuStates()
		return strings.Count(fmt.Sprint(states), gpuopsim.StateDone) == len(s.nodes), nil
	})
}

// gpuStates maps each node of the pool to its driver upgrade state.
func (s *scenario) gpuStates() map[string]string {
	out := map[string]string{}
	for _, n := range s.nodes {
		out[n] = s.getNode(n).Labels[gpuopsim.StateLabel]
	}
	return out
}

// upgradeDriver rolls a new driver version out to every GPU node.
func (s *scenario) upgradeDriver() {
	s.t.Helper()
	s.note("driver upgrade to 560.35")
	patch := []byte(`{"spec":{"driver":{"version":"560.35"}}}`)
	if _, err := testBed.CP.Dynamic().Resource(gpuopsim.ClusterPolicyGVR).Patch(s.ctx, clusterPolicyName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		s.fatalf("patching the ClusterPolicy: %v", err)
	}
	s.eventually(30*time.Second, "the upgrade to start", func() (bool, error) {
		return strings.Contains(fmt.Sprint(s.gpuStates()), gpuopsim.StateUpgradeRequired) ||
			strings.Contains(fmt.Sprint(s.gpuStates()), gpuopsim.StateCordonRequired), nil
	})
}

// waitDriverUpgraded waits until every node is upgrade-done and schedulable, failing as soon as one
// is upgrade-failed.
func (s *scenario) waitDriverUpgraded() {
	s.t.Helper()
	s.eventually(driverUpgradeTimeout, "every node to be upgrade-done", func() (bool, error) {
		done := 0
		for _, n := range s.nodes {
			node := s.getNode(n)
			switch node.Labels[gpuopsim.StateLabel] {
			case gpuopsim.StateFailed:
				return false, fmt.Errorf("node %s is %s", n, gpuopsim.StateFailed)
			case gpuopsim.StateDone:
				if !node.Spec.Unschedulable {
					done++
				}
			}
		}
		return done == len(s.nodes), nil
	})
}

var threeModels = []model{{name: "m1", kind: "Deployment"}, {name: "m2", kind: "Deployment"}, {name: "m3", kind: "Deployment"}}

// TestGPUDriverUpgrade: the GPU Operator upgrades the driver of a four-node pool, one GPU each,
// carrying three single-replica models behind minAvailable 1 PDBs (one spare GPU), with the
// guardian's default flags and the operator's default pod-deletion timeout (300 s, scaled like the
// MCO simulator's delays). Every node ends upgrade-done, none upgrade-failed, every model has a Ready
// pod at every observation, and every count is restored.
func TestGPUDriverUpgrade(t *testing.T) {
	s, inv := startDriverUpgradeBed(t, "gpu-upgrade")
	s.upgradeDriver()
	s.waitDriverUpgraded()
	s.assertModelsKept(inv)
	s.requireEvents("SurgeStarted", "StallResolved", "SurgeRestored")
	s.forbidEvents("SurgeFailed", "DrainFailed")
}

// startDriverUpgradeBed sets up the driver upgrade scenarios: four one-GPU nodes carrying the three
// models (one spare GPU), the GPU Operator at its first driver and the guardian with default flags,
// the promises watched and availability sampled.
func startDriverUpgradeBed(t *testing.T, name string) (*scenario, *invariants) {
	s := newScenarioWithin(t, 2*scenarioTimeout, name, gpuNodes(4, 1), "", selectors(threeModels)...)
	for _, m := range threeModels {
		s.createModel(m)
	}
	s.startGPUOperator()
	s.startGuardian()
	inv := s.watchInvariants()
	s.obs.StartSampling()
	return s, inv
}

// assertModelsKept checks, once the upgrade is over, that every model is back to its count, had a
// Ready pod at every observation, and never went below its count nor more than one above it.
func (s *scenario) assertModelsKept(inv *invariants) {
	s.t.Helper()
	for _, m := range threeModels {
		s.waitModelBack(m)
	}
	s.assertAvailable()
	inv.violations(s.t)
}

// TestPoolUpdateDuringDriverUpgrade: an MCO pool update and a GPU Operator driver upgrade at the same
// time, on the same four nodes (one GPU each, three single-replica models, one spare GPU). The driver
// upgrade starts once the MCO has cordoned its first node: the GPU Operator counts that node against
// its maxUnavailable and takes it at once (a node someone else cordoned is started whatever the
// limits), so at least one node is drained by both at the same time. With default flags the guardian
// makes one surge per stall whatever drains the node: no count ever goes more than one above its
// original or below it, every model has a Ready pod at every observation, the pool is Updated and
// every node upgrade-done, and every count is restored.
func TestPoolUpdateDuringDriverUpgrade(t *testing.T) {
	s, inv := startDriverUpgradeBed(t, "mco-and-gpu")
	both := s.sampleDoubleDrains()
	s.updatePool()
	s.eventually(30*time.Second, "the MCO to cordon its first node", func() (bool, error) {
		for _, n := range s.nodes {
			if s.getNode(n).Spec.Unschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	s.upgradeDriver()
	s.waitPoolUpdated()
	s.waitDriverUpgraded()
	s.assertModelsKept(inv)
	if nodes := both(); len(nodes) == 0 {
		t.Error("no node was drained by the MCO and the GPU Operator at the same time: the scenario tested nothing shared")
	} else {
		t.Logf("drained by both at once: %v", nodes)
	}
	s.requireEvents("SurgeStarted", "SurgeRestored")
	s.forbidEvents("SurgeFailed", "DrainFailed")
}

// sampleDoubleDrains records, every 100 ms until the returned function is called, the nodes being
// updated by the MCO (desired config not current) while the GPU Operator empties them (cordon to
// drain states), and returns them then.
func (s *scenario) sampleDoubleDrains() func() []string {
	emptying := []string{gpuopsim.StateCordonRequired, gpuopsim.StateWaitForJobsRequired, gpuopsim.StatePodDeletionRequired, gpuopsim.StateDrainRequired}
	seen := map[string]bool{}
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
			for _, name := range s.nodes {
				n, err := s.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					continue
				}
				a := n.Annotations
				if a[mcosim.DesiredConfigAnnotation] != a[mcosim.CurrentConfigAnnotation] && slices.Contains(emptying, n.Labels[gpuopsim.StateLabel]) {
					seen[name] = true
				}
			}
			return false, nil
		})
	}()
	return func() []string {
		cancel()
		<-done
		out := slices.Collect(maps.Keys(seen))
		slices.Sort(out)
		return out
	}
}

// TestGPUDriverUpgradeWithoutGuardian is the control case: the same upgrade without the guardian
// ends with a node in upgrade-failed, its model's eviction refused until the pod-deletion timeout.
func TestGPUDriverUpgradeWithoutGuardian(t *testing.T) {
	s := newScenarioWithin(t, 2*scenarioTimeout, "gpu-upgrade-control", gpuNodes(4, 1), "", selectors(threeModels)...)
	for _, m := range threeModels {
		s.createModel(m)
	}
	s.startGPUOperator()
	s.upgradeDriver()
	s.eventually(driverUpgradeTimeout, "a node to fail its driver upgrade", func() (bool, error) {
		return strings.Contains(fmt.Sprint(s.gpuStates()), gpuopsim.StateFailed), nil
	})
}

// TestNodeMaintenance: a medik8s NodeMaintenance on a model's node. The node is drained with the
// model available throughout, and the surge is held until the NodeMaintenance is deleted, then
// restored.
func TestNodeMaintenance(t *testing.T) {
	m := model{name: "m1", kind: "Deployment"}
	s := newScenario(t, "node-maintenance", gpuNodes(2, 1), "", m.selector())
	s.createModel(m)
	node := s.waitModelReady(m.selector(), 1)[0].Spec.NodeName
	s.startOperator(testbed.NodeMaintenanceOperator)
	s.startGuardian()
	s.obs.StartSampling()

	maintenances := testBed.CP.Dynamic().Resource(nmosim.NodeMaintenanceGVR)
	nm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": nmosim.NodeMaintenanceGVR.GroupVersion().String(), "kind": "NodeMaintenance",
		"metadata": map[string]any{"name": "nm-" + s.name},
		"spec":     map[string]any{"nodeName": node, "reason": "firmware update"},
	}}
	s.note("NodeMaintenance of %s", node)
	if _, err := maintenances.Create(s.ctx, nm, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating the NodeMaintenance: %v", err)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.t.Context()), 30*time.Second)
		defer cancel()
		_ = maintenances.Delete(ctx, "nm-"+s.name, metav1.DeleteOptions{})
	})
	s.eventually(time.Minute, "the maintenance to drain "+node, func() (bool, error) {
		phase := nestedString(s.getMaintenance(nmosim.NodeMaintenanceGVR), "status", "phase")
		return phase == nmosim.PhaseSucceeded, nil
	})
	s.holds(3*time.Second, "the surge is held while the maintenance lasts", func() error {
		if !s.hasSurge() || *s.deployment(m.name).Spec.Replicas != 2 {
			return fmt.Errorf("Surge %v, replicas %d", s.hasSurge(), *s.deployment(m.name).Spec.Replicas)
		}
		return nil
	})
	s.note("NodeMaintenance deleted")
	if err := maintenances.Delete(s.ctx, "nm-"+s.name, metav1.DeleteOptions{}); err != nil {
		s.fatalf("deleting the NodeMaintenance: %v", err)
	}
	s.eventually(time.Minute, node+" to be uncordoned", func() (bool, error) {
		return !s.getNode(node).Spec.Unschedulable, nil
	})
	s.waitModelBack(m)
	s.assertAvailable()
	s.requireEvents("SurgeStarted", "StallResolved", "SurgeRestored")
	s.forbidEvents("SurgeFailed")
}

// getMaintenance reads the scenario's NodeMaintenance.
func (s *scenario) getMaintenance(gvr schema.GroupVersionResource) *unstructured.Unstructured {
	u, err := testBed.CP.Dynamic().Resource(gvr).Get(s.ctx, "nm-"+s.name, metav1.GetOptions{})
	if err != nil {
		s.fatalf("getting the NodeMaintenance: %v", err)
	}
	return u
}

func nestedString(u *unstructured.Unstructured, path ...string) string {
	v, _, _ := unstructured.NestedString(u.Object, path...)
	return v
}
