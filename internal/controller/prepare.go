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

// syncPool prepares a pool annotated drain-guardian.io/prepare=true for its next update: observe (the
// blocked pods of its nodes still to update, in the MCO's order), decide (guardian.DecidePrepare, under
// the executor's admission with the surges it starts), apply (cleanups, Event, gauge). The pool is
// only read, never written.
func (c *Controller) syncPool(ctx context.Context, name string) (time.Duration, error) {
	if c.pools == nil {
		return 0, nil
	}
	pool, err := c.pools.Get(name)
	if apierrors.IsNotFound(err) {
		c.preparations.forget(name, c.metrics)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if !guardian.PrepareRequested(pool) || !c.poolSelector.Matches(labels.Set(pool.Labels)) {
		c.preparations.forget(name, c.metrics)
		return 0, nil
	}
	config := guardian.PendingConfig(pool)
	if after, nothing := c.nothingToPrepare(pool, config); nothing {
		c.preparations.set(name, prepareCounts{}, c.metrics)
		return after, nil
	}
	nodes, err := c.observePrepare(pool, config)
	if err != nil {
		return 0, err
	}
	decisions, starts := c.decidePrepare(ctx, config, nodes)
	counts, err := c.applyPrepare(ctx, pool.Name, nodes, decisions, starts)
	c.preparations.set(name, counts, c.metrics)
	c.reportPrepared(pool, config, counts)
	return prepareRecheck, err
}

// nothingToPrepare reports, with its Event, a pool that has nothing to prepare for now: no pending
// update, an update paused by the maintenance operator, or one applied without a drain; and when to
// look at it again.
func (c *Controller) nothingToPrepare(pool *mcfgv1.MachineConfigPool, config string) (time.Duration, bool) {
	name := pool.Name
	if config == "" {
		c.reportPrepare(pool, corev1.EventTypeNormal, ReasonNothingToPrepare,
			"Pool %s has no pending update (spec.configuration is status.configuration %s): nothing to prepare", name, pool.Status.Configuration.Name)
		return 0, true
	}
	if mco.PausedForMaintenance(pool) {
		c.reportPrepare(pool, corev1.EventTypeNormal, ReasonNothingToPrepare,
			"Pool %s is paused by NVIDIA's maintenance operator (%s) while it maintains a node: its update to %s waits for the maintenance to end; nothing is prepared before then",
			name, mco.MaintenancePausedAnnotation, config)
		return prepareRecheck, true
	}
	if ans := c.pendingAnswer(pool); ans.Need == mco.NeedNoDrain {
		c.reportPrepare(pool, corev1.EventTypeNormal, ReasonNothingToPrepare,
			"Pool %s's update to %s is applied without cordon or drain (%s): nothing to prepare", name, config, ans)
		return prepareRecheck, true
	}
	return 0, false
}

// pendingAnswer is whether the pool's pending update drains its nodes still to update: known once
// the machine-config daemon of one of them has answered (mco.PoolAnswer). An update not known to
// drain is prepared for: the daemon drains for any change it does not know.
func (c *Controller) pendingAnswer(pool *mcfgv1.MachineConfigPool) mco.Answer {
	return mco.PoolAnswer(pool, c.plan(pool).Order(), c.answers.need)
}

// observePrepare reads the stalls of the pool's nodes that its next update has still to take, in the
// MCO's order. Nodes updating now are left to the stall path, which serves their drains.
func (c *Controller) observePrepare(pool *mcfgv1.MachineConfigPool, config string) ([]*nodeObservation, error) {
	plan := c.plan(pool)
	var out []*nodeObservation
	for _, n := range append(append(append([]*corev1.Node{}, plan.Now...), plan.Later...), plan.Skipped...) {
		obs := &nodeObservation{node: n, pool: pool.Name, wave: guardian.Wave{
			Node: n.Name, Drain: guardian.NodeDrain{Trigger: guardian.TriggerPrepared, Drain: config}, PoolSelected: true}}
		if err := c.observeStalls(obs); err != nil {
			return nil, err
		}
		out = append(out, obs)
	}
	return out, nil
}

// decidePrepare decides the pool's prepared surges and starts them under the executor's admission,
// after every stall in flight (see decideStalls).
func (c *Controller) decidePrepare(ctx context.Context, config string, nodes []*nodeObservation) ([]guardian.PrepareDecision, map[[2]int]*surgeStart) {
	var decisions []guardian.PrepareDecision
	starts := map[[2]int]*surgeStart{}
	c.exec.admit(ctx, func() []*surgeStart {
		p := c.prepareInput(config, nodes, c.drains.anyCapacityWanted())
		decisions = guardian.DecidePrepare(c.stallConfig(), p)
		var out []*surgeStart
		for i, nd := range decisions {
			for j, d := range nd.Decisions {
				if d.Outcome == guardian.OutcomeSurge && d.SameAs < 0 {
					starts[[2]int{i, j}] = c.surgeStart(nodes[i], &nodes[i].wave.Stalls[j], d)
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
func (c *Controller) prepareInput(config string, nodes []*nodeObservation, capacityWanted bool) guardian.Prepare {
	view := c.flight.view(c.surges.List())
	pools := c.newPoolLookup()
	p := guardian.Prepare{
		Config: config, PoolSelected: true, InFlight: view.count, InFlightByNamespace: view.byNamespace, Waiting: view.waiting,
		Ledger:         guardian.NewLazyLedger(c.capacityNow, c.booked(view)),
		CapacityWanted: capacityWanted,
		WillNotDrain:   func(n *corev1.Node) bool { return c.willNotDrain(n, pools) },
	}
	for _, obs := range nodes {
		p.Nodes = append(p.Nodes, guardian.PrepareNode{Node: obs.node.Name, Stalls: obs.wave.Stalls})
	}
	return p
}

// addPreparedSurges counts the pool's Prepared Surges (those its workloads no longer block with) and
// sorts the notes.
func (c *Controller) addPreparedSurges(pc *prepareCounts, pool string) {
	for _, s := range c.surges.List() {
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
func (c *Controller) applyPrepare(ctx context.Context, pool string, nodes []*nodeObservation, decisions []guardian.PrepareDecision, starts map[[2]int]*surgeStart) (prepareCounts, error) {
	var counts prepareCounts
	var firstErr error
	for i, nd := range decisions {
		for j, d := range nd.Decisions {
			if d.SameAs >= 0 || d.Outcome == guardian.OutcomeIgnore {
				continue
			}
			state, note, err := c.applyPrepared(ctx, nodes[i], j, d, starts[[2]int{i, j}])
			if err != nil && firstErr == nil {
				firstErr = err
			}
			counts.add(state, note, surgeNameOf(d, &nodes[i].wave.Stalls[j], starts[[2]int{i, j}]))
		}
	}
	c.addPreparedSurges(&counts, pool)
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
func (c *Controller) applyPrepared(ctx context.Context, obs *nodeObservation, j int, d guardian.Decision, start *surgeStart) (string, string, error) {
	st := &obs.wave.Stalls[j]
	state, note := preparedOf(obs.node.Name, st, d)
	switch d.Outcome {
	case guardian.OutcomeSurge:
		if start.err != nil && !apierrors.IsAlreadyExists(start.err) && !errors.Is(start.err, errDryRun) {
			return metrics.PreparedWaiting, prepareSubject(obs.node.Name, d) + ": creating its Surge failed", start.err
		}
		if start.err == nil {
			c.event(d.Regarding, corev1.EventTypeNormal, ReasonSurgeStarted, actionSurge,
				"Surging %s ahead of the update of pool %s, so that node %s drains without waiting for pod %s (Surge %s)",
				guardian.DescribeFields(d.Fields), obs.pool, obs.node.Name, st.Pod.Name, start.surge.Name)
			c.enqueueSurge(start.surge)
		}
	case guardian.OutcomeCovered:
		c.enqueueSurge(d.Existing)
	case guardian.OutcomeCleanup:
		c.enqueueSurge(d.Existing)
		return state, note, c.exec.deleteSurge(ctx, d.Existing)
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

// predictPrepare counts the pool's workloads by the state syncPool would leave them in now, deciding
// as it does but writing nothing: what `check` prints under a pool being prepared.
func (c *Controller) predictPrepare(pool *mcfgv1.MachineConfigPool, capacityWanted bool) (prepareCounts, error) {
	var counts prepareCounts
	config := guardian.PendingConfig(pool)
	if config == "" || mco.PausedForMaintenance(pool) || c.pendingAnswer(pool).Need == mco.NeedNoDrain {
		return counts, nil
	}
	nodes, err := c.observePrepare(pool, config)
	if err != nil {
		return counts, err
	}
	for i, nd := range guardian.DecidePrepare(c.stallConfig(), c.prepareInput(config, nodes, capacityWanted)) {
		for j, d := range nd.Decisions {
			if d.SameAs >= 0 || d.Outcome == guardian.OutcomeIgnore {
				continue
			}
			st := &nodes[i].wave.Stalls[j]
			state, note := preparedOf(nodes[i].node.Name, st, d)
			counts.add(state, note, surgeNameOf(d, st, nil))
		}
	}
	c.addPreparedSurges(&counts, pool.Name)
	return counts, nil
}
