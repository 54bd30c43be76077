package guardian

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// Retry delays of deferred stalls.
const (
	// DeferRetry is how soon a stall that could not be surged yet (capacity, concurrency, look-ahead
	// room) is looked at again.
	DeferRetry = 30 * time.Second
	// PDBLagRetry is how soon a stall whose PDB status lags behind its pods is looked at again; the
	// PDB's own update re-examines it sooner.
	PDBLagRetry = 2 * time.Second
	// StaleSurgeRetry is how soon a stall is looked at again after a Failed Surge of an earlier
	// drain was deleted to make room for its own.
	StaleSurgeRetry = time.Second
)

// Outcome is what the guardian does about one blocked workload.
type Outcome int

// The outcomes of DecideStalls.
const (
	// OutcomeIgnore: nothing to do and nothing to report (out of scope, opted out).
	OutcomeIgnore Outcome = iota
	// OutcomeSurge: create a Surge with the decision's fields and delta.
	OutcomeSurge
	// OutcomeCovered: an existing Surge serves this stall.
	OutcomeCovered
	// OutcomeDefer: not now; look again after RetryAfter (capacity, concurrency, look-ahead room,
	// a PDB status behind its pods, an owner that could not be read).
	OutcomeDefer
	// OutcomeUnresolvable: no surge helps; report it.
	OutcomeUnresolvable
	// OutcomeCleanup: a Failed Surge of an earlier drain is in the way: delete it and look again.
	OutcomeCleanup
)

// StallConfig is the part of the configuration that changes a stall decision.
type StallConfig struct {
	// NamespaceSelector is --namespace-selector; nil selects every namespace.
	NamespaceSelector labels.Selector
	// Excludes tells the namespaces left out whatever the selector says (options.Excludes: the
	// platform's and the guardian's own, unless --platform-namespaces); nil excludes none.
	Excludes func(namespace string) bool
	// NilKeepsCount is the LLMInferenceService replica semantics (see workload.PlanSurge).
	NilKeepsCount bool
	// MaxInFlight is --max-concurrent-surges; 0 means no limit (a prediction).
	MaxInFlight int
	// MaxInFlightPerNamespace is --max-concurrent-surges-per-namespace; 0 means no limit.
	MaxInFlightPerNamespace int
	// MaxSurgeReplicas is --max-surge-replicas, the replicas one surge may add; 0 means
	// blocking.MaxSurge.
	MaxSurgeReplicas int32
	// Predicting is set by `check`: a Failed Surge of an earlier drain counts as already deleted,
	// as the daemon deletes it before deciding again.
	Predicting bool
}

// Owner is what was read about a blocked pod's owner (see workload.Observe).
type Owner = workload.Owner

// Stall is one pod that a PDB keeps on the node, with what was observed about it.
type Stall struct {
	blocking.Blocked
	// Namespace is the pod's namespace; nil when it could not be read.
	Namespace *corev1.Namespace
	// PDBStatusBehind: the PDB's status counts fewer healthy pods than the cache holds.
	PDBStatusBehind bool
	Owner           Owner
	// Existing is the workload's Surge, of any phase; nil when it has none.
	Existing *v1alpha1.Surge
	// WaitingSince is when the stall was first deferred for a slot; zero when it never was.
	WaitingSince time.Time
	// Group is, for a multi-node workload (a LeaderWorkerSet, whose replicas are groups of pods),
	// the group a surge adds (see GroupOf); nil when a replica is one pod.
	Group *blocking.Group
}

// GroupOf returns the group a surge of the stall's workload adds when its pod owner runs groups
// (workload.PodOwnerState.GroupSize), from the workload's pods; nil otherwise. ObserveStalls calls it
// for the controller and `check` alike, so that they count capacity alike.
func GroupOf(o Owner, blocked *podinfo.Pod, pods []*podinfo.Pod) *blocking.Group {
	if o.Err != nil || o.PodOwner == nil || o.PodOwner.GroupSize < 1 {
		return nil
	}
	return blocking.GroupModel(blocked, pods, int(o.PodOwner.GroupSize), o.PodOwner.TopologyKey)
}

