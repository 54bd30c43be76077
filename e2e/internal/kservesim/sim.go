package kservesim

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// FieldManager is the server-side apply field manager of every write.
const FieldManager = "kserve-sim"

// The API of the simulated kinds. LLMInferenceServices are read and written
// through v1alpha2, their storage version; with conversion None an object
// created through v1alpha1 is the same object.
var (
	GroupVersionInferenceService    = schema.GroupVersion{Group: "serving.kserve.io", Version: "v1beta1"}
	GroupVersionLLMInferenceService = schema.GroupVersion{Group: "serving.kserve.io", Version: "v1alpha2"}

	inferenceServices    = GroupVersionInferenceService.WithResource("inferenceservices")
	llmInferenceServices = GroupVersionLLMInferenceService.WithResource("llminferenceservices")
)

// Options selects the KServe release the simulator imitates.
type Options struct {
	// LLMNilKeepsCount selects what an absent spec.replicas (or
	// spec.prefill.replicas) of an LLMInferenceService means. True imitates
	// RHOAI 3.4 and later: the Deployment keeps its current count, so
	// restoring an absent field takes an explicit value first, then its
	// removal. False imitates 3.3 and earlier: absent means 1.
	LLMNilKeepsCount bool
}

const workers = 2

type kind string

const (
	kindInferenceService    kind = "InferenceService"
	kindLLMInferenceService kind = "LLMInferenceService"
)

// key identifies one KServe object to reconcile.
type key struct {
	kind            kind
	namespace, name string
}

type controller struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
	opts Options

	deployments appslisters.DeploymentLister
	hpas        autoscalinglisters.HorizontalPodAutoscalerLister
	isvcs       cache.GenericLister
	llms        cache.GenericLister
	synced      []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[key]
	now   func() time.Time
}

// Run reconciles InferenceServices and LLMInferenceServices until ctx is
// done. It first waits until both kinds are served (their CRDs installed),
// then returns nil when ctx ends, or an error if it cannot start.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kserve simulator: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kserve simulator: %w", err)
	}
	logger := klog.FromContext(ctx).WithName("kserve-sim")
	ctx = klog.NewContext(ctx, logger)

	// Without the CRDs the dynamic informers would retry with a growing
	// back-off and pick the kinds up late; wait for them explicitly.
	for _, gvr := range []schema.GroupVersionResource{inferenceServices, llmInferenceServices} {
		err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				logger.V(2).Info("Waiting for the resource to be served", "resource", gvr.String(), "err", err)
			}
			return err == nil, nil
		})
		if err != nil {
			return nil // ctx ended while waiting
		}
	}

	kinf := informers.NewSharedInformerFactory(kube, 0)
	dinf := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	c, err := newController(kube, dyn, kinf, dinf, opts)
	if err != nil {
		return err
	}
	kinf.Start(ctx.Done())
	dinf.Start(ctx.Done())
	defer func() {
		c.queue.ShutDown()
		kinf.Shutdown()
		dinf.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return nil // ctx ended
	}
	logger.Info("Started", "llmNilKeepsCount", opts.LLMNilKeepsCount)

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func newController(kube kubernetes.Interface, dyn dynamic.Interface, kinf informers.SharedInformerFactory,
	dinf dynamicinformer.DynamicSharedInformerFactory, opts Options) (*controller, error) {
	c := &controller{
		kube: kube,
		dyn:  dyn,
		opts: opts,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "kserve-sim"}),
		now: time.Now,
	}
	deployments := kinf.Apps().V1().Deployments()
	hpas := kinf.Autoscaling().V2().HorizontalPodAutoscalers()
	isvcs := dinf.ForResource(inferenceServices)
	llms := dinf.ForResource(llmInferenceServices)
	c.deployments = deployments.Lister()
	c.hpas = hpas.Lister()
	c.isvcs = isvcs.Lister()
	c.llms = llms.Lister()

	for _, reg := range []struct {
		inf     cache.SharedIndexInformer
		handler cache.ResourceEventHandler
	}{
		{isvcs.Informer(), c.handler(func(obj metav1.Object) (key, bool) {
			return key{kindInferenceService, obj.GetNamespace(), obj.GetName()}, true
		})},
		{llms.Informer(), c.handler(func(obj metav1.Object) (key, bool) {
			return key{kindLLMInferenceService, obj.GetNamespace(), obj.GetName()}, true
		})},
		{deployments.Informer(), c.handler(ownerKey)},
		{hpas.Informer(), c.handler(ownerKey)},
	} {
		h, err := reg.inf.AddEventHandler(reg.handler)
		if err != nil {
			return nil, err
		}
		c.synced = append(c.synced, h.HasSynced)
	}
	return c, nil
}

