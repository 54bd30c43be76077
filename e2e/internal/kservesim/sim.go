package kservesim

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
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

// FieldManager is the field manager of every write: creates, updates,
// patches and server-side applies.
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
		// A Deployment event reconciles its owner, as KServe's controller
		// owns Deployments: a deleted or edited predictor is put back.
		{deployments.Informer(), c.handler(ownerKey)},
	} {
		h, err := reg.inf.AddEventHandler(reg.handler)
		if err != nil {
			return nil, err
		}
		c.synced = append(c.synced, h.HasSynced)
	}
	// HPAs are read from the cache but their events reconcile nothing (see
	// reconcileHPA).
	c.synced = append(c.synced, hpas.Informer().HasSynced)
	return c, nil
}

// ownerKey maps a Deployment to the KServe object that controls it.
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

// applyOptions are those of the LLMInferenceService Deployments and of the
// status writes, which are forced server-side applies.
var applyOptions = metav1.ApplyOptions{FieldManager: FieldManager, Force: true}

// reconcileInferenceService imitates KServe's raw-deployment reconciler for
// the predictor: the Deployment (reconcilePredictor), then the HPA
// (reconcileHPA), then the status.
func (c *controller) reconcileInferenceService(ctx context.Context, isvc *unstructured.Unstructured) error {
	want, err := inferenceServiceObjects(isvc)
	if err != nil {
		// KServe's webhook would have refused the object; report it and
		// wait for the next change instead of retrying.
		klog.FromContext(ctx).Info("Invalid InferenceService", "err", err.Error())
		return c.applyStatus(ctx, inferenceServices, isvc, inferenceServiceStatus(isvc, nil, err, c.now()))
	}
	dep, err := c.reconcilePredictor(ctx, want)
	if err != nil {
		return err
	}
	if err := c.reconcileHPA(ctx, isvc, want); err != nil {
		return err
	}
	return c.applyStatus(ctx, inferenceServices, isvc, inferenceServiceStatus(isvc, dep, nil, c.now()))
}

