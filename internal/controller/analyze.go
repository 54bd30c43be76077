package controller

import (
	"fmt"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/check"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/options"
)

// PredictOptions are the inputs of a prediction (Check, and the daemon's) that do not come from the cluster.
type PredictOptions struct {
	// ReadyTimes are observed replacement-ready times by workload kind (see check.ReadyTimes).
	ReadyTimes map[string]time.Duration
	// ReadyEstimate stands in for kinds without an observation; zero leaves the time unknown.
	ReadyEstimate time.Duration
}

// Check is `drain-guardian check`: after inf.Start, it predicts once what the daemon's prediction
// would (see predict). It builds no controller: no queue, no executor, no event handler; a recorder
// without a sink takes the report of a Surge it rejects; nothing is written.
func Check(inf *Informers, log *zap.Logger, po PredictOptions) (*check.Report, error) {
	m, clk := metrics.New(), clock.RealClock{}
	g := newGauges(m)
	b := newBase(inf, &eventer{recorder: &events.FakeRecorder{}, log: log}, m, log, clk, g, newDrains(clk, g))
	return (&poolReconciler{base: b}).predict(po)
}

// predict reads the listers once and predicts, pool by pool, which pods would block the next
// drains and what the guardian would do about each (see package check). It writes nothing. It
// verifies the cached Surges first, as a new leader does: a one-off check has verified none, and the
// capacity their replacements hold would otherwise look free.
func (r *poolReconciler) predict(po PredictOptions) (*check.Report, error) {
	r.verifySurges()
	cl, err := r.snapshot()
	if err != nil {
		return nil, err
	}
	report := check.Analyze(cl, check.Config{
		NamespaceSelector: r.nsSelector, PoolSelector: r.poolSelector, Excludes: r.opts.Excludes,
		MaxSurgeReplicas: int32(r.opts.MaxSurgeReplicas),
		NilKeepsCount:    r.kserve.nilKeepsCount(),
		HoldAll:          r.opts.Restore == string(options.RestorePool),
		ReadyTimes:       po.ReadyTimes, ReadyEstimate: po.ReadyEstimate,
	})
	if err := r.addPrepare(report); err != nil {
		return nil, err
	}
	return report, nil
}

// addPrepare says, for every pool asked to be prepared, how far it is: its workloads that would stall
// the update counted by the state the guardian's prepare decision leaves them in now (predictPrepare),
// the same counts as drain_guardian_prepared_workloads and the pool's Events.
func (r *poolReconciler) addPrepare(report *check.Report) error {
	if r.pools == nil {
		return nil
	}
	// A stall waiting for capacity keeps prepared surges back. The daemon knows its own stalls; a
	// one-off `check` reads them from its report: a pod on a node being drained that finds no room.
	capacityWanted := r.demand.anyCapacityWanted() || stallWantsCapacity(report)
	for i := range report.Pools {
		p := &report.Pools[i]
		pool, err := r.pools.Get(p.Name)
		if err != nil || !guardian.PrepareRequested(pool) {
			continue
		}
		pc, err := r.predictPrepare(pool, capacityWanted)
		if err != nil {
			return fmt.Errorf("pool %s: %w", p.Name, err)
		}
		p.Prepare = &check.Prepare{
			Prepared: pc.byState[metrics.PreparedReady], Preparing: pc.byState[metrics.PreparedStarting],
			Waiting: pc.notes[metrics.PreparedWaiting], Unresolvable: pc.notes[metrics.PreparedUnresolvable],
		}
	}
	return nil
}

// stallWantsCapacity reports whether a pod blocks a drain under way and finds no room for its replacement.
func stallWantsCapacity(r *check.Report) bool {
	for _, p := range r.Pools {
		for _, n := range p.Nodes {
			for _, b := range n.Blocks {
				if n.Stage == check.StageUpdating && b.Verdict == check.NoCapacity {
					return true
				}
			}
		}
	}
	return false
}

// snapshot lists what check.Analyze needs from the informer caches.
func (r *poolReconciler) snapshot() (check.Cluster, error) {
	view := r.flight.view(r.surges.List())
	cl := check.Cluster{Workloads: r.store, Pending: r.booked(view), Surge: r.surgeOf, Sources: capacity.Standard(r.devices()), DrainNeed: r.answers.need, Selectors: r.selectors}
	var err error
	if cl.Nodes, err = r.nodes.List(labels.Everything()); err != nil {
		return cl, fmt.Errorf("listing nodes: %w", err)
	}
	if cl.Pods, err = r.pods.List(labels.Everything()); err != nil {
		return cl, fmt.Errorf("listing pods: %w", err)
	}
	if cl.PDBs, err = r.pdbs.List(labels.Everything()); err != nil {
		return cl, fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	if cl.Namespaces, err = r.namespaces.List(labels.Everything()); err != nil {
		return cl, fmt.Errorf("listing namespaces: %w", err)
	}
	if r.pools != nil {
		pools, err := r.pools.List(labels.Everything())
		if err != nil {
			return cl, fmt.Errorf("listing MachineConfigPools: %w", err)
		}
		// A non-nil list, even empty, keeps MCO mode: nodes outside every pool form "(no pool)".
		cl.Pools = append([]*mcfgv1.MachineConfigPool{}, pools...)
	}
	cl.Rollouts = r.sources.rollouts()
	return cl, nil
}