// ownerKey maps a Deployment or HPA to the KServe object that controls it,
// so that a deleted or edited child is put back.
func ownerKey(obj metav1.Object) (key, bool) {
	ref := metav1.GetControllerOf(obj)
	if ref == nil {
		return key{}, false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != GroupVersionInferenceService.Group {
		return key{}, false
	}
	switch k := kind(ref.Kind); k {
	case kindInferenceService, kindLLMInferenceService:
		return key{k, obj.GetNamespace(), ref.Name}, true
	}
	return key{}, false
}

func (c *controller) handler(keyOf func(metav1.Object) (key, bool)) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		m, err := meta(obj)
		if err != nil {
			utilruntime.HandleError(err)
			return
		}
		if k, ok := keyOf(m); ok {
			c.queue.Add(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}
}

func meta(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
	return m, nil
}

func (c *controller) processNext(ctx context.Context) bool {
	k, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(k)
	logger := klog.FromContext(ctx).WithValues("kind", k.kind, "namespace", k.namespace, "name", k.name)
	err := c.reconcile(klog.NewContext(ctx, logger), k)
	switch {
	case err == nil:
		c.queue.Forget(k)
	case ctx.Err() != nil:
	default:
		logger.Error(err, "Reconcile failed; retrying")
		c.queue.AddRateLimited(k)
	}
	return true
}

func (c *controller) reconcile(ctx context.Context, k key) error {
	lister := c.isvcs
	if k.kind == kindLLMInferenceService {
		lister = c.llms
	}
	obj, err := lister.ByNamespace(k.namespace).Get(k.name)
	if apierrors.IsNotFound(err) {
		return nil // the garbage collector removes the children
	}
	if err != nil {
		return err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("unexpected object %T", obj)
	}
	if u.GetDeletionTimestamp() != nil {
		return nil
	}
	if k.kind == kindInferenceService {
		return c.reconcileInferenceService(ctx, u)
	}
	return c.reconcileLLMInferenceService(ctx, u)
}

var applyOptions = metav1.ApplyOptions{FieldManager: FieldManager, Force: true}

func (c *controller) reconcileInferenceService(ctx context.Context, isvc *unstructured.Unstructured) error {
	want, err := inferenceServiceObjects(isvc)
	if err != nil {
		// KServe's webhook would have refused the object; report it and
		// wait for the next change instead of retrying.
		klog.FromContext(ctx).Info("Invalid InferenceService", "err", err.Error())
		return c.applyStatus(ctx, inferenceServices, isvc, inferenceServiceStatus(isvc, nil, err, c.now()))
	}
	ns := isvc.GetNamespace()
	if _, err := c.kube.AppsV1().Deployments(ns).Apply(ctx, want.Deployment, applyOptions); err != nil {
		return fmt.Errorf("applying Deployment %s: %w", *want.Deployment.Name, err)
	}
	name := predictorName(isvc.GetName())
	if want.HPA != nil {
		if _, err := c.kube.AutoscalingV2().HorizontalPodAutoscalers(ns).Apply(ctx, want.HPA, applyOptions); err != nil {
			return fmt.Errorf("applying HorizontalPodAutoscaler %s: %w", name, err)
		}
	} else if hpa, err := c.hpas.HorizontalPodAutoscalers(ns).Get(name); err == nil && controlledBy(hpa, isvc.GetUID()) {
		// KServe removes its HPA when the autoscaler class changes.
		if err := c.deleteHPA(ctx, hpa); err != nil {
			return err
		}
	}
	dep, err := c.deployments.Deployments(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return c.applyStatus(ctx, inferenceServices, isvc, inferenceServiceStatus(isvc, dep, nil, c.now()))
}

func (c *controller) reconcileLLMInferenceService(ctx context.Context, llm *unstructured.Unstructured) error {
	ns := llm.GetNamespace()
	current := func(name string) *int32 {
		d, err := c.deployments.Deployments(ns).Get(name)
		if err != nil {
			return nil
		}
		return d.Spec.Replicas
	}
	want, err := llmInferenceServiceObjects(llm, current, c.opts.LLMNilKeepsCount)
	if err != nil {
		klog.FromContext(ctx).Info("Invalid LLMInferenceService", "err", err.Error())
		return c.applyStatus(ctx, llmInferenceServices, llm, llmStatus(llm, nil, err, c.now()))
	}
	workloads := map[string]*appsv1.Deployment{}
	for role, d := range map[string]struct {
		name string
		want bool
	}{
		"main":    {MainDeploymentName(llm.GetName()), want.Main != nil},
		"prefill": {PrefillDeploymentName(llm.GetName()), want.Prefill != nil},
	} {
		if d.want {
			continue
		}
		// A workload that is no longer wanted (prefill removed, or now
		// multi-node) is deleted, as KServe does.
		if existing, err := c.deployments.Deployments(ns).Get(d.name); err == nil && controlledBy(existing, llm.GetUID()) {
			if err := c.deleteDeployment(ctx, existing); err != nil {
				return fmt.Errorf("deleting %s Deployment: %w", role, err)
			}
		}
	}
	if want.Main != nil {
		if _, err := c.kube.AppsV1().Deployments(ns).Apply(ctx, want.Main, applyOptions); err != nil {
			return fmt.Errorf("applying Deployment %s: %w", *want.Main.Name, err)
		}
		if d, err := c.deployments.Deployments(ns).Get(*want.Main.Name); err == nil {
			workloads["main"] = d
		}
	}
	if want.Prefill != nil {
		if _, err := c.kube.AppsV1().Deployments(ns).Apply(ctx, want.Prefill, applyOptions); err != nil {
			return fmt.Errorf("applying Deployment %s: %w", *want.Prefill.Name, err)
		}
		if d, err := c.deployments.Deployments(ns).Get(*want.Prefill.Name); err == nil {
			workloads["prefill"] = d
		}
	}
	return c.applyStatus(ctx, llmInferenceServices, llm, llmStatus(llm, &llmWorkloads{want: want, deployments: workloads}, nil, c.now()))
}

func controlledBy(obj metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == uid
}

// deleteDeployment deletes a child, preconditioned on its UID so that a
// newer object of the same name is left alone.
func (c *controller) deleteDeployment(ctx context.Context, d *appsv1.Deployment) error {
	err := c.kube.AppsV1().Deployments(d.Namespace).Delete(ctx, d.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &d.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func (c *controller) deleteHPA(ctx context.Context, h *autoscalingv2.HorizontalPodAutoscaler) error {
	err := c.kube.AutoscalingV2().HorizontalPodAutoscalers(h.Namespace).Delete(ctx, h.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &h.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// applyStatus writes status unless it already says the same, so that a
// reconcile triggered by the simulator's own status write ends there.
func (c *controller) applyStatus(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, status map[string]any) error {
	old, _, _ := unstructured.NestedMap(obj.Object, "status")
	if sameStatus(old, status) {
		return nil
	}
	patch := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(),
		"kind":       obj.GetKind(),
		"metadata":   map[string]any{"name": obj.GetName(), "namespace": obj.GetNamespace()},
		"status":     status,
	}}
	_, err := c.dyn.Resource(gvr).Namespace(obj.GetNamespace()).ApplyStatus(ctx, obj.GetName(), patch, applyOptions)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("applying status: %w", err)
	}
	return nil
}