// Lookahead is what a look-ahead surge may use: only spare capacity, never the room a stall being
// served needs.
type Lookahead struct {
	// CapacityWanted: a stall of the pool waits for capacity now; nothing is spare.
	CapacityWanted bool
	// WillNotDrain filters the ledger to the nodes this update will not drain again (see
	// mco.WillNotDrain): a replacement on a node still to update would only move the stall there.
	WillNotDrain func(*corev1.Node) bool
	// Unserved are the replacements the stalls on the nodes updating now will ask for.
	Unserved []*podinfo.Pod
}

// Wave is everything DecideStalls reads about one node to be drained (or one node of the wave a
// prediction looks at).
type Wave struct {
	Node  string
	Drain NodeDrain
	// PoolSelected: the node's pool matches --pool-selector.
	PoolSelected bool
	Stalls       []Stall
	// InFlight counts the Surges serving a stall now, including those created but not yet cached.
	InFlight int
	// InFlightByNamespace splits InFlight by namespace; DecideStalls adds the surges it decides.
	InFlightByNamespace map[string]int
	// Waiting lists the stalls deferred for a slot, of any node, that still wait: a freed slot goes
	// first to the namespace with the fewest surges in flight, then to the oldest stall.
	Waiting []WaitingStall
	// Ledger is the capacity the wave's surges book against; shared by every wave of one sync or
	// of one prediction step.
	Ledger *Ledger
	// Lookahead is the room for look-ahead surges (Drain.Lookahead()); nil means none.
	Lookahead *Lookahead
}

// WaitingStall is a stall deferred for want of a slot.
type WaitingStall struct {
	// Workload identifies the stall (the UID of the blocked pod's controller).
	Workload  types.UID
	Namespace string
	// Since is when it was first deferred.
	Since time.Time
}

// Decision is what the guardian does about one blocked pod.
type Decision struct {
	Outcome Outcome
	// Reason names why the pod is not surged now (StallNone for a surge or a covered stall).
	Reason StallReason
	// Detail says why, in a sentence without the pod or node (the caller adds them).
	Detail string
	// Regarding is the object a report is about: the workload when resolved, else the pod.
	Regarding *corev1.ObjectReference
	// InScope: the pod's namespace is one the guardian serves (it counts as blocked).
	InScope bool
	// SameAs is the index of the earlier pod of the same workload whose decision this repeats, or -1.
	SameAs     int
	RetryAfter time.Duration
	// Fields and Delta are the surge to make (OutcomeSurge).
	Fields []workload.Field
	Delta  int32
	// Missing is what the replacements that fit nowhere request (StallNoCapacity).
	Missing corev1.ResourceList
	// Existing is the Surge that covers the stall, failed for it, or is to be deleted.
	Existing *v1alpha1.Surge
	// Target is the object whose replicas a surge raises, when the owner was resolved.
	Target *workload.Target
}

// DecideStalls decides every blocked pod of a wave. Several blocked pods of one workload are one
// stall: the first decides for all of them. Surges decided are booked in w.Ledger and counted
// against cfg.MaxInFlight, so the next decision (of this wave or another sharing the ledger) sees them.
func DecideStalls(cfg StallConfig, w Wave) []Decision {
	out := make([]Decision, len(w.Stalls))
	first := map[types.UID]int{}
	for i := range w.Stalls {
		st := &w.Stalls[i]
		owner := WorkloadOf(st.Pod)
		if t := st.Owner.Target; t != nil && t.PodOwner.UID != "" && st.Group != nil {
			// A group's leader and workers have StatefulSets of their own: one stall all the same.
			owner = t.PodOwner.UID
		}
		if j, ok := first[owner]; ok && owner != "" {
			out[i] = out[j]
			out[i].SameAs = j
			continue
		}
		first[owner] = i
		d := decideOne(cfg, &w, st)
		d.SameAs = -1
		if d.Outcome == OutcomeSurge {
			w.Ledger.BookStall(st, int(d.Delta))
			w.InFlight++
			if w.InFlightByNamespace == nil {
				w.InFlightByNamespace = map[string]int{}
			}
			w.InFlightByNamespace[st.Pod.Namespace]++
		}
		out[i] = d
	}
	return out
}

