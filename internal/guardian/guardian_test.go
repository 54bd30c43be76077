package guardian

import (
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/internal/mco"
)

var now = time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)

func defaultConfig() Config {
	return Config{
		Preemptive:        true,
		CordonGracePeriod: 10 * time.Minute,
		Restore:           RestoreAuto,
		Evict:             true,
		ScheduleTimeout:   5 * time.Minute,
		ReadyTimeout:      30 * time.Minute,
		MaxSurgeDuration:  24 * time.Hour,
	}
}

// One MCO update of a node is one drain, whatever the guardian sees of it: targeted, drained, then
// rebooting into the new config. A Surge records that drain (spec.drain) and the lifecycle compares it
// with NodeTrigger's answer: a Pending Surge is finished and a Failed one forgotten once they differ.
func TestNodeTriggerDrainIsStableAcrossOneUpdate(t *testing.T) {
	cfg := defaultConfig()
	pool := updatingPool()
	stages := map[string]*corev1.Node{
		"targeted":  targetedNode(),
		"draining":  drainingNode(),
		"rebooting": withDrain(targetedNode(), "drain-rendered-b", "drain-rendered-b"),
	}
	for name, n := range stages {
		got := NodeTrigger(cfg, n, pool, false, mco.NeedDrain, now, time.Time{})
		if got.Drain != "rendered-b" {
			t.Errorf("%s: NodeTrigger().Drain = %q, want rendered-b", name, got.Drain)
		}
	}
	// A node updated and uncordoned is under no drain any more.
	if got := NodeTrigger(cfg, updatedNode(), pool, false, mco.NeedDrain, now, time.Time{}); got.Drain != "" || got.Trigger != "" {
		t.Errorf("updated node: NodeTrigger() = %+v, want no drain", got)
	}
}

