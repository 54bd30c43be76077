// Package mco reads the Machine Config Operator's drain protocol from Nodes and MachineConfigPools.
//
// Everything here is a pure function of the objects passed in: the MCO writes these annotations and
// conditions, drain-guardian only ever reads them.
package mco

import (
	"strings"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Node annotations written by the machine-config daemon and controller.
const (
	annotationPrefix = "machineconfiguration.openshift.io/"
	// CurrentConfigAnnotation is the rendered MachineConfig the node runs.
	CurrentConfigAnnotation = annotationPrefix + "currentConfig"
	// DesiredConfigAnnotation is the rendered MachineConfig the node controller wants the node to run.
	DesiredConfigAnnotation = annotationPrefix + "desiredConfig"
	// StateAnnotation is the daemon's state: Done, Working, Degraded or Unreconcilable.
	StateAnnotation = annotationPrefix + "state"
	// DesiredDrainAnnotation is written by the daemon: drain-<config> or uncordon-<config>.
	DesiredDrainAnnotation = annotationPrefix + "desiredDrain"
	// LastAppliedDrainAnnotation is written by the drain controller once it carried out desiredDrain.
	LastAppliedDrainAnnotation = annotationPrefix + "lastAppliedDrain"

	// StateDone is the daemon state of a node that runs its desired config.
	StateDone = "Done"

	drainPrefix    = "drain-"
	uncordonPrefix = "uncordon-"

	// WorkerPool and MasterPool are the two pools every OpenShift cluster has.
	WorkerPool = "worker"
	MasterPool = "master"
)

// NodeState is the MCO's view of one node.
type NodeState struct {
	CurrentConfig    string
	DesiredConfig    string
	State            string
	DesiredDrain     string
	LastAppliedDrain string
}

// ReadNode extracts the MCO annotations of node.
func ReadNode(node *corev1.Node) NodeState {
	a := node.Annotations
	return NodeState{
		CurrentConfig:    a[CurrentConfigAnnotation],
		DesiredConfig:    a[DesiredConfigAnnotation],
		State:            a[StateAnnotation],
		DesiredDrain:     a[DesiredDrainAnnotation],
		LastAppliedDrain: a[LastAppliedDrainAnnotation],
	}
}

// Managed reports whether the MCO manages the node at all.
func (s NodeState) Managed() bool { return s.CurrentConfig != "" || s.DesiredConfig != "" }

// Draining reports whether the drain controller is draining the node: the daemon asked for a drain that
// the controller has not yet reported as done.
func (s NodeState) Draining() bool {
	return strings.HasPrefix(s.DesiredDrain, drainPrefix) && s.DesiredDrain != s.LastAppliedDrain
}

// Targeted reports whether the node controller has picked the node for an update it has not finished.
func (s NodeState) Targeted() bool {
	return s.DesiredConfig != "" && s.CurrentConfig != "" && s.DesiredConfig != s.CurrentConfig
}

// Updated reports whether the node runs its desired config and the daemon is idle.
func (s NodeState) Updated() bool {
	return s.Managed() && s.CurrentConfig == s.DesiredConfig && s.State == StateDone
}

// PoolForNode returns the pool that owns node, following the MCO's rules: of the pools whose nodeSelector
// matches, master wins, then a custom pool wins over worker; among several custom pools the MCO refuses to
// pick, and so does this function (nil). Paused pools still own their nodes.
func PoolForNode(node *corev1.Node, pools []*mcfgv1.MachineConfigPool) *mcfgv1.MachineConfigPool {
	var master, worker *mcfgv1.MachineConfigPool
	var custom []*mcfgv1.MachineConfigPool
	for _, p := range pools {
		if p.Spec.NodeSelector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(node.Labels)) {
			continue
		}
		switch p.Name {
		case MasterPool:
			master = p
		case WorkerPool:
			worker = p
		default:
			custom = append(custom, p)
		}
	}
	switch {
	case master != nil:
		return master
	case len(custom) == 1:
		return custom[0]
	case len(custom) > 1:
		return nil
	default:
		return worker
	}
}

// PoolCondition reports whether the pool's condition t is True.
func PoolCondition(pool *mcfgv1.MachineConfigPool, t mcfgv1.MachineConfigPoolConditionType) bool {
	for _, c := range pool.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PoolUpdated reports whether every machine of the pool runs the pool's target config.
func PoolUpdated(pool *mcfgv1.MachineConfigPool) bool {
	return PoolCondition(pool, mcfgv1.MachineConfigPoolUpdated) &&
		!PoolCondition(pool, mcfgv1.MachineConfigPoolUpdating) &&
		pool.Status.Configuration.Name == pool.Spec.Configuration.Name
}

// PoolUpdating reports whether the pool is rolling out a config.
func PoolUpdating(pool *mcfgv1.MachineConfigPool) bool {
	return PoolCondition(pool, mcfgv1.MachineConfigPoolUpdating)
}

// MaintenancePausedAnnotation marks a MachineConfigPool that NVIDIA's maintenance operator paused
// while it drains one of its nodes for a NodeMaintenance (Mellanox/maintenance-operator
// internal/openshift/mcp.go: it pauses only a pool with no update in progress, and unpauses it
// once no NodeMaintenance of the pool's nodes is left).
const MaintenancePausedAnnotation = "maintenance.nvidia.com/mcp-paused"

// PausedForMaintenance reports whether NVIDIA's maintenance operator holds the pool paused: the drain
// of its node is that NodeMaintenance's, and the pool's own update waits for it to end. Such a pool
// is not being updated, nor paused by an admin for an update window.
func PausedForMaintenance(pool *mcfgv1.MachineConfigPool) bool {
	return pool != nil && pool.Spec.Paused && pool.Annotations[MaintenancePausedAnnotation] == "true"
}

// WillNotDrain reports whether the current update will not drain node (again): it is schedulable, not
// targeted and idle, and either its pool (nil: none) has nothing to roll out or the node already runs
// the pool's target config. A surge whose survivors all sit on such nodes can be undone safely.
func WillNotDrain(node *corev1.Node, pool *mcfgv1.MachineConfigPool) bool {
	if node.Spec.Unschedulable {
		return false
	}
	s := ReadNode(node)
	if s.Managed() && (s.Targeted() || s.Draining() || (s.State != "" && s.State != StateDone)) {
		return false
	}
	if pool == nil || PoolUpdated(pool) {
		return true
	}
	return s.CurrentConfig == pool.Spec.Configuration.Name && s.DesiredConfig == pool.Spec.Configuration.Name
}
