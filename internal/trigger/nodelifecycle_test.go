package trigger

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func lifecycleNode(cordoned bool, conds ...corev1.NodeCondition) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
	n.Status.Conditions = append([]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}, conds...)
	return n
}

func lifecycleCondition(t corev1.NodeConditionType, status corev1.ConditionStatus, at time.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: t, Status: status, LastTransitionTime: metav1.NewTime(at)}
}

// A maintenance announced by Node lifecycle conditions is one drain from its plan to its end: the
// model is surged ahead while planned (look-ahead), its pod evicted while the drain is in progress,
// and the surge held until the conditions are gone and the node is schedulable.
func TestNodeLifecycleSignal(t *testing.T) {
	planned := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	draining := planned.Add(time.Hour)
	const id = "lifecycle-2026-12-01T10:00:00Z"
	tests := []struct {
		name      string
		predict   bool
		node      *corev1.Node
		wantPhase Phase
		wantDrain string
		wantBack  bool
	}{
		{"no condition", true, lifecycleNode(false), PhaseNone, "", true},
		{"no condition, still cordoned", true, lifecycleNode(true), PhaseNone, "", false},
		{"planned", true, lifecycleNode(false, lifecycleCondition(ConditionMaintenancePlanned, corev1.ConditionTrue, planned)), PhasePredicted, id, false},
		{"planned, look-ahead off", false, lifecycleNode(false, lifecycleCondition(ConditionMaintenancePlanned, corev1.ConditionTrue, planned)), PhaseNone, "", true},
		{"planned then draining: the same drain", true, lifecycleNode(true,
			lifecycleCondition(ConditionMaintenancePlanned, corev1.ConditionTrue, planned),
			lifecycleCondition(ConditionDrainInProgress, corev1.ConditionTrue, draining)), PhaseDraining, id, false},
		{"draining, look-ahead off: the same drain", false, lifecycleNode(true,
			lifecycleCondition(ConditionMaintenancePlanned, corev1.ConditionTrue, planned),
			lifecycleCondition(ConditionDrainInProgress, corev1.ConditionTrue, draining)), PhaseDraining, id, false},
		{"maintenance in progress", true, lifecycleNode(true, lifecycleCondition(ConditionMaintenanceInProgress, corev1.ConditionTrue, planned)), PhaseTargeted, id, false},
		{"drained", true, lifecycleNode(true,
			lifecycleCondition(ConditionDrainInProgress, corev1.ConditionFalse, draining),
			lifecycleCondition(ConditionDrained, corev1.ConditionTrue, planned)), PhaseDrained, id, false},
		{"conditions False", true, lifecycleNode(false,
			lifecycleCondition(ConditionMaintenancePlanned, corev1.ConditionFalse, planned),
			lifecycleCondition(ConditionDrainInProgress, corev1.ConditionFalse, draining)), PhaseNone, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NodeLifecycles{Predict: tt.predict}.Signal(tt.node)
			if got.Source != NodeLifecycle || got.Phase != tt.wantPhase || got.Drain != tt.wantDrain || got.Back != tt.wantBack {
				t.Errorf("Signal() = %+v, want phase %v drain %q back %v", got, tt.wantPhase, tt.wantDrain, tt.wantBack)
			}
		})
	}
}
