// Package gpuopsim simulates the driver upgrade controller of the NVIDIA GPU
// Operator: the in-place upgrade of NVIDIA/k8s-operator-libs pkg/upgrade as
// NVIDIA/gpu-operator wires it (controllers/upgrade_controller.go,
// cmd/gpu-operator/main.go: pod deletion and validation enabled, driver name
// "gpu").
//
// It walks every GPU node through the state label
// nvidia.com/gpu-driver-upgrade-state in the real order, one transition per
// node per reconcile, as pkg/upgrade/upgrade_state.go ApplyState does:
// upgrade-required → cordon-required (within maxParallelUpgrades and
// maxUnavailable, pkg/upgrade/upgrade_inplace.go) → cordon →
// wait-for-jobs-required → pod-deletion-required → evict the GPU pods with
// kubectl's drain helper within podDeletion.timeoutSeconds
// (pkg/upgrade/pod_manager.go) → pod-restart-required → validation-required →
// uncordon-required → uncordon → upgrade-done. A pod deletion that times out
// (an eviction refused by a PDB until the timeout) ends in upgrade-failed, or
// in drain-required when the policy enables a drain; a node in upgrade-failed
// stays cordoned until its driver is in sync, which nothing does on its own.
//
// The simulator reads the ClusterPolicy (nvidia.com/v1; the oldest if there
// are several) and writes only Node labels, annotations and
// spec.unschedulable, Events (reason GPUDriverUpgrade, on the node) and pod
// evictions. Its delays and the policy's timeouts are multiplied by a time
// scale, as the MCO simulator's are.
//
// Where the simulator differs from the GPU Operator:
//   - There is no driver DaemonSet and no driver pod. A node with
//     nvidia.com/gpu capacity counts as running a driver pod; the driver
//     version it runs is kept in the simulator's memory, set to the
//     ClusterPolicy's spec.driver.version when the simulator first sees the
//     node. Changing spec.driver.version starts an upgrade of every node.
//     The driver restart (pod-restart-required) and the validation
//     (validation-required) are delays.
//   - waitForCompletion.podSelector is not supported: wait-for-jobs-required
//     always moves on at once, as with the Helm chart's empty selector.
//   - GPU pods are those of which a container requests or limits an
//     nvidia.com/gpu or nvidia.com/mig- resource (cmd/gpu-operator/main.go
//     gpuPodSpecFilter); DRA claims are not looked at.
//   - Requestor mode (NVIDIA's maintenance operator) and the NVIDIADriver
//     CRD are not simulated.
//   - Inside one pod deletion, kubectl retries an eviction refused with 429
//     after a fixed 5 s that the time scale does not shorten.
package gpuopsim

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Node labels and annotations of the upgrade controller
// (pkg/upgrade/consts.go with driver name "gpu").
const (
	StateLabel = "nvidia.com/gpu-driver-upgrade-state"
	SkipLabel  = "nvidia.com/gpu-driver-upgrade.skip"
	// InitialStateAnnotation marks a node that was cordoned before its
	// upgrade: it is left cordoned afterwards.
	InitialStateAnnotation = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
	// SkipDrainSelector keeps pods labelled
	// nvidia.com/gpu-driver-upgrade-drain.skip=true out of a drain
	// (controllers/upgrade_controller.go UpgradeSkipDrainLabelSelector).
	SkipDrainSelector = "nvidia.com/gpu-driver-upgrade-drain.skip!=true"
)

// The states, in the order of an in-place upgrade.
const (
	StateUpgradeRequired     = "upgrade-required"
	StateCordonRequired      = "cordon-required"
	StateWaitForJobsRequired = "wait-for-jobs-required"
	StatePodDeletionRequired = "pod-deletion-required"
	StateDrainRequired       = "drain-required"
	StatePodRestartRequired  = "pod-restart-required"
	StateValidationRequired  = "validation-required"
	StateUncordonRequired    = "uncordon-required"
	StateDone                = "upgrade-done"
	StateFailed              = "upgrade-failed"
)

// EventReason is the reason of every Event the upgrade controller records
// (pkg/upgrade/util.go GetEventReason).
const EventReason = "GPUDriverUpgrade"

// GPUResource is the extended resource of a whole GPU.
const GPUResource = "nvidia.com/gpu"

// ClusterPolicyGVR is the GPU Operator's ClusterPolicy.
var ClusterPolicyGVR = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1", Resource: "clusterpolicies"}

// Timings are the upgrade controller's delays and those the simulator adds
// for what it does not run. RealTimings holds real values; ScaledTimings
// multiplies them all, and the policy's timeouts with them.
type Timings struct {
	// Resync is the upgrade controller's planned requeue
	// (controllers/upgrade_controller.go plannedRequeueInterval).
	Resync time.Duration
	// DriverRestart is how long the new driver pod takes to be Ready.
	DriverRestart time.Duration
	// Validation is how long the validator pods take on the new driver.
	Validation time.Duration
	// Scale multiplies the ClusterPolicy's timeouts.
	Scale float64
}

// RealTimings returns the real delays.
func RealTimings() Timings {
	return Timings{Resync: 2 * time.Minute, DriverRestart: time.Minute, Validation: 30 * time.Second, Scale: 1}
}

// minDelay keeps a scaled timeout positive: kubectl's drain helper reads
// zero as "no timeout".
const minDelay = time.Millisecond

// ScaledTimings returns RealTimings with every delay multiplied by scale
// (1.0 = real timings, 0.05 = 20 times faster).
func ScaledTimings(scale float64) (Timings, error) {
	if math.IsNaN(scale) || math.IsInf(scale, 0) || scale <= 0 {
		return Timings{}, fmt.Errorf("time scale must be a positive number, got %v", scale)
	}
	t := RealTimings()
	t.Scale = scale
	t.Resync = t.scale(t.Resync)
	t.DriverRestart = t.scale(t.DriverRestart)
	t.Validation = t.scale(t.Validation)
	return t, nil
}

func (t Timings) scale(d time.Duration) time.Duration {
	return max(time.Duration(float64(d)*t.Scale), minDelay)
}

// timeout scales a policy timeout in seconds; 0 stays 0, "no limit".
func (t Timings) timeout(seconds int) time.Duration {
	if seconds <= 0 {
		return 0
	}
	return t.scale(time.Duration(seconds) * time.Second)
}
