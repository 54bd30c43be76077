package trigger

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Node labels and annotations of the GPU Operator's upgrade controller. They are the formats of
// NVIDIA/k8s-operator-libs pkg/upgrade/consts.go with the driver name "gpu", which NVIDIA/gpu-operator
// sets in cmd/gpu-operator/main.go (upgrade.SetDriverName).
const (
	// GPUUpgradeStateLabel holds the node's driver upgrade state, one of the GPUState* values.
	GPUUpgradeStateLabel = "nvidia.com/gpu-driver-upgrade-state"
	// GPUUpgradeSkipLabel set to "true" makes the upgrade controller leave the node in
	// upgrade-required (SkipNodeUpgrade in pkg/upgrade/common_manager.go).
	GPUUpgradeSkipLabel = "nvidia.com/gpu-driver-upgrade.skip"
	// GPURequestorModeAnnotation marks a node whose upgrade was handed to NVIDIA's maintenance
	// operator (requestor mode, pkg/upgrade/upgrade_requestor.go).
	GPURequestorModeAnnotation = "nvidia.com/gpu-driver-upgrade-requestor-mode"
)

// The values of GPUUpgradeStateLabel, in the order the in-place upgrade walks them
// (pkg/upgrade/consts.go, pkg/upgrade/upgrade_state.go ApplyState). No label means the upgrade
// controller is off or has not seen the node yet.
const (
	GPUStateUpgradeRequired     = "upgrade-required"
	GPUStateCordonRequired      = "cordon-required"
	GPUStateWaitForJobsRequired = "wait-for-jobs-required"
	// GPUStatePodDeletionRequired: the GPU pods are evicted with kubectl's drain helper within the
	// policy's podDeletion.timeoutSeconds; failure ends in upgrade-failed (or drain-required when the
	// policy enables a drain).
	GPUStatePodDeletionRequired = "pod-deletion-required"
	GPUStateDrainRequired       = "drain-required"
	// GPUStateNodeMaintenanceRequired and GPUStatePostMaintenanceRequired exist in requestor mode:
	// NVIDIA's maintenance operator cordons and drains the node through its own NodeMaintenance.
	GPUStateNodeMaintenanceRequired = "node-maintenance-required"
	GPUStatePostMaintenanceRequired = "post-maintenance-required"
	GPUStatePodRestartRequired      = "pod-restart-required"
	GPUStateValidationRequired      = "validation-required"
	GPUStateUncordonRequired        = "uncordon-required"
	GPUStateDone                    = "upgrade-done"
	GPUStateFailed                  = "upgrade-failed"
)

// gpuPhases maps every upgrade state to the phase of the node's drain. upgrade-required is
// PhasePredicted only for the nodes the caller predicts (see GPUDriverUpgrades.Predicted).
var gpuPhases = map[string]Phase{
	GPUStateUpgradeRequired:     PhasePredicted,
	GPUStateCordonRequired:      PhaseTargeted,
	GPUStateWaitForJobsRequired: PhaseTargeted,
	GPUStatePodDeletionRequired: PhaseDraining,
	GPUStateDrainRequired:       PhaseDraining,
	// Handed to the maintenance operator, whose NodeMaintenance says when the drain really starts
	// (NodeMaintenances reads it); until then the node is picked, not yet drained.
	GPUStateNodeMaintenanceRequired: PhaseTargeted,
	GPUStatePostMaintenanceRequired: PhaseDrained,
	GPUStatePodRestartRequired:      PhaseDrained,
	GPUStateValidationRequired:      PhaseDrained,
	GPUStateUncordonRequired:        PhaseDrained,
	GPUStateDone:                    PhaseOver,
	GPUStateFailed:                  PhaseFailed,
}

// GPUNode is the upgrade controller's view of one node.
type GPUNode struct {
	// State is the value of GPUUpgradeStateLabel, "" when absent.
	State string
	// Skip: the node opted out of driver upgrades.
	Skip bool
	// RequestorMode: the node's upgrade is carried out by NVIDIA's maintenance operator.
	RequestorMode bool
}

