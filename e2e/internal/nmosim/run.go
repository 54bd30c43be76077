package nmosim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// eventComponent is the source of the operator's Events.
const eventComponent = "node-maintenance-operator"

// Run simulates the Node Maintenance Operator against the cluster behind cfg
// until ctx is done. timeScale multiplies every delay (1.0 = real; 0.05 = 20
// times faster).
//
// Run logs every step through the logger in ctx (klog.FromContext). The
// cluster must serve the NodeMaintenance CRD: Run returns an error at once if
// it cannot list NodeMaintenances, and nil once ctx is done.
func Run(ctx context.Context, cfg *rest.Config, timeScale float64) error {
	timing, err := ScaledTimings(timeScale)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	return run(ctx, kube, dyn, timing)
}

func run(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, timing Timings) error {
	log := klog.FromContext(ctx).WithName("nmosim")
	probeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := dyn.Resource(NodeMaintenanceGVR).List(probeCtx, metav1.ListOptions{Limit: 1})
	if err == nil {
		// The operator creates its Lease namespace when it starts.
		_, err = kube.CoreV1().Namespaces().Create(probeCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	}
	cancel()
	if err != nil {
		return fmt.Errorf("starting (is the NodeMaintenance CRD installed?): %w", err)
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()

	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	informer := factory.ForResource(NodeMaintenanceGVR)
	c := &controller{
		kube:     kube,
		client:   dyn.Resource(NodeMaintenanceGVR),
		lister:   informer.Lister(),
		recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: eventComponent}),
		timing:   timing,
		log:      log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nmosim"}),
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue, UpdateFunc: func(_, n any) { c.enqueue(n) }, DeleteFunc: c.enqueue,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForNamedCacheSync("nmosim", ctx.Done(), informer.Informer().HasSynced) {
		return nil
	}
	log.Info("Node Maintenance Operator simulator started", "drainTimeout", timing.DrainTimeout.String(), "retry", timing.RetryDelay.String())

	done := make(chan struct{})
	go func() {
		defer close(done)
		defer utilruntime.HandleCrashWithContext(ctx)
		// One worker, controller-runtime's default.
		for {
			key, shutdown := c.queue.Get()
			if shutdown {
				return
			}
			if err := c.sync(ctx, key); err != nil && ctx.Err() == nil {
				log.Error(err, "reconcile failed; retrying", "nodeMaintenance", key)
				c.queue.AddRateLimited(key)
			} else {
				c.queue.Forget(key)
			}
			c.queue.Done(key)
		}
	}()
	<-ctx.Done()
	c.queue.ShutDown()
	<-done
	log.Info("Node Maintenance Operator simulator stopped")
	return nil
}