// reconcilePredictor creates the predictor Deployment, or brings an
// existing one to the desired spec, the way KServe's DeploymentReconciler
// does (pkg/controller/v1beta1/inferenceservice/reconcilers/deployment/
// deployment_reconciler.go in kserve/kserve and opendatahub-io/kserve:
// checkDeploymentExist and Reconcile):
//
//   - Missing: it is created as built.
//   - Present: the desired object is sent as a dry-run update, which fills
//     in the API defaults, and its spec is compared with the existing one,
//     .spec.replicas left out unless the existing Deployment's autoscaler
//     class is "none". Equal specs mean no write at all, so whatever else
//     sits on the Deployment (foreign annotations and labels included)
//     stays.
//   - Different: a strategic merge patch from the whole existing object to
//     the whole dry-run result (see predictorPatch) is sent. It deletes
//     every annotation and label KServe did not put there.
//
// The Deployment returned is the one whose status the InferenceService
// reports: the existing object (as KServe does), or the created one.
func (c *controller) reconcilePredictor(ctx context.Context, want *isvcObjects) (*appsv1.Deployment, error) {
	desired := want.Deployment
	client := c.kube.AppsV1().Deployments(desired.Namespace)
	existing, err := c.deployments.Deployments(desired.Namespace).Get(desired.Name)
	if apierrors.IsNotFound(err) {
		create := desired.DeepCopy()
		if want.KEDAReplicas != nil {
			create.Spec.Replicas = pointerTo(*want.KEDAReplicas)
		}
		created, err := client.Create(ctx, create, metav1.CreateOptions{FieldManager: FieldManager})
		if err != nil {
			return nil, fmt.Errorf("creating Deployment %s: %w", desired.Name, err)
		}
		return created, nil
	}
	if err != nil {
		return nil, err
	}

	// Without a resourceVersion the dry run is an unconditional update,
	// which Deployments allow; KServe sends its desired object the same way.
	defaulted, err := client.Update(ctx, desired.DeepCopy(), metav1.UpdateOptions{
		DryRun: []string{metav1.DryRunAll}, FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("dry-run update of Deployment %s: %w", desired.Name, err)
	}
	if !predictorSpecEqual(existing, defaulted) {
		patch, err := predictorPatch(existing, defaulted)
		if err != nil {
			return nil, fmt.Errorf("patch for Deployment %s: %w", desired.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("Patching the predictor Deployment", "deployment", desired.Name, "patch", string(patch))
		if _, err := client.Patch(ctx, desired.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			return nil, fmt.Errorf("patching Deployment %s: %w", desired.Name, err)
		}
	}

	// Stand-in for KEDA, which KServe leaves the count to: hold it at
	// minReplicas through the scale subresource, as KEDA's HPA would, so
	// that the Deployment's metadata is left alone.
	if r := want.KEDAReplicas; r != nil && (existing.Spec.Replicas == nil || *existing.Spec.Replicas != *r) {
		s := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: desired.Name, Namespace: desired.Namespace},
			Spec: autoscalingv1.ScaleSpec{Replicas: *r}}
		if _, err := client.UpdateScale(ctx, desired.Name, s, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
			return nil, fmt.Errorf("scaling Deployment %s to minReplicas: %w", desired.Name, err)
		}
	}
	return existing, nil
}

// reconcileHPA keeps the HPA as KServe's HPAReconciler does
// (pkg/controller/v1beta1/inferenceservice/reconcilers/hpa/hpa_reconciler.go:
// checkHPAExist, semanticHPAEquals, Reconcile):
//
//   - Class hpa and no HPA: it is created.
//   - Class hpa and an HPA whose spec is not semantically equal to the
//     desired one, or whose autoscaler class annotation changed: a full
//     update with the desired object (its own metadata, no
//     resourceVersion), which also replaces the HPA's labels and
//     annotations. The desired spec carries the empty behavior KServe
//     writes and the stored one the API defaults, so in practice this is an
//     update on every reconcile (a no-op for the API server when nothing
//     was changed).
//   - Another class: an HPA the InferenceService controls is deleted.
//
// KServe does not watch HPAs (its controller owns Deployments and Services,
// not HPAs: pkg/controller/v1beta1/inferenceservice/controller.go,
// SetupWithManager), so neither does the simulator: a direct edit of the HPA
// stays until the InferenceService is next reconciled, for whatever reason
// (its own change or status, or a change of its Deployment, such as the HPA
// controller scaling it).
func (c *controller) reconcileHPA(ctx context.Context, isvc *unstructured.Unstructured, want *isvcObjects) error {
	ns, name := isvc.GetNamespace(), predictorName(isvc.GetName())
	client := c.kube.AutoscalingV2().HorizontalPodAutoscalers(ns)
	existing, err := c.hpas.HorizontalPodAutoscalers(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	found := err == nil
	switch {
	case want.HPA == nil:
		// KServe removes its HPA when the autoscaler class changes.
		if found && controlledBy(existing, isvc.GetUID()) {
			return c.deleteHPA(ctx, existing)
		}
	case !found:
		if _, err := client.Create(ctx, want.HPA.DeepCopy(), metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
			return fmt.Errorf("creating HorizontalPodAutoscaler %s: %w", name, err)
		}
	case !hpaEqual(want.HPA, existing):
		if _, err := client.Update(ctx, want.HPA.DeepCopy(), metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
			return fmt.Errorf("updating HorizontalPodAutoscaler %s: %w", name, err)
		}
	}
	return nil
}

func (c *controller) reconcileLLMInferenceService(ctx context.Context, llm *unstructured.Unstructured) error {
	ns := llm.GetNamespace()
	current := func(name string) *int32 {
		if name == MainLeaderWorkerSetName(llm.GetName()) || name == PrefillLeaderWorkerSetName(llm.GetName()) {
			return c.currentSetReplicas(ctx, ns, name)
		}
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
	sets, err := c.reconcileLeaderWorkerSets(ctx, want)
	if err != nil {
		return err
	}
	if want.MainSet != nil || want.PrefillSet != nil {
		// No informer of the sets: look again soon, as KServe's watch of them would (see multiNodeResync).
		c.queue.AddAfter(key{kindLLMInferenceService, ns, llm.GetName()}, multiNodeResync)
	}
	return c.applyStatus(ctx, llmInferenceServices, llm, llmStatus(llm, &llmWorkloads{want: want, deployments: workloads, sets: sets}, nil, c.now()))
}

// reconcileLeaderWorkerSets keeps the multi-node workloads in place and returns them by role.
func (c *controller) reconcileLeaderWorkerSets(ctx context.Context, want *llmObjects) (map[string]*unstructured.Unstructured, error) {
	sets := map[string]*unstructured.Unstructured{}
	for role, set := range map[string]*unstructured.Unstructured{"main": want.MainSet, "prefill": want.PrefillSet} {
		if set == nil {
			continue
		}
		got, err := c.reconcileLeaderWorkerSet(ctx, set)
		if err != nil {
			return nil, err
		}
		sets[role] = got
	}
	return sets, nil
}

// currentSetReplicas reads the spec.replicas of a LeaderWorkerSet live; nil when it has none or
// cannot be read.
func (c *controller) currentSetReplicas(ctx context.Context, namespace, name string) *int32 {
	u, err := c.dyn.Resource(LeaderWorkerSets).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	n, ok, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
	if !ok {
		return nil
	}
	r := int32(n)
	return &r
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
