// Package controller wires drain-guardian to the cluster: shared informers feed one rate-limited
// workqueue of node, Surge and pool keys, and level-driven sync functions (syncNode, syncSurge,
// syncPool) read the view, ask package guardian what to do and carry it out through the executor, the
// one door for writes. Informers are wired in controller.go, the run in run.go, the queue in queue.go.
package controller

import (
	"errors"
	"fmt"
	"sync/atomic"

	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	mcfginformers "github.com/openshift/client-go/machineconfiguration/informers/externalversions"
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/dra"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
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

// Controller is drain-guardian's reconciler: one queue of node, Surge and pool keys over shared
// informers. Its state is in three parts, each a type of its own: what it reads of the cluster (view),
// the informers that fill that view (informerSet), and its in-memory bookkeeping (books); the rest is
// its configuration and the ways it writes (the executor) and reports.
type Controller struct {
	cfg      guardian.Config
	opts     *options.Options
	log      *zap.Logger
	clients  Clients
	recorder events.EventRecorder
	metrics  *metrics.Metrics
	clock    clock.Clock
	queue    workqueue.TypedRateLimitingInterface[key]
	exec     *executor
	ready    atomic.Bool
	// answers reads whether an MCO update drains (see mcd.go).
	answers *mcdAnswers

	view
	informerSet
	books
}

// view is the cluster as the controller reads it: the listers of the shared informers and the
// lookups built on them. Its methods are the reads the node, Surge and pool syncs share (the pods on
// a node and the PDBs blocking them, a workload's pods, a target's Surge, a node's pool and signals,
// survivors, capacity held): a view holds no client, executor or bookkeeping, so none of them can
// write or remember.
type view struct {
	nsSelector, poolSelector labels.Selector

	nodes corelisters.NodeLister
	// pods is indexed by node (nodeNameIndex).
	pods podinfo.Lister
	pdbs policylisters.PodDisruptionBudgetLister
	// selectors holds the PDBs' parsed selectors, one parse per change of a PDB.
	selectors  *blocking.SelectorCache
	namespaces corelisters.NamespaceLister
	// pools is nil when the cluster does not serve MachineConfigPools (plain Kubernetes).
	pools          mcfglisters.MachineConfigPoolLister
	store          *workload.Store
	surges         *surgeLister
	kserve         *kserveAPIs
	scaleResources *scaleDiscovery
	// dra is nil when the cluster does not serve resource.k8s.io/v1 (see watchDevices).
	dra *dra.Listers
	// inventory is the device count of the DRA caches, rebuilt when they change (see devices).
	inventory dra.InventoryCache
	// sources reads the drains that do not come from the MCO (see sources.go).
	sources *sources
}

// informerSet is the shared informer factories behind the view, and what says their caches synced.
type informerSet struct {
	kubeFactory    informers.SharedInformerFactory
	mcoFactory     mcfginformers.SharedInformerFactory
	dynamicFactory dynamicinformer.DynamicSharedInformerFactory
	// draFactory is nil when the cluster does not serve resource.k8s.io/v1 (see watchDevices).
	draFactory informers.SharedInformerFactory
	synced     []cache.InformerSynced
}

// books is the controller's in-memory bookkeeping, one type per job (see state.go): nothing in it
// is needed to resume after a restart.
type books struct {
	// plans caches each pool's predicted update order (see plan) until the next node or pool event.
	plans   planCache
	events  *eventer
	reports *reports
	flight  *flight
	drains  *drains
	cordons cordons
	gauges  *gauges
	// writing holds when this process first tried to write each Pending Surge's fields.
	writing writeAttempts
	// preparations holds what was last reported about each pool being prepared (see syncPool).
	preparations preparations
}

// New builds the controller and registers its informers; nothing runs until Start and Run.
func New(opts *options.Options, clients Clients, recorder events.EventRecorder, m *metrics.Metrics, log *zap.Logger) (*Controller, error) {
	nsSel, err := labels.Parse(opts.NamespaceSelector)
	if err != nil {
		return nil, fmt.Errorf("--namespace-selector: %w", err)
	}
	poolSel, err := labels.Parse(opts.PoolSelector)
	if err != nil {
		return nil, fmt.Errorf("--pool-selector: %w", err)
	}
	c := &Controller{
		cfg: guardian.Config{
			Preemptive: opts.Preemptive, CordonedNodes: opts.CordonedNodes, CordonGracePeriod: opts.CordonGracePeriod,
			Restore: guardian.RestoreMode(opts.Restore), Evict: opts.Evict,
			ScheduleTimeout: opts.ScheduleTimeout, ReadyTimeout: opts.ReadyTimeout, MaxSurgeDuration: opts.MaxSurgeDuration, EvictTimeout: opts.EvictTimeout,
			Lookahead: opts.Lookahead,
		},
		opts: opts, log: log, clients: clients, recorder: recorder, metrics: m, clock: clock.RealClock{},
		view:  view{nsSelector: nsSel, poolSelector: poolSel, selectors: blocking.NewSelectorCache()},
		books: books{events: &eventer{recorder: recorder, log: log}, gauges: newGauges(m)},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "drain_guardian", MetricsProvider: m.NewWorkqueueProvider()},
		),
	}
	c.setClock(clock.RealClock{})
	c.kubeFactory = informers.NewSharedInformerFactoryWithOptions(clients.Kube, opts.ResyncPeriod, informers.WithTransform(slim))
	c.dynamicFactory = dynamicinformer.NewDynamicSharedInformerFactory(clients.Dynamic, opts.ResyncPeriod)
	for _, watch := range []func() error{c.watchSurges, c.watchCore, c.watchDevices, c.watchSources, c.watchPools} {
		if err := watch(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// watchSurges registers the Surge informer; the Surge API must be served.
func (c *Controller) watchSurges() error {
	if served, err := servesResource(c.clients.Discovery, v1alpha1.SchemeGroupVersion.String(), v1alpha1.SurgesResource.Resource); err != nil {
		return fmt.Errorf("discovering the Surge API: %w", err)
	} else if !served {
		return fmt.Errorf("the Surge API (%s) is not served: install its CustomResourceDefinition (manifests/base/crd) before the guardian", v1alpha1.SurgesResource.GroupResource())
	}
	inf := c.dynamicFactory.ForResource(v1alpha1.SurgesResource).Informer()
	if err := inf.SetTransform(stripManagedFields); err != nil {
		return err
	}
	c.surges = &surgeLister{indexer: inf.GetIndexer()}
	return c.register(inf, c.handler(c.onSurge))
}

// watchCore registers the informers of the core kinds (nodes, pods, PDBs, namespaces and the
// workloads), builds the view's listers and lookups on them, and the executor on the workload store.
func (c *Controller) watchCore() error {
	f := c.kubeFactory
	nodeInf, podInf, pdbInf, nsInf := f.Core().V1().Nodes(), f.Core().V1().Pods(), f.Policy().V1().PodDisruptionBudgets(), f.Core().V1().Namespaces()
	rsInf, depInf, ssInf, hpaInf := f.Apps().V1().ReplicaSets(), f.Apps().V1().Deployments(), f.Apps().V1().StatefulSets(), f.Autoscaling().V2().HorizontalPodAutoscalers()
	if err := podInf.Informer().AddIndexers(cache.Indexers{nodeNameIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*podinfo.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return err
	}
	c.nodes, c.pods = nodeInf.Lister(), podinfo.Lister{Indexer: podInf.Informer().GetIndexer()}
	c.pdbs, c.namespaces = pdbInf.Lister(), nsInf.Lister()
	c.kserve = newKServeAPIs(c)
	c.answers = &mcdAnswers{nodes: func() []*corev1.Node {
		nodes, _ := c.nodes.List(labels.Everything())
		return nodes
	}}
	c.scaleResources = &scaleDiscovery{discovery: c.clients.Discovery, ttl: scaleDiscoveryTTL, clock: c.clock}
	c.store = &workload.Store{
		ReplicaSets: workload.MetadataIndex{Indexer: rsInf.Informer().GetIndexer(), Resource: appsv1.Resource("replicasets")},
		Deployments: depInf.Lister(), StatefulSets: ssInf.Lister(), HPAs: hpaInf.Lister(),
		KServe: c.kserve.lister, Scalable: c.scaleResources.lookup, Kube: c.clients.Kube, Dynamic: c.clients.Dynamic, FieldManager: FieldManager,
		Pods: func(namespace, name string) (metav1.Object, error) { return c.pods.Pods(namespace).Get(name) },
	}
	c.exec = newExecutor(executorConfig{
		Kube: c.clients.Kube, Dynamic: c.clients.Dynamic, Targets: c.store, Metrics: c.metrics, Events: c.events,
		Reports: c.reports, Flight: c.flight, DryRun: c.opts.DryRun,
	})
	return errors.Join(
		c.register(nodeInf.Informer(), c.handler(c.onNode)),
		c.register(podInf.Informer(), c.podHandler()),
		c.register(pdbInf.Informer(), c.pdbHandler()),
		c.register(depInf.Informer(), c.handler(c.onScalable(workload.KindDeployment))),
		c.register(ssInf.Informer(), c.handler(c.onScalable(workload.KindStatefulSet))),
		c.register(hpaInf.Informer(), c.handler(c.onScalable(workload.KindHPA))),
		c.register(nsInf.Informer(), nil),
		c.register(rsInf.Informer(), nil),
	)
}

// watchPools registers the MachineConfigPool and MachineConfigNode informers when the cluster serves
// them; without them only the other drain sources trigger surges.
func (c *Controller) watchPools() error {
	served, err := servesResource(c.clients.Discovery, "machineconfiguration.openshift.io/v1", "machineconfigpools")
	if err != nil {
		return fmt.Errorf("discovering MachineConfigPools: %w", err)
	}
	if !served || c.clients.MCO == nil {
		c.log.Warn("MachineConfigPools are not served by this cluster: MCO drain detection is off; only --cordoned-nodes can trigger surges",
			zap.Bool("cordonedNodes", c.opts.CordonedNodes))
		return nil
	}
	c.mcoFactory = mcfginformers.NewSharedInformerFactoryWithOptions(c.clients.MCO, c.opts.ResyncPeriod, mcfginformers.WithTransform(stripManagedFields))
	poolInf := c.mcoFactory.Machineconfiguration().V1().MachineConfigPools()
	c.pools = poolInf.Lister()
	if err := c.register(poolInf.Informer(), c.handler(c.onPool)); err != nil {
		return err
	}
	if err := c.watchMachineConfigNodes(); err != nil {
		return fmt.Errorf("discovering MachineConfigNodes: %w", err)
	}
	return nil
}

// register adds the event handler (none when nil) to the informer, and the informer to those whose
// caches Start waits for.
func (c *Controller) register(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
	if h != nil {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	c.synced = append(c.synced, inf.HasSynced)
	return nil
}

// setClock makes clk the controller's clock, and its bookkeeping's: every time the controller reads
// comes from it. Call it before anything runs.
func (c *Controller) setClock(clk clock.WithTicker) {
	c.clock = clk
	c.reports = newReports(clk)
	c.flight = newFlight(clk, c.gauges)
	c.drains = newDrains(clk, c.gauges)
	if c.exec != nil {
		c.exec.reports, c.exec.flight = c.reports, c.flight
	}
	if c.scaleResources != nil {
		c.scaleResources.clock = clk
	}
}

// servesResource reports whether the API server serves resource in groupVersion.
func servesResource(d discovery.DiscoveryInterface, groupVersion, resource string) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(groupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// stripManagedFields drops managedFields from cached objects: the guardian never reads them and they
// are a large share of each object's memory.
func stripManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}