// WorkloadOf identifies a blocked pod's stall: the UID of the pod's controller, so that the blocked
// pods of one workload are one stall ("" for a pod without a controller).
func WorkloadOf(p *podinfo.Pod) types.UID {
	if ref := metav1.GetControllerOf(p); ref != nil {
		return ref.UID
	}
	return ""
}

// decideOne decides one stall: scope, owner, existing Surge, PDB, surge plan, then room.
func decideOne(cfg StallConfig, w *Wave, st *Stall) Decision {
	d := Decision{Regarding: st.Pod.Ref()}
	if r, detail := Scope(cfg, w.PoolSelected, st.Namespace, st.Pod.Namespace); r != StallNone {
		return d.with(OutcomeIgnore, r, "%s", detail)
	}
	d.InScope = true
	if st.PDBStatusBehind && !st.MultiplePDBs {
		d = d.with(OutcomeDefer, StallPDBStatusBehind, "the status of PDB %s lags behind its pods", st.PDB.Name)
		d.RetryAfter = PDBLagRetry
		return d
	}
	if d.Target = st.Owner.Target; d.Target != nil {
		d.Regarding = d.Target.Ref.ObjectReference()
	}
	if r, detail := ownerProblem(st.Owner); r != StallNone {
		return d.with(outcomeOf(r), r, "%s", detail)
	}
	t, obj, po := st.Owner.Target, st.Owner.Object, st.Owner.PodOwner
	d.Regarding = obj.ObjectReference()
	if obj.Ignored() || workload.IgnoredByAnnotation(po.Annotations) {
		return d.with(OutcomeIgnore, StallOptedOut, "%s=true on %s: the guardian will not surge it", workload.IgnoreAnnotation, t.Ref.Kind)
	}
	if done, ok := existing(cfg, w, st, d); ok {
		return done
	}
	perReplica := int32(1)
	if st.Group != nil {
		perReplica = int32(len(st.Group.Pods))
	}
	delta, why := blocking.SurgeNeededPer(st.PDB, perReplica)
	if st.MultiplePDBs {
		return d.with(OutcomeUnresolvable, StallMultiplePDBs, "more than one PDB selects the pod; the Eviction API refuses it whatever the budgets")
	}
	if why != "" {
		return d.with(OutcomeUnresolvable, StallUnsatisfiablePDB, "%s", DescribePDB(st.PDB, why))
	}
	if cfg.MaxSurgeReplicas > 0 && delta > cfg.MaxSurgeReplicas {
		// A tenant's budget (minAvailable: 90% of one replica) must not make the guardian hand it
		// nine GPUs: the stall is reported with the number instead.
		return d.with(OutcomeUnresolvable, StallSurgeTooLarge, "PDB %s allows a disruption only with %d added replicas, more than --max-surge-replicas=%d",
			st.PDB.Name, delta, cfg.MaxSurgeReplicas)
	}
	if why := st.Owner.Unsettled(); why != "" {
		// Surge only a workload at rest: what it runs is then what it asks for, and the replicas the
		// surge adds are the ones the drain waits for. The workload's informer re-examines the node
		// when it settles; DeferRetry looks again in any case.
		return d.with(OutcomeDefer, StallNotSteady, "%s; a surge waits until it runs what it asks for", why)
	}
	fields, err := workload.PlanSurge(obj, t, po.Replicas, delta, cfg.NilKeepsCount)
	if err != nil {
		return d.with(OutcomeUnresolvable, StallUnsupportedOwner, "%s", unsupportedDetail(err))
	}
	if r, detail := beyondPolicy(cfg, fields); r != StallNone {
		return d.with(OutcomeUnresolvable, r, "%s", detail)
	}
	d.Fields, d.Delta = fields, delta
	return room(cfg, w, st, d)
}

