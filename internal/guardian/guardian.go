// Package guardian holds drain-guardian's decisions as pure functions: whether a node is about to be
// drained (NodeTrigger), what to do about each pod that blocks a drain (DecideStalls, stall.go, booking
// surges in a capacity Ledger; the daemon and `drain-guardian check` both call it), and what to do next
// for one Surge (the lifecycle state machine, lifecycle.go). The controller gathers the observations
// from its listers (a node's stalls through ObserveStalls, observe.go, over a StallReader that `check`
// answers from its snapshot) and carries out the decisions through one executor; nothing here reads
// or writes the API.
package guardian

import (
	"strings"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/mco"
)

// Trigger says why a node is about to lose its pods.
type Trigger string

// The triggers. A future EvictionRequest source adds a value here.
const (
	// TriggerMCODrain: the MCO drain controller is draining the node.
	TriggerMCODrain Trigger = "MCODrain"
	// TriggerMCOTargeted: the MCO node controller picked the node for an update; its drain follows.
	TriggerMCOTargeted Trigger = "MCOTargeted"
	// TriggerCordoned: the node has been cordoned for the grace period by someone other than the MCO.
	TriggerCordoned Trigger = "Cordoned"
	// TriggerMCOPredicted: the node is among the next --lookahead nodes the MCO will target
	// (mco.PredictTargets): the replacement starts while the nodes before it drain and reboot.
	TriggerMCOPredicted Trigger = "MCOPredicted"
)

// RestoreMode says when a surge that served its node is undone.
type RestoreMode string

// The restore modes.
const (
	// RestoreAuto restores as soon as the workload's original number of pods is Ready on nodes this
	// update will not drain again, and at the latest when the pool is Updated.
	RestoreAuto RestoreMode = "auto"
	// RestorePool holds every surge until the pool is Updated.
	RestorePool RestoreMode = "pool"
	// RestoreNode restores once the drained node is updated and schedulable again.
	RestoreNode RestoreMode = "node"
)

// Config is the part of the options that drives decisions.
type Config struct {
	Preemptive        bool
	CordonedNodes     bool
	CordonGracePeriod time.Duration
	Restore           RestoreMode
	Evict             bool
	ScheduleTimeout   time.Duration
	ReadyTimeout      time.Duration
	MaxSurgeDuration  time.Duration
	// EvictTimeout bounds how long a Ready surge waits for its blocked pod to leave a drained node.
	EvictTimeout time.Duration
	// Lookahead is how many of the nodes the MCO will target next are surged ahead (0: none).
	Lookahead int
}

// NodeDrain is the answer of NodeTrigger.
type NodeDrain struct {
	Trigger Trigger
	// Drain identifies this drain of the node: the MCO config it updates to, or the cordon time.
	Drain string
	// RecheckAfter, when positive and Trigger is empty, is when the answer may change by itself
	// (a cordon reaching its grace period).
	RecheckAfter time.Duration
	// Detail is a source's own word for the drain's state (see trigger.Signal.Detail): for logs and
	// Events only, quoted.
	Detail string
	// Predicted: a source other than the MCO is expected to pick the node soon (look-ahead).
	Predicted bool
	// Draining: a source other than the MCO is removing the node's pods now.
	Draining bool
	// Failed names the source that gave up on the node's drain (Trigger is then empty and Drain the
	// failed drain's id); empty otherwise.
	Failed Trigger
}

// Lookahead reports whether the drain is only predicted: a surge for it uses spare capacity only.
func (d NodeDrain) Lookahead() bool {
	return d.Trigger == TriggerMCOPredicted || d.Predicted
}

// unschedulableTaint is added by the node lifecycle controller to cordoned nodes, with the cordon time.
const unschedulableTaint = "node.kubernetes.io/unschedulable"

// NodeTrigger decides whether node is being, or is about to be, drained. pool is the node's
// MachineConfigPool (nil when it has none); predicted says the node is among the next --lookahead
// nodes the MCO will target (see mco.PredictTargets); need is what is known of whether the node's
// MCO update drains it (mco.NodeAnswer, or the answer of another node on the same update);
// cordonSeen is when this process first saw the node cordoned, used when the unschedulable taint
// carries no time.
//
// A drain under way is acted on whatever need says. A targeted or predicted node is acted on only
// once its update is known to drain: an update the machine-config daemon applies without a drain
// (SSH keys, pull secret, a policy's None, …) must cost no surge, and the daemon says which it is
// within about a second of the targeting, before any drain could start.
func NodeTrigger(cfg Config, node *corev1.Node, pool *mcfgv1.MachineConfigPool, predicted bool, need mco.Need, now, cordonSeen time.Time) NodeDrain {
	s := mco.ReadNode(node)
	if s.Draining() {
		return NodeDrain{Trigger: TriggerMCODrain, Drain: strings.TrimPrefix(s.DesiredDrain, "drain-")}
	}
	updating := pool != nil && mco.PoolUpdating(pool) && need == mco.NeedDrain
	if cfg.Preemptive && s.Targeted() && updating {
		return NodeDrain{Trigger: TriggerMCOTargeted, Drain: s.DesiredConfig}
	}
	if cfg.Lookahead > 0 && predicted && updating && pool.Spec.Configuration.Name != "" {
		// The drain id is the config the node will update to: the same as the targeted node's and
		// the drain's, so that one Surge follows the node from prediction to drain.
		return NodeDrain{Trigger: TriggerMCOPredicted, Drain: pool.Spec.Configuration.Name}
	}
	if cfg.CordonedNodes && node.Spec.Unschedulable {
		since := cordonSeen
		for _, t := range node.Spec.Taints {
			if t.Key == unschedulableTaint && t.TimeAdded != nil {
				since = t.TimeAdded.Time
			}
		}
		if wait := since.Add(cfg.CordonGracePeriod).Sub(now); wait > 0 {
			return NodeDrain{RecheckAfter: wait}
		}
		return NodeDrain{Trigger: TriggerCordoned, Drain: "cordon-" + since.UTC().Format(time.RFC3339)}
	}
	return NodeDrain{}
}
