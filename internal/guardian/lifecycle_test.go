package guardian

import (
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

const cordonDrain = "cordon-2025-05-01T11:00:00Z"

// allActionKinds is every action Decide can answer; TestDecide must reach each of them.
var allActionKinds = []ActionKind{
	ActWait, ActWriteFields, ActMarkSurged, ActDiscard, ActMarkReady, ActMarkEvictionDue, ActEvict, ActMarkResolved,
	ActStartRestore, ActRestoreFields, ActFinish, ActForget,
}

type decideCase struct {
	name  string
	phase v1alpha1.Phase
	cfg   func(*Config)
	// surge and obs modify the defaults: an MCO drain of node-a (for rendered-b) in the updating
	// worker pool, surged a minute ago by one replica of a single-replica Deployment, one pod still
	// on the node, the fields where the phase says they are.
	surge func(*v1alpha1.Surge)
	obs   func(*Observation)
	want  Action
}

func TestDecide(t *testing.T) {
	var cases []decideCase
	cases = append(cases, pendingCases()...)
	cases = append(cases, surgedCases()...)
	cases = append(cases, readyCases()...)
	cases = append(cases, resolvedCases()...)
	cases = append(cases, restoringCases()...)
	cases = append(cases, failedCases()...)
	cases = append(cases, lookaheadCases()...)
	cases = append(cases, preparedCases()...)
	cases = append(cases, sourceCases()...)

	seen := map[ActionKind]bool{}
	for _, tt := range cases {
		t.Run(string(tt.phaseOrPending())+"/"+tt.name, func(t *testing.T) {
			got := decide(tt)
			seen[got.Kind] = true
			if got != tt.want {
				t.Errorf("Decide() = %+v, want %+v", got, tt.want)
			}
			if got.Kind == ActWait && got.After <= 0 {
				t.Errorf("Decide() waits with After = %s; a wait must come back", got.After)
			}
			if got.Kind != ActStartRestore && got.Failed || got.Kind != ActStartRestore && got.Reason != "" && got.Reason != ReasonDrainOver {
				t.Errorf("Decide() = %+v: only a StartRestore carries a restore reason", got)
			}
			if got.Reason == ReasonDrainOver && got.Kind != ActMarkResolved {
				t.Errorf("Decide() = %+v: DrainOver explains only a MarkResolved", got)
			}
		})
	}
	for _, k := range allActionKinds {
		if !seen[k] {
			t.Errorf("no case answers %s", k)
		}
	}
}

func (tt decideCase) phaseOrPending() v1alpha1.Phase {
	if tt.phase == "" {
		return v1alpha1.PhasePending
	}
	return tt.phase
}

func decide(tt decideCase) Action {
	cfg := defaultConfig()
	cfg.EvictTimeout = 10 * time.Minute
	if tt.cfg != nil {
		tt.cfg(&cfg)
	}
	s := testSurge(tt.phase)
	switch s.PhaseOf() {
	case v1alpha1.PhasePending:
		// A Pending Surge is written seconds before its fields.
		s.Spec.StartTime = metav1.NewTime(now.Add(-10 * time.Second))
	case v1alpha1.PhaseReady:
		// Its node has been under drain for half a minute (see noEvictionDue).
		evictionDueAgo(30 * time.Second)(s)
	}
	if tt.surge != nil {
		tt.surge(s)
	}
	fields := []workload.FieldState{workload.FieldAtSet}
	if p := s.PhaseOf(); p == v1alpha1.PhasePending || p == v1alpha1.PhaseFailed {
		fields = []workload.FieldState{workload.FieldAtOriginal}
	}
	o := Observation{
		Now: now, Surge: s, Fields: fields,
		Node: drainingNode(), Pool: updatingPool(), CurrentDrain: "rendered-b",
		LiveOnNode: 1,
	}
	if s.PhaseOf() == v1alpha1.PhaseResolved {
		o.LiveOnNode = 0
	}
	if Trigger(s.Spec.Trigger) == TriggerCordoned {
		o.Node, o.Pool, o.CurrentDrain = cordonedSince(updatedNode(), nil), nil, cordonDrain
	}
	if tt.obs != nil {
		tt.obs(&o)
	}
	return Decide(cfg, o)
}

func pendingCases() []decideCase {
	return []decideCase{
		{name: "no phase written yet, fields at original: write them", phase: "", want: Action{Kind: ActWriteFields}},
		{name: "fields at original: write them", phase: v1alpha1.PhasePending, want: Action{Kind: ActWriteFields}},
		{
			name: "all fields at set (crash after the write): mark surged", phase: v1alpha1.PhasePending,
			obs:  fields(workload.FieldAtSet, workload.FieldAtSet),
			want: Action{Kind: ActMarkSurged},
		},
		{
			// The write happened: it must be undone through the lifecycle, not forgotten.
			name: "fields at set although the stall is gone: mark surged all the same", phase: v1alpha1.PhasePending,
			obs:  func(o *Observation) { fields(workload.FieldAtSet)(o); o.CurrentDrain = ""; o.Pool = updatedPool() },
			want: Action{Kind: ActMarkSurged},
		},
		{
			name: "field changed by someone else before the write: discard", phase: v1alpha1.PhasePending,
			obs:  fields(workload.FieldChanged),
			want: Action{Kind: ActDiscard},
		},
		{
			// The write happened (one patch sets every field), then someone changed the other field:
			// the surge goes on and its restore keeps their value; forgetting it would strand a field
			// at the surged value with no record.
			name: "one field at set, the other changed since: mark surged", phase: v1alpha1.PhasePending,
			obs:  fields(workload.FieldAtSet, workload.FieldChanged),
			want: Action{Kind: ActMarkSurged},
		},
		{
			name: "one field at set, the other back at its original: mark surged", phase: v1alpha1.PhasePending,
			obs:  fields(workload.FieldAtSet, workload.FieldAtOriginal),
			want: Action{Kind: ActMarkSurged},
		},
		{
			name: "one of two fields changed: discard", phase: v1alpha1.PhasePending,
			obs:  fields(workload.FieldAtOriginal, workload.FieldChanged),
			want: Action{Kind: ActDiscard},
		},
		{
			name: "node no longer under any drain: finish", phase: v1alpha1.PhasePending,
			obs:  func(o *Observation) { o.CurrentDrain = ""; o.Node = updatedNode() },
			want: Action{Kind: ActFinish},
		},
		{
			name: "node under another drain than the Surge's: finish", phase: v1alpha1.PhasePending,
			obs:  func(o *Observation) { o.CurrentDrain = "rendered-c" },
			want: Action{Kind: ActFinish},
		},
		{
			// The write went through but the cache still holds the version it replaced: the fields
			// only look unwritten. Dropping the Surge would leave the count raised with nothing to
			// restore it (seen end to end: a GPU driver upgrade's predicted stall ended 20 ms after
			// the write).
			name: "own write not in the cache yet, stall gone: wait, never drop", phase: v1alpha1.PhasePending,
			obs:  func(o *Observation) { o.CurrentDrain = ""; o.Node = updatedNode(); o.WriteUnseen = true },
			want: Action{Kind: ActWait, After: WriteSeenRetry},
		},
		{
			name: "own write not in the cache yet: wait, not a second write", phase: v1alpha1.PhasePending,
			obs:  func(o *Observation) { o.WriteUnseen = true },
			want: Action{Kind: ActWait, After: WriteSeenRetry},
		},
		{
			// A cache that never catches up (a broken watch) does not hold the slot for ever; the
			// Failed Surge is kept, and restores the write if it is seen after all.
			name: "own write unseen for PendingTimeout: fail", phase: v1alpha1.PhasePending,
			surge: startedAgo(PendingTimeout),
			obs:   func(o *Observation) { o.WriteUnseen = true },
			want:  Action{Kind: ActStartRestore, Reason: ReasonWriteTimeout, Failed: true},
		},
		{
			// A tenant changing the workload in a loop, or a webhook refusing the write: the slot
			// is not held for ever.
			name: "fields not written for PendingTimeout: fail", phase: v1alpha1.PhasePending,
			surge: startedAgo(PendingTimeout),
			want:  Action{Kind: ActStartRestore, Reason: ReasonWriteTimeout, Failed: true},
		},
		{
			// The guardian was down: the deadline runs from its first attempt, not from the start.
			name: "Pending for long, first attempt 10s ago: write", phase: v1alpha1.PhasePending,
			surge: startedAgo(time.Hour),
			obs:   func(o *Observation) { o.WritingSince = now.Add(-10 * time.Second) },
			want:  Action{Kind: ActWriteFields},
		},
		{
			name: "Pending for long, attempts for PendingTimeout: fail", phase: v1alpha1.PhasePending,
			surge: startedAgo(time.Hour),
			obs:   func(o *Observation) { o.WritingSince = now.Add(-PendingTimeout) },
			want:  Action{Kind: ActStartRestore, Reason: ReasonWriteTimeout, Failed: true},
		},
		{
			name: "fields not written yet, PendingTimeout in a second: write", phase: v1alpha1.PhasePending,
			surge: startedAgo(PendingTimeout - time.Second),
			want:  Action{Kind: ActWriteFields},
		},
		{
			name: "the write landed after PendingTimeout: mark surged, never forget it", phase: v1alpha1.PhasePending,
			surge: startedAgo(2 * PendingTimeout),
			obs:   fields(workload.FieldAtSet),
			want:  Action{Kind: ActMarkSurged},
		},
		{
			name: "node deleted: finish", phase: v1alpha1.PhasePending,
			obs:  func(o *Observation) { o.Node = nil },
			want: Action{Kind: ActFinish},
		},
		{
			name: "pool updated: finish", phase: v1alpha1.PhasePending,
			obs:  func(o *Observation) { o.Pool = updatedPool() },
			want: Action{Kind: ActFinish},
		},
		{
			name: "pod owner deleted: finish", phase: v1alpha1.PhasePending,
			obs:  func(o *Observation) { o.PodOwnerGone = true },
			want: Action{Kind: ActFinish},
		},
		{
			name: "cordon trigger, node uncordoned: finish", phase: v1alpha1.PhasePending, surge: cordonSurge,
			obs:  func(o *Observation) { o.Node = updatedNode() },
			want: Action{Kind: ActFinish},
		},
		{
			name: "cordon trigger, node still cordoned: write", phase: v1alpha1.PhasePending, surge: cordonSurge,
			want: Action{Kind: ActWriteFields},
		},
		{
			name: "restore=auto: pods on safe nodes do not stop a surge not written yet", phase: v1alpha1.PhasePending,
			obs:  func(o *Observation) { o.ReadyOnSafeNodes = 3 },
			want: Action{Kind: ActWriteFields},
		},
		{
			name: "restore=node, node being drained: write", phase: v1alpha1.PhasePending, cfg: restore(RestoreNode),
			want: Action{Kind: ActWriteFields},
		},
	}
}

func surgedCases() []decideCase {
	minute := time.Minute
	surged := v1alpha1.PhaseSurged
	return []decideCase{
		{
			name: "replacement Ready", phase: surged,
			surge: func(s *v1alpha1.Surge) { s.Spec.ReadyBefore = 1 },
			obs:   func(o *Observation) { o.ReadyElsewhere = 2 },
			// The node is under MCO drain: evict in the same sync, before the MCO's next attempt;
			// --evict-timeout runs from this write.
			want: Action{Kind: ActMarkReady, EvictNow: true, EvictionDue: true},
		},
		{
			name: "replacement Ready, eviction disabled", phase: surged, cfg: func(c *Config) { c.Evict = false },
			obs:  func(o *Observation) { o.ReadyElsewhere = 1 },
			want: Action{Kind: ActMarkReady, EvictionDue: true},
		},
		{
			name: "replacement Ready, node only targeted: no eviction yet", phase: surged,
			surge: func(s *v1alpha1.Surge) { s.Spec.Trigger = string(TriggerMCOTargeted) },
			obs:   func(o *Observation) { o.ReadyElsewhere = 1; o.Node = targetedNode() },
			want:  Action{Kind: ActMarkReady},
		},
		{
			name: "Ready elsewhere counts only beyond the replicas Ready before the surge", phase: surged,
			surge: func(s *v1alpha1.Surge) { s.Spec.ReadyBefore = 1 },
			obs:   func(o *Observation) { o.ReadyElsewhere = 1 },
			want:  Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "Ready replacement wins over another pod stuck Unschedulable", phase: surged,
			obs:  func(o *Observation) { o.ReadyElsewhere = 1; o.UnschedulableSince = ptrTime(now.Add(-10 * minute)) },
			want: Action{Kind: ActMarkReady, EvictNow: true, EvictionDue: true},
		},
		{
			// A tenant's quota refuses the replacement: the slot is freed after 30 s, not after
			// --ready-timeout.
			name: "replacements refused past the bound: restore, failed", phase: surged,
			surge: surgedAgo(ReplacementRefusedTimeout),
			obs:   func(o *Observation) { o.ReplacementRefused = "exceeded quota: pods" },
			want:  Action{Kind: ActStartRestore, Reason: ReasonReplacementRefused, Failed: true, Detail: "exceeded quota: pods"},
		},
		{
			name: "replacements refused for 10s: look again when the bound is over", phase: surged,
			surge: surgedAgo(10 * time.Second),
			obs:   func(o *Observation) { o.ReplacementRefused = "exceeded quota: pods" },
			want:  Action{Kind: ActWait, After: ReplacementRefusedTimeout - 10*time.Second},
		},
		{
			// The bound runs from the write of the fields, not from the Surge's creation.
			name: "replacements refused, fields written 10s ago by a Surge created long before", phase: surged,
			surge: func(s *v1alpha1.Surge) { startedAgo(5 * minute)(s); surgedAgo(10 * time.Second)(s) },
			obs:   func(o *Observation) { o.ReplacementRefused = "exceeded quota: pods" },
			want:  Action{Kind: ActWait, After: ReplacementRefusedTimeout - 10*time.Second},
		},
		{
			name: "replacement Unschedulable past the schedule timeout", phase: surged,
			obs:  func(o *Observation) { o.UnschedulableSince = ptrTime(now.Add(-5 * minute)) },
			want: Action{Kind: ActStartRestore, Reason: ReasonUnschedulable, Failed: true},
		},
		{
			name: "replacement Unschedulable, schedule timeout in 10s", phase: surged,
			obs:  func(o *Observation) { o.UnschedulableSince = ptrTime(now.Add(-5*minute + 10*time.Second)) },
			want: Action{Kind: ActWait, After: 10 * time.Second},
		},
		{
			name: "replacement not Ready past the ready timeout", phase: surged,
			surge: startedAgo(30 * minute),
			want:  Action{Kind: ActStartRestore, Reason: ReasonReadyTimeout, Failed: true},
		},
		{
			name: "replacement not Ready, ready timeout in 5s", phase: surged,
			surge: startedAgo(30*minute - 5*time.Second),
			want:  Action{Kind: ActWait, After: 5 * time.Second},
		},
		{
			name: "pod owner deleted", phase: surged,
			obs:  func(o *Observation) { o.PodOwnerGone = true },
			want: Action{Kind: ActStartRestore, Reason: ReasonPodOwnerGone, Failed: true},
		},
		{
			name: "maximum duration exceeded", phase: surged,
			surge: startedAgo(24 * time.Hour),
			want:  Action{Kind: ActStartRestore, Reason: ReasonMaxDuration, Failed: true},
		},
		{
			name: "maximum duration wins over a finished update", phase: surged,
			surge: startedAgo(25 * time.Hour),
			obs:   func(o *Observation) { o.Pool = updatedPool() },
			want:  Action{Kind: ActStartRestore, Reason: ReasonMaxDuration, Failed: true},
		},
		{
			name: "pool updated before the replacement was Ready", phase: surged,
			obs:  func(o *Observation) { o.Pool = updatedPool(); o.Node = updatedNode() },
			want: Action{Kind: ActStartRestore, Reason: ReasonPoolUpdated},
		},
		{
			name: "node deleted", phase: surged,
			obs:  func(o *Observation) { o.Node = nil },
			want: Action{Kind: ActStartRestore, Reason: ReasonNodeDeleted},
		},
		{
			name: "pool deleted", phase: surged,
			obs:  func(o *Observation) { o.Pool = nil },
			want: Action{Kind: ActStartRestore, Reason: ReasonPoolDeleted},
		},
		{
			name: "cordon trigger, node uncordoned", phase: surged, surge: cordonSurge,
			obs:  func(o *Observation) { o.Node = updatedNode() },
			want: Action{Kind: ActStartRestore, Reason: ReasonUncordoned},
		},
	}
}

func readyCases() []decideCase {
	ready := v1alpha1.PhaseReady
	targeted := func(s *v1alpha1.Surge) { s.Spec.Trigger = string(TriggerMCOTargeted) }
	return []decideCase{
		{
			name: "no pod left on the node", phase: ready,
			obs:  func(o *Observation) { o.LiveOnNode = 0 },
			want: Action{Kind: ActMarkResolved},
		},
		{
			name: "node cordoned and MCO draining: evict", phase: ready,
			want: Action{Kind: ActEvict, After: evictRetryPeriod},
		},
		{
			name: "eviction disabled: wait for the MCO's next attempt", phase: ready, cfg: func(c *Config) { c.Evict = false },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "drain started after the replacement was Ready: record it and evict", phase: ready, surge: noEvictionDue,
			want: Action{Kind: ActMarkEvictionDue, EvictNow: true},
		},
		{
			name: "drain started, eviction disabled: record it", phase: ready, surge: noEvictionDue, cfg: func(c *Config) { c.Evict = false },
			want: Action{Kind: ActMarkEvictionDue},
		},
		{
			// A second PDB over the pod, minAvailable raised: the tenant's own budgets refuse the
			// eviction, and the surge would hold its slot for --max-surge-duration.
			name: "blocked pod still on the node after --evict-timeout: restore, failed", phase: ready,
			surge: evictionDueAgo(10 * time.Minute),
			want:  Action{Kind: ActStartRestore, Reason: ReasonEvictTimeout, Failed: true},
		},
		{
			name: "eviction disabled, --evict-timeout over: restore, failed", phase: ready, cfg: func(c *Config) { c.Evict = false },
			surge: evictionDueAgo(11 * time.Minute),
			want:  Action{Kind: ActStartRestore, Reason: ReasonEvictTimeout, Failed: true},
		},
		{
			// Another PDB selects the pod while the surge's own allows the disruption: the Eviction
			// API refuses it whatever the budgets; no blind retry until --evict-timeout.
			name: "another PDB selects the pod: restore, failed, at once", phase: ready,
			obs:  func(o *Observation) { o.OtherPDB = "pin" },
			want: Action{Kind: ActStartRestore, Reason: ReasonMultiplePDBs, Failed: true, Detail: "PDB pin also selects the pod"},
		},
		{
			name: "another PDB selects the pod before the eviction was asked for: ask first", phase: ready, surge: noEvictionDue,
			obs:  func(o *Observation) { o.OtherPDB = "pin" },
			want: Action{Kind: ActMarkEvictionDue, EvictNow: true},
		},
		{
			name: "--evict-timeout in 2s: evict, look again then", phase: ready,
			surge: evictionDueAgo(10*time.Minute - 2*time.Second),
			want:  Action{Kind: ActEvict, After: 2 * time.Second},
		},
		{
			name: "pod gone at the --evict-timeout: resolved", phase: ready,
			surge: evictionDueAgo(time.Hour),
			obs:   func(o *Observation) { o.LiveOnNode = 0 },
			want:  Action{Kind: ActMarkResolved},
		},
		{
			name: "MCO draining but node not cordoned yet", phase: ready,
			obs:  func(o *Observation) { o.Node.Spec.Unschedulable = false },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "node merely targeted: no eviction before the drain", phase: ready, surge: targeted,
			obs:  func(o *Observation) { o.Node = targetedNode() },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "node targeted and cordoned by someone, MCO not draining: no eviction", phase: ready, surge: targeted,
			obs:  func(o *Observation) { o.Node = cordonedSince(targetedNode(), nil) },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "preemptive surge, drain started since: evict", phase: ready, surge: targeted,
			want: Action{Kind: ActEvict, After: evictRetryPeriod},
		},
		{
			name: "cordon trigger, node cordoned: evict", phase: ready, surge: cordonSurge,
			want: Action{Kind: ActEvict, After: evictRetryPeriod},
		},
		{
			name: "restore=auto: pods on safe nodes do not restore before the node is left", phase: ready,
			obs:  func(o *Observation) { o.ReadyOnSafeNodes = 2 },
			want: Action{Kind: ActEvict, After: evictRetryPeriod},
		},
		{
			name: "pod owner deleted", phase: ready,
			obs:  func(o *Observation) { o.PodOwnerGone = true },
			want: Action{Kind: ActStartRestore, Reason: ReasonPodOwnerGone, Failed: true},
		},
	}
}

func resolvedCases() []decideCase {
	resolved := v1alpha1.PhaseResolved
	safe := func(n int32) func(*Observation) { return func(o *Observation) { o.ReadyOnSafeNodes = n } }
	capacityWanted := func(o *Observation) { o.ReadyOnSafeNodes, o.ReadySurvivors, o.CapacityWanted = 1, 1, true }
	// survivorOnOldNode: the workload's only Ready pod runs on the spare node, which this update
	// has still to drain; the replica on the updated node is still starting.
	survivorOnOldNode := func(o *Observation) { o.ReadySurvivors, o.CapacityWanted = 1, true }
	replicas := func(n int32) func(*v1alpha1.Surge) { return func(s *v1alpha1.Surge) { s.Spec.Replicas = n } }
	return []decideCase{
		// --restore=auto (the default).
		{
			name: "auto: the original count is Ready on safe nodes: restore", phase: resolved, obs: safe(1),
			want: Action{Kind: ActStartRestore, Reason: ReasonSurvivorsSafe},
		},
		{
			name: "auto: more than enough Ready on safe nodes", phase: resolved, obs: safe(2),
			want: Action{Kind: ActStartRestore, Reason: ReasonSurvivorsSafe},
		},
		{
			name: "auto: fewer than the original count on safe nodes: hold", phase: resolved, surge: replicas(2), obs: safe(1),
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "auto: two replicas, both on safe nodes", phase: resolved, surge: replicas(2), obs: safe(2),
			want: Action{Kind: ActStartRestore, Reason: ReasonSurvivorsSafe},
		},
		{
			name: "auto: no pod on a safe node: hold", phase: resolved,
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "auto: spec.replicas 0 still needs one safe Ready pod", phase: resolved, surge: replicas(0),
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "auto: pool updated", phase: resolved,
			obs:  func(o *Observation) { o.Pool = updatedPool(); o.Node = updatedNode() },
			want: Action{Kind: ActStartRestore, Reason: ReasonPoolUpdated},
		},
		{
			name: "groups: pool updated while the group the restore keeps re-forms: hold", phase: resolved,
			obs:  func(o *Observation) { o.Pool = updatedPool(); o.Node = updatedNode(); o.Groups = true },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "groups: pool updated and the kept group whole: restore", phase: resolved,
			obs: func(o *Observation) {
				o.Pool = updatedPool()
				o.Node = updatedNode()
				o.Groups, o.ReadySurvivors, o.ReadyOnSafeNodes = true, 1, 1
			},
			want: Action{Kind: ActStartRestore, Reason: ReasonSurvivorsSafe},
		},
		{
			name: "auto: pool deleted", phase: resolved,
			obs:  func(o *Observation) { o.Pool = nil },
			want: Action{Kind: ActStartRestore, Reason: ReasonPoolDeleted},
		},
		// --restore=pool.
		{
			name: "pool: safe survivors do not restore while the pool updates", phase: resolved, cfg: restore(RestorePool), obs: safe(1),
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "pool: node updated, pool still updating: hold", phase: resolved, cfg: restore(RestorePool),
			obs:  func(o *Observation) { o.Node = updatedNode() },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "pool: pool updated", phase: resolved, cfg: restore(RestorePool),
			obs:  func(o *Observation) { o.Pool = updatedPool(); o.Node = updatedNode() },
			want: Action{Kind: ActStartRestore, Reason: ReasonPoolUpdated},
		},
		{
			name: "pool: another stall wants the capacity and survivors are safe: give it back", phase: resolved, cfg: restore(RestorePool),
			obs:  capacityWanted,
			want: Action{Kind: ActStartRestore, Reason: ReasonCapacityNeeded},
		},
		{
			name: "pool: capacity wanted but no Ready survivor: hold", phase: resolved, cfg: restore(RestorePool),
			obs:  func(o *Observation) { o.CapacityWanted = true },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "pool: capacity wanted, survivor Ready on a node still to update: give it back", phase: resolved, cfg: restore(RestorePool),
			obs:  survivorOnOldNode,
			want: Action{Kind: ActStartRestore, Reason: ReasonCapacityNeeded},
		},
		{
			name: "auto: capacity wanted, survivor Ready on a node still to update: give it back", phase: resolved,
			obs:  survivorOnOldNode,
			want: Action{Kind: ActStartRestore, Reason: ReasonCapacityNeeded},
		},
		{
			name: "node: capacity wanted, node not back yet, survivor Ready elsewhere: give it back", phase: resolved, cfg: restore(RestoreNode),
			obs:  survivorOnOldNode,
			want: Action{Kind: ActStartRestore, Reason: ReasonCapacityNeeded},
		},
		{
			name: "auto: capacity wanted, fewer survivors than the original count: hold", phase: resolved, surge: replicas(2),
			obs:  survivorOnOldNode,
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "auto: survivor Ready on a node still to update, no stall waiting: hold", phase: resolved,
			obs:  func(o *Observation) { o.ReadySurvivors = 1 },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			// Not Resolved yet: the blocked pod is still on the node; restoring would put it back in charge.
			name: "auto: capacity wanted but the blocked pod has not left: evict, do not restore", phase: v1alpha1.PhaseReady,
			obs:  func(o *Observation) { o.ReadySurvivors, o.CapacityWanted, o.LiveOnNode = 1, true, 1 },
			want: Action{Kind: ActEvict, After: evictRetryPeriod},
		},
		{
			name: "pool: pool deleted", phase: resolved, cfg: restore(RestorePool),
			obs:  func(o *Observation) { o.Pool = nil },
			want: Action{Kind: ActStartRestore, Reason: ReasonPoolDeleted},
		},
		// --restore=node.
		{
			name: "node: node updated, Done and schedulable", phase: resolved, cfg: restore(RestoreNode),
			obs:  func(o *Observation) { o.Node = updatedNode() },
			want: Action{Kind: ActStartRestore, Reason: ReasonNodeUpdated},
		},
		{
			name: "node: node updated but still cordoned", phase: resolved, cfg: restore(RestoreNode),
			obs:  func(o *Observation) { o.Node = updatedNode(); o.Node.Spec.Unschedulable = true },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			// The pool's target moved on during the rollout: the node is done all the same.
			name: "node: node ended on another config than the drain's", phase: resolved, cfg: restore(RestoreNode),
			surge: func(s *v1alpha1.Surge) { s.Spec.Drain = "rendered-c" },
			obs:   func(o *Observation) { o.Node = updatedNode() },
			want:  Action{Kind: ActStartRestore, Reason: ReasonNodeUpdated},
		},
		{
			name: "node: node updated but targeted again", phase: resolved, cfg: restore(RestoreNode),
			obs: func(o *Observation) {
				o.Node = updatedNode()
				o.Node.Annotations[mco.DesiredConfigAnnotation] = "rendered-c"
			},
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "node: still draining", phase: resolved, cfg: restore(RestoreNode),
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "node: safe survivors alone do not restore", phase: resolved, cfg: restore(RestoreNode), obs: safe(1),
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "node: capacity wanted and survivors safe", phase: resolved, cfg: restore(RestoreNode), obs: capacityWanted,
			want: Action{Kind: ActStartRestore, Reason: ReasonCapacityNeeded},
		},
		{
			name: "node: pool updated is not enough while the node is cordoned", phase: resolved, cfg: restore(RestoreNode),
			obs:  func(o *Observation) { o.Pool = updatedPool(); o.Node = cordonedSince(updatedNode(), nil) },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		// A plain cordon.
		{
			name: "cordon trigger, node uncordoned", phase: resolved, surge: cordonSurge,
			obs:  func(o *Observation) { o.Node = updatedNode() },
			want: Action{Kind: ActStartRestore, Reason: ReasonUncordoned},
		},
		{
			name: "cordon trigger, node uncordoned even though its pool is updating", phase: resolved, surge: cordonSurge,
			obs:  func(o *Observation) { o.Node = updatedNode(); o.Pool = updatingPool() },
			want: Action{Kind: ActStartRestore, Reason: ReasonUncordoned},
		},
		{
			name: "cordon trigger, node still cordoned, pool updated", phase: resolved, surge: cordonSurge,
			obs:  func(o *Observation) { o.Pool = updatedPool() },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "cordon trigger, node still cordoned: safe survivors do not restore", phase: resolved, surge: cordonSurge, obs: safe(1),
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		// Early restores.
		{
			name: "pod owner deleted", phase: resolved,
			obs:  func(o *Observation) { o.PodOwnerGone = true; o.Pool = updatedPool() },
			want: Action{Kind: ActStartRestore, Reason: ReasonPodOwnerGone, Failed: true},
		},
		{
			name: "maximum duration exceeded", phase: resolved, cfg: restore(RestorePool), surge: startedAgo(24 * time.Hour),
			want: Action{Kind: ActStartRestore, Reason: ReasonMaxDuration, Failed: true},
		},
		{
			name: "maximum duration in 10s", phase: resolved, cfg: restore(RestorePool), surge: startedAgo(24*time.Hour - 10*time.Second),
			want: Action{Kind: ActWait, After: 10 * time.Second},
		},
		{
			name: "node deleted", phase: resolved,
			obs:  func(o *Observation) { o.Node = nil },
			want: Action{Kind: ActStartRestore, Reason: ReasonNodeDeleted},
		},
	}
}

func restoringCases() []decideCase {
	restoring := v1alpha1.PhaseRestoring
	return []decideCase{
		{name: "field at set: restore it", phase: restoring, want: Action{Kind: ActRestoreFields}},
		{
			name: "one field at set, one changed by someone else: restore", phase: restoring,
			obs:  fields(workload.FieldAtSet, workload.FieldChanged),
			want: Action{Kind: ActRestoreFields},
		},
		{
			name: "one field at set, one at explicit: the set one first", phase: restoring,
			obs:  func(o *Observation) { fields(workload.FieldAtSet, workload.FieldAtExplicit)(o); o.CaughtUp = true },
			want: Action{Kind: ActRestoreFields},
		},
		{
			name: "at explicit, workload caught up: remove the field", phase: restoring,
			obs:  func(o *Observation) { fields(workload.FieldAtExplicit)(o); o.CaughtUp = true },
			want: Action{Kind: ActRestoreFields, RemoveExplicit: true},
		},
		{
			name: "at explicit, pod owner deleted: remove the field", phase: restoring,
			obs:  func(o *Observation) { fields(workload.FieldAtExplicit)(o); o.PodOwnerGone = true },
			want: Action{Kind: ActRestoreFields, RemoveExplicit: true},
		},
		{
			name: "at explicit, workload still scaling down: wait", phase: restoring,
			obs:  fields(workload.FieldAtExplicit),
			want: Action{Kind: ActWait, After: scaleDownRecheck},
		},
		{
			name: "at explicit, still scaling down, even past the maximum duration: wait", phase: restoring,
			surge: startedAgo(48 * time.Hour),
			obs:   fields(workload.FieldAtExplicit),
			want:  Action{Kind: ActWait, After: scaleDownRecheck},
		},
		{name: "every field at original: finish", phase: restoring, obs: fields(workload.FieldAtOriginal, workload.FieldAtOriginal), want: Action{Kind: ActFinish}},
		{name: "field changed by someone else: finish, their value kept", phase: restoring, obs: fields(workload.FieldChanged), want: Action{Kind: ActFinish}},
		{name: "original and changed: finish", phase: restoring, obs: fields(workload.FieldAtOriginal, workload.FieldChanged), want: Action{Kind: ActFinish}},
		{
			name: "past the maximum duration: restore, not restart the restore", phase: restoring,
			surge: startedAgo(48 * time.Hour),
			want:  Action{Kind: ActRestoreFields},
		},
		{
			name: "node deleted: restore all the same", phase: restoring,
			obs:  func(o *Observation) { o.Node = nil; o.Pool = nil },
			want: Action{Kind: ActRestoreFields},
		},
	}
}

func failedCases() []decideCase {
	failed := v1alpha1.PhaseFailed
	restoredAgo := func(d time.Duration) func(*v1alpha1.Surge) {
		return func(s *v1alpha1.Surge) {
			t := metav1.NewTime(now.Add(-d))
			s.Status.RestoreTime = &t
		}
	}
	return []decideCase{
		{
			name: "same drain still under way: keep", phase: failed, surge: restoredAgo(time.Hour),
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "node deleted: forget", phase: failed, surge: restoredAgo(time.Hour),
			obs:  func(o *Observation) { o.Node = nil },
			want: Action{Kind: ActForget},
		},
		{
			name: "node under no drain any more: forget", phase: failed, surge: restoredAgo(time.Hour),
			obs:  func(o *Observation) { o.CurrentDrain = ""; o.Node = updatedNode() },
			want: Action{Kind: ActForget},
		},
		{
			name: "node under another drain: forget", phase: failed, surge: restoredAgo(time.Hour),
			obs:  func(o *Observation) { o.CurrentDrain = "rendered-c" },
			want: Action{Kind: ActForget},
		},
		{
			name: "retention ran out: forget", phase: failed, surge: restoredAgo(24 * time.Hour),
			want: Action{Kind: ActForget},
		},
		{
			name: "retention counts from the restore, not the start", phase: failed,
			surge: func(s *v1alpha1.Surge) { startedAgo(30 * time.Hour)(s); restoredAgo(time.Hour)(s) },
			want:  Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "no restore time: retention counts from the start", phase: failed, surge: startedAgo(24 * time.Hour),
			want: Action{Kind: ActForget},
		},
		{
			name: "retention ends in 10s", phase: failed, surge: restoredAgo(24*time.Hour - 10*time.Second),
			want: Action{Kind: ActWait, After: 10 * time.Second},
		},
		{
			name: "cordon trigger, same cordon: keep", phase: failed, surge: func(s *v1alpha1.Surge) { cordonSurge(s); restoredAgo(time.Minute)(s) },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
	}
}

func TestInFlight(t *testing.T) {
	want := map[v1alpha1.Phase]bool{
		v1alpha1.PhasePending:   true,
		v1alpha1.PhaseSurged:    true,
		v1alpha1.PhaseReady:     true,
		v1alpha1.PhaseResolved:  false,
		v1alpha1.PhaseRestoring: false,
		v1alpha1.PhaseFailed:    false,
	}
	for p, w := range want {
		if got := InFlight(&v1alpha1.Surge{Status: v1alpha1.SurgeStatus{Phase: p}}); got != w {
			t.Errorf("InFlight(%s) = %v, want %v", p, got, w)
		}
	}
	if !InFlight(&v1alpha1.Surge{}) {
		t.Error("a Surge with no phase written (Pending) is not in flight")
	}
	// A prepared surge whose replacement is Ready waits for its pool's update, maybe for hours: it
	// must not hold a slot that a stall blocking a drain needs.
	prepared := func(p v1alpha1.Phase) *v1alpha1.Surge {
		return &v1alpha1.Surge{Spec: v1alpha1.SurgeSpec{Trigger: string(TriggerPrepared)}, Status: v1alpha1.SurgeStatus{Phase: p}}
	}
	if !InFlight(prepared(v1alpha1.PhaseSurged)) || InFlight(prepared(v1alpha1.PhaseReady)) {
		t.Error("a Prepared surge is in flight until its replacement is Ready, and only until then")
	}
}

// Four single-replica models, one on each of four GPU nodes of a pool rolling out rendered-b one node
// at a time. Each drain stalls on a model and is served by a surge; the surges of the drains already
// done are held (Resolved). With --restore=pool they are held until the pool is Updated but do not
// count against --max-concurrent-surges, so the next node's stall can be served; with --restore=auto a
// held surge whose workload is Ready on a node the update will not drain again is restored at once,
// freeing the GPU it held for the next node's stall.
func TestFourSingleReplicaModelsOnFourNodes(t *testing.T) {
	// n1 and n2 are updated and back; n3 is being drained now; n4 still runs the old config.
	nodes := map[string]*corev1.Node{
		"n1": named(updatedNode(), "n1"),
		"n2": named(updatedNode(), "n2"),
		"n3": named(drainingNode(), "n3"),
		"n4": named(oldNode(), "n4"),
	}
	// The nodes each model's Ready pods run on now. m1 (from n1) was replaced on n2, since updated;
	// m2 (from n2) was replaced on n1; m3's replacement (for n3) is still starting.
	readyOn := map[string][]string{"m1": {"n2"}, "m2": {"n1"}, "m3": nil}
	surges := map[string]*v1alpha1.Surge{
		"m1": modelSurge("n1", v1alpha1.PhaseResolved),
		"m2": modelSurge("n2", v1alpha1.PhaseResolved),
		"m3": modelSurge("n3", v1alpha1.PhaseSurged),
	}
	// observe builds the Observation the controller would, counting safe nodes with mco.WillNotDrain.
	observe := func(model string, pool *mcfgv1.MachineConfigPool) Observation {
		s := surges[model]
		o := Observation{
			Now: now, Surge: s, Fields: []workload.FieldState{workload.FieldAtSet},
			Node: nodes[s.Spec.Node], Pool: pool, ReadyElsewhere: int32(len(readyOn[model])),
		}
		if s.Spec.Node == "n3" {
			o.CurrentDrain, o.LiveOnNode = "rendered-b", 1
		}
		for _, n := range readyOn[model] {
			if mco.WillNotDrain(nodes[n], pool) {
				o.ReadyOnSafeNodes++
			}
			if st := mco.ReadNode(nodes[n]); !nodes[n].Spec.Unschedulable && !st.Targeted() && !st.Draining() {
				o.ReadySurvivors++
			}
		}
		return o
	}
	models := []string{"m1", "m2", "m3"}

	t.Run("restore=pool", func(t *testing.T) {
		cfg := defaultConfig()
		cfg.Restore = RestorePool
		inFlight := 0
		for _, m := range models {
			if InFlight(surges[m]) {
				inFlight++
			}
			got := Decide(cfg, observe(m, updatingPool()))
			if got.Kind != ActWait {
				t.Errorf("%s: Decide() = %+v, want Wait (held until the pool is Updated, or replacement starting)", m, got)
			}
		}
		// With --max-concurrent-surges=1, n3's stall (m3) may be served: m1 and m2, held only for
		// safety, are not in flight.
		if inFlight != 1 {
			t.Errorf("%d surges in flight, want 1 (m3's)", inFlight)
		}
		// n4's stall will wait for the GPU m1 holds: m1, Ready on an updated node, gives it back.
		o := observe("m1", updatingPool())
		o.CapacityWanted = true
		if got := Decide(cfg, o); got.Kind != ActStartRestore || got.Reason != ReasonCapacityNeeded || got.Failed {
			t.Errorf("m1 with capacity wanted: Decide() = %+v, want StartRestore(%s)", got, ReasonCapacityNeeded)
		}
		// Once the pool is Updated every held surge is restored.
		for _, m := range []string{"m1", "m2"} {
			if got := Decide(cfg, observe(m, updatedPool())); got.Kind != ActStartRestore || got.Reason != ReasonPoolUpdated || got.Failed {
				t.Errorf("%s after the pool is Updated: Decide() = %+v, want StartRestore(%s)", m, got, ReasonPoolUpdated)
			}
		}
	})

	t.Run("restore=auto", func(t *testing.T) {
		cfg := defaultConfig()
		cfg.Restore = RestoreAuto
		for _, m := range []string{"m1", "m2"} {
			if got := Decide(cfg, observe(m, updatingPool())); got.Kind != ActStartRestore || got.Reason != ReasonSurvivorsSafe || got.Failed {
				t.Errorf("%s, Ready on an updated node: Decide() = %+v, want StartRestore(%s)", m, got, ReasonSurvivorsSafe)
			}
		}
		// m3's replacement is not Ready yet: its surge stays, in flight.
		if got := Decide(cfg, observe("m3", updatingPool())); got.Kind != ActWait || !InFlight(surges["m3"]) {
			t.Errorf("m3: Decide() = %+v, want Wait while in flight", got)
		}
		// Had m1's replacement landed on n4, which the update has still to drain, restoring m1 would
		// stall n4's drain on it again: it is held.
		readyOn["m1"] = []string{"n4"}
		if got := Decide(cfg, observe("m1", updatingPool())); got.Kind != ActWait {
			t.Errorf("m1 Ready only on a node still to update: Decide() = %+v, want Wait", got)
		}
	})
}

// One spare GPU: five one-GPU nodes, four single-replica models on n1..n4, n5 free. n1's model was
// surged onto n5 and its pod evicted from n1; n1 is updated and back, and the model's second replica
// is starting there. n2's stall now waits for a GPU. Under every restore mode the held surge gives its
// capacity back at once (the model stays available on n5, which will be surged again when its turn
// comes); waiting for the replica on n1 to be Ready would cost the pool one model load per node.
func TestOneSpareGPUHandsTheGPUOn(t *testing.T) {
	n1, n5 := named(updatedNode(), "n1"), named(oldNode(), "n5")
	o := Observation{
		Now: now, Surge: modelSurge("n1", v1alpha1.PhaseResolved), Fields: []workload.FieldState{workload.FieldAtSet},
		Node: n1, Pool: updatingPool(), ReadyElsewhere: 1,
	}
	if !mco.WillNotDrain(n1, o.Pool) || mco.WillNotDrain(n5, o.Pool) {
		t.Fatal("test setup: n1 must be safe and n5 still to update")
	}
	// The controller counts the Ready pod on n5: schedulable, not targeted, survives a scale-down.
	o.ReadySurvivors = 1
	for _, mode := range []RestoreMode{RestoreAuto, RestorePool, RestoreNode} {
		cfg := defaultConfig()
		cfg.Restore = mode
		if mode != RestoreNode {
			if got := Decide(cfg, o); got.Kind != ActWait {
				t.Errorf("%s, no stall waiting: Decide() = %+v, want Wait", mode, got)
			}
		}
		wanting := o
		wanting.CapacityWanted = true
		if got := Decide(cfg, wanting); got.Kind != ActStartRestore || got.Reason != ReasonCapacityNeeded || got.Failed {
			t.Errorf("%s, n2's stall waits for the GPU: Decide() = %+v, want StartRestore(%s)", mode, got, ReasonCapacityNeeded)
		}
	}
}

// lookaheadCases: a Surge made for a node the MCO was predicted to target next (spec.trigger
// MCOPredicted). Its replacement is made Ready ahead, but nothing is evicted before the MCO drains the
// node; a prediction that does not come true is undone.
func lookaheadCases() []decideCase {
	predicted := func(s *v1alpha1.Surge) { s.Spec.Trigger = string(TriggerMCOPredicted) }
	// oldAndPredicted: the node still runs the old config; NodeTrigger still predicts it.
	oldAndPredicted := func(o *Observation) { o.Node = oldNode(); o.CurrentDrain = "rendered-b" }
	return []decideCase{
		{
			name: "predicted: replacement Ready ahead of the drain: mark Ready, do not evict", phase: v1alpha1.PhaseSurged, surge: predicted,
			obs:  func(o *Observation) { oldAndPredicted(o); o.ReadyElsewhere = 1 },
			want: Action{Kind: ActMarkReady},
		},
		{
			name: "predicted: Ready, the MCO has not drained the node yet: wait", phase: v1alpha1.PhaseReady, surge: predicted,
			obs:  oldAndPredicted,
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "predicted: Ready, the node is now being drained: evict", phase: v1alpha1.PhaseReady, surge: predicted,
			want: Action{Kind: ActEvict, After: evictRetryPeriod},
		},
		{
			name: "predicted: the node is no longer a next target (pool paused, order changed): restore", phase: v1alpha1.PhaseReady, surge: predicted,
			obs:  func(o *Observation) { o.Node = oldNode(); o.CurrentDrain = "" },
			want: Action{Kind: ActStartRestore, Reason: ReasonPredictionMissed},
		},
		{
			name: "predicted: missed while the replacement starts: restore", phase: v1alpha1.PhaseSurged, surge: predicted,
			obs:  func(o *Observation) { o.Node = oldNode(); o.CurrentDrain = "" },
			want: Action{Kind: ActStartRestore, Reason: ReasonPredictionMissed},
		},
		{
			// The drain happened: the pod is gone; what follows is a surge like any other.
			name: "predicted: pod gone after the drain: resolved", phase: v1alpha1.PhaseReady, surge: predicted,
			obs:  func(o *Observation) { o.LiveOnNode = 0; o.CurrentDrain = "" },
			want: Action{Kind: ActMarkResolved},
		},
		{
			// Found by the end-to-end suite: a look-ahead surge of a LeaderWorkerSet served the drain
			// (Resolved); lws recreated the evicted group, one of whose pods the scheduler put back on
			// the updated node. That pod is no missed prediction: restoring then removed the one
			// complete group while the recreated one was starting.
			name: "predicted: resolved, a pod placed back on the updated node: held", phase: v1alpha1.PhaseResolved, surge: predicted,
			obs:  func(o *Observation) { o.Node = updatedNode(); o.CurrentDrain = ""; o.LiveOnNode = 1 },
			want: Action{Kind: ActWait, After: defaultRecheckPeriod},
		},
		{
			name: "predicted: missed, but the groups the scale-down keeps are not whole: held", phase: v1alpha1.PhaseReady, surge: predicted,
			obs: func(o *Observation) {
				o.Node, o.CurrentDrain = oldNode(), ""
				o.Groups, o.ReadySurvivors = true, 0
			},
			want: Action{Kind: ActMarkResolved, Reason: ReasonDrainOver},
		},
		{
			// Unlike a prediction, a drain that was called off is not a reason to restore: the
			// surge is held as any resolved one, by the restore policy.
			name: "MCO drain called off with the pod still there: resolved, not restored", phase: v1alpha1.PhaseReady,
			obs:  func(o *Observation) { o.Node = oldNode(); o.CurrentDrain = "" },
			want: Action{Kind: ActMarkResolved, Reason: ReasonDrainOver},
		},
		{
			// Found by the chaos suite: the Surge was marked Ready after the MCO had evicted the pod,
			// the node rebooted, and the ReplicaSet put a pod back on it. Waiting for the node to
			// empty held the spare GPU until the pool finished, which the next stall kept it from.
			name: "drain over, a pod placed back on the updated node: resolved", phase: v1alpha1.PhaseReady,
			obs:  func(o *Observation) { o.Node = updatedNode(); o.CurrentDrain = "" },
			want: Action{Kind: ActMarkResolved, Reason: ReasonDrainOver},
		},
	}
}

// pausedPool is a paused pool whose render controller moved spec.configuration to rendered-b: the
// update waits for its window.
func pausedPool() *mcfgv1.MachineConfigPool {
	p := updatingPool()
	p.Spec.Paused = true
	p.Status.Conditions = []mcfgv1.MachineConfigPoolCondition{
		{Type: mcfgv1.MachineConfigPoolUpdated, Status: corev1.ConditionFalse},
		{Type: mcfgv1.MachineConfigPoolUpdating, Status: corev1.ConditionFalse},
	}
	return p
}

// preparedCases: a surge made ahead of a paused pool's update at the admin's request. Both replicas
// are held until the pool is Updated, whatever --restore says.
func preparedCases() []decideCase {
	prepared := func(s *v1alpha1.Surge) { s.Spec.Trigger = string(TriggerPrepared) }
	// waiting: the pool is paused, the node runs the old config and is drained by no one.
	waiting := func(o *Observation) { o.Node, o.Pool, o.CurrentDrain = oldNode(), pausedPool(), "" }
	safe := func(o *Observation) { waiting(o); o.LiveOnNode, o.ReadyOnSafeNodes, o.ReadySurvivors = 0, 2, 2 }
	return []decideCase{
		{name: "prepared: no drain yet: write the fields", surge: prepared, obs: waiting, want: Action{Kind: ActWriteFields}},
		{name: "prepared: withdrawn before the write: finish", surge: prepared,
			obs: func(o *Observation) { waiting(o); o.PrepareWithdrawn = true }, want: Action{Kind: ActFinish}},
		{name: "prepared: replacement Ready: mark Ready, do not evict", phase: v1alpha1.PhaseSurged, surge: prepared,
			obs: func(o *Observation) { waiting(o); o.ReadyElsewhere = 1 }, want: Action{Kind: ActMarkReady}},
		{name: "prepared: Ready while the pool waits for its window: hold, the drain has not come", phase: v1alpha1.PhaseReady, surge: prepared,
			obs: waiting, want: Action{Kind: ActWait, After: defaultRecheckPeriod}},
		{name: "prepared: Ready, its node now drained: evict", phase: v1alpha1.PhaseReady, surge: prepared,
			want: Action{Kind: ActEvict, After: evictRetryPeriod}},
		{name: "prepared: resolved, survivors safe: held until the pool is Updated", phase: v1alpha1.PhaseResolved, surge: prepared,
			obs: safe, want: Action{Kind: ActWait, After: defaultRecheckPeriod}},
		{name: "prepared: node-restore policy: still held until the pool is Updated", phase: v1alpha1.PhaseResolved, surge: prepared,
			cfg: restore(RestoreNode), obs: func(o *Observation) { safe(o); o.Node = updatedNode() }, want: Action{Kind: ActWait, After: defaultRecheckPeriod}},
		{name: "prepared: pool Updated: restore", phase: v1alpha1.PhaseResolved, surge: prepared,
			obs: func(o *Observation) { safe(o); o.Pool = updatedPool() }, want: Action{Kind: ActStartRestore, Reason: ReasonPoolUpdated}},
		{name: "prepared: pool Updated before its node was drained (config reverted): restore", phase: v1alpha1.PhaseReady, surge: prepared,
			obs: func(o *Observation) { waiting(o); o.Pool = updatedPool() }, want: Action{Kind: ActStartRestore, Reason: ReasonPoolUpdated}},
		{name: "prepared: annotation removed: restore", phase: v1alpha1.PhaseReady, surge: prepared,
			obs: func(o *Observation) { waiting(o); o.PrepareWithdrawn = true }, want: Action{Kind: ActStartRestore, Reason: ReasonPrepareWithdrawn}},
		{name: "prepared: a stall waits for its capacity: give it back while the workload stays available", phase: v1alpha1.PhaseReady, surge: prepared,
			obs: func(o *Observation) { waiting(o); o.CapacityWanted, o.ReadySurvivors = true, 1 }, want: Action{Kind: ActStartRestore, Reason: ReasonCapacityNeeded}},
		{name: "prepared: a stall waits for capacity, no survivor Ready: hold", phase: v1alpha1.PhaseReady, surge: prepared,
			obs: func(o *Observation) { waiting(o); o.CapacityWanted = true }, want: Action{Kind: ActWait, After: defaultRecheckPeriod}},
		{name: "prepared: --max-surge-duration: restore, failed", phase: v1alpha1.PhaseReady, surge: func(s *v1alpha1.Surge) { prepared(s); startedAgo(25 * time.Hour)(s) },
			obs: waiting, want: Action{Kind: ActStartRestore, Reason: ReasonMaxDuration, Failed: true}},
		{name: "prepared: failed, the pool still waits: kept so that it is not retried", phase: v1alpha1.PhaseFailed, surge: prepared,
			obs: waiting, want: Action{Kind: ActWait, After: defaultRecheckPeriod}},
		{name: "prepared: failed, annotation removed: forget", phase: v1alpha1.PhaseFailed, surge: prepared,
			obs: func(o *Observation) { waiting(o); o.PrepareWithdrawn = true }, want: Action{Kind: ActForget}},
		{name: "prepared: failed, pool Updated: forget", phase: v1alpha1.PhaseFailed, surge: prepared,
			obs: func(o *Observation) { waiting(o); o.Pool = updatedPool() }, want: Action{Kind: ActForget}},
	}
}

// surgedAgo records the Surge's fields as written d ago.
func surgedAgo(d time.Duration) func(*v1alpha1.Surge) {
	return func(s *v1alpha1.Surge) {
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: ConditionSurged, Status: metav1.ConditionTrue, Reason: "Written",
			LastTransitionTime: metav1.NewTime(now.Add(-d))})
	}
}

func testSurge(phase v1alpha1.Phase) *v1alpha1.Surge {
	one := int64(1)
	ref := v1alpha1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "llm", UID: "llm-uid"}
	return &v1alpha1.Surge{
		ObjectMeta: metav1.ObjectMeta{Name: "llm-node-a", Namespace: "models"},
		Spec: v1alpha1.SurgeSpec{
			Target:      ref,
			PodOwner:    ref,
			Fields:      []v1alpha1.Field{{Path: "/spec/replicas", Original: &one, Set: 2}},
			Node:        "node-a",
			Pool:        mco.WorkerPool,
			Trigger:     string(TriggerMCODrain),
			Drain:       "rendered-b",
			PDB:         "llm",
			BlockedPod:  "llm-5d9-x",
			Delta:       1,
			Replicas:    1,
			ReadyBefore: 0,
			StartTime:   metav1.NewTime(now.Add(-time.Minute)),
		},
		Status: v1alpha1.SurgeStatus{Phase: phase},
	}
}

func modelSurge(node string, phase v1alpha1.Phase) *v1alpha1.Surge {
	s := testSurge(phase)
	s.Name, s.Spec.Node = "model-"+node, node
	return s
}

func cordonSurge(s *v1alpha1.Surge) {
	s.Spec.Trigger = string(TriggerCordoned)
	s.Spec.Pool = ""
	s.Spec.Drain = cordonDrain
}

// evictionDueAgo says the Surge's node has been under drain, its replacement Ready, for d.
func evictionDueAgo(d time.Duration) func(*v1alpha1.Surge) {
	return func(s *v1alpha1.Surge) {
		noEvictionDue(s)
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: ConditionEvictionDue, Status: metav1.ConditionTrue,
			Reason: "NodeDraining", LastTransitionTime: metav1.NewTime(now.Add(-d))})
	}
}

func noEvictionDue(s *v1alpha1.Surge) {
	meta.RemoveStatusCondition(&s.Status.Conditions, ConditionEvictionDue)
}

func startedAgo(d time.Duration) func(*v1alpha1.Surge) {
	return func(s *v1alpha1.Surge) { s.Spec.StartTime = metav1.NewTime(now.Add(-d)) }
}

func fields(states ...workload.FieldState) func(*Observation) {
	return func(o *Observation) { o.Fields = states }
}

func restore(m RestoreMode) func(*Config) {
	return func(c *Config) { c.Restore = m }
}

func named(n *corev1.Node, name string) *corev1.Node {
	n.Name = name
	return n
}

// oldNode runs rendered-a and is not targeted yet.
func oldNode() *corev1.Node {
	n := targetedNode()
	n.Annotations[mco.DesiredConfigAnnotation] = "rendered-a"
	return n
}