// beyondPolicy reports a planned write that the admission policy drain-guardian-writes would refuse
// (manifests/base/admissionpolicy.yaml), so that the stall is reported instead of a surge failing
// WriteTimeout a minute later: a write may change a present count by at most --max-surge-replicas
// (the minimum of an HPA far below what it runs is raised by more than the delta), and the restore
// may not write a count below 1 (an InferenceService's minReplicas 0).
func beyondPolicy(cfg StallConfig, fields []workload.Field) (StallReason, string) {
	for _, f := range fields {
		if f.Original == nil {
			continue
		}
		if *f.Original < 1 {
			return StallUnsupportedOwner, fmt.Sprintf("%s is %d: restoring it would write a count below 1, which the guardian may not", f.Path, *f.Original)
		}
		if change := f.Set - *f.Original; cfg.MaxSurgeReplicas > 0 && change > int64(cfg.MaxSurgeReplicas) {
			return StallSurgeTooLarge, fmt.Sprintf("raising %s from %d to %d changes it by %d, more than --max-surge-replicas=%d",
				f.Path, *f.Original, f.Set, change, cfg.MaxSurgeReplicas)
		}
	}
	return StallNone, ""
}

// with sets the decision's outcome and reason and says why.
func (d Decision) with(o Outcome, r StallReason, format string, args ...any) Decision {
	d.Outcome, d.Reason, d.Detail = o, r, fmt.Sprintf(format, args...)
	if o == OutcomeDefer && d.RetryAfter == 0 && r != StallUnknown {
		d.RetryAfter = DeferRetry
	}
	return d
}

func outcomeOf(r StallReason) Outcome {
	if r == StallUnknown {
		return OutcomeDefer
	}
	return OutcomeUnresolvable
}

// Scope applies --pool-selector, the platform exclusion, --namespace-selector and the namespace opt-out annotation to a pod
// of namespace name (ns is that namespace, nil when it cannot be read); StallNone means in scope.
// Labels and annotations are the namespace owner's input: only the documented values count.
func Scope(cfg StallConfig, poolSelected bool, ns *corev1.Namespace, name string) (StallReason, string) {
	switch {
	case !poolSelected:
		return StallOutOfScope, "the pool does not match --pool-selector: the guardian leaves it alone"
	case cfg.Excludes != nil && cfg.Excludes(name):
		return StallOutOfScope, fmt.Sprintf("namespace %s belongs to the platform or the guardian: out of scope unless --platform-namespaces", name)
	case ns == nil:
		return StallOutOfScope, fmt.Sprintf("namespace %s is not readable", name)
	case workload.IgnoredByAnnotation(ns.Annotations):
		return StallOptedOut, fmt.Sprintf("%s=true on namespace %s", workload.IgnoreAnnotation, ns.Name)
	case cfg.NamespaceSelector != nil && !cfg.NamespaceSelector.Matches(labels.Set(ns.Labels)):
		return StallOutOfScope, fmt.Sprintf("namespace %s does not match --namespace-selector", ns.Name)
	}
	return StallNone, ""
}

// ownerProblem classifies an error met reading the pod's owner. Only what cannot change by itself
// is unresolvable; anything else (a cache miss, a timeout) is unknown: look again.
func ownerProblem(o Owner) (StallReason, string) {
	var unsup *workload.UnsupportedError
	var notServed *workload.NotServedError
	err := o.Err
	switch {
	case err == nil:
		return StallNone, ""
	case errors.As(err, &unsup):
		return StallUnsupportedOwner, unsup.Detail
	case errors.As(err, &notServed):
		return StallUnsupportedOwner, fmt.Sprintf("owned by a %s, which this cluster does not serve (or the guardian may not list)", notServed.Kind)
	case apierrors.IsForbidden(err) && o.Target != nil && o.Target.Ref.ViaScale():
		r := o.Target.Ref
		gv, _ := schema.ParseGroupVersion(r.APIVersion)
		return StallMissingRBAC, fmt.Sprintf("%s %s has a /scale subresource the guardian may not use: grant get and patch on %s/scale in API group %q",
			r.Kind, r.Name, r.Resource, gv.Group)
	}
	return StallUnknown, fmt.Sprintf("reading the owner failed, looking again: %v", err)
}

