// Package controller wires drain-guardian to the cluster. Informers (informers.go) registers the
// shared informers and builds the read-only view on their caches; the Controller receives them, routes
// their events (handlers.go) into one rate-limited workqueue of node, Surge and pool keys (queue.go),
// and hands each key to the reconciler of its kind (reconcilers.go): the node reconciler serves stalls
// (node.go), the Surge reconciler moves a Surge along its lifecycle (surge.go), the pool reconciler
// prepares pools and predicts their next update (prepare.go, analyze.go). Each reads the view, asks
// package guardian what to do and carries it out through the executor, the one door for writes.
package controller

import (
	"fmt"

	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// FieldManager names drain-guardian in the managedFields of what it writes.
const FieldManager = "drain-guardian"

// nodeNameIndex indexes pods by the node they are bound to.
const nodeNameIndex = "spec.nodeName"

// key is one unit of work: a node to check for blocked pods, a Surge to move along, or a pool to
// prepare for its next update.
type key struct {
	Node  string
	Surge types.NamespacedName
	Pool  string
}

func (k key) String() string {
	switch {
	case k.Node != "":
		return "node/" + k.Node
	case k.Pool != "":
		return "pool/" + k.Pool
	}
	return "surge/" + k.Surge.String()
}

// Clients are the API clients the controller uses.
type Clients struct {
	Kube      kubernetes.Interface
	MCO       mcfgclient.Interface
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
}

// Controller routes the informers' events into one queue of node, Surge and pool keys and runs the
// reconciler of each key's kind, while it leads.
type Controller struct {
	opts      *options.Options
	log       *zap.Logger
	metrics   *metrics.Metrics
	informers *Informers
	queue     workqueue.TypedRateLimitingInterface[key]
	keys
	// view is the informers' view: the handlers read it to route events.
	*view
	reconcile reconcilers
	// drains is the node reconciler's record of the nodes under drain: the handlers route pod, PDB
	// and device events to those nodes only.
	drains *drains
	gauges *gauges
}

// reconcilers are the three reconcilers, one per key kind.
type reconcilers struct {
	node  *nodeReconciler
	surge *surgeReconciler
	pool  *poolReconciler
}

// New builds the controller over inf (see NewInformers) and adds its event handlers to the
// informers; nothing runs until inf.Start and Run.
func New(inf *Informers, clients Clients, recorder events.EventRecorder, m *metrics.Metrics, log *zap.Logger) (*Controller, error) {
	return newController(inf, clients, recorder, m, log, clock.RealClock{})
}

// newController is New on clk: every time the controller and its bookkeeping read comes from it.
func newController(inf *Informers, clients Clients, recorder events.EventRecorder, m *metrics.Metrics, log *zap.Logger, clk clock.Clock) (*Controller, error) {
	c := &Controller{
		opts: inf.opts, log: log, metrics: m, informers: inf, view: inf.view, gauges: newGauges(m),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "drain_guardian", MetricsProvider: m.NewWorkqueueProvider()},
		),
	}
	c.keys = keys{queue: c.queue, cached: inf.view.surges}
	c.drains = newDrains(clk, c.gauges)
	b := newBase(inf, &eventer{recorder: recorder, log: log}, m, log, clk, c.gauges, c.drains)
	b.keys = c.keys
	b.exec = newExecutor(executorConfig{
		Kube: clients.Kube, Dynamic: clients.Dynamic, Targets: inf.view.store, Metrics: m, Events: b.events,
		Reports: b.reports, Flight: b.flight, DryRun: inf.opts.DryRun,
	})
	c.reconcile = reconcilers{
		node:  &nodeReconciler{base: b, drains: c.drains},
		surge: &surgeReconciler{base: b, writing: &writeAttempts{}},
		pool:  &poolReconciler{base: b, preparations: &preparations{}},
	}
	inf.view.kserve.handler = func(kind workload.Kind) cache.ResourceEventHandler { return c.handler(c.onScalable(kind)) }
	// Pods blocked before a KServe kind was known were reported as unsupported: look again.
	inf.view.kserve.synced = c.enqueueWatchedNodes
	for _, r := range inf.routes {
		if _, err := r.inf.AddEventHandler(r.handler(c)); err != nil {
			return nil, fmt.Errorf("adding an event handler: %w", err)
		}
	}
	return c, nil
}

// Ready reports whether the informers' caches have synced.
func (c *Controller) Ready() bool { return c.informers.Ready() }
