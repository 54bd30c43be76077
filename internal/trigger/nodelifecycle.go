package trigger

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// NodeLifecycle: Kubernetes Node lifecycle conditions (KEP-5683, alpha in Kubernetes 1.37 behind the
// NodeLifecycleConditions gate) that an admin or a maintenance controller sets on the node:
// MaintenancePlanned, MaintenanceInProgress, DrainInProgress, Drained. Node conditions are
// free-form, so any API server stores them and this source works on any version.
const NodeLifecycle Name = "NodeLifecycle"

// NodeLifecycleKind registers the Node lifecycle conditions in Kinds. They are read from the node
// itself: no API to watch, nothing to grant. MaintenancePlanned is predicted with --lookahead.
var NodeLifecycleKind = Kind{
	Name:  NodeLifecycle,
	Noun:  "maintenance drain",
	Next:  "a node planned for maintenance (MaintenancePlanned)",
	Flag:  "node-lifecycle",
	Usage: "Treat Node lifecycle conditions (MaintenancePlanned, MaintenanceInProgress, DrainInProgress, Drained; KEP-5683) as drains of their node: MaintenancePlanned surges ahead with --lookahead, DrainInProgress evicts, the surge is held until the conditions are gone and the node is schedulable.",
	Signal: func(v View, node *corev1.Node, predict bool) Signal {
		return NodeLifecycles{Predict: predict && v.Lookahead() > 0}.Signal(node)
	},
	WillDrain: func(_ View, node *corev1.Node) bool {
		return NodeLifecycles{Predict: true}.Signal(node).Active()
	},
	DrainingNow: func(v View) []*corev1.Node {
		var out []*corev1.Node
		for _, n := range v.Nodes() {
			if (NodeLifecycles{}).Signal(n).Phase == PhaseDraining {
				out = append(out, n)
			}
		}
		return out
	},
}

// The Node lifecycle condition types (KEP-5683).
const (
	ConditionMaintenancePlanned    corev1.NodeConditionType = "MaintenancePlanned"
	ConditionMaintenanceInProgress corev1.NodeConditionType = "MaintenanceInProgress"
	ConditionDrainInProgress       corev1.NodeConditionType = "DrainInProgress"
	ConditionDrained               corev1.NodeConditionType = "Drained"
)

// lifecyclePhases maps each condition, while True, to the phase of the drain it announces, in the
// order a maintenance walks them.
var lifecyclePhases = []struct {
	condition corev1.NodeConditionType
	phase     Phase
}{
	{ConditionMaintenancePlanned, PhasePredicted},
	{ConditionMaintenanceInProgress, PhaseTargeted},
	{ConditionDrainInProgress, PhaseDraining},
	{ConditionDrained, PhaseDrained},
}

// NodeLifecycles reads a node's lifecycle conditions. Predict lets MaintenancePlanned count as a
// predicted drain (look-ahead: a surge on spare capacity only); without it a planned maintenance
// is not acted on until it starts.
type NodeLifecycles struct {
	Predict bool
}

// Signal is the node's drain as its lifecycle conditions announce it: the furthest phase whose
// condition is True (DrainInProgress beats MaintenancePlanned). The drain id is the time the
// earliest of the True conditions turned True, so that one maintenance keeps one id from its plan
// to its end while its conditions pile up, and the next maintenance gets another. With no
// condition True the node is back once schedulable.
func (l NodeLifecycles) Signal(node *corev1.Node) Signal {
	var phase Phase
	var since time.Time
	var detail string
	for _, lp := range lifecyclePhases {
		c := condition(node, lp.condition)
		if c == nil || c.Status != corev1.ConditionTrue {
			continue
		}
		// The plan's time names the drain even when the plan alone is not acted on.
		if t := c.LastTransitionTime.Time; since.IsZero() || t.Before(since) {
			since = t
		}
		if lp.phase != PhasePredicted || l.Predict {
			phase, detail = lp.phase, string(lp.condition)
		}
	}
	if phase == PhaseNone {
		return Signal{Source: NodeLifecycle, Back: !node.Spec.Unschedulable}
	}
	return Signal{Source: NodeLifecycle, Phase: phase, Drain: "lifecycle-" + since.UTC().Format(time.RFC3339), Detail: detail}
}

// condition returns the node's condition of type t, nil when it has none.
func condition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}