func unsupportedDetail(err error) string {
	var unsup *workload.UnsupportedError
	if errors.As(err, &unsup) {
		return unsup.Detail
	}
	return err.Error()
}

// existing decides a stall whose workload has a Surge already: an active one covers it; a Failed
// one for this very drain was reported when it failed; a Failed one for another drain is deleted so
// that this stall gets a surge of its own.
func existing(cfg StallConfig, w *Wave, st *Stall, d Decision) (Decision, bool) {
	s := st.Existing
	if s == nil {
		return d, false
	}
	d.Existing = s
	switch {
	case s.PhaseOf() != v1alpha1.PhaseFailed:
		return d.with(OutcomeCovered, StallNone, "Surge %s serves it", s.Name), true
	case s.Spec.Node == w.Node && s.Spec.Drain == w.Drain.Drain && !failedPrepare(s, w):
		return d.with(OutcomeUnresolvable, StallSurgeFailed, "Surge %s failed for this drain (%s): %s", s.Name, s.Status.Reason, s.Status.Message), true
	case cfg.Predicting:
		d.Existing = nil
		return d, false
	}
	d = d.with(OutcomeCleanup, StallNone, "Surge %s failed for an earlier drain", s.Name)
	d.RetryAfter = StaleSurgeRetry
	return d, true
}

// failedPrepare: a prepared surge failed ahead of the drain that has now come; the drain gets a
// surge of its own.
func failedPrepare(s *v1alpha1.Surge, w *Wave) bool {
	return Trigger(s.Spec.Trigger) == TriggerPrepared && w.Drain.Trigger != TriggerPrepared
}

// room decides whether the planned surge can be made now: capacity, then the concurrency limit.
// A look-ahead surge is only for spare capacity and never takes the last slot.
func room(cfg StallConfig, w *Wave, st *Stall, d Decision) Decision {
	if w.Drain.Trigger == TriggerPrepared {
		return prepareRoom(cfg, w, st, d)
	}
	delta := int(d.Delta)
	lookahead := w.Drain.Lookahead()
	if lookahead && !lookaheadFits(w, st, delta) {
		return d.with(OutcomeDefer, StallLookaheadSkipped, "no spare capacity on updated nodes after the stalls being served")
	}
	if placed, short := w.Ledger.FitStall(st, delta, nil, nil); placed < delta {
		d.Missing = short.Resources
		return d.with(OutcomeDefer, StallNoCapacity, "%s%s", describeShort(st, placed, delta, short, "other schedulable"), deviceReasons(short))
	}
	if cfg.MaxInFlight > 0 && lookahead && w.InFlight+1 >= cfg.MaxInFlight {
		return d.with(OutcomeDefer, StallLookaheadSkipped, "the last surge slot stays for a stall that blocks a drain")
	}
	return slot(cfg, w, st, d)
}

