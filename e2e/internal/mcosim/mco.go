// Package mcosim simulates the parts of the OpenShift Machine Config Operator
// (MCO) that roll a MachineConfigPool update across nodes: the node controller
// of machine-config-controller (which nodes to target next, the pool status),
// the machine-config-daemon on every node (Working, decide the update, request
// a drain when needed, reboot or update in place, request an uncordon, Done)
// and the drain controller (cordon, drain through the Eviction API with
// k8s.io/kubectl/pkg/drain, retry on the MCO's timers).
//
// The simulator talks to a real API server only through the same objects the
// MCO uses: MachineConfigPools (spec read, status written), Node annotations,
// taints and spec.unschedulable, rendered MachineConfigs and MachineConfiguration
// cluster (read), and MachineConfigNodes (written as pkg/upgrademonitor
// does). Nothing is rendered: a pool's spec.configuration.name is taken as the
// target rendered config, and changing it starts a rollout. Every MCO delay is
// multiplied by a time scale so that end-to-end scenarios can run the real
// protocol faster than real time.
//
// The daemon decides each update as the real one does (mcd.go): from the two
// rendered MachineConfigs (OS image, kernel arguments and type, extensions,
// FIPS: reboot; files, units, SSH keys: the node disruption policies of
// MachineConfiguration cluster's status) whether it drains and whether it
// reboots. An update that needs no drain never cordons the node and never
// sets desiredDrain=drain-<config>; the daemon still asks for
// uncordon-<config> before Done. When either MachineConfig is missing (as for
// pools that name configs nobody created) or the policies are missing or not
// observed, every update drains and reboots.
//
// Where the simulator differs from the MCO:
//   - Nodes that never ran a daemon (no currentConfig) get currentConfig =
//     desiredConfig = the pool's target and state Done from the node
//     controller; on a real cluster they come from the config the node booted.
//   - The reboot and the in-place update are delays; during the reboot the
//     node stays cordoned, its Ready condition and its remaining (DaemonSet)
//     pods are left alone.
//   - When a drain outlasts the daemon's timeout, the node goes Degraded with
//     the MCO's reason and the daemon keeps waiting, back to Working once the
//     drain completes; the real daemon fails the update and retries it.
//   - A missing MachineConfig or unobserved MachineConfiguration makes the
//     simulated daemon drain; the real one fails the update (after polling
//     the policies for 2 minutes).
//   - After a successful drain attempt the controller re-reads the node from
//     the API server, not its cache, to tell an external uncordon from its own
//     cordon that the cache has not seen yet.
//   - Inside one drain attempt, kubectl retries an eviction refused with 429
//     after a fixed 5 s that the time scale does not shorten.
//   - MachineConfigNodes are created by the daemon when an update starts
//     (on a real cluster the operator creates them for every node); the
//     feature-gated conditions (ImageModeStatusReporting, pinned image sets)
//     are not written.
//   - Not simulated: the mcc_drain_err metric, on-cluster layering (image
//     annotations), control-plane and single-node special cases, the force
//     file, rendering of MachineConfigs.
package mcosim

import (
	"strings"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
)

// Node annotations of the MCO protocol.
const (
	// CurrentConfigAnnotation names the rendered config the node runs.
	CurrentConfigAnnotation = "machineconfiguration.openshift.io/currentConfig"
	// DesiredConfigAnnotation names the rendered config the node controller
	// has targeted the node to. A node whose desiredConfig differs from its
	// currentConfig is being updated.
	DesiredConfigAnnotation = "machineconfiguration.openshift.io/desiredConfig"
	// StateAnnotation is the daemon's state: StateDone, StateWorking,
	// StateDegraded or StateUnreconcilable.
	StateAnnotation = "machineconfiguration.openshift.io/state"
	// ReasonAnnotation is human text explaining a Degraded state; the daemon
	// clears it when it reaches Done.
	ReasonAnnotation = "machineconfiguration.openshift.io/reason"
	// DesiredDrainAnnotation is written by the daemon to ask the drain
	// controller for DrainRequest(config) or UncordonRequest(config).
	DesiredDrainAnnotation = "machineconfiguration.openshift.io/desiredDrain"
	// LastAppliedDrainAnnotation is written by the drain controller, equal to
	// DesiredDrainAnnotation, once the request has been carried out.
	LastAppliedDrainAnnotation = "machineconfiguration.openshift.io/lastAppliedDrain"
)

