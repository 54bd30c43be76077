package guardian

import (
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

var now = time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)

func defaultConfig() Config {
	return Config{
		Preemptive:        true,
		CordonGracePeriod: 10 * time.Minute,
		Evict:             true,
		ScheduleTimeout:   5 * time.Minute,
		ReadyTimeout:      30 * time.Minute,
		MaxSurgeDuration:  24 * time.Hour,
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
		want       NodeDrain
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
			if got := NodeTrigger(cfg, tt.node, tt.pool, now, tt.cordonSeen); got != tt.want {
				t.Errorf("NodeTrigger() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	minute := time.Minute
	tests := []struct {
		name string
		cfg  func(*Config)
		// rec and obs modify the defaults: an MCO drain of node-a in the updating worker pool, surged a
		// minute ago, replacement not Ready yet.
		rec  func(*workload.Record)
		obs  func(*Observation)
		want Action
	}{
		// Two-step restore under way.
		{
			name: "restoring, scaled down",
			rec:  func(r *workload.Record) { r.Restoring = ReasonPoolUpdated },
			obs:  func(o *Observation) { o.ScaledDown = true },
			want: Action{Kind: ActFinishRestore},
		},
		{
			name: "restoring, pod owner deleted",
			rec:  func(r *workload.Record) { r.Restoring = ReasonPoolUpdated },
			obs:  func(o *Observation) { o.PodOwnerGone = true },
			want: Action{Kind: ActFinishRestore},
		},
		{
			name: "restoring, still scaled up: wait, even past the maximum duration",
			rec: func(r *workload.Record) {
				r.Restoring = ReasonMaxDuration
				r.StartTime = metav1.NewTime(now.Add(-48 * time.Hour))
			},
			want: Action{Kind: ActWait, After: evictRetryPeriod},
		},
		// Early restores.
		{
			name: "pod owner deleted",
			obs:  func(o *Observation) { o.PodOwnerGone = true },
			want: Action{Kind: ActRestore, Reason: ReasonPodOwnerGone, Failed: true},
		},
		{
			name: "maximum duration exceeded",
			rec:  func(r *workload.Record) { r.StartTime = metav1.NewTime(now.Add(-24 * time.Hour)) },
			want: Action{Kind: ActRestore, Reason: ReasonMaxDuration, Failed: true},
		},
		{
			name: "maximum duration wins over a finished update",
			rec:  func(r *workload.Record) { r.StartTime = metav1.NewTime(now.Add(-25 * time.Hour)) },
			obs:  func(o *Observation) { o.Pool = updatedPool() },
			want: Action{Kind: ActRestore, Reason: ReasonMaxDuration, Failed: true},
		},
		// The update is over.
		{
			name: "pool updated",
			rec:  readyAndResolved,
			obs:  func(o *Observation) { o.Pool = updatedPool(); o.Node = updatedNode() },
			want: Action{Kind: ActRestore, Reason: ReasonPoolUpdated},
		},
		{
			name: "pool updated before the replacement was Ready",
			obs:  func(o *Observation) { o.Pool = updatedPool() },
			want: Action{Kind: ActRestore, Reason: ReasonPoolUpdated},
		},
		{
			name: "pool deleted",
			rec:  readyAndResolved,
			obs:  func(o *Observation) { o.Pool = nil },
			want: Action{Kind: ActRestore, Reason: ReasonPoolDeleted},
		},
		{
			name: "node updated but the pool still updating (restore=pool)",
			rec:  readyAndResolved,
			obs:  func(o *Observation) { o.Node = updatedNode() },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "restore=node: node updated, Done and schedulable",
			cfg:  func(c *Config) { c.RestoreOnNode = true },
			rec:  readyAndResolved,
			obs:  func(o *Observation) { o.Node = updatedNode() },
			want: Action{Kind: ActRestore, Reason: ReasonNodeUpdated},
		},
		{
			name: "restore=node: node updated but still cordoned",
			cfg:  func(c *Config) { c.RestoreOnNode = true },
			rec:  readyAndResolved,
			obs: func(o *Observation) {
				o.Node = updatedNode()
				o.Node.Spec.Unschedulable = true
			},
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			// The pool's target moved on during the rollout: the node is done all the same.
			name: "restore=node: node ended on another config than the drain's",
			cfg:  func(c *Config) { c.RestoreOnNode = true },
			rec: func(r *workload.Record) {
				readyAndResolved(r)
				r.Drain = "rendered-c"
			},
			obs:  func(o *Observation) { o.Node = updatedNode() },
			want: Action{Kind: ActRestore, Reason: ReasonNodeUpdated},
		},
		{
			name: "restore=node: node still draining",
			cfg:  func(c *Config) { c.RestoreOnNode = true },
			rec:  readyAndResolved,
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "cordon trigger, node uncordoned",
			rec:  cordonRecord,
			obs:  func(o *Observation) { o.Node = updatedNode(); o.Pool = nil },
			want: Action{Kind: ActRestore, Reason: ReasonUncordoned},
		},
		{
			name: "cordon trigger, node uncordoned even though its pool is updating",
			rec:  cordonRecord,
			obs:  func(o *Observation) { o.Node = updatedNode() },
			want: Action{Kind: ActRestore, Reason: ReasonUncordoned},
		},
		{
			name: "cordon trigger, node still cordoned",
			rec:  func(r *workload.Record) { cordonRecord(r); readyAndResolved(r) },
			obs:  func(o *Observation) { o.Node = cordonedSince(updatedNode(), nil); o.Pool = updatedPool() },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "node deleted",
			rec:  readyAndResolved,
			obs:  func(o *Observation) { o.Node = nil },
			want: Action{Kind: ActRestore, Reason: ReasonNodeDeleted},
		},
		// Waiting for the replacement.
		{
			name: "replacement Ready",
			rec:  func(r *workload.Record) { r.ReadyBefore = 1; r.Delta = 1 },
			obs:  func(o *Observation) { o.ReadyElsewhere = 2 },
			want: Action{Kind: ActMarkReady},
		},
		{
			name: "Ready elsewhere counts only beyond the replicas Ready before the surge",
			rec:  func(r *workload.Record) { r.ReadyBefore = 1; r.Delta = 1 },
			obs:  func(o *Observation) { o.ReadyElsewhere = 1 },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "replacement Unschedulable past the schedule timeout",
			obs:  func(o *Observation) { o.UnschedulableSince = ptrTime(now.Add(-5 * minute)) },
			want: Action{Kind: ActRestore, Reason: ReasonUnschedulable, Failed: true},
		},
		{
			name: "replacement Unschedulable, timeout in 10s",
			obs:  func(o *Observation) { o.UnschedulableSince = ptrTime(now.Add(-5*minute + 10*time.Second)) },
			want: Action{Kind: ActWait, After: 10 * time.Second},
		},
		{
			name: "replacement not Ready past the ready timeout",
			rec:  func(r *workload.Record) { r.StartTime = metav1.NewTime(now.Add(-30 * minute)) },
			want: Action{Kind: ActRestore, Reason: ReasonReadyTimeout, Failed: true},
		},
		{
			name: "replacement not Ready, timeout in 5s",
			rec:  func(r *workload.Record) { r.StartTime = metav1.NewTime(now.Add(-30*minute + 5*time.Second)) },
			want: Action{Kind: ActWait, After: 5 * time.Second},
		},
		// Replacement Ready: evict or wait for the drain.
		{
			name: "blocked pod gone from the node",
			rec:  readyOnly,
			obs:  func(o *Observation) { o.LiveOnNode = 0 },
			want: Action{Kind: ActMarkResolved},
		},
		{
			name: "node cordoned and MCO draining: evict",
			rec:  readyOnly,
			want: Action{Kind: ActEvict, After: evictRetryPeriod},
		},
		{
			name: "eviction disabled: wait for the MCO's next attempt",
			cfg:  func(c *Config) { c.Evict = false },
			rec:  readyOnly,
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "MCO draining but node not cordoned yet",
			rec:  readyOnly,
			obs:  func(o *Observation) { o.Node.Spec.Unschedulable = false },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "node merely targeted: no eviction before the drain",
			rec:  func(r *workload.Record) { readyOnly(r); r.Trigger = string(TriggerMCOTargeted) },
			obs:  func(o *Observation) { o.Node = targetedNode() },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "node targeted and cordoned by someone, MCO not draining: no eviction",
			rec:  func(r *workload.Record) { readyOnly(r); r.Trigger = string(TriggerMCOTargeted) },
			obs:  func(o *Observation) { o.Node = cordonedSince(targetedNode(), nil) },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "preemptive surge, drain started since: evict",
			rec:  func(r *workload.Record) { readyOnly(r); r.Trigger = string(TriggerMCOTargeted) },
			want: Action{Kind: ActEvict, After: evictRetryPeriod},
		},
		{
			name: "cordon trigger, node cordoned: evict",
			rec:  func(r *workload.Record) { cordonRecord(r); readyOnly(r) },
			obs:  func(o *Observation) { o.Node = cordonedSince(updatedNode(), nil) },
			want: Action{Kind: ActEvict, After: evictRetryPeriod},
		},
		// Resolved: held until the update is over.
		{
			name: "resolved, pool still updating",
			rec:  readyAndResolved,
			obs:  func(o *Observation) { o.LiveOnNode = 0 },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "resolved, maximum duration in 10s",
			rec: func(r *workload.Record) {
				readyAndResolved(r)
				r.StartTime = metav1.NewTime(now.Add(-24*time.Hour + 10*time.Second))
			},
			want: Action{Kind: ActWait, After: 10 * time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			rec := &workload.Record{
				Version:   workload.RecordVersion,
				Fields:    []workload.Field{{Path: "/spec/replicas", Set: 2}},
				Node:      "node-a",
				Pool:      mco.WorkerPool,
				Trigger:   string(TriggerMCODrain),
				Drain:     "rendered-b",
				Delta:     1,
				StartTime: metav1.NewTime(now.Add(-time.Minute)),
			}
			if tt.rec != nil {
				tt.rec(rec)
			}
			o := Observation{Now: now, Record: rec, Node: drainingNode(), Pool: updatingPool(), LiveOnNode: 1}
			if tt.obs != nil {
				tt.obs(&o)
			}
			got := Decide(cfg, o)
			if got != tt.want {
				t.Errorf("Decide() = %+v, want %+v", got, tt.want)
			}
			if got.Kind == ActWait && got.After <= 0 {
				t.Errorf("Decide() waits with After = %s; a wait must come back", got.After)
			}
		})
	}
}

func readyOnly(r *workload.Record) {
	t := metav1.NewTime(now.Add(-30 * time.Second))
	r.ReadyTime = &t
}

func readyAndResolved(r *workload.Record) {
	readyOnly(r)
	t := metav1.NewTime(now.Add(-20 * time.Second))
	r.ResolvedTime = &t
}

func cordonRecord(r *workload.Record) {
	r.Trigger = string(TriggerCordoned)
	r.Pool = ""
	r.Drain = "cordon-2025-05-01T11:00:00Z"
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
