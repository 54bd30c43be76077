package guardian

import (
	"testing"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/trigger"
)

func TestDominantDrain(t *testing.T) {
	gpu := func(p trigger.Phase) trigger.Signal {
		return trigger.Signal{Source: trigger.GPUDriverUpgrade, Phase: p, Drain: "gpu-driver-upgrade", Detail: "state"}
	}
	nm := func(p trigger.Phase) trigger.Signal {
		return trigger.Signal{Source: trigger.NodeMaintenance, Phase: p, Drain: "nodemaintenance/nm/uid"}
	}
	mcoDrain := NodeDrain{Trigger: TriggerMCODrain, Drain: "rendered-2"}
	targeted := NodeDrain{Trigger: TriggerMCOTargeted, Drain: "rendered-2"}
	cordoned := NodeDrain{Trigger: TriggerCordoned, Drain: "cordon-x"}
	cases := []struct {
		name    string
		mco     NodeDrain
		signals []trigger.Signal
		want    NodeDrain
	}{
		{"nothing", NodeDrain{}, []trigger.Signal{gpu(trigger.PhaseNone), nm(trigger.PhaseNone)}, NodeDrain{}},
		{"a cordon still in its grace period keeps its recheck", NodeDrain{RecheckAfter: 5}, []trigger.Signal{gpu(trigger.PhaseOver)}, NodeDrain{RecheckAfter: 5}},
		{"MCO alone", mcoDrain, []trigger.Signal{gpu(trigger.PhaseNone)}, mcoDrain},
		{"driver upgrade picked the node", NodeDrain{}, []trigger.Signal{gpu(trigger.PhaseTargeted)},
			NodeDrain{Trigger: Trigger(trigger.GPUDriverUpgrade), Drain: "gpu-driver-upgrade", Detail: "state"}},
		{"driver upgrade predicted", NodeDrain{}, []trigger.Signal{gpu(trigger.PhasePredicted)},
			NodeDrain{Trigger: Trigger(trigger.GPUDriverUpgrade), Drain: "gpu-driver-upgrade", Detail: "state", Predicted: true}},
		{"both draining: the MCO wins the tie", mcoDrain, []trigger.Signal{gpu(trigger.PhaseDraining)}, mcoDrain},
		{"the upgrade drains a node the MCO only targeted", targeted, []trigger.Signal{gpu(trigger.PhaseDraining)},
			NodeDrain{Trigger: Trigger(trigger.GPUDriverUpgrade), Drain: "gpu-driver-upgrade", Detail: "state", Draining: true}},
		{"a maintenance drains a node the upgrade only picked", NodeDrain{}, []trigger.Signal{gpu(trigger.PhaseTargeted), nm(trigger.PhaseDraining)},
			NodeDrain{Trigger: Trigger(trigger.NodeMaintenance), Drain: "nodemaintenance/nm/uid", Draining: true}},
		{"a cordon the upgrade explains is the upgrade's", cordoned, []trigger.Signal{gpu(trigger.PhaseDrained)},
			NodeDrain{Trigger: Trigger(trigger.GPUDriverUpgrade), Drain: "gpu-driver-upgrade", Detail: "state"}},
		{"a cordon nobody explains", cordoned, []trigger.Signal{gpu(trigger.PhaseOver)}, cordoned},
		{"a failed upgrade keeps its drain and no trigger", cordoned, []trigger.Signal{gpu(trigger.PhaseFailed)},
			NodeDrain{Drain: "gpu-driver-upgrade", Detail: "state", Failed: Trigger(trigger.GPUDriverUpgrade)}},
		{"a failed upgrade yields to an MCO drain", mcoDrain, []trigger.Signal{gpu(trigger.PhaseFailed)}, mcoDrain},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			if got := DominantDrain(tt.mco, tt.signals...); got != tt.want {
				t.Errorf("DominantDrain() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDrainsListsEverySourcesCurrentDrain(t *testing.T) {
	got := Drains(NodeDrain{Trigger: TriggerMCODrain, Drain: "rendered-2"},
		trigger.Signal{Source: trigger.GPUDriverUpgrade, Phase: trigger.PhaseFailed, Drain: "gpu"},
		trigger.Signal{Source: trigger.NodeMaintenance, Phase: trigger.PhaseOver, Drain: "nm"})
	if len(got) != 2 || got[0] != "rendered-2" || got[1] != "gpu" {
		t.Fatalf("Drains() = %v, want [rendered-2 gpu]", got)
	}
}

// gpuSurge makes the test Surge one made for a driver upgrade of its node, picked, not cordoned.
func gpuSurge(s *v1alpha1.Surge) {
	s.Spec.Trigger, s.Spec.Drain = string(Trigger(trigger.GPUDriverUpgrade)), "gpu-driver-upgrade"
}

// sourceCases are the lifecycle of a surge made for a source other than the MCO: the MCO pool's
// progress does not matter to it, the source's does.
func sourceCases() []decideCase {
	picked := func(o *Observation) {
		o.Node, o.CurrentDrain = updatedNode(), "gpu-driver-upgrade"
	}
	cordoned := func(draining bool) func(*Observation) {
		return func(o *Observation) {
			picked(o)
			o.Node.Spec.Unschedulable, o.SourceDraining = true, draining
		}
	}
	back := func(rolloutOver bool) func(*Observation) {
		return func(o *Observation) {
			picked(o)
			o.CurrentDrain, o.SourceBack, o.SourceRolloutOver, o.Pool = "", true, rolloutOver, updatedPool()
			o.LiveOnNode, o.ReadyOnSafeNodes = 0, 1
		}
	}
	return []decideCase{
		{name: "source: replacement Ready on a node only picked: no eviction", phase: v1alpha1.PhaseSurged, surge: gpuSurge,
			obs: func(o *Observation) { picked(o); o.ReadyElsewhere = 1 }, want: Action{Kind: ActMarkReady}},
		{name: "source: cordoned but not deleting pods yet: wait", phase: v1alpha1.PhaseReady, surge: gpuSurge,
			obs: cordoned(false), want: Action{Kind: ActWait, After: defaultRecheckPeriod}},
		{name: "source: deleting pods: evict", phase: v1alpha1.PhaseReady, surge: gpuSurge,
			obs: cordoned(true), want: Action{Kind: ActEvict, After: evictRetryPeriod}},
		{name: "source: replacement Ready while deleting pods: evict now", phase: v1alpha1.PhaseSurged, surge: gpuSurge,
			obs:  func(o *Observation) { cordoned(true)(o); o.ReadyElsewhere = 1 },
			want: Action{Kind: ActMarkReady, EvictNow: true, EvictionDue: true}},
		{name: "source: the MCO pool updated does not end it", phase: v1alpha1.PhaseResolved, surge: gpuSurge,
			obs: func(o *Observation) {
				cordoned(false)(o)
				o.Pool, o.LiveOnNode, o.ReadyOnSafeNodes = updatedPool(), 0, 1
			},
			want: Action{Kind: ActWait, After: defaultRecheckPeriod}},
		{name: "source: node back: restore", phase: v1alpha1.PhaseResolved, surge: gpuSurge, obs: back(false),
			want: Action{Kind: ActStartRestore, Reason: ReasonNodeBack}},
		{name: "source: pool mode, node back, rollout going on: hold", phase: v1alpha1.PhaseResolved, surge: gpuSurge, obs: back(false),
			cfg: restore(RestorePool), want: Action{Kind: ActWait, After: defaultRecheckPeriod}},
		{name: "source: pool mode, rollout over: restore", phase: v1alpha1.PhaseResolved, surge: gpuSurge, obs: back(true),
			cfg: restore(RestorePool), want: Action{Kind: ActStartRestore, Reason: ReasonRolloutOver}},
		{name: "source: capacity wanted and a survivor: restore early", phase: v1alpha1.PhaseResolved, surge: gpuSurge,
			obs: func(o *Observation) {
				cordoned(false)(o)
				o.LiveOnNode, o.ReadySurvivors, o.CapacityWanted = 0, 1, true
			},
			want: Action{Kind: ActStartRestore, Reason: ReasonCapacityNeeded}},
	}
}
