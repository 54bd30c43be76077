// Package trigger reads drains of nodes that do not come from the Machine Config Operator, one file
// per source, each registered in the table Kinds (kinds.go): NVIDIA GPU Operator driver upgrades
// (gpuoperator.go), node maintenance requests (nodemaintenance.go) and Node lifecycle conditions
// (nodelifecycle.go). Each source answers the same question the MCO reader answers in package
// guardian (NodeTrigger): for one node, now, is a drain coming, under way, finished or given up,
// and which drain is it.
//
// Everything here is a pure function of objects read from the informers' caches through a View:
// drain-guardian never writes the labels or resources these operators own.
package trigger

// Name names a trigger source. It is the value of the `trigger` metric label and appears in Events,
// so the set of values is small and fixed.
type Name string

// The sources.
const (
	// GPUDriverUpgrade: the NVIDIA GPU Operator's upgrade controller is moving the node to a new
	// driver (node label nvidia.com/gpu-driver-upgrade-state).
	GPUDriverUpgrade Name = "GPUDriverUpgrade"
	// NodeMaintenance: a NodeMaintenance object (medik8s, or NVIDIA's maintenance operator) asks for
	// the node to be cordoned and drained.
	NodeMaintenance Name = "NodeMaintenance"
)

// Phase is where a node stands in one drain of one source. The phases are ordered as a drain lives
// through them; Failed and Over end it.
type Phase int

// The phases.
const (
	// PhaseNone: this source is not draining the node and does not expect to.
	PhaseNone Phase = iota
	// PhasePredicted: the source has not picked the node yet but is expected to soon (look-ahead):
	// a replacement started now is Ready by the time the node is picked.
	PhasePredicted
	// PhaseTargeted: the source has picked the node; cordon and pod removal follow. Surge now.
	PhaseTargeted
	// PhaseDraining: the source is removing the node's pods now, through the Eviction API.
	PhaseDraining
	// PhaseDrained: the pods are gone and the source is working on the empty node (driver reload,
	// maintenance); the node is not back yet. Hold the surge.
	PhaseDrained
	// PhaseFailed: the source gave up on this drain. A GPU driver upgrade in upgrade-failed leaves
	// the node cordoned until someone intervenes; a failed medik8s NodeMaintenance uncordons it.
	PhaseFailed
	// PhaseOver: the drain is finished and the source has handed the node back (uncordoned it or is
	// uncordoning it).
	PhaseOver
)

var phaseNames = [...]string{"None", "Predicted", "Targeted", "Draining", "Drained", "Failed", "Over"}

// String returns the phase's name, as logs and Events print it.
func (p Phase) String() string {
	if p < 0 || int(p) >= len(phaseNames) {
		return "Unknown"
	}
	return phaseNames[p]
}

// Signal is one source's view of one node.
type Signal struct {
	Source Name
	Phase  Phase
	// Drain identifies this drain of the node. It is the same from PhasePredicted to PhaseFailed or
	// PhaseOver, and differs for the next drain of the same node, so that one Surge follows one drain
	// and a Surge recorded for an earlier drain is seen to be over. Empty in PhaseNone.
	Drain string
	// Detail is the source's own word for the state (a label value, a status phase, a last error),
	// for logs and Events. It comes from objects other parties write: print it quoted, never parse it.
	Detail string
	// Back reports whether the node is back as far as this source is concerned: the source has no
	// drain of it under way or failed (PhaseNone or PhaseOver) and the node is schedulable. It is
	// what a per-node restore waits for. A source whose end leaves no trace (a deleted
	// NodeMaintenance) shows the end as PhaseNone.
	Back bool
}

// Active reports whether the signal asks for, or holds, a surge: the drain is predicted, targeted,
// draining or drained. A failed drain is not active: nothing evicts the node's pods any more.
func (s Signal) Active() bool {
	return s.Phase >= PhasePredicted && s.Phase <= PhaseDrained
}

// CurrentDrain is the drain the node is under now for this source, "" when none: the value a Surge's
// recorded drain is compared with (guardian.Observation.CurrentDrain). A failed drain stays current
// so that the memory of a failed surge lasts as long as the node stays failed.
func (s Signal) CurrentDrain() string {
	if s.Active() || s.Phase == PhaseFailed {
		return s.Drain
	}
	return ""
}

// urgency orders phases for Dominant: the one that calls for action soonest first.
var urgency = map[Phase]int{
	PhaseDraining:  6,
	PhaseTargeted:  5,
	PhaseDrained:   4,
	PhasePredicted: 3,
	PhaseFailed:    2,
	PhaseOver:      1,
	PhaseNone:      0,
}

// Dominant returns the signal of several sources about the same node that calls for action soonest:
// a drain under way beats one that is only targeted, which beats a drained node, a prediction, a
// failure and an end, in that order. Ties go to the earlier signal, so callers list sources in a
// fixed order. When two sources drain the same node at once (an MCO update and a driver upgrade),
// following the dominant one keeps one drain, hence one surge, per node. No signals give the zero
// Signal.
func Dominant(signals ...Signal) Signal {
	var best Signal
	for i, s := range signals {
		if i == 0 || urgency[s.Phase] > urgency[best.Phase] {
			best = s
		}
	}
	return best
}