// ReadGPUNode reads the upgrade controller's labels and annotations of node.
func ReadGPUNode(node *corev1.Node) GPUNode {
	_, requestor := node.Annotations[GPURequestorModeAnnotation]
	return GPUNode{
		State:         node.Labels[GPUUpgradeStateLabel],
		Skip:          node.Labels[GPUUpgradeSkipLabel] == "true",
		RequestorMode: requestor,
	}
}

// Managed reports whether the upgrade controller has labelled the node (it labels every node that
// runs a driver pod, once driver upgrades are enabled).
func (n GPUNode) Managed() bool { return n.State != "" }

// Pending reports whether the node waits to be picked for an upgrade: upgrade-required and not
// skipped. A skipped node stays in upgrade-required for as long as it carries the skip label.
func (n GPUNode) Pending() bool { return n.State == GPUStateUpgradeRequired && !n.Skip }

// GPUDriverUpgrades reads the GPU Operator's driver upgrade of a node, for one analysis pass.
type GPUDriverUpgrades struct {
	// Predicted holds the names of the nodes in upgrade-required that the upgrade controller is
	// expected to pick soon enough to surge ahead (from PredictGPUUpgrades and the look-ahead). Other
	// nodes in upgrade-required are PhaseNone: the upgrade will come, but not soon.
	Predicted map[string]bool
	// Rollouts identifies, by node name, the driver version being rolled out to the node: the
	// revision of the driver DaemonSet that owns its driver pod, for instance. It makes the drain id
	// of the next upgrade differ from this one's even when the guardian never saw the node between
	// the two. Nodes missing from it share one id per upgrade.
	Rollouts map[string]string
}

// Signal maps the node's upgrade state to the phase of its drain. A node without the state label,
// with a state this version does not know, or skipped while upgrade-required, is PhaseNone; a
// skipped node already past upgrade-required is followed to the end (the upgrade controller reads
// the skip label only when it picks nodes).
func (g GPUDriverUpgrades) Signal(node *corev1.Node) Signal {
	n := ReadGPUNode(node)
	phase, known := gpuPhases[n.State]
	if !known || (n.State == GPUStateUpgradeRequired && (n.Skip || !g.Predicted[node.Name])) {
		phase = PhaseNone
	}
	return newSignal(GPUDriverUpgrade, phase, gpuDrainID(g.Rollouts[node.Name]), n.State, node)
}

// gpuDrainID names one driver upgrade of a node.
func gpuDrainID(rollout string) string {
	if rollout == "" {
		return "gpu-driver-upgrade"
	}
	return "gpu-driver-upgrade-" + rollout
}

// newSignal fills in what every source computes the same way: no drain id in PhaseNone, and Back
// when the source has nothing (more) to do with a schedulable node.
func newSignal(source Name, phase Phase, drain, detail string, node *corev1.Node) Signal {
	if phase == PhaseNone {
		drain = ""
	}
	return Signal{
		Source: source,
		Phase:  phase,
		Drain:  drain,
		Detail: detail,
		Back:   (phase == PhaseNone || phase == PhaseOver) && !node.Spec.Unschedulable,
	}
}

// GPUDriverUpgradeKind registers the driver upgrade in Kinds. It reads the node's state label and
// the ClusterPolicy's upgrade policy (DefaultUpgradePolicy when none can be read: the labels still
// say where each node stands).
var GPUDriverUpgradeKind = Kind{
	Name:  GPUDriverUpgrade,
	Noun:  "driver upgrade",
	Next:  "the GPU Operator's next pick",
	Flag:  "gpu-driver-upgrades",
	Usage: "Treat NVIDIA GPU Operator driver upgrades (node label nvidia.com/gpu-driver-upgrade-state) as drains: surge from the node's selection (cordon-required), and ahead of it with --lookahead.",
	Resources: []Resource{{
		GVR: ClusterPolicyGVR,
		// The upgrade policy shapes the prediction of every managed node.
		Affects: func(v View, _ *unstructured.Unstructured) []string {
			var out []string
			for _, n := range v.Nodes() {
				if ReadGPUNode(n).Managed() {
					out = append(out, n.Name)
				}
			}
			return out
		},
		Slim: slimClusterPolicy,
	}},
	Signal: func(v View, node *corev1.Node, predict bool) Signal {
		var predicted map[string]bool
		// The prediction reads every node: only for a node waiting to be picked.
		if predict && v.Lookahead() > 0 && ReadGPUNode(node).Pending() {
			predicted = map[string]bool{}
			for _, n := range gpuPlan(v).Predicted(v.Lookahead()) {
				predicted[n.Name] = true
			}
		}
		return GPUDriverUpgrades{Predicted: predicted}.Signal(node)
	},
	Upcoming: func(v View, node *corev1.Node) []string {
		if v.Lookahead() == 0 || !ReadGPUNode(node).Managed() {
			return nil
		}
		var out []string
		for _, n := range gpuPlan(v).Predicted(v.Lookahead()) {
			out = append(out, n.Name)
		}
		return out
	},
	WillDrain:   func(_ View, n *corev1.Node) bool { return gpuWillDrain(n) },
	DrainingNow: func(v View) []*corev1.Node { return gpuPlan(v).Upgrading },
	RolloutOver: func(v View) bool {
		for _, n := range v.Nodes() {
			if gpuWillDrain(n) {
				return false
			}
		}
		return true
	},
	Rollout: gpuRollout,
}

