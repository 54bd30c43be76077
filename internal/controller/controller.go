// Package controller wires drain-guardian to the cluster: shared informers feed one rate-limited
// workqueue of node and workload keys, and level-driven sync functions read the listers, ask package
// guardian what to do and carry it out.
package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
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

// Controller is drain-guardian's reconciler.
type Controller struct {
	cfg      guardian.Config
	opts     *options.Options
	log      *zap.Logger
	clients  Clients
	recorder events.EventRecorder
	metrics  *metrics.Metrics
	clock    clock.Clock
	queue    workqueue.TypedRateLimitingInterface[key]

	nsSelector, poolSelector labels.Selector

	kubeFactory    informers.SharedInformerFactory
	mcoFactory     mcfginformers.SharedInformerFactory
	dynamicFactory dynamicinformer.DynamicSharedInformerFactory
	// draFactory and dra are nil when the cluster does not serve resource.k8s.io/v1 (see watchDevices).
	draFactory informers.SharedInformerFactory
	dra        *dra.Listers
	// inventory is the device count of the DRA caches, rebuilt when they change (see devices).
	inventory dra.InventoryCache

	nodes      corelisters.NodeLister
	pods       podinfo.Lister
	podIndexer cache.Indexer
	pdbs       policylisters.PodDisruptionBudgetLister
	// selectors holds the PDBs' parsed selectors, one parse per change of a PDB.
	selectors  *blocking.SelectorCache
	namespaces corelisters.NamespaceLister
	// pools is nil when the cluster does not serve MachineConfigPools (plain Kubernetes).
	pools          mcfglisters.MachineConfigPoolLister
	store          *workload.Store
	surges         *surgeLister
	exec           *executor
	kserve         *kserveAPIs
	scaleResources *scaleDiscovery

	synced []cache.InformerSynced
	ready  atomic.Bool

	// plans caches each pool's predicted update order (see plan) until the next node or pool event.
	plans planCache
	// The bookkeeping, one type per job (see state.go).
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
	// sources reads the drains that do not come from the MCO (see sources.go).
	sources *sources
	// answers reads whether an MCO update drains (see mcd.go).
	answers *mcdAnswers
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
		nsSelector: nsSel, poolSelector: poolSel,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "drain_guardian", MetricsProvider: m.NewWorkqueueProvider()},
		),
		events: &eventer{recorder: recorder, log: log},
		gauges: newGauges(m), selectors: blocking.NewSelectorCache(),
	}
	c.setClock(clock.RealClock{})
	c.kubeFactory = informers.NewSharedInformerFactoryWithOptions(clients.Kube, opts.ResyncPeriod, informers.WithTransform(slim))
	c.dynamicFactory = dynamicinformer.NewDynamicSharedInformerFactory(clients.Dynamic, opts.ResyncPeriod)
	if served, err := servesResource(clients.Discovery, v1alpha1.SchemeGroupVersion.String(), v1alpha1.SurgesResource.Resource); err != nil {
		return nil, fmt.Errorf("discovering the Surge API: %w", err)
	} else if !served {
		return nil, fmt.Errorf("the Surge API (%s) is not served: install its CustomResourceDefinition (manifests/base/crd) before the guardian", v1alpha1.SurgesResource.GroupResource())
	}
	surgeInf := c.dynamicFactory.ForResource(v1alpha1.SurgesResource).Informer()
	if err := surgeInf.SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	c.surges = &surgeLister{indexer: surgeInf.GetIndexer()}

	nodeInf := c.kubeFactory.Core().V1().Nodes()
	podInf := c.kubeFactory.Core().V1().Pods()
	pdbInf := c.kubeFactory.Policy().V1().PodDisruptionBudgets()
	nsInf := c.kubeFactory.Core().V1().Namespaces()
	rsInf := c.kubeFactory.Apps().V1().ReplicaSets()
	depInf := c.kubeFactory.Apps().V1().Deployments()
	ssInf := c.kubeFactory.Apps().V1().StatefulSets()
	hpaInf := c.kubeFactory.Autoscaling().V2().HorizontalPodAutoscalers()
	if err := podInf.Informer().AddIndexers(cache.Indexers{nodeNameIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*podinfo.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	c.nodes, c.podIndexer = nodeInf.Lister(), podInf.Informer().GetIndexer()
	c.pods = podinfo.Lister{Indexer: c.podIndexer}
	c.pdbs, c.namespaces = pdbInf.Lister(), nsInf.Lister()
	c.kserve = newKServeAPIs(c)
	c.answers = &mcdAnswers{nodes: func() []*corev1.Node {
		nodes, _ := c.nodes.List(labels.Everything())
		return nodes
	}}
	c.scaleResources = &scaleDiscovery{discovery: clients.Discovery, ttl: scaleDiscoveryTTL, clock: c.clock}
	c.store = &workload.Store{
		ReplicaSets: workload.MetadataIndex{Indexer: rsInf.Informer().GetIndexer(), Resource: appsv1.Resource("replicasets")},
		Deployments: depInf.Lister(), StatefulSets: ssInf.Lister(), HPAs: hpaInf.Lister(),
		KServe: c.kserve.lister, Scalable: c.scaleResources.lookup, Kube: clients.Kube, Dynamic: clients.Dynamic, FieldManager: FieldManager,
		Pods: func(namespace, name string) (metav1.Object, error) { return c.pods.Pods(namespace).Get(name) },
	}
	c.exec = newExecutor(executorConfig{
		Kube: clients.Kube, Dynamic: clients.Dynamic, Targets: c.store, Metrics: m, Events: c.events,
		Reports: c.reports, Flight: c.flight, DryRun: opts.DryRun,
	})

	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{nodeInf.Informer(), c.handler(c.onNode)},
		{podInf.Informer(), c.podHandler()},
		{pdbInf.Informer(), c.pdbHandler()},
		{depInf.Informer(), c.handler(c.onScalable(workload.KindDeployment))},
		{ssInf.Informer(), c.handler(c.onScalable(workload.KindStatefulSet))},
		{hpaInf.Informer(), c.handler(c.onScalable(workload.KindHPA))},
		{surgeInf, c.handler(c.onSurge)},
		{nsInf.Informer(), nil},
		{rsInf.Informer(), nil},
	}
	for _, h := range handlers {
		if h.h != nil {
			if _, err := h.inf.AddEventHandler(h.h); err != nil {
				return nil, err
			}
		}
		c.synced = append(c.synced, h.inf.HasSynced)
	}

	if err := c.watchDevices(); err != nil {
		return nil, err
	}
	if err := c.watchSources(); err != nil {
		return nil, err
	}
	if served, err := servesResource(clients.Discovery, "machineconfiguration.openshift.io/v1", "machineconfigpools"); err != nil {
		return nil, fmt.Errorf("discovering MachineConfigPools: %w", err)
	} else if served && clients.MCO != nil {
		c.mcoFactory = mcfginformers.NewSharedInformerFactoryWithOptions(clients.MCO, opts.ResyncPeriod, mcfginformers.WithTransform(stripManagedFields))
		poolInf := c.mcoFactory.Machineconfiguration().V1().MachineConfigPools()
		c.pools = poolInf.Lister()
		if _, err := poolInf.Informer().AddEventHandler(c.handler(c.onPool)); err != nil {
			return nil, err
		}
		c.synced = append(c.synced, poolInf.Informer().HasSynced)
		if err := c.watchMachineConfigNodes(); err != nil {
			return nil, fmt.Errorf("discovering MachineConfigNodes: %w", err)
		}
	} else {
		log.Warn("MachineConfigPools are not served by this cluster: MCO drain detection is off; only --cordoned-nodes can trigger surges",
			zap.Bool("cordonedNodes", opts.CordonedNodes))
	}
	return c, nil
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

// Start starts the informers and waits for their caches; it returns an error if ctx ends first. It runs
// on every replica, leader or not, so that a new leader acts on a warm cache.
func (c *Controller) Start(ctx context.Context) error {
	c.kubeFactory.Start(ctx.Done())
	c.dynamicFactory.Start(ctx.Done())
	if c.mcoFactory != nil {
		c.mcoFactory.Start(ctx.Done())
	}
	if c.draFactory != nil {
		c.draFactory.Start(ctx.Done())
	}
	if err := c.kserve.discover(ctx); err != nil {
		c.log.Warn("KServe discovery failed; retrying in the background", zap.Error(err))
	}
	c.log.Info("waiting for informer caches to sync")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("informer caches did not sync: %w", ctx.Err())
	}
	c.kserve.waitForSync(ctx)
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := c.kserve.discover(ctx); err != nil {
			c.log.Debug("KServe discovery failed", zap.Error(err))
		}
	}, kserveDiscoveryPeriod)
	c.ready.Store(true)
	c.log.Info("informer caches synced")
	return nil
}

