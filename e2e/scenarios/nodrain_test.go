package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	opv1 "github.com/openshift/api/operator/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kubectl/pkg/drain"

	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// noDrainCase is one MCO update of a pool of one-GPU nodes running a single-replica model behind a
// minAvailable 1 PDB, with the machine-config daemon simulator deciding whether it drains.
type noDrainCase struct {
	name   string
	change mcosim.ConfigChange
	// admin are the admin's node disruption policies.
	admin opv1.NodeDisruptionPolicyConfig
	// read runs the guardian and check with --read-machineconfigs (and the component's RBAC).
	read bool
	// wantCheck is check's drain verdict for the pool with the update pending.
	wantCheck string
	// drains: the update drains every node, and the model is surged as before.
	drains bool
}

// TestUpdatesWithoutDrain: with default flags, an update the machine-config daemon applies without
// cordon or drain — only SSH keys, or only a file an admin's policy maps to None — ends with the
// pool Updated, no Surge ever created, the model's pod never moved nor its Deployment written;
// check says drain-unknown ahead of it without the read of rendered configs, no-drain with it. A
// kernel argument drains, and is surged and resolved as before.
func TestUpdatesWithoutDrain(t *testing.T) {
	const policyDir = "/etc/e2e-nodrain"
	for _, tc := range []noDrainCase{
		{name: "ssh", change: mcosim.SSHKeyChange("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2e e2e"), wantCheck: "drain-unknown"},
		{name: "policy-none", change: mcosim.FileChange(policyDir+"/app.conf", "level=debug\n"), read: true, wantCheck: "no-drain",
			admin: opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{{
				Path: policyDir, Actions: []opv1.NodeDisruptionPolicySpecAction{{Type: opv1.NoneSpecAction}},
			}}}},
		{name: "kargs", change: mcosim.KernelArgChange("nosmt"), read: true, wantCheck: "drain", drains: true},
	} {
		t.Run(tc.name, func(t *testing.T) { runNoDrainCase(t, tc) })
	}
}

func runNoDrainCase(t *testing.T, tc noDrainCase) {
	name := "nodrain-" + tc.name
	from, to := "rendered-e2e-"+name+"-1", "rendered-e2e-"+name+"-2"
	s := newScenarioOn(t, scenarioTimeout, from, name, gpuNodes(3, 1), selectorOf(modelLabels))
	t.Cleanup(func() {
		for _, mc := range []string{from, to} {
			_ = testBed.MCFG.MachineconfigurationV1().MachineConfigs().Delete(t.Context(), mc, metav1.DeleteOptions{})
		}
	})
	if err := testBed.SetNodeDisruptionPolicies(s.ctx, tc.admin); err != nil {
		s.fatalf("setting the node disruption policies: %v", err)
	}
	t.Cleanup(func() { _ = testBed.SetNodeDisruptionPolicies(t.Context(), opv1.NodeDisruptionPolicyConfig{}) })
	pod := s.createDeployment(loadingDelay)
	var flags []string
	if tc.read {
		s.grantReadMachineConfigs()
		flags = append(flags, "--read-machineconfigs")
	}

	// The update is rendered and pending, the pool paused: what check says before it starts.
	s.setPaused(true)
	base := mcosim.BaseRenderedConfig()
	if err := testBed.UpdatePoolWithChange(s.ctx, s.pool, from, to, base, tc.change); err != nil {
		s.fatalf("rendering the update: %v", err)
	}
	report, out, _ := s.check(testBed.CP.AdminKubeconfig(), append(flags, "-o", "json")...)
	if got := report.poolDrain(s.pool); got != tc.wantCheck {
		s.fatalf("check says %q for the pending update, want %q:\n%s", got, tc.wantCheck, out)
	}

	s.startGuardian(flags...)
	s.obs.StartSampling()
	s.note("pool unpaused: update to %s", to)
	s.setPaused(false)
	s.waitPoolUpdatedTo(to)
	if tc.drains {
		s.waitRestored(selectorOf(modelLabels), 1)
		s.assertAvailable()
		s.requireEvents("SurgeStarted", "ReplacementReady", "StallResolved", "SurgeRestored")
		return
	}
	s.assertAvailable()
	if n := len(s.surges()); n != 0 {
		s.fatalf("%d Surges for an update that does not drain", n)
	}
	s.forbidEvents("SurgeStarted", "StallPredicted", "StallDetected")
	if d := s.deployment("model"); d.Generation != 1 || *d.Spec.Replicas != 1 {
		s.fatalf("the Deployment was written (generation %d, replicas %d): the update does not drain", d.Generation, *d.Spec.Replicas)
	}
	now, err := s.kube.CoreV1().Pods(s.ns).Get(s.ctx, pod.Name, metav1.GetOptions{})
	if err != nil || now.UID != pod.UID || now.Spec.NodeName != pod.Spec.NodeName {
		s.fatalf("the model's pod moved (%v): the update does not drain", err)
	}
	for _, n := range s.nodes {
		if s.getNode(n).Spec.Unschedulable {
			s.fatalf("node %s left cordoned", n)
		}
	}
}

// poolDrain is check's drain verdict of the pool ("" when it has no update pending).
func (r checkReport) poolDrain(pool string) string {
	for _, p := range r.Pools {
		if p.Name == pool {
			return p.Drain
		}
	}
	return "pool not in the report"
}

