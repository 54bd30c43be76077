// Package guardian holds drain-guardian's decisions as pure functions: whether a node is about to be
// drained, and what to do next for one surge. The controller gathers the observations from its
// listers and carries out the decisions; nothing here reads or writes the API.
package guardian

import (
	"strings"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// Trigger says why a node is about to lose its pods.
type Trigger string

// The triggers. A future EvictionRequest or next-node prediction source adds a value here.
const (
	// TriggerMCODrain: the MCO drain controller is draining the node.
	TriggerMCODrain Trigger = "MCODrain"
	// TriggerMCOTargeted: the MCO node controller picked the node for an update; its drain follows.
	TriggerMCOTargeted Trigger = "MCOTargeted"
	// TriggerCordoned: the node has been cordoned for the grace period by someone other than the MCO.
	TriggerCordoned Trigger = "Cordoned"
)

// Config is the part of the options that drives decisions.
type Config struct {
	Preemptive        bool
	CordonedNodes     bool
	CordonGracePeriod time.Duration
	RestoreOnNode     bool
	Evict             bool
	ScheduleTimeout   time.Duration
	ReadyTimeout      time.Duration
	MaxSurgeDuration  time.Duration
}

// NodeDrain is the answer of NodeTrigger.
type NodeDrain struct {
	Trigger Trigger
	// Drain identifies this drain of the node: the MCO config it updates to, or the cordon time.
	Drain string
	// RecheckAfter, when positive and Trigger is empty, is when the answer may change by itself
	// (a cordon reaching its grace period).
	RecheckAfter time.Duration
}

// unschedulableTaint is added by the node lifecycle controller to cordoned nodes, with the cordon time.
const unschedulableTaint = "node.kubernetes.io/unschedulable"

// NodeTrigger decides whether node is being, or is about to be, drained. pool is the node's
// MachineConfigPool (nil when it has none); cordonSeen is when this process first saw the node cordoned,
// used when the unschedulable taint carries no time.
func NodeTrigger(cfg Config, node *corev1.Node, pool *mcfgv1.MachineConfigPool, now, cordonSeen time.Time) NodeDrain {
	s := mco.ReadNode(node)
	if s.Draining() {
		return NodeDrain{Trigger: TriggerMCODrain, Drain: strings.TrimPrefix(s.DesiredDrain, "drain-")}
	}
	if cfg.Preemptive && s.Targeted() && pool != nil && mco.PoolUpdating(pool) {
		return NodeDrain{Trigger: TriggerMCOTargeted, Drain: s.DesiredConfig}
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

// Observation is everything Decide needs to know about one surge, read from the listers.
type Observation struct {
	Now    time.Time
	Record *workload.Record
	// Node is the record's node, nil when deleted; Pool its pool, nil when deleted or none.
	Node *corev1.Node
	Pool *mcfgv1.MachineConfigPool
	// PodOwnerGone: the Deployment or StatefulSet running the pods no longer exists.
	PodOwnerGone bool
	// LiveOnNode counts the workload's pods still on the node and not being deleted.
	LiveOnNode int
	// ReadyElsewhere counts the workload's Ready pods on other nodes, not being deleted.
	ReadyElsewhere int32
	// UnschedulableSince is when the oldest Unschedulable pod of the workload became so, if any.
	UnschedulableSince *time.Time
	// ScaledDown: the pod owner runs no more pods than it asks for (the two-step restore waits for it).
	ScaledDown bool
}

// ActionKind is what to do next for a surge.
type ActionKind string

// The actions.
const (
	ActWait          ActionKind = "Wait"
	ActMarkReady     ActionKind = "MarkReady"
	ActEvict         ActionKind = "Evict"
	ActMarkResolved  ActionKind = "MarkResolved"
	ActRestore       ActionKind = "Restore"
	ActFinishRestore ActionKind = "FinishRestore"
)

// Restore reasons. The failure ones double as the failed-stall metric's reason label.
const (
	ReasonPoolUpdated    = "PoolUpdated"
	ReasonNodeUpdated    = "NodeUpdated"
	ReasonUncordoned     = "Uncordoned"
	ReasonNodeDeleted    = "NodeDeleted"
	ReasonPoolDeleted    = "PoolDeleted"
	ReasonUnschedulable  = "Unschedulable"
	ReasonReadyTimeout   = "ReadyTimeout"
	ReasonMaxDuration    = "MaxDurationExceeded"
	ReasonPodOwnerGone   = "WorkloadDeleted"
	ReasonUnsatisfiable  = "UnsatisfiablePDB"
	ReasonUnsupported    = "UnsupportedOwner"
	ReasonNoCapacity     = "NoCapacity"
	defaultRecheckPeriod = 30 * time.Second
	evictRetryPeriod     = 5 * time.Second
)

// Action is Decide's answer.
type Action struct {
	Kind ActionKind
	// Reason explains a Restore; Failed marks a restore that undoes a surge which did not help.
	Reason string
	Failed bool
	// After is when to look again if nothing changes before.
	After time.Duration
}

// Decide returns the next step of a surge's life: detected → surged → replacement Ready → blocked pod
// evicted or drained → held while the pool updates → restored; or restored early when the replacement
// cannot be scheduled, is not Ready in time, or the surge outlives its maximum duration.
func Decide(cfg Config, o Observation) Action {
	r := o.Record
	age := o.Now.Sub(r.StartTime.Time)
	if r.Restoring != "" {
		if o.ScaledDown || o.PodOwnerGone {
			return Action{Kind: ActFinishRestore}
		}
		return Action{Kind: ActWait, After: evictRetryPeriod}
	}
	if o.PodOwnerGone {
		return Action{Kind: ActRestore, Reason: ReasonPodOwnerGone, Failed: true}
	}
	if age >= cfg.MaxSurgeDuration {
		return Action{Kind: ActRestore, Reason: ReasonMaxDuration, Failed: true}
	}
	if reason, done := finished(cfg, o); done {
		return Action{Kind: ActRestore, Reason: reason}
	}
	next := min(defaultRecheckPeriod, cfg.MaxSurgeDuration-age)
	if r.ReadyTime == nil {
		if o.ReadyElsewhere >= r.ReadyBefore+r.Delta {
			return Action{Kind: ActMarkReady}
		}
		if o.UnschedulableSince != nil {
			stuck := o.Now.Sub(*o.UnschedulableSince)
			if stuck >= cfg.ScheduleTimeout {
				return Action{Kind: ActRestore, Reason: ReasonUnschedulable, Failed: true}
			}
			next = min(next, cfg.ScheduleTimeout-stuck)
		}
		if age >= cfg.ReadyTimeout {
			return Action{Kind: ActRestore, Reason: ReasonReadyTimeout, Failed: true}
		}
		return Action{Kind: ActWait, After: min(next, cfg.ReadyTimeout-age)}
	}
	if r.ResolvedTime == nil {
		if o.LiveOnNode == 0 {
			return Action{Kind: ActMarkResolved}
		}
		if cfg.Evict && o.Node != nil && o.Node.Spec.Unschedulable && beingDrained(r, o.Node) {
			return Action{Kind: ActEvict, After: evictRetryPeriod}
		}
	}
	return Action{Kind: ActWait, After: next}
}

// beingDrained reports whether the node's pods are meant to leave now: the MCO is draining it, or the
// stall came from a plain cordon. A node the MCO merely targeted is not evicted from before its drain.
func beingDrained(r *workload.Record, node *corev1.Node) bool {
	return Trigger(r.Trigger) == TriggerCordoned || mco.ReadNode(node).Draining()
}

// finished reports whether the update the surge was made for is over, and why.
func finished(cfg Config, o Observation) (string, bool) {
	if o.Node == nil {
		return ReasonNodeDeleted, true
	}
	r := o.Record
	if Trigger(r.Trigger) == TriggerCordoned || r.Pool == "" {
		return ReasonUncordoned, !o.Node.Spec.Unschedulable
	}
	if !cfg.RestoreOnNode {
		if o.Pool == nil {
			return ReasonPoolDeleted, true
		}
		return ReasonPoolUpdated, mco.PoolUpdated(o.Pool)
	}
	// The node is done with its update, whichever config it ended on: the pool's target may have moved
	// on during the rollout, or been reverted, and either way no drain of this node is coming.
	s := mco.ReadNode(o.Node)
	return ReasonNodeUpdated, s.Updated() && !s.Targeted() && !o.Node.Spec.Unschedulable
}