// Ready reports whether the caches have synced.
func (c *Controller) Ready() bool { return c.ready.Load() }

// Run processes the queue with the configured number of workers until ctx ends. Call it only while
// leading, after Start returned.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	c.takeOver()
	c.gauges.setLeading(true)
	defer c.gauges.setLeading(false)
	c.log.Info("starting workers", zap.Int("workers", c.opts.Workers), zap.Bool("dryRun", c.opts.DryRun))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.runPredictions(ctx)
	}()
	for i := 0; i < c.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, c.worker, time.Second)
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

// takeOver is what a new leader does before its workers start. Every node and every Surge is
// looked at once: this resumes or restores the surges a previous leader left. And every cached Surge
// is verified first (see verifySurges), so that no node sync finds the capacity of a surge in
// flight free.
func (c *Controller) takeOver() {
	c.verifySurges()
	c.enqueueAll()
}

// verifySurges verifies every cached Surge; verify writes nothing (the syncs act). A Surge counts
// (its slot, the capacity its replacements take) only once this process has verified it: a node
// synced, or a prediction made, before the Surges would find their GPUs free and surge a second
// workload onto capacity a surge in flight holds.
func (c *Controller) verifySurges() {
	for _, s := range c.surges.List() {
		if _, _, err := c.verify(s); err != nil && !errors.Is(err, errTargetGone) {
			c.log.Info("cannot verify a Surge yet; its sync retries", zap.String("surge", s.Namespace+"/"+s.Name), zap.Error(err))
		}
	}
}