// GPUDriverUpgradePool names the pseudo-pool of the nodes a driver upgrade drains in `check`.
const GPUDriverUpgradePool = "(gpu driver upgrade)"

// gpuWillDrain reports whether the driver upgrade has still to drain the node: it waits to be
// picked, or is between its selection and its end.
func gpuWillDrain(n *corev1.Node) bool {
	return ReadGPUNode(n).Pending() || (GPUDriverUpgrades{}).Signal(n).Active()
}

// gpuPolicy is the upgrade policy of the ClusterPolicy the GPU Operator acts on, or its default.
func gpuPolicy(v View) UpgradePolicy {
	p, err := ActiveUpgradePolicy(v.Objects(ClusterPolicyGVR))
	if err != nil {
		v.Logf("reading the ClusterPolicy's upgrade policy, assuming the default: %v", err)
		return DefaultUpgradePolicy()
	}
	return p
}

// gpuPlan predicts the upgrade controller's next picks.
func gpuPlan(v View) UpgradePlan {
	return PredictGPUUpgrades(v.Nodes(), gpuPolicy(v))
}

// gpuRollout is the driver upgrade as `check` predicts it: the one under way (nodes upgrading,
// then the next picks, then the other waiting nodes by name) or, when none is, the next one: every
// managed node not skipped, by name. Failed nodes are left out: nothing drains them any more. ok is
// false when no node is managed by the upgrade controller.
func gpuRollout(v View) (Rollout, bool) {
	policy := gpuPolicy(v)
	plan := PredictGPUUpgrades(v.Nodes(), policy)
	var order []*corev1.Node
	for _, n := range append(append(append([]*corev1.Node{}, plan.Upgrading...), plan.Next...), plan.Candidates...) {
		if n.Labels[GPUUpgradeStateLabel] != GPUStateFailed {
			order = append(order, n)
		}
	}
	if len(order) == 0 {
		for _, n := range v.Nodes() {
			if g := ReadGPUNode(n); g.Managed() && !g.Skip {
				order = append(order, n)
			}
		}
		sort.Slice(order, func(i, j int) bool { return order[i].Name < order[j].Name })
	}
	if len(order) == 0 && len(plan.Skipped) == 0 {
		return Rollout{}, false
	}
	width := max(plan.MaxUnavailable, 1)
	if policy.MaxParallelUpgrades > 0 {
		width = min(width, policy.MaxParallelUpgrades)
	}
	return Rollout{Name: GPUDriverUpgradePool, Drain: gpuDrainID(""), Width: width, Order: order}, true
}

// slimClusterPolicy keeps, of a ClusterPolicy, its metadata and spec.driver.upgradePolicy: the rest
// of its spec configures a dozen operands.
func slimClusterPolicy(u *unstructured.Unstructured) {
	policy, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "driver", "upgradePolicy")
	delete(u.Object, "spec")
	delete(u.Object, "status")
	if found {
		_ = unstructured.SetNestedField(u.Object, policy, "spec", "driver", "upgradePolicy")
	}
}