// slot decides whether the stall gets one of the --max-concurrent-surges slots now. One namespace
// never holds more than --max-concurrent-surges-per-namespace of them, and when stalls of other
// namespaces wait, a free slot goes first to the namespace with the fewest surges in flight, then
// to the stall that has waited longest: no tenant can keep another's stall waiting by having more.
func slot(cfg StallConfig, w *Wave, st *Stall, d Decision) Decision {
	ns := st.Pod.Namespace
	mine := w.InFlightByNamespace[ns]
	if cfg.MaxInFlightPerNamespace > 0 && mine >= cfg.MaxInFlightPerNamespace {
		return d.with(OutcomeDefer, StallDeferred, "namespace %s has %d surges in flight (--max-concurrent-surges-per-namespace=%d): waiting",
			ns, mine, cfg.MaxInFlightPerNamespace)
	}
	if cfg.MaxInFlight <= 0 {
		return d.with(OutcomeSurge, StallNone, "")
	}
	free := cfg.MaxInFlight - w.InFlight
	if free <= 0 {
		return d.with(OutcomeDefer, StallDeferred, "%d stalls are being served (--max-concurrent-surges=%d): waiting", w.InFlight, cfg.MaxInFlight)
	}
	since := st.WaitingSince
	ahead := 0
	for _, o := range w.Waiting {
		if o.Namespace == ns {
			continue
		}
		theirs := w.InFlightByNamespace[o.Namespace]
		if cfg.MaxInFlightPerNamespace > 0 && theirs >= cfg.MaxInFlightPerNamespace {
			continue // it waits for its own namespace's surges, not for a free slot
		}
		if theirs < mine || (theirs == mine && (since.IsZero() || o.Since.Before(since))) {
			ahead++
		}
	}
	if ahead >= free {
		return d.with(OutcomeDefer, StallDeferred, "%d free surge slot(s) go first to %d stall(s) of namespaces with fewer surges in flight or waiting longer",
			free, ahead)
	}
	return d.with(OutcomeSurge, StallNone, "")
}

// deviceReasons says why DRA devices were not counted for the replacements, if they were not for a
// reason other than their number.
func deviceReasons(short capacity.Shortfall) string {
	var out string
	if short.Refused != "" {
		out += "; " + short.Refused
	}
	if short.Unsure != "" {
		out += fmt.Sprintf("; devices the count cannot judge (%s) are not counted unless --dra-unknown-fits is set", short.Unsure)
	}
	return out
}

// lookaheadFits reports whether a look-ahead surge fits in what the stalls being served leave free:
// no stall of the pool waits for capacity, and with the replacements of the stalls on the nodes
// updating now placed first, it fits on a node the update will not drain again.
func lookaheadFits(w *Wave, st *Stall, delta int) bool {
	la := w.Lookahead
	if la == nil || la.CapacityWanted {
		return false
	}
	placed, _ := w.Ledger.FitStall(st, delta, la.WillNotDrain, la.Unserved)
	return placed == delta
}

// describeShort says how many of the delta replacements fit nowhere and what they miss: pods, or for
// a multi-node workload whole groups ("missing 2 nodes with 8 nvidia.com/gpu each").
func describeShort(st *Stall, placed, delta int, short capacity.Shortfall, where string) string {
	if st.Group == nil {
		return fmt.Sprintf("%d of %d replacement(s) fit on no %s node: missing %s",
			delta-placed, delta, where, capacity.DescribeResources(short.Resources))
	}
	nodes := "1 node with " + capacity.DescribeResources(short.PerNode)
	if short.Nodes != 1 {
		nodes = fmt.Sprintf("%d nodes with %s each", short.Nodes, capacity.DescribeResources(short.PerNode))
	}
	out := fmt.Sprintf("%d of %d group(s) of %d pods fit on no %s nodes (a group is placed whole or not at all): missing %s",
		delta-placed, delta, len(st.Group.Pods), where, nodes)
	if short.Domain != "" {
		out += fmt.Sprintf(" in one %s domain (%s)", st.Group.TopologyKey, short.Domain)
	}
	return out
}

// DescribePDB says why no surge satisfies the PDB (why is blocking.SurgeNeeded's reason).
func DescribePDB(pdb *policyv1.PodDisruptionBudget, why string) string {
	switch why {
	case blocking.ReasonMaxUnavailable:
		return fmt.Sprintf("PDB %s has maxUnavailable %s: added replicas raise the expected count too, so no surge helps", pdb.Name, pdb.Spec.MaxUnavailable.String())
	case blocking.ReasonFullMinAvailable:
		return fmt.Sprintf("PDB %s has minAvailable %s: it requires every replica, whatever their number", pdb.Name, pdb.Spec.MinAvailable.String())
	}
	return fmt.Sprintf("PDB %s would need more than %d added replicas", pdb.Name, blocking.MaxSurge)
}
