// Package nmosim simulates the medik8s Node Maintenance Operator
// (medik8s/node-maintenance-operator internal/controller/nodemaintenance_controller.go,
// with the Lease of medik8s/common pkg/lease/manager.go).
//
// For each NodeMaintenance (nodemaintenance.medik8s.io/v1beta1) it adds its
// finalizer, writes status.phase Running with the pods to evict, takes the
// node's Lease (namespace medik8s-leases, name node-<node>, holder
// node-maintenance, one hour), labels the node
// remediation.medik8s.io/exclude-from-remediation, taints it
// (node.kubernetes.io/unschedulable and medik8s.io/drain, NoSchedule),
// cordons it and drains it like kubectl drain: every pod but DaemonSet pods,
// through the Eviction API, within 30 s. A failed attempt writes
// status.lastError, pendingPods and drainProgress and is retried 5 s later,
// and at once on the status update it caused, for as long as the object
// exists. A drain that succeeds writes phase Succeeded and drainProgress 100.
// Deleting the object undoes everything: taints, cordon, Lease, label, then
// the finalizer.
//
// Every delay is multiplied by a time scale, as the MCO simulator's are.
//
// Where the simulator differs from the operator:
//   - The validating webhook (the node must exist, one NodeMaintenance per
//     node, no control-plane node that would break etcd quorum) is not
//     simulated.
//   - The owner reference to the node that the operator keeps in memory and
//     writes with a later update is not written.
//   - The OpenShift-specific parts (the kubevirt live-migration taint of old
//     versions, the etcd quorum check) are not simulated.
//   - Inside one drain attempt, kubectl retries an eviction refused with 429
//     after a fixed 5 s that the time scale does not shorten.
package nmosim

import (
	"fmt"
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// NodeMaintenanceGVR is the medik8s NodeMaintenance.
var NodeMaintenanceGVR = schema.GroupVersionResource{Group: "nodemaintenance.medik8s.io", Version: "v1beta1", Resource: "nodemaintenances"}

// Names the operator uses.
const (
	// Finalizer is api/v1beta1 NodeMaintenanceFinalizer.
	Finalizer = "foregroundDeleteNodeMaintenance"
	// LeaseNamespace is medik8s/common's default lease namespace.
	LeaseNamespace = "medik8s-leases"
	// LeaseHolder is the operator's holder identity.
	LeaseHolder = "node-maintenance"
	// ExcludeFromRemediationLabel keeps node remediation away from a node
	// under maintenance (medik8s/common pkg/labels).
	ExcludeFromRemediationLabel = "remediation.medik8s.io/exclude-from-remediation"
	// DrainTaintKey and UnschedulableTaintKey are the taints the operator
	// adds, both NoSchedule (internal/controller/taint.go).
	DrainTaintKey         = "medik8s.io/drain"
	UnschedulableTaintKey = "node.kubernetes.io/unschedulable"
)

// Values of status.phase.
const (
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"
)

// Event reasons (pkg/utils/events.go).
const (
	EventBeginMaintenance   = "BeginMaintenance"
	EventFailedMaintenance  = "FailedMaintenance"
	EventSucceedMaintenance = "SucceedMaintenance"
	EventUncordonNode       = "UncordonNode"
	EventRemovedMaintenance = "RemovedMaintenance"
)

// LeaseName is the name of the Lease the operator holds on a node.
func LeaseName(node string) string { return "node-" + node }

// Timings are the operator's delays; ScaledTimings multiplies them.
type Timings struct {
	// DrainTimeout bounds one drain attempt (DrainerTimeout).
	DrainTimeout time.Duration
	// RetryDelay is the requeue after a failed attempt (waitDurationOnDrainError).
	RetryDelay time.Duration
	// LeaseDuration is the Lease's duration (LeaseDuration).
	LeaseDuration time.Duration
}

// RealTimings returns the operator's own delays.
func RealTimings() Timings {
	return Timings{DrainTimeout: 30 * time.Second, RetryDelay: 5 * time.Second, LeaseDuration: time.Hour}
}

// ScaledTimings returns RealTimings multiplied by scale (1.0 = real).
func ScaledTimings(scale float64) (Timings, error) {
	if math.IsNaN(scale) || math.IsInf(scale, 0) || scale <= 0 {
		return Timings{}, fmt.Errorf("time scale must be a positive number, got %v", scale)
	}
	s := func(d time.Duration) time.Duration { return max(time.Duration(float64(d)*scale), time.Millisecond) }
	t := RealTimings()
	// The Lease is written in whole seconds.
	return Timings{DrainTimeout: s(t.DrainTimeout), RetryDelay: s(t.RetryDelay), LeaseDuration: max(s(t.LeaseDuration), time.Second)}, nil
}

// nodeMaintenance is the object as the operator's Go types decode it
// (api/v1beta1/nodemaintenance_types.go).
type nodeMaintenance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		NodeName string `json:"nodeName"`
		Reason   string `json:"reason,omitempty"`
	} `json:"spec"`
	Status status `json:"status,omitempty"`
}

type status struct {
	Phase             string       `json:"phase,omitempty"`
	DrainProgress     int          `json:"drainProgress,omitempty"`
	LastUpdate        *metav1.Time `json:"lastUpdate,omitempty"`
	LastError         string       `json:"lastError,omitempty"`
	PendingPods       []string     `json:"pendingPods,omitempty"`
	PendingPodsRefs   []podRef     `json:"pendingPodsRefs,omitempty"`
	TotalPods         int          `json:"totalpods,omitempty"`
	EvictionPods      int          `json:"evictionPods,omitempty"`
	ErrorOnLeaseCount int          `json:"errorOnLeaseCount,omitempty"`
}

type podRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}
