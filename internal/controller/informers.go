package controller

import (
	"context"
	"fmt"
	"sync/atomic"

	mcfginformers "github.com/openshift/client-go/machineconfiguration/informers/externalversions"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// Informers is the wiring: the shared informers the guardian reads (what the cluster serves of them,
// found by discovery), and the read-only view built on their caches. NewInformers registers them,
// Start fills the caches. The daemon's controller receives them and adds its event handlers (see
// New); the one-off `check` reads them and adds none.
type Informers struct {
	opts    *options.Options
	log     *zap.Logger
	clients Clients
	// view is what the reconcilers read; nothing in it writes.
	view *view
	// scale finds the scale subresource of custom pod owners (the view's store reads it).
	scale *scaleDiscovery
	informerSet
	// routes are the informers whose events the controller turns into keys, each with its handler.
	routes []route
	ready  atomic.Bool
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

// route is an informer whose events the controller routes, and how (a method value of the
// controller, bound in New).
type route struct {
	inf     cache.SharedIndexInformer
	handler func(*Controller) cache.ResourceEventHandler
}

// NewInformers registers the informers of every kind the guardian reads and the cluster serves, and
// builds the view on them; nothing runs until Start.
func NewInformers(opts *options.Options, clients Clients, log *zap.Logger) (*Informers, error) {
	return newInformers(opts, clients, log, clock.RealClock{})
}

func newInformers(opts *options.Options, clients Clients, log *zap.Logger, clk clock.Clock) (*Informers, error) {
	nsSel, err := labels.Parse(opts.NamespaceSelector)
	if err != nil {
		return nil, fmt.Errorf("--namespace-selector: %w", err)
	}
	poolSel, err := labels.Parse(opts.PoolSelector)
	if err != nil {
		return nil, fmt.Errorf("--pool-selector: %w", err)
	}
	i := &Informers{
		opts: opts, log: log, clients: clients,
		view: &view{
			nsSelector: nsSel, poolSelector: poolSel, selectors: blocking.NewSelectorCache(), plans: &planCache{},
		},
		scale: &scaleDiscovery{discovery: clients.Discovery, ttl: scaleDiscoveryTTL, clock: clk},
	}
	i.kubeFactory = informers.NewSharedInformerFactoryWithOptions(clients.Kube, opts.ResyncPeriod, informers.WithTransform(slim))
	i.dynamicFactory = dynamicinformer.NewDynamicSharedInformerFactory(clients.Dynamic, opts.ResyncPeriod)
	for _, watch := range []func() error{i.watchSurges, i.watchCore, i.watchDevices, i.watchSources, i.watchPools} {
		if err := watch(); err != nil {
			return nil, err
		}
	}
	return i, nil
}

// watchSurges registers the Surge informer; the Surge API must be served.
func (i *Informers) watchSurges() error {
	if served, err := servesResource(i.clients.Discovery, v1alpha1.SchemeGroupVersion.String(), v1alpha1.SurgesResource.Resource); err != nil {
		return fmt.Errorf("discovering the Surge API: %w", err)
	} else if !served {
		return fmt.Errorf("the Surge API (%s) is not served: install its CustomResourceDefinition (manifests/base/crd) before the guardian", v1alpha1.SurgesResource.GroupResource())
	}
	inf := i.dynamicFactory.ForResource(v1alpha1.SurgesResource).Informer()
	if err := inf.SetTransform(stripManagedFields); err != nil {
		return err
	}
	i.view.surges = &surgeLister{indexer: inf.GetIndexer()}
	i.register(inf, func(c *Controller) cache.ResourceEventHandler { return c.handler(c.onSurge) })
	return nil
}

// watchCore registers the informers of the core kinds (nodes, pods, PDBs, namespaces and the
// workloads), and builds the view's listers and lookups on them.
func (i *Informers) watchCore() error {
	f, v := i.kubeFactory, i.view
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
	v.nodes, v.pods = nodeInf.Lister(), podinfo.Lister{Indexer: podInf.Informer().GetIndexer()}
	v.pdbs, v.namespaces = pdbInf.Lister(), nsInf.Lister()
	v.kserve = newKServeAPIs(i.clients.Discovery, i.dynamicFactory, i.opts, i.log)
	v.answers = &mcdAnswers{nodes: func() []*corev1.Node {
		nodes, _ := v.nodes.List(labels.Everything())
		return nodes
	}}
	v.store = &workload.Store{
		ReplicaSets: workload.MetadataIndex{Indexer: rsInf.Informer().GetIndexer(), Resource: appsv1.Resource("replicasets")},
		Deployments: depInf.Lister(), StatefulSets: ssInf.Lister(), HPAs: hpaInf.Lister(),
		KServe: v.kserve.lister, Scalable: i.scale.lookup, Kube: i.clients.Kube, Dynamic: i.clients.Dynamic, FieldManager: FieldManager,
		Pods: func(namespace, name string) (metav1.Object, error) { return v.pods.Pods(namespace).Get(name) },
	}
	i.register(nodeInf.Informer(), func(c *Controller) cache.ResourceEventHandler { return c.handler(c.onNode) })
	i.register(podInf.Informer(), (*Controller).podHandler)
	i.register(pdbInf.Informer(), (*Controller).pdbHandler)
	for inf, kind := range map[cache.SharedIndexInformer]workload.Kind{
		depInf.Informer(): workload.KindDeployment, ssInf.Informer(): workload.KindStatefulSet, hpaInf.Informer(): workload.KindHPA,
	} {
		i.register(inf, func(c *Controller) cache.ResourceEventHandler { return c.handler(c.onScalable(kind)) })
	}
	i.register(nsInf.Informer(), nil)
	i.register(rsInf.Informer(), nil)
	return nil
}

// watchPools registers the MachineConfigPool and MachineConfigNode informers when the cluster serves
// them; without them only the other drain sources trigger surges.
func (i *Informers) watchPools() error {
	served, err := servesResource(i.clients.Discovery, "machineconfiguration.openshift.io/v1", "machineconfigpools")
	if err != nil {
		return fmt.Errorf("discovering MachineConfigPools: %w", err)
	}
	if !served || i.clients.MCO == nil {
		i.log.Warn("MachineConfigPools are not served by this cluster: MCO drain detection is off; only --cordoned-nodes can trigger surges",
			zap.Bool("cordonedNodes", i.opts.CordonedNodes))
		return nil
	}
	i.mcoFactory = mcfginformers.NewSharedInformerFactoryWithOptions(i.clients.MCO, i.opts.ResyncPeriod, mcfginformers.WithTransform(stripManagedFields))
	poolInf := i.mcoFactory.Machineconfiguration().V1().MachineConfigPools()
	i.view.pools = poolInf.Lister()
	i.register(poolInf.Informer(), func(c *Controller) cache.ResourceEventHandler { return c.handler(c.onPool) })
	if err := i.watchMachineConfigNodes(); err != nil {
		return fmt.Errorf("discovering MachineConfigNodes: %w", err)
	}
	return nil
}

// register adds the informer to those whose caches Start waits for, and its events to those the
// controller routes by handler (none when nil).
func (i *Informers) register(inf cache.SharedIndexInformer, handler func(*Controller) cache.ResourceEventHandler) {
	i.synced = append(i.synced, inf.HasSynced)
	if handler != nil {
		i.routes = append(i.routes, route{inf: inf, handler: handler})
	}
}

// Start starts the informers and waits for their caches; it returns an error if ctx ends first. The
// daemon runs it on every replica, leader or not, so that a new leader acts on a warm cache.
func (i *Informers) Start(ctx context.Context) error {
	for _, f := range []interface{ Start(<-chan struct{}) }{i.kubeFactory, i.dynamicFactory, i.mcoFactory, i.draFactory} {
		// The MCO and DRA factories exist only when the cluster serves their APIs.
		if f != nil {
			f.Start(ctx.Done())
		}
	}
	kserve := i.view.kserve
	if err := kserve.discover(ctx); err != nil {
		i.log.Warn("KServe discovery failed; retrying in the background", zap.Error(err))
	}
	i.log.Info("waiting for informer caches to sync")
	if !cache.WaitForCacheSync(ctx.Done(), i.synced...) {
		return fmt.Errorf("informer caches did not sync: %w", ctx.Err())
	}
	kserve.waitForSync(ctx)
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := kserve.discover(ctx); err != nil {
			i.log.Debug("KServe discovery failed", zap.Error(err))
		}
	}, kserveDiscoveryPeriod)
	i.ready.Store(true)
	i.log.Info("informer caches synced")
	return nil
}

// Ready reports whether the caches have synced.
func (i *Informers) Ready() bool { return i.ready.Load() }

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
