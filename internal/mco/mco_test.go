package mco

import (
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeStateDraining(t *testing.T) {
	tests := []struct {
		name         string
		desired      string
		lastApplied  string
		wantDraining bool
	}{
		{name: "drain requested, not yet applied", desired: "drain-rendered-worker-b", lastApplied: "uncordon-rendered-worker-a", wantDraining: true},
		{name: "drain requested, nothing applied ever", desired: "drain-rendered-worker-b", wantDraining: true},
		{name: "drain applied: done", desired: "drain-rendered-worker-b", lastApplied: "drain-rendered-worker-b"},
		{name: "uncordon requested is not a drain", desired: "uncordon-rendered-worker-b", lastApplied: "drain-rendered-worker-b"},
		{name: "uncordon applied", desired: "uncordon-rendered-worker-b", lastApplied: "uncordon-rendered-worker-b"},
		{name: "no annotations", wantDraining: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := node("n1", nil, map[string]string{
				DesiredDrainAnnotation:     tt.desired,
				LastAppliedDrainAnnotation: tt.lastApplied,
			})
			if got := ReadNode(n).Draining(); got != tt.wantDraining {
				t.Errorf("Draining() = %v, want %v", got, tt.wantDraining)
			}
		})
	}
}

func TestNodeStateTargetedAndUpdated(t *testing.T) {
	tests := []struct {
		name                      string
		current, desired, state   string
		wantTargeted, wantUpdated bool
		wantManaged               bool
	}{
		{name: "runs desired config, Done", current: "rendered-a", desired: "rendered-a", state: StateDone, wantUpdated: true, wantManaged: true},
		{name: "runs desired config, daemon Working", current: "rendered-a", desired: "rendered-a", state: "Working", wantManaged: true},
		{name: "targeted for a new config", current: "rendered-a", desired: "rendered-b", state: StateDone, wantTargeted: true, wantManaged: true},
		{name: "targeted and working", current: "rendered-a", desired: "rendered-b", state: "Working", wantTargeted: true, wantManaged: true},
		{name: "desired only (current not written yet) is not targeted", desired: "rendered-b", state: StateDone, wantManaged: true},
		{name: "unmanaged node", state: StateDone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ReadNode(node("n1", nil, map[string]string{
				CurrentConfigAnnotation: tt.current,
				DesiredConfigAnnotation: tt.desired,
				StateAnnotation:         tt.state,
			}))
			if got := s.Targeted(); got != tt.wantTargeted {
				t.Errorf("Targeted() = %v, want %v", got, tt.wantTargeted)
			}
			if got := s.Updated(); got != tt.wantUpdated {
				t.Errorf("Updated() = %v, want %v", got, tt.wantUpdated)
			}
			if got := s.Managed(); got != tt.wantManaged {
				t.Errorf("Managed() = %v, want %v", got, tt.wantManaged)
			}
		})
	}
}

