package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
)

// Event reasons of a pool being prepared (recorded on the MachineConfigPool).
const (
	// ReasonPoolPreparing: some workloads that would stall the pool's next update are being prepared.
	ReasonPoolPreparing = "PoolPreparing"
	// ReasonPoolPrepared: every workload that would stall the pool's next update has a Ready extra replica.
	ReasonPoolPrepared = "PoolPrepared"
	// ReasonPoolPartlyPrepared: none is being prepared any more, but some are not prepared: they wait
	// for capacity, or no surge helps them. The pool is as ready as it gets until something changes.
	//
	// Each state has a reason of its own because the events API folds Events that differ only in their
	// note into one series, of which the API server keeps the first note: a PoolPreparing whose counts
	// changed would never be seen.
	ReasonPoolPartlyPrepared = "PoolPartlyPrepared"
	// ReasonNothingToPrepare: the pool has no pending update, or its pending update is known to be
	// applied without cordon or drain.
	ReasonNothingToPrepare = "NothingToPrepare"
)

const actionPrepare = "Prepare"

// prepareRecheck is how often a pool being prepared is looked at again without any change: free
// capacity moves without an event on the pool.
const prepareRecheck = guardian.DeferRetry

// sync prepares a pool annotated drain-guardian.io/prepare=true for its next update: observe (the
// blocked pods of its nodes still to update, in the MCO's order), decide (guardian.DecidePrepare, under
// the executor's admission with the surges it starts), apply (cleanups, Event, gauge). The pool is
// only read, never written.
func (r *poolReconciler) sync(ctx context.Context, name string) (time.Duration, error) {
	if r.pools == nil {
		return 0, nil
	}
	pool, err := r.pools.Get(name)
	if apierrors.IsNotFound(err) {
		r.preparations.forget(name, r.metrics)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if !guardian.PrepareRequested(pool) || !r.poolSelector.Matches(labels.Set(pool.Labels)) {
		r.preparations.forget(name, r.metrics)
		return 0, nil
	}
	config := guardian.PendingConfig(pool)
	if after, nothing := r.nothingToPrepare(pool, config); nothing {
		r.preparations.set(name, prepareCounts{}, r.metrics)
		return after, nil
	}
	nodes, err := r.observePrepare(pool, config)
	if err != nil {
		return 0, err
	}
	decisions, starts := r.decidePrepare(ctx, config, nodes)
	counts, err := r.applyPrepare(ctx, pool.Name, nodes, decisions, starts)
	r.preparations.set(name, counts, r.metrics)
	r.reportPrepared(pool, config, counts)
	return prepareRecheck, err
}

// nothingToPrepare reports, with its Event, a pool that has nothing to prepare for now: no pending
// update, an update paused by the maintenance operator, or one applied without a drain; and when to
// look at it again.
func (r *poolReconciler) nothingToPrepare(pool *mcfgv1.MachineConfigPool, config string) (time.Duration, bool) {
	name := pool.Name
	if config == "" {
		r.reportPrepare(pool, corev1.EventTypeNormal, ReasonNothingToPrepare,
			"Pool %s has no pending update (spec.configuration is status.configuration %s): nothing to prepare", name, pool.Status.Configuration.Name)
		return 0, true
	}
	if mco.PausedForMaintenance(pool) {
		r.reportPrepare(pool, corev1.EventTypeNormal, ReasonNothingToPrepare,
			"Pool %s is paused by NVIDIA's maintenance operator (%s) while it maintains a node: its update to %s waits for the maintenance to end; nothing is prepared before then",
			name, mco.MaintenancePausedAnnotation, config)
		return prepareRecheck, true
	}
	if ans := r.pendingAnswer(pool); ans.Need == mco.NeedNoDrain {
		r.reportPrepare(pool, corev1.EventTypeNormal, ReasonNothingToPrepare,
			"Pool %s's update to %s is applied without cordon or drain (%s): nothing to prepare", name, config, ans)
		return prepareRecheck, true
	}
	return 0, false
}

// pendingAnswer is whether the pool's pending update drains its nodes still to update: known once
// the machine-config daemon of one of them has answered (mco.PoolAnswer). An update not known to
// drain is prepared for: the daemon drains for any change it does not know.
func (r *poolReconciler) pendingAnswer(pool *mcfgv1.MachineConfigPool) mco.Answer {
	return mco.PoolAnswer(pool, r.plan(pool).Order(), r.answers.need)
}

// observePrepare reads the stalls of the pool's nodes that its next update has still to take, in the
// MCO's order. Nodes updating now are left to the stall path, which serves their drains.
func (r *poolReconciler) observePrepare(pool *mcfgv1.MachineConfigPool, config string) ([]*nodeObservation, error) {
	plan := r.plan(pool)
	var out []*nodeObservation
	for _, n := range append(append(append([]*corev1.Node{}, plan.Now...), plan.Later...), plan.Skipped...) {
		obs := &nodeObservation{node: n, pool: pool.Name, wave: guardian.Wave{
			Node: n.Name, Drain: guardian.NodeDrain{Trigger: guardian.TriggerPrepared, Drain: config}, PoolSelected: true}}
		if err := r.observeStalls(obs); err != nil {
			return nil, err
		}
		out = append(out, obs)
	}
	return out, nil
}

// decidePrepare decides the pool's prepared surges and starts them under the executor's admission,
// after every stall in flight (see decideStalls).
func (r *poolReconciler) decidePrepare(ctx context.Context, config string, nodes []*nodeObservation) ([]guardian.PrepareDecision, map[[2]int]*surgeStart) {
	var decisions []guardian.PrepareDecision
	starts := map[[2]int]*surgeStart{}
	r.exec.admit(ctx, func() []*surgeStart {
		p := r.prepareInput(config, nodes, r.demand.anyCapacityWanted())
		decisions = guardian.DecidePrepare(r.stallConfig(), p)
		var out []*surgeStart
		for i, nd := range decisions {
			for j, d := range nd.Decisions {
				if d.Outcome == guardian.OutcomeSurge && d.SameAs < 0 {
					starts[[2]int{i, j}] = r.surgeStart(nodes[i], &nodes[i].wave.Stalls[j], d)
					out = append(out, starts[[2]int{i, j}])
				}
			}
		}
		return out
	})
	return decisions, starts
}

// prepareInput is what guardian.DecidePrepare reads besides the stalls: the surges in flight, the
// capacity ledger after every stall's, and whether a stall waits for capacity now.
func (r *poolReconciler) prepareInput(config string, nodes []*nodeObservation, capacityWanted bool) guardian.Prepare {
	view := r.flight.view(r.surges.List())
	pools := r.newPoolLookup()
	p := guardian.Prepare{
		Config: config, PoolSelected: true, InFlight: view.count, InFlightByNamespace: view.byNamespace, Waiting: view.waiting,
		Ledger:         guardian.NewLazyLedger(r.capacityNow, r.booked(view)),
		CapacityWanted: capacityWanted,
		WillNotDrain:   func(n *corev1.Node) bool { return r.willNotDrain(n, pools) },
	}
	for _, obs := range nodes {
		p.Nodes = append(p.Nodes, guardian.PrepareNode{Node: obs.node.Name, Stalls: obs.wave.Stalls})
	}
	return p
}

// addPreparedSurges counts the pool's Prepared Surges (those its workloads no longer block with) and
// sorts the notes.
func (r *poolReconciler) addPreparedSurges(pc *prepareCounts, pool string) {
	for _, s := range r.surges.List() {
		if guardian.Trigger(s.Spec.Trigger) == guardian.TriggerPrepared && s.Spec.Pool == pool && s.PhaseOf() != v1alpha1.PhaseFailed {
			pc.add(preparedState(s), "", s.Name)
		}
	}
	for _, notes := range pc.notes {
		sort.Strings(notes)
	}
}

// preparedState is the state of a workload whose Surge serves the pool's update.
func preparedState(s *v1alpha1.Surge) string {
	switch s.PhaseOf() {
	case v1alpha1.PhaseReady, v1alpha1.PhaseResolved:
		return metrics.PreparedReady
	case v1alpha1.PhaseRestoring, v1alpha1.PhaseFailed:
		return metrics.PreparedWaiting
	}
	return metrics.PreparedStarting
}

// applyPrepare deletes the failed Surges in the way and counts every workload by state: those still
// blocked as decided, then those the pool's Prepared Surges made safe (their PDB allows a disruption
// now, so they no longer block). A surge that could not be created, and an owner that could not be
// read, are retried.
func (r *poolReconciler) applyPrepare(ctx context.Context, pool string, nodes []*nodeObservation, decisions []guardian.PrepareDecision, starts map[[2]int]*surgeStart) (prepareCounts, error) {
	var counts prepareCounts
	var firstErr error
	for i, nd := range decisions {
		for j, d := range nd.Decisions {
			if d.SameAs >= 0 || d.Outcome == guardian.OutcomeIgnore {
				continue
			}
			state, note, err := r.applyPrepared(ctx, nodes[i], j, d, starts[[2]int{i, j}])
			if err != nil && firstErr == nil {
				firstErr = err
			}
			counts.add(state, note, surgeNameOf(d, &nodes[i].wave.Stalls[j], starts[[2]int{i, j}]))
		}
	}
	r.addPreparedSurges(&counts, pool)
	return counts, firstErr
}

// surgeNameOf names the workload's Surge, just started or found, "" when it has none.
func surgeNameOf(d guardian.Decision, st *guardian.Stall, start *surgeStart) string {
	switch {
	case d.Outcome == guardian.OutcomeSurge && start != nil:
		return start.surge.Name
	case st.Existing != nil:
		return st.Existing.Name
	}
	return ""
}

// applyPrepared carries out one workload's prepare decision and says in which state it is
// (preparedOf), or that its surge could not be started.
func (r *poolReconciler) applyPrepared(ctx context.Context, obs *nodeObservation, j int, d guardian.Decision, start *surgeStart) (string, string, error) {
	st := &obs.wave.Stalls[j]
	state, note := preparedOf(obs.node.Name, st, d)
	switch d.Outcome {
	case guardian.OutcomeSurge:
		if start.err != nil && !apierrors.IsAlreadyExists(start.err) && !errors.Is(start.err, errDryRun) {
			return metrics.PreparedWaiting, prepareSubject(obs.node.Name, d) + ": creating its Surge failed", start.err
		}
		if start.err == nil {
			r.event(d.Regarding, corev1.EventTypeNormal, ReasonSurgeStarted, actionSurge,
				"Surging %s ahead of the update of pool %s, so that node %s drains without waiting for pod %s (Surge %s)",
				guardian.DescribeFields(d.Fields), obs.pool, obs.node.Name, st.Pod.Name, start.surge.Name)
			r.enqueueSurge(start.surge)
		}
	case guardian.OutcomeCovered:
		r.enqueueSurge(d.Existing)
	case guardian.OutcomeCleanup:
		r.enqueueSurge(d.Existing)
		return state, note, r.exec.deleteSurge(ctx, d.Existing)
	case guardian.OutcomeDefer:
		if d.Reason == guardian.StallUnknown {
			return state, note, fmt.Errorf("pod %s/%s: %w", st.Pod.Namespace, st.Pod.Name, st.Owner.Err)
		}
	}
	return state, note, nil
}

// preparedOf is the state a prepare decision leaves a workload in, with why when it is not prepared:
// the one answer of the daemon's Events and metric and of `check`.
func preparedOf(node string, st *guardian.Stall, d guardian.Decision) (string, string) {
	what := prepareSubject(node, d)
	switch d.Outcome {
	case guardian.OutcomeSurge:
		return metrics.PreparedStarting, ""
	case guardian.OutcomeCovered:
		if state := preparedState(d.Existing); state != metrics.PreparedWaiting {
			return state, ""
		}
		return metrics.PreparedWaiting, what + ": its Surge is being restored"
	case guardian.OutcomeCleanup:
		return metrics.PreparedWaiting, what + ": " + d.Detail
	case guardian.OutcomeUnresolvable:
		return metrics.PreparedUnresolvable, fmt.Sprintf("%s: %s: %s", what, d.Reason, d.Detail)
	}
	switch {
	case d.Reason == guardian.StallPrepareQueued:
		// Queued behind surges in flight: it starts by itself, so the pool is still preparing, not
		// waiting for something to change (what an admin about to unpause needs to tell apart).
		return metrics.PreparedStarting, ""
	case d.Reason == guardian.StallPDBStatusBehind && st.Existing != nil:
		// The replacement just turned Ready and the PDB's status has not counted it yet.
		return preparedState(st.Existing), ""
	}
	return metrics.PreparedWaiting, what + ": " + d.Detail
}

// prepareSubject names the workload of a prepare decision and the node it would stall.
func prepareSubject(node string, d guardian.Decision) string {
	return fmt.Sprintf("%s %s/%s on %s", d.Regarding.Kind, d.Regarding.Namespace, d.Regarding.Name, node)
}

// predictPrepare counts the pool's workloads by the state sync would leave them in now, deciding
// as it does but writing nothing: what `check` prints under a pool being prepared.
func (r *poolReconciler) predictPrepare(pool *mcfgv1.MachineConfigPool, capacityWanted bool) (prepareCounts, error) {
	var counts prepareCounts
	config := guardian.PendingConfig(pool)
	if config == "" || mco.PausedForMaintenance(pool) || r.pendingAnswer(pool).Need == mco.NeedNoDrain {
		return counts, nil
	}
	nodes, err := r.observePrepare(pool, config)
	if err != nil {
		return counts, err
	}
	for i, nd := range guardian.DecidePrepare(r.stallConfig(), r.prepareInput(config, nodes, capacityWanted)) {
		for j, d := range nd.Decisions {
			if d.SameAs >= 0 || d.Outcome == guardian.OutcomeIgnore {
				continue
			}
			st := &nodes[i].wave.Stalls[j]
			state, note := preparedOf(nodes[i].node.Name, st, d)
			counts.add(state, note, surgeNameOf(d, st, nil))
		}
	}
	r.addPreparedSurges(&counts, pool.Name)
	return counts, nil
}
