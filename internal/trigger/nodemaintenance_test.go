package trigger

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func medik8s(name, node, phase string, deleting bool) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemaintenance.medik8s.io/v1beta1",
		"kind":       "NodeMaintenance",
		"metadata":   map[string]any{"name": name, "uid": "uid-" + name},
		"spec":       map[string]any{"nodeName": node, "reason": "replace a DIMM"},
	}}
	if phase != "" {
		obj.Object["status"] = map[string]any{"phase": phase, "drainProgress": int64(50)}
	}
	if deleting {
		now := metav1.Now()
		obj.SetDeletionTimestamp(&now)
	}
	return obj
}

func nvidia(name, node, reason string, deleting bool) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "maintenance.nvidia.com/v1alpha1",
		"kind":       "NodeMaintenance",
		"metadata":   map[string]any{"name": name, "namespace": "nvidia-maintenance", "uid": "uid-" + name},
		"spec":       map[string]any{"nodeName": node, "requestorID": "nvidia.gpu.operator"},
	}}
	if reason != "" {
		obj.Object["status"] = map[string]any{"conditions": []any{
			map[string]any{"type": "Other", "status": "True", "reason": "Draining"},
			map[string]any{"type": "Ready", "status": "False", "reason": reason},
		}}
	}
	if deleting {
		now := metav1.Now()
		obj.SetDeletionTimestamp(&now)
	}
	return obj
}

func TestReadMedik8sNodeMaintenanceEveryPhase(t *testing.T) {
	tests := []struct {
		phase    string
		deleting bool
		want     Phase
	}{
		{phase: "", want: PhaseTargeted},
		{phase: Medik8sPhaseRunning, want: PhaseDraining},
		{phase: Medik8sPhaseSucceeded, want: PhaseDrained},
		{phase: Medik8sPhaseFailed, want: PhaseFailed},
		{phase: Medik8sPhaseRunning, deleting: true, want: PhaseOver},
		{phase: Medik8sPhaseSucceeded, deleting: true, want: PhaseOver},
		{phase: "Paused", want: PhaseNone},
	}
	for _, tt := range tests {
		m, err := ReadMedik8sNodeMaintenance(medik8s("nm-1", "gpu-1", tt.phase, tt.deleting))
		if err != nil {
			t.Fatal(err)
		}
		if m.Phase != tt.want || m.Status != tt.phase || m.NodeName != "gpu-1" || m.ID != "nm-1/uid-nm-1" {
			t.Errorf("phase %q deleting=%v: %+v, want phase %v", tt.phase, tt.deleting, m, tt.want)
		}
	}
}

func TestReadNVIDIANodeMaintenanceEveryReason(t *testing.T) {
	tests := []struct {
		reason   string
		deleting bool
		want     Phase
	}{
		{reason: "", want: PhasePredicted},
		{reason: NVIDIAReasonPending, want: PhasePredicted},
		{reason: NVIDIAReasonScheduled, want: PhaseTargeted},
		{reason: NVIDIAReasonCordon, want: PhaseTargeted},
		{reason: NVIDIAReasonWaitForPodCompletion, want: PhaseTargeted},
		{reason: NVIDIAReasonDraining, want: PhaseDraining},
		{reason: NVIDIAReasonReady, want: PhaseDrained},
		{reason: NVIDIAReasonRequestorFailed, want: PhaseFailed},
		{reason: NVIDIAReasonReady, deleting: true, want: PhaseOver},
		{reason: "SomethingNew", want: PhaseNone},
	}
	for _, tt := range tests {
		m, err := ReadNVIDIANodeMaintenance(nvidia("nm-1", "gpu-1", tt.reason, tt.deleting))
		if err != nil {
			t.Fatal(err)
		}
		if m.Phase != tt.want || m.Status != tt.reason || m.ID != "nvidia-maintenance/nm-1/uid-nm-1" {
			t.Errorf("reason %q deleting=%v: %+v, want phase %v", tt.reason, tt.deleting, m, tt.want)
		}
	}
}

func TestReadNodeMaintenanceRejectsMalformed(t *testing.T) {
	noNode := medik8s("nm-1", "", Medik8sPhaseRunning, false)
	if _, err := ReadMedik8sNodeMaintenance(noNode); err == nil {
		t.Error("medik8s without spec.nodeName: no error")
	}
	badPhase := medik8s("nm-1", "gpu-1", "", false)
	badPhase.Object["status"] = map[string]any{"phase": int64(3)}
	if _, err := ReadMedik8sNodeMaintenance(badPhase); err == nil {
		t.Error("medik8s with a numeric phase: no error")
	}
	badConditions := nvidia("nm-1", "gpu-1", "", false)
	badConditions.Object["status"] = map[string]any{"conditions": "Ready"}
	if _, err := ReadNVIDIANodeMaintenance(badConditions); err == nil {
		t.Error("NVIDIA with conditions not a list: no error")
	}
}

