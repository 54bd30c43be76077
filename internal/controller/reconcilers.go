package controller

import (
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/options"
)

// The three reconcilers, one per key kind. Each is the base (what they all read and how they write
// and report) plus the bookkeeping only it keeps:
//
//   - nodeReconciler (node.go, apply.go, stalls.go) serves the stalls of a node under drain, or
//     about to be, and records the node's drain (drains);
//   - surgeReconciler (surge.go, surgeobserve.go, surgereports.go, restore.go) moves a Surge along its
//     lifecycle and remembers its write attempts (writing);
//   - poolReconciler (prepare.go, preparereport.go, analyze.go) prepares a pool for its next update
//     and predicts it, and remembers what it last reported (preparations).

// base is what the reconcilers share: the configuration, the read-only view, the executor (the one
// door for writes), reporting, and the bookkeeping more than one of them reads. The executor and the
// queue are nil in a one-off `check`, which never writes (see Check).
type base struct {
	cfg     guardian.Config
	opts    *options.Options
	log     *zap.Logger
	clock   clock.Clock
	metrics *metrics.Metrics
	events  *eventer
	exec    *executor
	keys
	*view
	// flight is which Surges count as in flight (slots, capacity held); verify and the Surge
	// reconciler write it, the node and pool reconcilers admit new surges by it.
	flight *flight
	// reports de-duplicates one-off reports.
	reports *reports
	// cordons is when this process first saw each node cordoned (see nodeTrigger).
	cordons *cordons
	// demand is whether stalls wait for capacity: a held surge gives its capacity back, prepared
	// surges wait. The node reconciler records it.
	demand capacityDemand
}

// capacityDemand is the node reconciler's record of the stalls deferred for capacity, as the others
// read it.
type capacityDemand interface {
	capacityWanted(pool string) bool
	anyCapacityWanted() bool
}

// nodeReconciler serves the stalls of one node per sync (see sync in node.go).
type nodeReconciler struct {
	*base
	drains *drains
}

// surgeReconciler moves one Surge along its lifecycle per sync (see sync in surge.go).
type surgeReconciler struct {
	*base
	// writing holds when this process first tried to write each Pending Surge's fields.
	writing *writeAttempts
}

// poolReconciler prepares one pool per sync (see sync in prepare.go), and predicts the pools' next
// updates (see predict in analyze.go).
type poolReconciler struct {
	*base
	// preparations holds what was last reported about each pool being prepared.
	preparations *preparations
}

// newBase builds the reconcilers' base over the informers' view, with fresh bookkeeping on clk.
func newBase(inf *Informers, ev *eventer, m *metrics.Metrics, log *zap.Logger, clk clock.Clock, g *gauges, demand capacityDemand) *base {
	opts := inf.opts
	return &base{
		cfg: guardian.Config{
			Preemptive: opts.Preemptive, CordonedNodes: opts.CordonedNodes, CordonGracePeriod: opts.CordonGracePeriod,
			Restore: guardian.RestoreMode(opts.Restore), Evict: opts.Evict,
			ScheduleTimeout: opts.ScheduleTimeout, ReadyTimeout: opts.ReadyTimeout, MaxSurgeDuration: opts.MaxSurgeDuration, EvictTimeout: opts.EvictTimeout,
			Lookahead: opts.Lookahead,
		},
		opts: opts, log: log, clock: clk, metrics: m, events: ev, view: inf.view,
		flight: newFlight(clk, g), reports: newReports(clk), cordons: &cordons{}, demand: demand,
	}
}
