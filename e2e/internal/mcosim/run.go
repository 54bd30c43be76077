package mcosim

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclientset "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	mcfginformers "github.com/openshift/client-go/machineconfiguration/informers/externalversions"
	opclientset "github.com/openshift/client-go/operator/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// eventComponent is the source the MCO's node and drain controllers both
// record their Events under.
const eventComponent = "machineconfigcontroller-nodecontroller"

// Run simulates the Machine Config Operator against the cluster behind cfg
// until ctx is done. timeScale multiplies every MCO delay (1.0 = real
// timings; 0.05 = 20 times faster); see ScaledTimings.
//
// Run logs every step of the protocol (targeting, daemon transitions, each
// drain attempt and its outcome, pool status changes) through the logger in
// ctx (klog.FromContext), and records the MCO's Events in
// EventNamespace, which it creates if needed. The cluster must serve the
// MachineConfigPool CRD: Run returns an error at once if it cannot list
// pools, and nil once ctx is done.
func Run(ctx context.Context, cfg *rest.Config, timeScale float64) error {
	timing, err := ScaledTimings(timeScale)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	mcfg, err := mcfgclientset.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("machineconfiguration client: %w", err)
	}
	op, err := opclientset.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("operator.openshift.io client: %w", err)
	}
	return run(ctx, kube, mcfg, op, timing)
}

// Workers per controller. The MCO runs 5 drain workers, so one blocked drain
// never holds up another node's drain.
const (
	nodeControllerWorkers  = 2
	daemonWorkers          = 2
	drainControllerWorkers = 5
)

// run is Run with clients; op may be nil (no MachineConfiguration: every
// update drains).
func run(ctx context.Context, kube kubernetes.Interface, mcfg mcfgclientset.Interface, op opclientset.Interface, timing Timings) error {
	log := klog.FromContext(ctx).WithName("mcosim")

	// Fail early rather than wait forever for a pool informer that cannot
	// list.
	probeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := mcfg.MachineconfigurationV1().MachineConfigPools().List(probeCtx, metav1.ListOptions{Limit: 1})
	cancel()
	if err != nil {
		return fmt.Errorf("listing MachineConfigPools (is the CRD installed?): %w", err)
	}

	if err := ensureNamespace(ctx, kube, EventNamespace); err != nil {
		// Events are best-effort; the protocol itself does not need them.
		log.Error(err, "cannot create the Event namespace; MCO Events will be lost", "namespace", EventNamespace)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: eventComponent})

	kubeInformers := informers.NewSharedInformerFactory(kube, 0)
	mcfgInformers := mcfginformers.NewSharedInformerFactory(mcfg, 0)
	nodeInformer := kubeInformers.Core().V1().Nodes()
	poolInformer := mcfgInformers.Machineconfiguration().V1().MachineConfigPools()

	nodeCtrl := newNodeController(kube, mcfg, nodeInformer.Lister(), poolInformer.Lister(), recorder, timing, log)
	daemons := newDaemonSet(kube, mcfg, op, nodeInformer.Lister(), poolInformer.Lister(), timing, log)
	drainCtrl := newDrainController(kube, mcfg, nodeInformer.Lister(), poolInformer.Lister(), recorder, timing, log)

	handlers := []cache.ResourceEventHandler{
		cache.ResourceEventHandlerFuncs{
			AddFunc:    nodeCtrl.onNodeAdd,
			UpdateFunc: nodeCtrl.onNodeUpdate,
			DeleteFunc: nodeCtrl.onNodeDelete,
		},
		cache.ResourceEventHandlerFuncs{
			AddFunc:    daemons.onNode,
			UpdateFunc: func(_, newObj interface{}) { daemons.onNode(newObj) },
			DeleteFunc: daemons.onNodeDelete,
		},
		cache.ResourceEventHandlerFuncs{
			AddFunc:    drainCtrl.onNodeAdd,
			UpdateFunc: drainCtrl.onNodeUpdate,
			DeleteFunc: drainCtrl.onNodeDelete,
		},
	}
	for _, h := range handlers {
		if _, err := nodeInformer.Informer().AddEventHandler(h); err != nil {
			return fmt.Errorf("node event handler: %w", err)
		}
	}
	if _, err := poolInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    nodeCtrl.onPool,
		UpdateFunc: nodeCtrl.onPoolUpdate,
		DeleteFunc: nodeCtrl.onPool,
	}); err != nil {
		return fmt.Errorf("pool event handler: %w", err)
	}

	kubeInformers.Start(ctx.Done())
	mcfgInformers.Start(ctx.Done())
	defer kubeInformers.Shutdown()
	defer mcfgInformers.Shutdown()
	if !cache.WaitForNamedCacheSync("mcosim", ctx.Done(), nodeInformer.Informer().HasSynced, poolInformer.Informer().HasSynced) {
		// Only a done context stops the wait: that is a normal end.
		return nil
	}
	// Node events seen while the pool cache was still filling may have
	// missed their pools.
	pools, err := poolInformer.Lister().List(labels.Everything())
	if err != nil {
		return err
	}
	for _, p := range pools {
		nodeCtrl.enqueuePool(p.Name)
	}

	log.Info("MCO simulator started", "updateDelay", timing.UpdateDelay.String(),
		"drainTimeout", timing.DrainHelperTimeout.String(), "reboot", timing.Reboot.String(),
		"prepareUpdate", timing.PrepareUpdate.String(), "applyInPlace", timing.ApplyInPlace.String())
	var wg sync.WaitGroup
	runWorkers(ctx, &wg, nodeCtrl.queue, nodeControllerWorkers, nodeCtrl.sync, log.WithValues("controller", "node"))
	runWorkers(ctx, &wg, daemons.queue, daemonWorkers, daemons.sync, log.WithValues("controller", "daemon"))
	runWorkers(ctx, &wg, drainCtrl.queue, drainControllerWorkers, drainCtrl.sync, log.WithValues("controller", "drain"))

	<-ctx.Done()
	nodeCtrl.queue.ShutDown()
	daemons.queue.ShutDown()
	drainCtrl.queue.ShutDown()
	wg.Wait()
	log.Info("MCO simulator stopped")
	return nil
}