// Values of StateAnnotation.
const (
	StateDone           = "Done"
	StateWorking        = "Working"
	StateDegraded       = "Degraded"
	StateUnreconcilable = "Unreconcilable"
)

// Well-known names the MCO uses.
const (
	// MasterPool and WorkerPool are the pools every cluster has; they matter
	// for pool membership (see PoolsForNode).
	MasterPool = "master"
	WorkerPool = "worker"

	// ZoneLabel orders the rollout: nodes are updated zone by zone.
	ZoneLabel = "topology.kubernetes.io/zone"

	// UpdateInProgressTaintKey is the key of the PreferNoSchedule taint the
	// node controller puts on nodes that have not been targeted for the
	// pool's current target yet, so that the scheduler prefers nodes that
	// will not be drained again.
	UpdateInProgressTaintKey = "UpdateInProgress"

	// EventNamespace is where the MCO records its Events, including Events
	// about cluster-scoped Nodes and MachineConfigPools.
	EventNamespace = "openshift-machine-config-operator"

	drainVerb    = "drain"
	uncordonVerb = "uncordon"
)

// UpdateInProgressTaint returns the taint the node controller applies to nodes
// still to be updated.
func UpdateInProgressTaint() corev1.Taint {
	return corev1.Taint{Key: UpdateInProgressTaintKey, Effect: corev1.TaintEffectPreferNoSchedule}
}

// DrainRequest is the desiredDrain value that asks for a cordon and drain
// before the node moves to config.
func DrainRequest(config string) string { return drainVerb + "-" + config }

// UncordonRequest is the desiredDrain value that asks for an uncordon once the
// node runs config.
func UncordonRequest(config string) string { return uncordonVerb + "-" + config }

// NodeUpdated reports whether the daemon on node has finished its last update:
// currentConfig equals desiredConfig and the state is Done. It does not compare
// with the pool's target; see NodeUpdatedTo for that.
func NodeUpdated(node *corev1.Node) bool {
	a := node.Annotations
	current, desired := a[CurrentConfigAnnotation], a[DesiredConfigAnnotation]
	return current != "" && current == desired && a[StateAnnotation] == StateDone
}

// NodeUpdatedTo reports whether node has finished updating to config.
func NodeUpdatedTo(node *corev1.Node, config string) bool {
	return NodeUpdated(node) && node.Annotations[CurrentConfigAnnotation] == config
}

// DrainInProgress reports whether the MCO is draining node: the daemon asked
// for a drain and the drain controller has not reported completion yet.
func DrainInProgress(node *corev1.Node) bool {
	desired := node.Annotations[DesiredDrainAnnotation]
	return strings.HasPrefix(desired, drainVerb+"-") && desired != node.Annotations[LastAppliedDrainAnnotation]
}

// PoolUpdated reports whether pool has finished rolling out its current target:
// the status was computed for the current generation, it names the target
// config, and the Updated condition is True.
func PoolUpdated(pool *mcfgv1.MachineConfigPool) bool {
	if pool.Status.ObservedGeneration != pool.Generation {
		return false
	}
	if pool.Spec.Configuration.Name == "" || pool.Status.Configuration.Name != pool.Spec.Configuration.Name {
		return false
	}
	return poolConditionTrue(pool.Status.Conditions, mcfgv1.MachineConfigPoolUpdated)
}

func poolConditionTrue(conds []mcfgv1.MachineConfigPoolCondition, t mcfgv1.MachineConfigPoolConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