func readAll(t *testing.T, objs ...*unstructured.Unstructured) NodeMaintenances {
	t.Helper()
	var ms []Maintenance
	for _, o := range objs {
		read := ReadMedik8sNodeMaintenance
		if strings.HasPrefix(o.GetAPIVersion(), "maintenance.nvidia.com/") {
			read = ReadNVIDIANodeMaintenance
		}
		m, err := read(o)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	return NewNodeMaintenances(ms)
}

func TestNodeMaintenancesSignal(t *testing.T) {
	node := func(name string, unschedulable bool) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
	}
	running := medik8s("nm-1", "gpu-1", Medik8sPhaseRunning, false)
	running.Object["status"].(map[string]any)["lastError"] = "Cannot evict pod as it would violate the pod's disruption budget."
	src := readAll(t,
		running,
		nvidia("gpu-2-req", "gpu-2", NVIDIAReasonPending, false),
		nvidia("gpu-2-other", "gpu-2", NVIDIAReasonDraining, false),
		medik8s("nm-3", "gpu-3", Medik8sPhaseSucceeded, true),
	)

	got := src.Signal(node("gpu-1", true))
	if got.Source != NodeMaintenance || got.Phase != PhaseDraining || got.Drain != "nodemaintenance/nm-1/uid-nm-1" ||
		!strings.Contains(got.Detail, "disruption budget") || got.Back {
		t.Errorf("gpu-1: Signal() = %+v", got)
	}
	// Two requestors on one node: the one draining wins.
	if got := src.Signal(node("gpu-2", true)); got.Phase != PhaseDraining || got.Drain != "nodemaintenance/nvidia-maintenance/gpu-2-other/uid-gpu-2-other" {
		t.Errorf("gpu-2: Signal() = %+v, want the draining NodeMaintenance", got)
	}
	// Being deleted: over, back once the operator has uncordoned the node.
	if got := src.Signal(node("gpu-3", true)); got.Phase != PhaseOver || got.Back || got.CurrentDrain() != "" {
		t.Errorf("gpu-3 still cordoned: Signal() = %+v", got)
	}
	if got := src.Signal(node("gpu-3", false)); got.Phase != PhaseOver || !got.Back {
		t.Errorf("gpu-3 uncordoned: Signal() = %+v", got)
	}
	// No NodeMaintenance at all.
	if got := src.Signal(node("gpu-4", false)); got.Phase != PhaseNone || got.Drain != "" || !got.Back {
		t.Errorf("gpu-4: Signal() = %+v", got)
	}
}

func TestNodeMaintenanceDrainIDDiffersForARecreatedObject(t *testing.T) {
	first := medik8s("nm-1", "gpu-1", Medik8sPhaseRunning, false)
	second := first.DeepCopy()
	second.SetUID(types.UID("another-uid"))
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}
	a, b := readAll(t, first).Signal(n), readAll(t, second).Signal(n)
	if a.Drain == b.Drain {
		t.Errorf("recreated NodeMaintenance reuses drain id %q", a.Drain)
	}
}

func TestNodeMaintenanceDetailIsBounded(t *testing.T) {
	obj := medik8s("nm-1", "gpu-1", Medik8sPhaseRunning, false)
	obj.Object["status"].(map[string]any)["lastError"] = strings.Repeat("é", 10000)
	got := readAll(t, obj).Signal(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}})
	if len(got.Detail) > maxDetail || !strings.HasPrefix(got.Detail, "Running: é") {
		t.Errorf("Detail has %d bytes, want at most %d: %.40q", len(got.Detail), maxDetail, got.Detail)
	}
}

// Without the NodeMaintenance APIs there is nothing to list: every node is PhaseNone, and back.
func TestNodeMaintenancesWithoutTheAPI(t *testing.T) {
	got := NewNodeMaintenances(nil).Signal(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}})
	if got.Phase != PhaseNone || got.Drain != "" || !got.Back || got.Source != NodeMaintenance {
		t.Errorf("Signal() = %+v, want PhaseNone", got)
	}
}