// setPaused pauses or unpauses the scenario's pool.
func (s *scenario) setPaused(paused bool) {
	s.t.Helper()
	patch := []byte(`{"spec":{"paused":false}}`)
	if paused {
		patch = []byte(`{"spec":{"paused":true}}`)
	}
	if _, err := testBed.MCFG.MachineconfigurationV1().MachineConfigPools().Patch(s.ctx, s.pool, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		s.fatalf("pausing the pool: %v", err)
	}
}

// grantReadMachineConfigs applies the read-machineconfigs component's RBAC as an admin would.
func (s *scenario) grantReadMachineConfigs() {
	s.t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "manifests", "components", "read-machineconfigs", "rbac.yaml"))
	if err != nil {
		s.fatalf("%v", err)
	}
	defer f.Close()
	gvrs := map[string]schema.GroupVersionResource{
		"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	}
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			break
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if _, err := testBed.CP.Dynamic().Resource(gvrs[u.GetKind()]).Apply(s.ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "e2e", Force: true}); err != nil {
			s.fatalf("applying %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// TestNodeLifecycleMaintenance: an admin plans a maintenance of the model's node with the Node
// lifecycle conditions (KEP-5683) and drains it with kubectl's drain: the model is surged while the
// maintenance is only planned, stays available throughout, its pod leaves the node, and the surge
// is restored once the conditions are gone and the node is uncordoned.
func TestNodeLifecycleMaintenance(t *testing.T) {
	s := newScenario(t, "lifecycle", gpuNodes(3, 1), selectorOf(modelLabels))
	pod := s.createDeployment(loadingDelay)
	node := pod.Spec.NodeName
	s.startGuardian()
	s.obs.StartSampling()

	s.note("MaintenancePlanned on %s", node)
	if err := testBed.SetNodeConditions(s.ctx, node, testbed.NodeLifecycleCondition(testbed.NodeMaintenancePlanned, corev1.ConditionTrue, "", "e2e")); err != nil {
		s.fatalf("%v", err)
	}
	s.waitEvent(time.Minute, "ReplacementReady", corev1.EventTypeNormal)
	if p, err := s.kube.CoreV1().Pods(s.ns).Get(s.ctx, pod.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		s.fatalf("the pod left its node before the drain (%v)", err)
	}

	s.note("DrainInProgress on %s, kubectl drain", node)
	if err := testBed.SetNodeConditions(s.ctx, node, testbed.NodeLifecycleCondition(testbed.NodeDrainInProgress, corev1.ConditionTrue, "", "e2e")); err != nil {
		s.fatalf("%v", err)
	}
	helper := &drain.Helper{
		Ctx: s.ctx, Client: s.kube, Force: true, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true,
		GracePeriodSeconds: -1, Timeout: 2 * time.Minute, Out: os.Stderr, ErrOut: os.Stderr,
	}
	n := s.getNode(node)
	if err := drain.RunCordonOrUncordon(helper, n, true); err != nil {
		s.fatalf("cordoning %s: %v", node, err)
	}
	if err := drain.RunNodeDrain(helper, node); err != nil {
		s.fatalf("draining %s: %v", node, err)
	}
	if _, err := s.kube.CoreV1().Pods(s.ns).Get(s.ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		s.fatalf("the blocked pod is still there after the drain (%v)", err)
	}

	s.note("maintenance over on %s", node)
	if err := testBed.SetNodeConditions(s.ctx, node,
		testbed.NodeLifecycleCondition(testbed.NodeDrainInProgress, corev1.ConditionFalse, "", "e2e"),
		testbed.NodeLifecycleCondition(testbed.NodeMaintenancePlanned, corev1.ConditionFalse, "", "e2e")); err != nil {
		s.fatalf("%v", err)
	}
	if err := drain.RunCordonOrUncordon(helper, s.getNode(node), false); err != nil {
		s.fatalf("uncordoning %s: %v", node, err)
	}
	s.waitRestored(selectorOf(modelLabels), 1)
	s.assertAvailable()
	s.requireEvents("SurgeStarted", "ReplacementReady", "SurgeRestored")
	s.forbidEvents("SurgeFailed")
}

// TestPoolPausedForMaintenance: NVIDIA's maintenance operator paused the pool (its annotation)
// while it maintains a node, and an update that drains is pending. Asked to prepare the pool, the
// guardian prepares nothing and says why: the update waits for the maintenance, and no stall is
// reported while the pool stays paused.
func TestPoolPausedForMaintenance(t *testing.T) {
	s := newScenario(t, "paused-maintenance", gpuNodes(3, 1), selectorOf(modelLabels))
	s.createDeployment(loadingDelay)
	patch := []byte(`{"metadata":{"annotations":{"maintenance.nvidia.com/mcp-paused":"true","` + prepareAnnotation + `":"true"}},"spec":{"paused":true}}`)
	if _, err := testBed.MCFG.MachineconfigurationV1().MachineConfigPools().Patch(s.ctx, s.pool, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		s.fatalf("pausing the pool as the maintenance operator does: %v", err)
	}
	s.updatePool()
	s.startGuardian()
	s.waitPoolEventMatching(time.Minute, "NothingToPrepare naming the maintenance operator", func(e corev1.Event) bool {
		return e.Reason == "NothingToPrepare" && strings.Contains(e.Message, "maintenance operator")
	})
	s.holds(10*time.Second, "no Surge and no stall while the pool is paused", func() error {
		if n := len(s.surges()); n != 0 {
			return fmt.Errorf("%d Surges", n)
		}
		for _, r := range []string{"SurgeStarted", "StallDetected", "StallPredicted"} {
			if len(s.events()[r]) != 0 {
				return fmt.Errorf("a %s Event", r)
			}
		}
		return nil
	})
}
