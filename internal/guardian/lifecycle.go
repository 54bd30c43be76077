package guardian

import (
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// Observation is everything Decide needs to know about one Surge, read from the listers and checked
// against the live objects by the controller.
type Observation struct {
	Now   time.Time
	Surge *v1alpha1.Surge
	// Fields is the state of each of the Surge's fields on the live target, in order.
	Fields []workload.FieldState
	// Node is the Surge's node, nil when deleted; Pool its pool, nil when deleted or none.
	Node *corev1.Node
	Pool *mcfgv1.MachineConfigPool
	// CurrentDrain identifies the drain the node is under now ("" when none), as NodeTrigger says.
	CurrentDrain string
	// PodOwnerGone: the Deployment or StatefulSet running the pods no longer exists.
	PodOwnerGone bool
	// LiveOnNode counts the workload's pods still on the node and not being deleted.
	LiveOnNode int
	// ReadyElsewhere counts the workload's Ready pods on other nodes, not being deleted.
	ReadyElsewhere int32
	// ReadyOnSafeNodes counts the workload's Ready pods, not being deleted, on nodes this update will
	// not drain again (mco.WillNotDrain).
	ReadyOnSafeNodes int32
	// ReadySurvivors counts the workload's Ready pods, not being deleted, that a restore keeps (for a
	// StatefulSet, ordinals below the original count) on schedulable nodes the MCO is not updating now:
	// the pods that keep the workload available if the count goes back down at once.
	ReadySurvivors int32
	// UnschedulableSince is when the oldest Unschedulable pod of the workload became so, if any.
	UnschedulableSince *time.Time
	// ReplacementRefused says why the pod owner's controller cannot create the surge's replacements
	// (the message of its ReplicaFailure condition, reason FailedCreate: a quota, a LimitRange, an
	// admission webhook) while it runs fewer pods than it wants; "" otherwise.
	ReplacementRefused string
	// OtherPDB names a PDB other than the Surge's own that selects a pod of the workload on the node,
	// while the Surge's own PDB allows a disruption: the Eviction API refuses a pod that two PDBs
	// select, whatever the budgets. "" when there is none.
	OtherPDB string
	// CaughtUp: the pod owner runs exactly the explicit count of a two-step restore.
	CaughtUp bool
	// Groups: the workload's replicas are groups of pods (a LeaderWorkerSet), and its scale-down
	// removes the highest group whatever its state; ReadySurvivors and ReadyOnSafeNodes count whole
	// groups of an index below the original count.
	Groups bool
	// CapacityWanted: a stall of the same pool (of any pool, for a Prepared surge) waits for capacity
	// that this surge holds.
	CapacityWanted bool
	// WriteUnseen, on a Pending Surge: this process wrote its fields and the target as read is still
	// the version that write replaced (the informer has not delivered it yet). The read says nothing
	// about whether the fields are written.
	WriteUnseen bool
	// WritingSince, on a Pending Surge, is when this process first tried to write its fields: the
	// Pending deadline runs from there, not from a start that may lie before an outage of the guardian.
	WritingSince time.Time
	// PrepareWithdrawn: the pool of a Prepared surge no longer asks to be prepared (PrepareAnnotation).
	PrepareWithdrawn bool
	// The Surge's own source, for a surge made for a source other than the MCO (FromSource):
	// SourceDraining, the source is removing the node's pods now; SourceBack, the source has no
	// drain of the node under way or failed and the node is schedulable (trigger.Signal.Back);
	// SourceRolloutOver, the source drains no node of the cluster any more (the end of a driver
	// rollout: every node done, failed or skipped).
	SourceDraining, SourceBack, SourceRolloutOver bool
}

// ActionKind is what to do next for a Surge. Each action is at most one write.
type ActionKind string

// The actions.
const (
	ActWait ActionKind = "Wait"
	// ActWriteFields writes the surged values on the target (Pending).
	ActWriteFields ActionKind = "WriteFields"
	// ActMarkSurged records that the fields are written (Pending → Surged).
	ActMarkSurged ActionKind = "MarkSurged"
	// ActDiscard deletes a Pending Surge whose fields someone else changed before the guardian wrote them.
	ActDiscard ActionKind = "Discard"
	// ActMarkReady records the Ready replacement (Surged → Ready).
	ActMarkReady ActionKind = "MarkReady"
	// ActMarkEvictionDue records, on a Ready Surge, that its node is being drained: the blocked pod
	// should leave now, and --evict-timeout runs from here.
	ActMarkEvictionDue ActionKind = "MarkEvictionDue"
	// ActEvict evicts the workload's pods from the drained node through the Eviction API.
	ActEvict ActionKind = "Evict"
	// ActMarkResolved records that no pod is left on the node (Ready → Resolved).
	ActMarkResolved ActionKind = "MarkResolved"
	// ActStartRestore commits to the restore, with its reason (→ Restoring).
	ActStartRestore ActionKind = "StartRestore"
	// ActRestoreFields writes the original values back (one step; see Action.RemoveExplicit).
	ActRestoreFields ActionKind = "RestoreFields"
	// ActFinish ends a restore: the Surge is deleted, or kept as Failed when the surge did not help.
	ActFinish ActionKind = "Finish"
	// ActForget deletes a Failed Surge once its drain is over or its retention ran out.
	ActForget ActionKind = "Forget"
)

// Restore reasons. The failure ones double as the failed-stall metric's reason label.
const (
	ReasonPoolUpdated = "PoolUpdated"
	ReasonNodeUpdated = "NodeUpdated"
	// ReasonNodeBack: the source of the surge's drain is done with the node (driver upgrade done,
	// NodeMaintenance deleted) and it is schedulable again.
	ReasonNodeBack = "NodeBack"
	// ReasonRolloutOver: with --restore=pool, the source drains no node of the cluster any more.
	ReasonRolloutOver    = "RolloutOver"
	ReasonSurvivorsSafe  = "SurvivorsOnUpdatedNodes"
	ReasonCapacityNeeded = "CapacityNeeded"
	ReasonUncordoned     = "Uncordoned"
	ReasonNodeDeleted    = "NodeDeleted"
	ReasonPoolDeleted    = "PoolDeleted"
	ReasonStallGone      = "StallGone"
	ReasonUnschedulable  = "Unschedulable"
	ReasonReadyTimeout   = "ReadyTimeout"
	ReasonMaxDuration    = "MaxDurationExceeded"
	ReasonPodOwnerGone   = "WorkloadDeleted"
	ReasonUnsatisfiable  = "UnsatisfiablePDB"
	ReasonUnsupported    = "UnsupportedOwner"
	ReasonNoCapacity     = "NoCapacity"
	// ReasonSurgeTooLarge: the PDB needs more added replicas than --max-surge-replicas allows.
	ReasonSurgeTooLarge = "SurgeTooLarge"
	// ReasonNotSteady: the workload does not run what it asks for; it is not surged until it does.
	ReasonNotSteady = "NotSteady"
	// ReasonPredictionMissed: a look-ahead surge's node is no longer among the MCO's next targets
	// (pool paused, order changed, target reverted) before its drain, or the machine-config daemon
	// answered that the update it was made for goes on without a drain.
	ReasonPredictionMissed = "PredictionMissed"
	// ReasonDrainOver, on MarkResolved: the drain ended while a pod of the workload is on the node.
	ReasonDrainOver = "DrainOver"
	// ReasonWriteTimeout: the surged fields could not be written (refused, or a conflict each time)
	// for PendingTimeout.
	ReasonWriteTimeout = "WriteTimeout"
	// ReasonEvictTimeout: the replacement is Ready but the blocked pod did not leave the drained node
	// within --evict-timeout (the tenant's own budgets refuse its eviction).
	ReasonEvictTimeout = "EvictTimeout"
	// ReasonPrepareWithdrawn: the pool of a Prepared surge no longer asks to be prepared.
	ReasonPrepareWithdrawn = "PrepareWithdrawn"
	// ReasonReplacementRefused: the pod owner's controller was refused the replacement pods (quota,
	// LimitRange, admission) for ReplacementRefusedTimeout.
	ReasonReplacementRefused = "ReplacementRefused"
	// ReasonMultiplePDBs: the blocked pod's eviction is refused because another PDB selects it too,
	// while the budget the surge was made for allows the disruption.
	ReasonMultiplePDBs = "MultiplePDBs"
)

// ConditionSurged is the condition a Surge gets when its fields are written: its LastTransitionTime
// is when ReplacementRefusedTimeout starts.
const ConditionSurged = "Surged"

// ConditionEvictionDue is the condition a Ready Surge gets when its node is being drained: its
// LastTransitionTime is when --evict-timeout started.
const ConditionEvictionDue = "EvictionDue"

// PendingTimeout bounds how long a Surge stays Pending while the guardian tries to write its fields
// (see Observation.WritingSince). The fields are written within a second unless the write is refused
// or conflicts each time (a tenant changing the workload in a loop, an admission webhook refusing
// it): a Pending Surge holds a --max-concurrent-surges slot, which nobody may hold forever.
const PendingTimeout = time.Minute

// WriteSeenRetry is how soon a Pending Surge whose write the cache has not shown yet is looked at
// again; the target's informer event brings it back sooner.
const WriteSeenRetry = time.Second

// ReplacementRefusedTimeout bounds how long a Surged surge waits while its pod owner's controller
// reports that the replacement pods are refused (Observation.ReplacementRefused). A refusal can be a
// race that heals by itself: a quota whose usage still counts a pod that just left, recalculated by
// the quota controller within seconds of the deletion; the ReplicaSet controller retries a failed
// creation with a per-item backoff doubling from 5 ms, a dozen attempts in the first 20 seconds. A
// refusal that outlasts 30 s is the tenant's quota, LimitRange or webhook, which nothing the guardian
// waits for will change: the surge is restored and its slot freed at once instead of after
// --ready-timeout (30 minutes).
const ReplacementRefusedTimeout = 30 * time.Second

const (
	defaultRecheckPeriod = 30 * time.Second
	evictRetryPeriod     = 5 * time.Second
	scaleDownRecheck     = 5 * time.Second
)

// Action is Decide's answer.
type Action struct {
	Kind ActionKind
	// Reason explains a StartRestore (or, on MarkResolved, that the drain is over rather than the node
	// empty); Failed marks a restore that undoes a surge which did not help.
	Reason string
	Failed bool
	// RemoveExplicit, on RestoreFields, removes fields left at their explicit count by the first step.
	RemoveExplicit bool
	// EvictNow, on MarkReady and MarkEvictionDue, evicts the blocked pods right after the write: the
	// node is being drained and every second the pod stays there is a second until the MCO's next
	// attempt can succeed.
	EvictNow bool
	// EvictionDue, on MarkReady, also records ConditionEvictionDue: the node is being drained already.
	EvictionDue bool
	// Detail, on a StartRestore that fails the surge, says what the observation showed (the refusal's
	// message, the other PDB): it goes into the Surge's status and the failure's Event.
	Detail string
	// After is when to look again if nothing changes before.
	After time.Duration
}

// Decide returns the next step of a Surge's life: Pending → Surged → Ready → Resolved → Restoring →
// deleted; or Restoring early, marked failed, when the replacement cannot be scheduled, is not Ready
// in time, the workload is deleted or the surge outlives its maximum duration (→ Failed, kept until
// the drain it was made for is over).
func Decide(cfg Config, o Observation) Action {
	switch o.Surge.PhaseOf() {
	case v1alpha1.PhasePending:
		return decidePending(cfg, o)
	case v1alpha1.PhaseRestoring:
		return decideRestoring(o)
	case v1alpha1.PhaseFailed:
		return decideFailed(cfg, o)
	}
	if a, ok := mustRestore(cfg, o); ok {
		return a
	}
	s := o.Surge
	age := o.Now.Sub(s.Spec.StartTime.Time)
	next := min(defaultRecheckPeriod, cfg.MaxSurgeDuration-age)
	switch s.PhaseOf() {
	case v1alpha1.PhaseSurged:
		if o.ReadyElsewhere >= s.Spec.ReadyBefore+s.Spec.Delta {
			due := o.LiveOnNode > 0 && evictionDue(o)
			return Action{Kind: ActMarkReady, EvictionDue: due, EvictNow: cfg.Evict && due}
		}
		if o.ReplacementRefused != "" {
			refused := o.Now.Sub(surgedAt(s))
			if refused >= ReplacementRefusedTimeout {
				return Action{Kind: ActStartRestore, Reason: ReasonReplacementRefused, Failed: true, Detail: o.ReplacementRefused}
			}
			next = min(next, ReplacementRefusedTimeout-refused)
		}
		if o.UnschedulableSince != nil {
			stuck := o.Now.Sub(*o.UnschedulableSince)
			if stuck >= cfg.ScheduleTimeout {
				return Action{Kind: ActStartRestore, Reason: ReasonUnschedulable, Failed: true}
			}
			next = min(next, cfg.ScheduleTimeout-stuck)
		}
		if age >= cfg.ReadyTimeout {
			return Action{Kind: ActStartRestore, Reason: ReasonReadyTimeout, Failed: true}
		}
		return Action{Kind: ActWait, After: min(next, cfg.ReadyTimeout-age)}
	case v1alpha1.PhaseReady:
		if o.LiveOnNode == 0 {
			return Action{Kind: ActMarkResolved}
		}
		if o.CurrentDrain != s.Spec.Drain && !prepared(s) {
			// The drain this surge was made for is over (the node went through it, or it was called
			// off) while a pod of the workload is on the node: one the ReplicaSet placed there after
			// the node came back, or the blocked one, never evicted. Nothing is blocked any more, and
			// waiting for the node to empty would hold the surge, and the capacity it takes, until the
			// pool finishes, which it may never do while another stall waits for that capacity.
			return Action{Kind: ActMarkResolved, Reason: ReasonDrainOver}
		}
		if evictionDue(o) {
			return decideEviction(cfg, o, next)
		}
	}
	return Action{Kind: ActWait, After: next}
}

// decideEviction waits for the blocked pod of a Ready surge to leave its drained node, evicting it
// (--evict), at most --evict-timeout. After that, the tenant's own budgets refuse the eviction (a
// second PDB, minAvailable raised, the replacement's readiness failing): holding the surge would hold
// a slot, and the capacity, of every other tenant's stalls for --max-surge-duration. It is restored
// and reported instead.
func decideEviction(cfg Config, o Observation, next time.Duration) Action {
	c := meta.FindStatusCondition(o.Surge.Status.Conditions, ConditionEvictionDue)
	if c == nil {
		return Action{Kind: ActMarkEvictionDue, EvictNow: cfg.Evict}
	}
	if o.OtherPDB != "" {
		// The eviction was asked for (when the condition was set) and the budget this surge was made
		// for allows it, but another PDB selects the pod: the Eviction API refuses it whatever the
		// budgets, and retrying until --evict-timeout would hold the slot for nothing. The stall
		// decision sees the pod's two PDBs again and reports them.
		return Action{Kind: ActStartRestore, Reason: ReasonMultiplePDBs, Failed: true,
			Detail: "PDB " + o.OtherPDB + " also selects the pod"}
	}
	waited := o.Now.Sub(c.LastTransitionTime.Time)
	if waited >= cfg.EvictTimeout {
		return Action{Kind: ActStartRestore, Reason: ReasonEvictTimeout, Failed: true}
	}
	next = min(next, cfg.EvictTimeout-waited)
	if cfg.Evict {
		return Action{Kind: ActEvict, After: min(next, evictRetryPeriod)}
	}
	return Action{Kind: ActWait, After: next}
}

// surgedAt is when the Surge's fields were recorded as written (its Surged condition), or its start
// when the condition is missing.
func surgedAt(s *v1alpha1.Surge) time.Time {
	if c := meta.FindStatusCondition(s.Status.Conditions, ConditionSurged); c != nil {
		return c.LastTransitionTime.Time
	}
	return s.Spec.StartTime.Time
}

// evictionDue reports whether the blocked pods should leave the Surge's node now: it is cordoned and
// being drained.
func evictionDue(o Observation) bool {
	return o.Node != nil && o.Node.Spec.Unschedulable && beingDrained(o)
}

// decidePending finishes the first write of a surge: the Surge exists, the fields may or may not be
// written (a crash between the two writes resumes here).
func decidePending(cfg Config, o Observation) Action {
	switch {
	case anyIn(o.Fields, workload.FieldAtSet):
		// The fields are written in one patch: one at its surged value means the write happened (a
		// crash came before the Surge said so), even if someone changed another field since. The
		// surge goes on; its restore keeps their values.
		return Action{Kind: ActMarkSurged}
	case !allIn(o.Fields, workload.FieldAtOriginal):
		return Action{Kind: ActDiscard}
	}
	since := o.Surge.Spec.StartTime.Time
	if o.WritingSince.After(since) {
		since = o.WritingSince
	}
	timedOut := o.Now.Sub(since) >= PendingTimeout
	if o.WriteUnseen && !timedOut {
		// The fields look unwritten only because the cache lags this process's own write: dropping
		// the Surge now would leave the count raised with nothing to restore it.
		return Action{Kind: ActWait, After: WriteSeenRetry}
	}
	if o.PodOwnerGone {
		return Action{Kind: ActFinish}
	}
	if _, done := finished(cfg, o); done || stallGone(o) {
		// The stall ended before the fields were written: nothing to surge, nothing to restore.
		return Action{Kind: ActFinish}
	}
	if timedOut {
		// Every write was refused or lost a conflict for a minute: give the slot back, and keep the
		// Failed Surge so that this drain is not surged again. A write that did land after all is
		// seen at its surged value and restored.
		return Action{Kind: ActStartRestore, Reason: ReasonWriteTimeout, Failed: true}
	}
	return Action{Kind: ActWriteFields}
}

// decideRestoring puts the fields back, one write at a time, then finishes.
func decideRestoring(o Observation) Action {
	switch {
	case anyIn(o.Fields, workload.FieldAtSet):
		return Action{Kind: ActRestoreFields}
	case anyIn(o.Fields, workload.FieldAtExplicit):
		if o.CaughtUp || o.PodOwnerGone {
			return Action{Kind: ActRestoreFields, RemoveExplicit: true}
		}
		return Action{Kind: ActWait, After: scaleDownRecheck}
	}
	return Action{Kind: ActFinish}
}

// decideFailed keeps a Failed Surge, the memory that this drain of this node was tried, while that
// drain lasts, at most for --max-surge-duration.
func decideFailed(cfg Config, o Observation) Action {
	s := o.Surge
	if o.Node == nil || stallGone(o) || (prepared(s) && (o.Pool == nil || mco.PoolUpdated(o.Pool))) {
		return Action{Kind: ActForget}
	}
	since := s.Spec.StartTime.Time
	if s.Status.RestoreTime != nil {
		since = s.Status.RestoreTime.Time
	}
	left := cfg.MaxSurgeDuration - o.Now.Sub(since)
	if left <= 0 {
		return Action{Kind: ActForget}
	}
	return Action{Kind: ActWait, After: min(left, defaultRecheckPeriod)}
}

// mustRestore returns the restore a surged workload is due, if any.
func mustRestore(cfg Config, o Observation) (Action, bool) {
	if o.PodOwnerGone {
		return Action{Kind: ActStartRestore, Reason: ReasonPodOwnerGone, Failed: true}, true
	}
	if o.Now.Sub(o.Surge.Spec.StartTime.Time) >= cfg.MaxSurgeDuration {
		return Action{Kind: ActStartRestore, Reason: ReasonMaxDuration, Failed: true}, true
	}
	if prepared(o.Surge) && o.PrepareWithdrawn {
		return Action{Kind: ActStartRestore, Reason: ReasonPrepareWithdrawn}, true
	}
	if groupsShort(o) {
		// The restores above are the valves that do not wait; the others keep a workload of groups
		// surged until the groups its scale-down keeps are whole.
		return Action{}, false
	}
	if reason, done := finished(cfg, o); done {
		return Action{Kind: ActStartRestore, Reason: reason}, true
	}
	if predictedAhead(o) && o.Surge.PhaseOf() != v1alpha1.PhaseResolved && o.LiveOnNode > 0 && o.CurrentDrain != o.Surge.Spec.Drain {
		// The prediction did not come true while the pod is still there: nothing is blocked. (A
		// Resolved surge's prediction came true: a pod on its node now was placed there after the
		// drain.)
		return Action{Kind: ActStartRestore, Reason: ReasonPredictionMissed}, true
	}
	return Action{}, false
}

// groupsShort reports whether a workload of groups does not run its original number of groups whole
// on schedulable nodes the MCO is not updating: its scale-down would remove the highest group, which
// may be the only complete one, even once the pool is Updated. The restore waits for the groups it
// keeps (at most --max-surge-duration, the valve of every surge).
func groupsShort(o Observation) bool {
	return o.Groups && o.ReadySurvivors < max(o.Surge.Spec.Replicas, 1)
}

// predictedAhead reports whether the Surge was made on a prediction that can still fail: a look-ahead,
// or a targeted node whose update (the one the Surge was made for, still under way and not
// draining) was computed to drain before the node's own daemon answered.
func predictedAhead(o Observation) bool {
	switch Trigger(o.Surge.Spec.Trigger) {
	case TriggerMCOPredicted:
		return true
	case TriggerMCOTargeted:
		if o.Node == nil {
			return false
		}
		s := mco.ReadNode(o.Node)
		return s.Targeted() && s.DesiredConfig == o.Surge.Spec.Drain && !s.Draining()
	}
	return false
}

// beingDrained reports whether the node's pods are meant to leave now: the MCO is draining it, the
// Surge's source is (a driver upgrade deleting its GPU pods, a NodeMaintenance draining), or the
// stall came from a plain cordon. A node merely targeted, or predicted, is not evicted from before
// its drain.
func beingDrained(o Observation) bool {
	t := Trigger(o.Surge.Spec.Trigger)
	return t == TriggerCordoned || mco.ReadNode(o.Node).Draining() || (FromSource(t) && o.SourceDraining)
}

// finished reports whether the surge has served its purpose, and why. A surge whose workload already
// has its original number of Ready pods on nodes this update will not drain again needs no holding:
// restoring it frees the capacity (often the cluster's one spare GPU) for the next node's stall.
func finished(cfg Config, o Observation) (string, bool) {
	if o.Node == nil {
		return ReasonNodeDeleted, true
	}
	s := o.Surge
	if prepared(s) {
		return preparedFinished(o)
	}
	resolved, want := s.PhaseOf() == v1alpha1.PhaseResolved, max(s.Spec.Replicas, 1)
	if FromSource(Trigger(s.Spec.Trigger)) {
		return sourceFinished(cfg, o, resolved && o.CapacityWanted && o.ReadySurvivors >= want)
	}
	if Trigger(s.Spec.Trigger) == TriggerCordoned || s.Spec.Pool == "" {
		return ReasonUncordoned, !o.Node.Spec.Unschedulable
	}
	switch {
	case cfg.Restore == RestoreAuto && resolved && o.ReadyOnSafeNodes >= want:
		return ReasonSurvivorsSafe, true
	case o.CapacityWanted && resolved && o.ReadySurvivors >= want:
		// Another stall of the pool waits for capacity: give it back as soon as the workload stays
		// available without the extra replicas, even when a survivor sits on a node this update has
		// still to drain. That node's stall is then surged again, on the capacity freed by the stall
		// before it; holding instead would leave the waiting stall, and the pool, stuck. The replica
		// the restore removes is typically the one still starting on the updated node (the
		// ReplicaSet removes pods that are not Ready first), which gives the spare capacity back at once.
		return ReasonCapacityNeeded, true
	case cfg.Restore == RestoreNode:
		// The node is done with its update, whichever config it ended on: the pool's target may have
		// moved on during the rollout, or been reverted, and either way no drain of this node is coming.
		st := mco.ReadNode(o.Node)
		return ReasonNodeUpdated, st.Updated() && !st.Targeted() && !o.Node.Spec.Unschedulable
	case o.Pool == nil:
		return ReasonPoolDeleted, true
	}
	return ReasonPoolUpdated, mco.PoolUpdated(o.Pool)
}

// prepared reports whether the surge was made ahead of its pool's update (TriggerPrepared).
func prepared(s *v1alpha1.Surge) bool { return Trigger(s.Spec.Trigger) == TriggerPrepared }

// stallGone reports whether what the surge was made for is over: the node's drain (the drain the
// Surge names is not the node's current one), or, for a Prepared surge, the pool's request.
func stallGone(o Observation) bool {
	if prepared(o.Surge) {
		return o.PrepareWithdrawn
	}
	return o.CurrentDrain != o.Surge.Spec.Drain
}

// preparedFinished is finished for a Prepared surge: both replicas are held until the pool is Updated
// (its update ran: a pending update keeps status.configuration behind spec), whatever --restore says,
// so that every drain of the update finds the workload with a replica to spare. Only a stall waiting
// for the capacity it holds takes it back earlier, once the workload stays available without it.
func preparedFinished(o Observation) (string, bool) {
	switch {
	case o.Node == nil:
		return ReasonNodeDeleted, true
	case o.CapacityWanted && o.ReadySurvivors >= max(o.Surge.Spec.Replicas, 1):
		return ReasonCapacityNeeded, true
	case o.Pool == nil:
		return ReasonPoolDeleted, true
	}
	return ReasonPoolUpdated, mco.PoolUpdated(o.Pool)
}

// sourceFinished is finished for a surge made for a source other than the MCO: it is held until the
// source is done with the node (a driver upgrade done, a NodeMaintenance deleted), and with
// --restore=pool until the source's rollout is over; the MCO pool's progress does not matter to it.
// capacityNeeded is the early restore that lets a stall waiting for capacity go on (see finished).
func sourceFinished(cfg Config, o Observation, capacityNeeded bool) (string, bool) {
	switch {
	case capacityNeeded:
		return ReasonCapacityNeeded, true
	case cfg.Restore == RestorePool:
		return ReasonRolloutOver, o.SourceBack && o.SourceRolloutOver
	}
	return ReasonNodeBack, o.SourceBack
}

func allIn(states []workload.FieldState, want workload.FieldState) bool {
	for _, s := range states {
		if s != want {
			return false
		}
	}
	return len(states) > 0
}

func anyIn(states []workload.FieldState, want workload.FieldState) bool {
	for _, s := range states {
		if s == want {
			return true
		}
	}
	return false
}

// SlotHold bounds how long a Surge made for a drain under way holds a --max-concurrent-surges slot,
// whatever its tenant does: it is Pending and Surged at most --ready-timeout from its start (the
// Pending deadline, PendingTimeout, is shorter), and Ready at most --evict-timeout from its node's
// drain. A workload not at rest takes no slot (StallNotSteady), a refused replacement frees it after
// ReplacementRefusedTimeout, a second PDB over the blocked pod at once. The slot rule (see slot in
// stall.go) gives a freed slot first to the namespaces with the fewest surges in flight: a stall of a
// namespace with none waits for at most one SlotHold per --max-concurrent-surges stalls of other such
// namespaces that waited longer (docs/security.md).
func SlotHold(cfg Config) time.Duration {
	return max(cfg.ReadyTimeout, PendingTimeout) + cfg.EvictTimeout
}

// InFlight reports whether a Surge is a stall being served, the kind --max-concurrent-surges bounds:
// a surge held only for safety, or being restored, is not; nor is a Prepared surge once its
// replacement is Ready (it waits for its pool's update, which may be hours away).
func InFlight(s *v1alpha1.Surge) bool {
	switch s.PhaseOf() {
	case v1alpha1.PhasePending, v1alpha1.PhaseSurged:
		return true
	case v1alpha1.PhaseReady:
		return !prepared(s)
	}
	return false
}