func TestPoolForNode(t *testing.T) {
	master := pool(MasterPool, map[string]string{"node-role.kubernetes.io/master": ""})
	worker := pool(WorkerPool, map[string]string{"node-role.kubernetes.io/worker": ""})
	gpu := pool("gpu", map[string]string{"node-role.kubernetes.io/gpu": ""})
	infra := pool("infra", map[string]string{"node-role.kubernetes.io/infra": ""})
	noSelector := &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: "no-selector"}}
	emptySelector := &mcfgv1.MachineConfigPool{
		ObjectMeta: metav1.ObjectMeta{Name: "everything"},
		Spec:       mcfgv1.MachineConfigPoolSpec{NodeSelector: &metav1.LabelSelector{}},
	}
	all := []*mcfgv1.MachineConfigPool{noSelector, emptySelector, worker, gpu, infra, master}

	tests := []struct {
		name   string
		labels map[string]string
		pools  []*mcfgv1.MachineConfigPool
		want   string // "" means nil
	}{
		{name: "plain worker", labels: roles("worker"), pools: all, want: WorkerPool},
		{name: "custom pool wins over worker", labels: roles("worker", "gpu"), pools: all, want: "gpu"},
		{name: "custom pool wins whatever the order", labels: roles("worker", "gpu"), pools: []*mcfgv1.MachineConfigPool{gpu, worker}, want: "gpu"},
		{name: "master wins over worker", labels: roles("master", "worker"), pools: all, want: MasterPool},
		{name: "master wins over custom", labels: roles("master", "gpu"), pools: all, want: MasterPool},
		{name: "two custom pools: the MCO refuses, so do we", labels: roles("worker", "gpu", "infra"), pools: all, want: ""},
		{name: "no pool matches", labels: map[string]string{"kubernetes.io/hostname": "n1"}, pools: all, want: ""},
		{name: "nil and empty selectors own nothing", labels: roles("other"), pools: []*mcfgv1.MachineConfigPool{noSelector, emptySelector}, want: ""},
		{name: "no pools", labels: roles("worker"), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PoolForNode(node("n1", tt.labels, nil), tt.pools)
			switch {
			case got == nil && tt.want != "":
				t.Errorf("PoolForNode() = nil, want %q", tt.want)
			case got != nil && got.Name != tt.want:
				t.Errorf("PoolForNode() = %q, want %q", got.Name, orNil(tt.want))
			}
		})
	}
}

func TestPoolUpdated(t *testing.T) {
	tests := []struct {
		name         string
		updated      corev1.ConditionStatus
		updating     corev1.ConditionStatus
		spec, status string
		wantUpdated  bool
		wantUpdating bool
	}{
		{name: "updated, same config", updated: corev1.ConditionTrue, updating: corev1.ConditionFalse, spec: "rendered-b", status: "rendered-b", wantUpdated: true},
		{name: "updated condition but status config lags", updated: corev1.ConditionTrue, updating: corev1.ConditionFalse, spec: "rendered-b", status: "rendered-a"},
		{name: "updating", updated: corev1.ConditionFalse, updating: corev1.ConditionTrue, spec: "rendered-b", status: "rendered-a", wantUpdating: true},
		{name: "both conditions true is not updated", updated: corev1.ConditionTrue, updating: corev1.ConditionTrue, spec: "rendered-b", status: "rendered-b", wantUpdating: true},
		{name: "updated unknown", updated: corev1.ConditionUnknown, spec: "rendered-b", status: "rendered-b"},
		{name: "no conditions", spec: "rendered-b", status: "rendered-b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pool(WorkerPool, nil)
			p.Spec.Configuration.Name = tt.spec
			p.Status.Configuration.Name = tt.status
			if tt.updated != "" {
				p.Status.Conditions = append(p.Status.Conditions, mcfgv1.MachineConfigPoolCondition{Type: mcfgv1.MachineConfigPoolUpdated, Status: tt.updated})
			}
			if tt.updating != "" {
				p.Status.Conditions = append(p.Status.Conditions, mcfgv1.MachineConfigPoolCondition{Type: mcfgv1.MachineConfigPoolUpdating, Status: tt.updating})
			}
			if got := PoolUpdated(p); got != tt.wantUpdated {
				t.Errorf("PoolUpdated() = %v, want %v", got, tt.wantUpdated)
			}
			if got := PoolUpdating(p); got != tt.wantUpdating {
				t.Errorf("PoolUpdating() = %v, want %v", got, tt.wantUpdating)
			}
		})
	}
}

func node(name string, labels, annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations}}
}

func pool(name string, selector map[string]string) *mcfgv1.MachineConfigPool {
	p := &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if selector != nil {
		p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: selector}
	}
	return p
}

// roles returns the node-role labels the MCO's pools select on.
func roles(names ...string) map[string]string {
	l := map[string]string{}
	for _, n := range names {
		l["node-role.kubernetes.io/"+n] = ""
	}
	return l
}

func orNil(s string) string {
	if s == "" {
		return "<nil>"
	}
	return s
}