// runWorkers starts n goroutines that process queue with sync until the queue
// shuts down. A failed sync is retried with the queue's rate limiter.
func runWorkers(ctx context.Context, wg *sync.WaitGroup, queue workqueue.TypedRateLimitingInterface[string], n int,
	sync func(context.Context, string) error, log logr.Logger) {
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer utilruntime.HandleCrashWithContext(ctx)
			for {
				key, shutdown := queue.Get()
				if shutdown {
					return
				}
				err := sync(ctx, key)
				if err == nil {
					queue.Forget(key)
				} else if ctx.Err() == nil {
					log.Error(err, "sync failed; retrying", "key", key)
					queue.AddRateLimited(key)
				}
				queue.Done(key)
			}
		}()
	}
}

// patchNodeAnnotations merges annotations into the node's annotations. A
// merge patch never conflicts, so concurrent writers of other keys are safe.
func patchNodeAnnotations(ctx context.Context, kube kubernetes.Interface, name string, annotations map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	_, err = kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patching annotations of node %s: %w", name, err)
	}
	return nil
}

// eventRef points an Event at a cluster-scoped object but files it in
// EventNamespace, as the MCO's namespaced event recorder does.
func eventRef(obj metav1.Object) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{
		Name:      obj.GetName(),
		UID:       obj.GetUID(),
		Namespace: EventNamespace,
	}
	switch obj.(type) {
	case *corev1.Node:
		ref.Kind, ref.APIVersion = "Node", "v1"
	case *mcfgv1.MachineConfigPool:
		ref.Kind, ref.APIVersion = "MachineConfigPool", mcfgv1.GroupVersion.String()
	}
	return ref
}

func ensureNamespace(ctx context.Context, kube kubernetes.Interface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// deletedNodeName returns the name of a node from a delete notification.
func deletedNodeName(obj interface{}) (string, error) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return "", fmt.Errorf("unexpected object %T in node delete notification", obj)
	}
	return node.Name, nil
}
