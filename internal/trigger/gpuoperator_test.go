package trigger

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gpuNode is a Ready node in the given upgrade state ("" for no label).
func gpuNode(name, state string, mods ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
		}},
	}
	if state != "" {
		n.Labels[GPUUpgradeStateLabel] = state
	}
	for _, m := range mods {
		m(n)
	}
	return n
}

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }
func skipped(n *corev1.Node)  { n.Labels[GPUUpgradeSkipLabel] = "true" }
func notReady(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }

func TestGPUDriverUpgradeSignalEveryState(t *testing.T) {
	tests := []struct {
		state     string
		cordoned  bool
		predicted bool
		want      Phase
		wantBack  bool
	}{
		{state: "", want: PhaseNone, wantBack: true},
		{state: GPUStateUpgradeRequired, want: PhaseNone, wantBack: true},
		{state: GPUStateUpgradeRequired, predicted: true, want: PhasePredicted},
		{state: GPUStateCordonRequired, predicted: true, want: PhaseTargeted},
		{state: GPUStateCordonRequired, want: PhaseTargeted},
		{state: GPUStateWaitForJobsRequired, cordoned: true, want: PhaseTargeted},
		{state: GPUStatePodDeletionRequired, cordoned: true, want: PhaseDraining},
		{state: GPUStateDrainRequired, cordoned: true, want: PhaseDraining},
		{state: GPUStateNodeMaintenanceRequired, want: PhaseTargeted},
		{state: GPUStatePostMaintenanceRequired, cordoned: true, want: PhaseDrained},
		{state: GPUStatePodRestartRequired, cordoned: true, want: PhaseDrained},
		{state: GPUStateValidationRequired, cordoned: true, want: PhaseDrained},
		{state: GPUStateUncordonRequired, cordoned: true, want: PhaseDrained},
		{state: GPUStateDone, want: PhaseOver, wantBack: true},
		// A node that was cordoned before its upgrade stays cordoned after it: not back.
		{state: GPUStateDone, cordoned: true, want: PhaseOver},
		{state: GPUStateFailed, cordoned: true, want: PhaseFailed},
		{state: "some-future-state", cordoned: true, want: PhaseNone},
	}
	for _, tt := range tests {
		n := gpuNode("gpu-1", tt.state)
		n.Spec.Unschedulable = tt.cordoned
		src := GPUDriverUpgrades{Predicted: map[string]bool{"gpu-1": tt.predicted}}
		got := src.Signal(n)
		if got.Phase != tt.want || got.Back != tt.wantBack || got.Source != GPUDriverUpgrade || got.Detail != tt.state {
			t.Errorf("state %q cordoned=%v predicted=%v: Signal() = %+v, want phase %v, back %v",
				tt.state, tt.cordoned, tt.predicted, got, tt.want, tt.wantBack)
		}
		wantDrain := "gpu-driver-upgrade"
		if tt.want == PhaseNone {
			wantDrain = ""
		}
		if got.Drain != wantDrain {
			t.Errorf("state %q: Drain = %q, want %q", tt.state, got.Drain, wantDrain)
		}
	}
}

func TestGPUDriverUpgradeSkipLabel(t *testing.T) {
	src := GPUDriverUpgrades{Predicted: map[string]bool{"gpu-1": true}}
	if got := src.Signal(gpuNode("gpu-1", GPUStateUpgradeRequired, skipped)); got.Phase != PhaseNone || got.Drain != "" {
		t.Errorf("skipped node in upgrade-required: Signal() = %+v, want PhaseNone", got)
	}
	// The controller reads the skip label only when it picks nodes: one labelled later goes on.
	if got := src.Signal(gpuNode("gpu-1", GPUStatePodDeletionRequired, skipped, cordoned)); got.Phase != PhaseDraining {
		t.Errorf("skip label added during pod deletion: Signal() = %+v, want PhaseDraining", got)
	}
	n := gpuNode("gpu-1", GPUStateUpgradeRequired)
	n.Labels[GPUUpgradeSkipLabel] = "false"
	if got := src.Signal(n); got.Phase != PhasePredicted {
		t.Errorf(`skip label "false": Signal() = %+v, want PhasePredicted`, got)
	}
}

// One upgrade of a node keeps one drain id from prediction to the end; the next rollout's differs.
func TestGPUDriverUpgradeDrainIDFollowsOneRollout(t *testing.T) {
	first := GPUDriverUpgrades{Predicted: map[string]bool{"gpu-1": true}, Rollouts: map[string]string{"gpu-1": "rev-a"}}
	var ids []string
	for _, state := range []string{GPUStateUpgradeRequired, GPUStateCordonRequired, GPUStatePodDeletionRequired,
		GPUStatePodRestartRequired, GPUStateFailed} {
		s := first.Signal(gpuNode("gpu-1", state))
		ids = append(ids, s.CurrentDrain())
	}
	for _, id := range ids {
		if id != "gpu-driver-upgrade-rev-a" {
			t.Fatalf("drain ids through one upgrade = %v, want gpu-driver-upgrade-rev-a throughout", ids)
		}
	}
	if got := first.Signal(gpuNode("gpu-1", GPUStateDone)).CurrentDrain(); got != "" {
		t.Errorf("upgrade-done: CurrentDrain() = %q, want none", got)
	}
	next := GPUDriverUpgrades{Rollouts: map[string]string{"gpu-1": "rev-b"}}
	if got := next.Signal(gpuNode("gpu-1", GPUStateCordonRequired)).Drain; got == ids[0] {
		t.Errorf("next rollout reuses drain id %q", got)
	}
}

func TestReadGPUNode(t *testing.T) {
	n := gpuNode("gpu-1", GPUStateNodeMaintenanceRequired, skipped)
	n.Annotations[GPURequestorModeAnnotation] = "true"
	got := ReadGPUNode(n)
	want := GPUNode{State: GPUStateNodeMaintenanceRequired, Skip: true, RequestorMode: true}
	if got != want {
		t.Errorf("ReadGPUNode() = %+v, want %+v", got, want)
	}
	if got := ReadGPUNode(gpuNode("cpu-1", "")); got.Managed() || got.Pending() {
		t.Errorf("unlabelled node: %+v managed or pending", got)
	}
	if !ReadGPUNode(gpuNode("gpu-2", GPUStateUpgradeRequired)).Pending() {
		t.Error("upgrade-required node not pending")
	}
}
