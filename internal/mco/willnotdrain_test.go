package mco

import (
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
)

// WillNotDrain decides which nodes' Ready pods let --restore=auto undo a surge during a rollout: a
// node it wrongly calls safe makes the restored workload stall the drain again.
func TestWillNotDrain(t *testing.T) {
	// updated runs the pool's target rendered-b, idle.
	updated := map[string]string{
		CurrentConfigAnnotation: "rendered-b", DesiredConfigAnnotation: "rendered-b", StateAnnotation: StateDone,
		DesiredDrainAnnotation: "uncordon-rendered-b", LastAppliedDrainAnnotation: "uncordon-rendered-b",
	}
	// old runs rendered-a and is not targeted yet.
	old := map[string]string{
		CurrentConfigAnnotation: "rendered-a", DesiredConfigAnnotation: "rendered-a", StateAnnotation: StateDone,
		DesiredDrainAnnotation: "uncordon-rendered-a", LastAppliedDrainAnnotation: "uncordon-rendered-a",
	}
	with := func(base map[string]string, kv ...string) map[string]string {
		a := map[string]string{}
		for k, v := range base {
			a[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			a[kv[i]] = kv[i+1]
		}
		return a
	}
	updating := rollout(false)
	done := rollout(true)

	tests := []struct {
		name        string
		annotations map[string]string
		cordoned    bool
		pool        *mcfgv1.MachineConfigPool
		want        bool
	}{
		{name: "cordoned, even though updated", annotations: updated, cordoned: true, pool: done},
		{name: "cordoned node without a pool", cordoned: true},
		{name: "targeted for the pool's target", annotations: with(old, DesiredConfigAnnotation, "rendered-b"), pool: updating},
		{name: "targeted, pool already reports Updated", annotations: with(old, DesiredConfigAnnotation, "rendered-b"), pool: done},
		{name: "targeted, no pool", annotations: with(old, DesiredConfigAnnotation, "rendered-b")},
		{name: "daemon Working on the target config", annotations: with(updated, StateAnnotation, "Working"), pool: updating},
		{name: "daemon Working, no pool", annotations: with(updated, StateAnnotation, "Working")},
		{name: "daemon Degraded", annotations: with(updated, StateAnnotation, "Degraded"), pool: updating},
		{name: "drain requested, not carried out yet", annotations: with(updated, DesiredDrainAnnotation, "drain-rendered-b"), pool: updating},
		{name: "unmanaged node, no pool", want: true},
		{name: "MCO node without a pool", annotations: old, want: true},
		{name: "pool Updated", annotations: updated, pool: done, want: true},
		{name: "pool Updated, node on an older config but idle and not targeted", annotations: old, pool: done, want: true},
		{name: "pool updating, node on the target config and idle", annotations: updated, pool: updating, want: true},
		{name: "pool updating, node still on the old config", annotations: old, pool: updating},
		{name: "pool updating, unmanaged node", pool: updating},
		{name: "pool updating, desired config written but no current config yet", annotations: with(updated, CurrentConfigAnnotation, ""), pool: updating},
		{name: "pool updating, node ran the target but the pool moved on", annotations: updated, pool: func() *mcfgv1.MachineConfigPool {
			p := rollout(false)
			p.Spec.Configuration.Name = "rendered-c"
			return p
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := node("n1", nil, tt.annotations)
			n.Spec.Unschedulable = tt.cordoned
			if got := WillNotDrain(n, tt.pool); got != tt.want {
				t.Errorf("WillNotDrain() = %v, want %v", got, tt.want)
			}
		})
	}
}

// rollout is a worker pool rolling out rendered-b (done: finished).
func rollout(done bool) *mcfgv1.MachineConfigPool {
	p := pool(WorkerPool, map[string]string{"node-role.kubernetes.io/worker": ""})
	p.Spec.Configuration.Name = "rendered-b"
	p.Status.Configuration.Name = "rendered-a"
	updated, updating := corev1.ConditionFalse, corev1.ConditionTrue
	if done {
		p.Status.Configuration.Name = "rendered-b"
		updated, updating = corev1.ConditionTrue, corev1.ConditionFalse
	}
	p.Status.Conditions = []mcfgv1.MachineConfigPoolCondition{
		{Type: mcfgv1.MachineConfigPoolUpdated, Status: updated},
		{Type: mcfgv1.MachineConfigPoolUpdating, Status: updating},
	}
	return p
}
