package guardian

import (
	"github.com/drain-guardian/drain-guardian/internal/trigger"
)

// FromSource reports whether a trigger names a source of the table trigger.Kinds rather than the
// MCO or a plain cordon.
func FromSource(t Trigger) bool {
	_, ok := trigger.KindOf(trigger.Name(t))
	return ok
}

// mcoSignal is the MCO's (or a plain cordon's) answer as a signal, so that it can be weighed against
// the other sources'.
func mcoSignal(d NodeDrain) trigger.Signal {
	phase := trigger.PhaseNone
	switch d.Trigger {
	case TriggerMCODrain, TriggerCordoned:
		phase = trigger.PhaseDraining
	case TriggerMCOTargeted:
		phase = trigger.PhaseTargeted
	case TriggerMCOPredicted:
		phase = trigger.PhasePredicted
	}
	return trigger.Signal{Source: trigger.Name(d.Trigger), Phase: phase, Drain: d.Drain}
}

// DominantDrain weighs the MCO's answer for a node (NodeTrigger's) against the other sources'
// signals about it (in a fixed order) and returns the drain to follow: the one that calls for action
// soonest (trigger.Dominant), so that an MCO update and a driver upgrade of the same node at once
// make one drain and one surge, not two. The MCO wins ties. A plain cordon (TriggerCordoned) counts
// only when no source explains it: a node a source has cordoned is that source's drain.
//
// A source in trigger.PhaseFailed, with nothing else under way, gives no trigger but keeps its drain
// id (see trigger.Signal.CurrentDrain) and names itself in Failed: a Surge made for that drain is
// held, and its failure reported, until the node leaves the failed state.
func DominantDrain(mco NodeDrain, signals ...trigger.Signal) NodeDrain {
	if mco.Trigger == TriggerCordoned && explained(signals) {
		mco = NodeDrain{}
	}
	best := trigger.Dominant(append([]trigger.Signal{mcoSignal(mco)}, signals...)...)
	switch {
	case best.Phase == trigger.PhaseNone || best.Source == trigger.Name(mco.Trigger):
		return mco
	case best.Active():
		return NodeDrain{
			Trigger: Trigger(best.Source), Drain: best.Drain, Detail: best.Detail,
			Predicted: best.Phase == trigger.PhasePredicted, Draining: best.Phase == trigger.PhaseDraining,
		}
	case best.Phase == trigger.PhaseFailed:
		return NodeDrain{Drain: best.Drain, Detail: best.Detail, Failed: Trigger(best.Source)}
	}
	return mco
}

// explained reports whether a source has a drain of the node under way or failed.
func explained(signals []trigger.Signal) bool {
	for _, s := range signals {
		if s.Active() || s.Phase == trigger.PhaseFailed {
			return true
		}
	}
	return false
}

// Drains lists the drain ids every source (MCO included) has under way for the node, failed ones
// included: a Surge made for one of them still serves it, even while another source dominates.
func Drains(mco NodeDrain, signals ...trigger.Signal) []string {
	var out []string
	if mco.Drain != "" {
		out = append(out, mco.Drain)
	}
	for _, s := range signals {
		if d := s.CurrentDrain(); d != "" {
			out = append(out, d)
		}
	}
	return out
}
