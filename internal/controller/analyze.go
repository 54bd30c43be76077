package controller

import (
	"fmt"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/check"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/options"
)

// PredictOptions are the inputs of Predict that do not come from the cluster.
type PredictOptions struct {
	// ReadyTimes are observed replacement-ready times by workload kind (see check.ReadyTimes).
	ReadyTimes map[string]time.Duration
	// ReadyEstimate stands in for kinds without an observation; zero leaves the time unknown.
	ReadyEstimate time.Duration
}

// Predict reads the listers once and predicts, pool by pool, which pods would block the next
// drains and what the guardian would do about each (see package check). It writes nothing, so
// `drain-guardian check` can call it after Start without Run. It verifies the cached Surges first, as
// a new leader does: a one-off check has verified none, and the capacity their replacements hold
// would otherwise look free. (A Surge it rejects is reported as the daemon would; check's recorder
// has no sink.)
func (c *Controller) Predict(po PredictOptions) (*check.Report, error) {
	c.verifySurges()
	cl, err := c.snapshot()
	if err != nil {
		return nil, err
	}
	r := check.Analyze(cl, check.Config{
		NamespaceSelector: c.nsSelector, PoolSelector: c.poolSelector, Excludes: c.opts.Excludes,
		MaxSurgeReplicas: int32(c.opts.MaxSurgeReplicas),
		NilKeepsCount:    c.kserve.nilKeepsCount(),
		HoldAll:          c.opts.Restore == string(options.RestorePool),
		ReadyTimes:       po.ReadyTimes, ReadyEstimate: po.ReadyEstimate,
	})
	if err := c.addPrepare(r); err != nil {
		return nil, err
	}
	return r, nil
}

// addPrepare says, for every pool asked to be prepared, how far it is: its workloads that would stall
// the update counted by the state the guardian's prepare decision leaves them in now (predictPrepare),
// the same counts as drain_guardian_prepared_workloads and the pool's Events.
func (c *Controller) addPrepare(r *check.Report) error {
	if c.pools == nil {
		return nil
	}
	// A stall waiting for capacity keeps prepared surges back. The daemon knows its own stalls; a
	// one-off `check` reads them from its report: a pod on a node being drained that finds no room.
	capacityWanted := c.drains.anyCapacityWanted() || stallWantsCapacity(r)
	for i := range r.Pools {
		p := &r.Pools[i]
		pool, err := c.pools.Get(p.Name)
		if err != nil || !guardian.PrepareRequested(pool) {
			continue
		}
		pc, err := c.predictPrepare(pool, capacityWanted)
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
func (c *Controller) snapshot() (check.Cluster, error) {
	view := c.flight.view(c.surges.List())
	cl := check.Cluster{Workloads: c.store, Pending: c.booked(view), Surge: c.surgeOf, Sources: capacity.Standard(c.devices()), DrainNeed: c.answers.need, Selectors: c.selectors}
	var err error
	if cl.Nodes, err = c.nodes.List(labels.Everything()); err != nil {
		return cl, fmt.Errorf("listing nodes: %w", err)
	}
	if cl.Pods, err = c.pods.List(labels.Everything()); err != nil {
		return cl, fmt.Errorf("listing pods: %w", err)
	}
	if cl.PDBs, err = c.pdbs.List(labels.Everything()); err != nil {
		return cl, fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	if cl.Namespaces, err = c.namespaces.List(labels.Everything()); err != nil {
		return cl, fmt.Errorf("listing namespaces: %w", err)
	}
	if c.pools != nil {
		pools, err := c.pools.List(labels.Everything())
		if err != nil {
			return cl, fmt.Errorf("listing MachineConfigPools: %w", err)
		}
		// A non-nil list, even empty, keeps MCO mode: nodes outside every pool form "(no pool)".
		cl.Pools = append([]*mcfgv1.MachineConfigPool{}, pools...)
	}
	cl.Rollouts = c.sources.rollouts()
	return cl, nil
}
