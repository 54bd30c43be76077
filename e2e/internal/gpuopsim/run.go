package gpuopsim

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// eventComponent is the source of the operator's Events.
const eventComponent = "nvidia-gpu-operator"

// Run simulates the GPU Operator's driver upgrade controller against the
// cluster behind cfg until ctx is done. timeScale multiplies every delay and
// the ClusterPolicy's timeouts (1.0 = real; 0.05 = 20 times faster).
//
// Run logs every transition through the logger in ctx (klog.FromContext).
// The cluster must serve the ClusterPolicy CRD: Run returns an error at once
// if it cannot list ClusterPolicies, and nil once ctx is done.
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
	return run(ctx, kube, dyn, timing, nil)
}

// run is Run on given clients; shuffle, when not nil, replaces the random
// order in which the controller meets the waiting nodes.
func run(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, timing Timings, shuffle func([]*corev1.Node)) error {
	log := klog.FromContext(ctx).WithName("gpuopsim")
	probeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := dyn.Resource(ClusterPolicyGVR).List(probeCtx, metav1.ListOptions{Limit: 1})
	cancel()
	if err != nil {
		return fmt.Errorf("listing ClusterPolicies (is the CRD installed?): %w", err)
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: eventComponent})

	kubeInformers := informers.NewSharedInformerFactory(kube, 0)
	dynInformers := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	nodeInformer := kubeInformers.Core().V1().Nodes()
	policyInformer := dynInformers.ForResource(ClusterPolicyGVR)

	c := newController(kube, nodeInformer.Lister(), policyInformer.Lister(), recorder, timing, log)
	if shuffle != nil {
		c.shuffle = shuffle
	}
	enqueue := func(any) { c.enqueue() }
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: c.onNodeUpdate, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	if _, err := policyInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: c.onPolicyUpdate, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	kubeInformers.Start(ctx.Done())
	dynInformers.Start(ctx.Done())
	defer kubeInformers.Shutdown()
	defer dynInformers.Shutdown()
	if !cache.WaitForNamedCacheSync("gpuopsim", ctx.Done(), nodeInformer.Informer().HasSynced, policyInformer.Informer().HasSynced) {
		return nil
	}
	log.Info("GPU Operator simulator started", "resync", timing.Resync.String(), "driverRestart", timing.DriverRestart.String(),
		"timeScale", timing.Scale)
	c.enqueue()

	done := make(chan struct{})
	go func() {
		defer close(done)
		defer utilruntime.HandleCrashWithContext(ctx)
		// One worker: the real controller reconciles one request at a time.
		for processNext(ctx, c, log) {
		}
	}()
	<-ctx.Done()
	c.queue.ShutDown()
	<-done
	c.background.Wait()
	log.Info("GPU Operator simulator stopped")
	return nil
}

func processNext(ctx context.Context, c *controller, log logr.Logger) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			log.Error(err, "reconcile failed; retrying")
			c.queue.AddRateLimited(key)
		}
		return true
	}
	c.queue.Forget(key)
	return true
}
