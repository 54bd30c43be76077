package controller

import (
	"fmt"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/check"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// PredictOptions are the inputs of Predict that do not come from the cluster.
type PredictOptions struct {
	// ReadyTimes are observed replacement-ready times by workload kind (see check.ReadyTimes).
	ReadyTimes map[string]time.Duration
	// ReadyEstimate stands in for kinds without an observation; zero leaves the time unknown.
	ReadyEstimate time.Duration
}

// Predict reads the listers once and predicts, pool by pool, which pods would block the next
// drains and what the guardian would do about each (see package check). It writes nothing and
// records no Event, so `drain-guardian check` can call it after Start without Run.
func (c *Controller) Predict(po PredictOptions) (*check.Report, error) {
	cl, err := c.snapshot()
	if err != nil {
		return nil, err
	}
	return check.Analyze(cl, check.Config{
		NamespaceSelector: c.nsSelector, PoolSelector: c.poolSelector,
		NilKeepsCount: c.kserve.nilKeepsCount(),
		HoldAll:       c.opts.Restore == string(options.RestorePool),
		ReadyTimes:    po.ReadyTimes, ReadyEstimate: po.ReadyEstimate,
	}), nil
}

// surgeOf returns the target's Surge, of any phase, or nil.
func (c *Controller) surgeOf(t *workload.Target) *v1alpha1.Surge {
	s, err := c.surges.Get(t.Ref.Namespace, surgeName(t))
	if err != nil {
		return nil
	}
	return s
}

// snapshot lists what check.Analyze needs from the informer caches.
func (c *Controller) snapshot() (check.Cluster, error) {
	view := c.flight.view(c.surges.List())
	cl := check.Cluster{Workloads: c.store, Pending: append(c.pendingReplacements(view.trusted), view.unverified...), Surge: c.surgeOf}
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
	if c.sources.gpu {
		policy := c.sources.policy()
		cl.GPUUpgrade = &policy
	}
	return cl, nil
}