func TestNodeTrigger(t *testing.T) {
	cordonedAt := now.Add(-15 * time.Minute)
	tests := []struct {
		name       string
		cfg        func(*Config)
		node       *corev1.Node
		pool       *mcfgv1.MachineConfigPool
		cordonSeen time.Time
		predicted  bool
		// need is what is known of the node's update; the zero value stands for mco.NeedDrain
		// unless unknown is set.
		need    mco.Need
		unknown bool
		want    NodeDrain
	}{
		{
			name: "MCO draining",
			node: drainingNode(),
			pool: updatingPool(),
			want: NodeDrain{Trigger: TriggerMCODrain, Drain: "rendered-b"},
		},
		{
			name: "MCO draining, preemptive off",
			cfg:  func(c *Config) { c.Preemptive = false },
			node: drainingNode(),
			want: NodeDrain{Trigger: TriggerMCODrain, Drain: "rendered-b"},
		},
		{
			name: "drain done, node rebooting into its new config",
			node: withDrain(targetedNode(), "drain-rendered-b", "drain-rendered-b"),
			pool: updatingPool(),
			want: NodeDrain{Trigger: TriggerMCOTargeted, Drain: "rendered-b"},
		},
		{
			name: "uncordon requested is not a drain",
			node: withDrain(updatedNode(), "uncordon-rendered-b", "drain-rendered-b"),
			pool: updatingPool(),
			want: NodeDrain{},
		},
		{
			name: "targeted in an updating pool, preemptive",
			node: targetedNode(),
			pool: updatingPool(),
			want: NodeDrain{Trigger: TriggerMCOTargeted, Drain: "rendered-b"},
		},
		{
			name: "targeted in an updating pool, preemptive off",
			cfg:  func(c *Config) { c.Preemptive = false },
			node: targetedNode(),
			pool: updatingPool(),
			want: NodeDrain{},
		},
		{
			name: "targeted but the pool is not updating",
			node: targetedNode(),
			pool: updatedPool(),
			want: NodeDrain{},
		},
		{
			name: "targeted without a pool",
			node: targetedNode(),
			want: NodeDrain{},
		},
		{
			name: "updated node",
			node: updatedNode(),
			pool: updatingPool(),
			want: NodeDrain{},
		},
		{
			name: "cordoned, cordoned nodes not watched",
			node: cordonedSince(updatedNode(), &cordonedAt),
			want: NodeDrain{},
		},
		{
			name: "cordoned past the grace period (taint time)",
			cfg:  func(c *Config) { c.CordonedNodes = true },
			node: cordonedSince(updatedNode(), &cordonedAt),
			// The taint's time wins over when this process saw the cordon.
			cordonSeen: now.Add(-time.Minute),
			want:       NodeDrain{Trigger: TriggerCordoned, Drain: "cordon-2025-05-01T11:45:00Z"},
		},
		{
			name: "cordoned within the grace period: recheck when it ends",
			cfg:  func(c *Config) { c.CordonedNodes = true },
			node: cordonedSince(updatedNode(), ptrTime(now.Add(-4*time.Minute))),
			want: NodeDrain{RecheckAfter: 6 * time.Minute},
		},
		{
			name:       "cordoned, taint without time: first sighting counts",
			cfg:        func(c *Config) { c.CordonedNodes = true },
			node:       cordonedSince(updatedNode(), nil),
			cordonSeen: now.Add(-7 * time.Minute),
			want:       NodeDrain{RecheckAfter: 3 * time.Minute},
		},
		{
			name:       "cordoned, no taint at all, first sighting past the grace period",
			cfg:        func(c *Config) { c.CordonedNodes = true },
			node:       func() *corev1.Node { n := updatedNode(); n.Spec.Unschedulable = true; return n }(),
			cordonSeen: now.Add(-11 * time.Minute),
			want:       NodeDrain{Trigger: TriggerCordoned, Drain: "cordon-2025-05-01T11:49:00Z"},
		},
		{
			name: "predicted next target of an updating pool, look-ahead on",
			cfg:  func(c *Config) { c.Lookahead = 1 },
			node: oldNode(), pool: updatingPool(), predicted: true,
			want: NodeDrain{Trigger: TriggerMCOPredicted, Drain: "rendered-b"},
		},
		{
			name: "predicted, look-ahead off",
			node: oldNode(), pool: updatingPool(), predicted: true,
			want: NodeDrain{},
		},
		{
			name: "predicted but the pool is not updating",
			cfg:  func(c *Config) { c.Lookahead = 1 },
			node: oldNode(), pool: updatedPool(), predicted: true,
			want: NodeDrain{},
		},
		{
			name: "not predicted, look-ahead on",
			cfg:  func(c *Config) { c.Lookahead = 1 },
			node: oldNode(), pool: updatingPool(),
			want: NodeDrain{},
		},
		{
			// A drain or a target is the stronger signal: the same drain id, another trigger.
			name: "predicted and draining",
			cfg:  func(c *Config) { c.Lookahead = 1 },
			node: drainingNode(), pool: updatingPool(), predicted: true,
			want: NodeDrain{Trigger: TriggerMCODrain, Drain: "rendered-b"},
		},
		{
			name: "predicted and targeted, preemptive off: still surged ahead",
			cfg:  func(c *Config) { c.Lookahead = 1; c.Preemptive = false },
			node: targetedNode(), pool: updatingPool(), predicted: true,
			want: NodeDrain{Trigger: TriggerMCOPredicted, Drain: "rendered-b"},
		},
		{
			name: "targeted for an update that does not drain",
			node: targetedNode(), pool: updatingPool(), need: mco.NeedNoDrain,
			want: NodeDrain{},
		},
		{
			name: "targeted, the machine-config daemon has not answered yet",
			node: targetedNode(), pool: updatingPool(), unknown: true,
			want: NodeDrain{},
		},
		{
			name: "predicted for an update that does not drain",
			cfg:  func(c *Config) { c.Lookahead = 1 },
			node: updatedNode(), pool: updatingPool(), predicted: true, need: mco.NeedNoDrain,
			want: NodeDrain{},
		},
		{
			name: "predicted, nothing known of the update yet",
			cfg:  func(c *Config) { c.Lookahead = 1 },
			node: updatedNode(), pool: updatingPool(), predicted: true, unknown: true,
			want: NodeDrain{},
		},
		{
			name: "draining whatever the answer said",
			node: drainingNode(), pool: updatingPool(), need: mco.NeedNoDrain,
			want: NodeDrain{Trigger: TriggerMCODrain, Drain: "rendered-b"},
		},
		{
			name: "schedulable node with cordoned nodes watched",
			cfg:  func(c *Config) { c.CordonedNodes = true },
			node: updatedNode(),
			want: NodeDrain{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			need := tt.need
			if need == mco.NeedUnknown && !tt.unknown {
				need = mco.NeedDrain
			}
			if got := NodeTrigger(cfg, tt.node, tt.pool, tt.predicted, need, now, tt.cordonSeen); got != tt.want {
				t.Errorf("NodeTrigger() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// updatedNode runs rendered-b, Done and schedulable.
func updatedNode() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Annotations: map[string]string{
		mco.CurrentConfigAnnotation:    "rendered-b",
		mco.DesiredConfigAnnotation:    "rendered-b",
		mco.StateAnnotation:            mco.StateDone,
		mco.DesiredDrainAnnotation:     "uncordon-rendered-b",
		mco.LastAppliedDrainAnnotation: "uncordon-rendered-b",
	}}}
}

// targetedNode runs rendered-a and has been picked for rendered-b; no drain requested yet.
func targetedNode() *corev1.Node {
	n := updatedNode()
	n.Annotations[mco.CurrentConfigAnnotation] = "rendered-a"
	n.Annotations[mco.DesiredDrainAnnotation] = "uncordon-rendered-a"
	n.Annotations[mco.LastAppliedDrainAnnotation] = "uncordon-rendered-a"
	return n
}

// drainingNode is cordoned and being drained for rendered-b.
func drainingNode() *corev1.Node {
	n := withDrain(targetedNode(), "drain-rendered-b", "uncordon-rendered-a")
	n.Annotations[mco.StateAnnotation] = "Working"
	n.Spec.Unschedulable = true
	return n
}

func withDrain(n *corev1.Node, desired, lastApplied string) *corev1.Node {
	n.Annotations[mco.DesiredDrainAnnotation] = desired
	n.Annotations[mco.LastAppliedDrainAnnotation] = lastApplied
	return n
}

// cordonedSince cordons n with the node lifecycle controller's taint, added at since (nil: no time).
func cordonedSince(n *corev1.Node, since *time.Time) *corev1.Node {
	n.Spec.Unschedulable = true
	taint := corev1.Taint{Key: unschedulableTaint, Effect: corev1.TaintEffectNoSchedule}
	if since != nil {
		taint.TimeAdded = &metav1.Time{Time: *since}
	}
	n.Spec.Taints = append(n.Spec.Taints, taint)
	return n
}

func updatingPool() *mcfgv1.MachineConfigPool {
	p := &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: mco.WorkerPool}}
	p.Spec.Configuration.Name = "rendered-b"
	p.Status.Configuration.Name = "rendered-a"
	p.Status.Conditions = []mcfgv1.MachineConfigPoolCondition{
		{Type: mcfgv1.MachineConfigPoolUpdated, Status: corev1.ConditionFalse},
		{Type: mcfgv1.MachineConfigPoolUpdating, Status: corev1.ConditionTrue},
	}
	return p
}

func updatedPool() *mcfgv1.MachineConfigPool {
	p := updatingPool()
	p.Status.Configuration.Name = "rendered-b"
	p.Status.Conditions = []mcfgv1.MachineConfigPoolCondition{
		{Type: mcfgv1.MachineConfigPoolUpdated, Status: corev1.ConditionTrue},
		{Type: mcfgv1.MachineConfigPoolUpdating, Status: corev1.ConditionFalse},
	}
	return p
}

func ptrTime(t time.Time) *time.Time { return &t }
