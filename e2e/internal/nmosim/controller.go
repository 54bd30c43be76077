package nmosim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubectl/pkg/drain"
)

// maxLeaseErrors is how many failures to renew its own Lease the operator
// accepts before it gives the maintenance up (maxAllowedErrorToUpdateOwnedLease).
const maxLeaseErrors = 3

// controller plays the NodeMaintenance reconciler.
type controller struct {
	kube     kubernetes.Interface
	client   dynamic.NamespaceableResourceInterface
	lister   cache.GenericLister
	recorder record.EventRecorder
	timing   Timings
	log      logr.Logger
	queue    workqueue.TypedRateLimitingInterface[string]
}

// enqueue queues a NodeMaintenance on every change, its own status updates
// included, as a controller-runtime For() without predicates does.
func (c *controller) enqueue(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		c.queue.Add(u.GetName())
	}
}

func (c *controller) sync(ctx context.Context, name string) error {
	obj, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	nm := &nodeMaintenance{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, nm); err != nil {
		return err
	}
	original := nm.Status
	log := c.log.WithValues("nodeMaintenance", name, "node", nm.Spec.NodeName)
	helper := c.newHelper(ctx, log)

	if nm.DeletionTimestamp != nil {
		if !slices.Contains(nm.Finalizers, Finalizer) {
			return nil
		}
		if err := c.stopMaintenanceOnDeletion(ctx, nm.Spec.NodeName); err != nil && !apierrors.IsNotFound(err) {
			return c.onError(ctx, nm, original, helper, err, nil)
		}
		nm.Finalizers = slices.DeleteFunc(nm.Finalizers, func(f string) bool { return f == Finalizer })
		if _, err := c.update(ctx, nm); err != nil {
			return c.onError(ctx, nm, original, helper, err, nil)
		}
		log.Info("maintenance removed")
		c.recorder.Event(obj, corev1.EventTypeNormal, EventRemovedMaintenance, "Removed a node maintenance")
		return nil
	}
	if !slices.Contains(nm.Finalizers, Finalizer) {
		nm.Finalizers = append(nm.Finalizers, Finalizer)
		updated, err := c.update(ctx, nm)
		if err != nil {
			return c.onError(ctx, nm, original, helper, err, nil)
		}
		nm.ResourceVersion = updated.GetResourceVersion()
		log.Info("maintenance begins", "reason", nm.Spec.Reason)
		c.recorder.Event(obj, corev1.EventTypeNormal, EventBeginMaintenance, "Begin a node maintenance")
	}
	if nm.Status.Phase == "" {
		if err := c.initStatus(ctx, nm, helper); err != nil {
			return c.onError(ctx, nm, original, helper, err, nil)
		}
		if err := c.updateStatus(ctx, nm, original); err != nil {
			return c.onError(ctx, nm, original, helper, err, nil)
		}
		// The status update queues the object again; carry on with this pass.
		original = nm.Status
	}

	node, err := c.kube.CoreV1().Nodes().Get(ctx, nm.Spec.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.recorder.Event(obj, corev1.EventTypeWarning, EventFailedMaintenance, "Failed a node maintenance")
		nm.Status.Phase = PhaseFailed
		return c.onError(ctx, nm, original, helper, err, nil)
	}
	if err != nil {
		return c.onError(ctx, nm, original, helper, err, nil)
	}

	if nm.Status.ErrorOnLeaseCount > maxLeaseErrors {
		if err := c.stopMaintenance(ctx, node); err != nil {
			return c.onError(ctx, nm, original, helper, fmt.Errorf("failed to uncordon upon failure to obtain owned lease: %w", err), nil)
		}
		c.recorder.Event(obj, corev1.EventTypeWarning, EventFailedMaintenance, "Failed a node maintenance")
		nm.Status.Phase = PhaseFailed
		nm.Status.LastError = fmt.Sprintf("maintenance failed: lease could not be extended after %d attempts", nm.Status.ErrorOnLeaseCount)
		nm.Status.LastUpdate = now()
		return c.updateStatus(ctx, nm, original)
	}
	if err := c.requestLease(ctx, node); err != nil {
		var held alreadyHeldError
		if !errors.As(err, &held) || nm.Status.DrainProgress > 0 {
			nm.Status.ErrorOnLeaseCount++
		}
		return c.onError(ctx, nm, original, helper, err, nil)
	}
	if nm.Status.Phase != PhaseRunning || nm.Status.ErrorOnLeaseCount != 0 {
		nm.Status.Phase = PhaseRunning
		nm.Status.ErrorOnLeaseCount = 0
	}

	if err := c.startMaintenance(ctx, node, helper); err != nil {
		return c.onError(ctx, nm, original, helper, err, nil)
	}
	log.Info("evicting all pods from the node", "timeout", c.timing.DrainTimeout.String())
	if err := drain.RunNodeDrain(helper, node.Name); err != nil {
		log.Info("not all pods evicted", "error", err.Error())
		retry := c.timing.RetryDelay
		return c.onError(ctx, nm, original, helper, err, &retry)
	}
	if nm.Status.Phase != PhaseSucceeded {
		c.recorder.Event(obj, corev1.EventTypeNormal, EventSucceedMaintenance, "Node maintenance was succeeded")
		nm.Status.LastUpdate = now()
		log.Info("maintenance succeeded: all pods evicted")
	}
	nm.Status.Phase = PhaseSucceeded
	nm.Status.DrainProgress = 100
	nm.Status.PendingPods = nil
	nm.Status.PendingPodsRefs = nil
	return c.updateStatus(ctx, nm, original)
}

// initStatus fills the status the first time: Running, the pods to evict,
// all pods on the node.
func (c *controller) initStatus(ctx context.Context, nm *nodeMaintenance, helper *drain.Helper) error {
	nm.Status.Phase = PhaseRunning
	nm.Status.LastUpdate = now()
	pending, errs := helper.GetPodsForDeletion(nm.Spec.NodeName)
	if errs != nil {
		return fmt.Errorf("failed to get pods for eviction while initializing status")
	}
	if pending != nil {
		setPending(nm, pending.Pods())
	}
	nm.Status.EvictionPods = len(nm.Status.PendingPods)
	all, err := c.kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nm.Spec.NodeName})
	if err != nil {
		return err
	}
	nm.Status.TotalPods = len(all.Items)
	return nil
}

// onError records a failed pass in the status (lastError, the pods still to
// evict, the drain progress) and asks for the next: after retryAfter when
// given, else with the queue's backoff. A missing node is not retried.
func (c *controller) onError(ctx context.Context, nm *nodeMaintenance, original status, helper *drain.Helper, err error, retryAfter *time.Duration) error {
	nm.Status.LastError = err.Error()
	nm.Status.LastUpdate = now()
	if nm.Spec.NodeName != "" {
		if pending, _ := helper.GetPodsForDeletion(nm.Spec.NodeName); pending != nil {
			setPending(nm, pending.Pods())
			if nm.Status.EvictionPods != 0 {
				nm.Status.DrainProgress = (nm.Status.EvictionPods - len(nm.Status.PendingPods)) * 100 / nm.Status.EvictionPods
			}
		}
	}
	if updateErr := c.updateStatus(ctx, nm, original); updateErr != nil {
		c.log.Error(updateErr, "cannot update the NodeMaintenance status", "nodeMaintenance", nm.Name)
	}
	if apierrors.IsNotFound(err) && strings.Contains(err.Error(), nm.Spec.NodeName) {
		return nil
	}
	if retryAfter != nil {
		c.queue.AddAfter(nm.Name, *retryAfter)
		return nil
	}
	return err
}

func setPending(nm *nodeMaintenance, pods []corev1.Pod) {
	nm.Status.PendingPods = nil
	nm.Status.PendingPodsRefs = nil
	for _, p := range pods {
		nm.Status.PendingPods = append(nm.Status.PendingPods, p.Name)
		nm.Status.PendingPodsRefs = append(nm.Status.PendingPodsRefs, podRef{Namespace: p.Namespace, Name: p.Name})
	}
}

// startMaintenance labels, taints and cordons the node.
func (c *controller) startMaintenance(ctx context.Context, node *corev1.Node, helper *drain.Helper) error {
	if node.Labels[ExcludeFromRemediationLabel] != "true" {
		if err := c.mergePatchNode(ctx, node.Name, map[string]any{"metadata": map[string]any{"labels": map[string]any{ExcludeFromRemediationLabel: "true"}}}); err != nil {
			return err
		}
	}
	if err := c.setTaints(ctx, node.Name, true); err != nil {
		return err
	}
	return drain.RunCordonOrUncordon(helper, node, true)
}

// stopMaintenance undoes startMaintenance and gives the Lease up
// (stopNodeMaintenanceImp).
func (c *controller) stopMaintenance(ctx context.Context, node *corev1.Node) error {
	if err := c.setTaints(ctx, node.Name, false); err != nil {
		return err
	}
	if err := drain.RunCordonOrUncordon(&drain.Helper{Ctx: ctx, Client: c.kube}, node, false); err != nil {
		return err
	}
	c.recorder.Event(node, corev1.EventTypeNormal, EventUncordonNode, "Uncordon a node")
	var held alreadyHeldError
	if err := c.invalidateLease(ctx, node.Name); err != nil && !errors.As(err, &held) {
		return err
	}
	if node.Labels[ExcludeFromRemediationLabel] == "true" {
		return c.mergePatchNode(ctx, node.Name, map[string]any{"metadata": map[string]any{"labels": map[string]any{ExcludeFromRemediationLabel: nil}}})
	}
	return nil
}

func (c *controller) stopMaintenanceOnDeletion(ctx context.Context, nodeName string) error {
	node, err := c.kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		var held alreadyHeldError
		if err := c.invalidateLease(ctx, nodeName); err != nil && !errors.As(err, &held) {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	return c.stopMaintenance(ctx, node)
}

var maintenanceTaints = []corev1.Taint{
	{Key: UnschedulableTaintKey, Effect: corev1.TaintEffectNoSchedule},
	{Key: DrainTaintKey, Effect: corev1.TaintEffectNoSchedule},
}

// setTaints adds or removes the maintenance taints. The operator guards its
// JSON patch with a test of the taints it read (taint.go AddOrRemoveTaint);
// an update with the resourceVersion read guards the same way.
func (c *controller) setTaints(ctx context.Context, nodeName string, add bool) error {
	node, err := c.kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	taints := slices.Clone(node.Spec.Taints)
	changed := false
	for _, t := range maintenanceTaints {
		i := slices.IndexFunc(taints, func(x corev1.Taint) bool { return x.Key == t.Key && x.Effect == t.Effect })
		switch {
		case add && i < 0:
			taints = append(taints, t)
			changed = true
		case !add && i >= 0:
			taints = slices.Delete(taints, i, i+1)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	node.Spec.Taints = taints
	_, err = c.kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	return err
}

func (c *controller) mergePatchNode(ctx context.Context, name string, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
	return err
}

// update writes the whole object (the finalizer).
func (c *controller) update(ctx context.Context, nm *nodeMaintenance) (*unstructured.Unstructured, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(nm)
	if err != nil {
		return nil, err
	}
	return c.client.Update(ctx, &unstructured.Unstructured{Object: obj}, metav1.UpdateOptions{})
}

// updateStatus writes the status if it changed: an unchanged write would be
// a no-op on the API server.
func (c *controller) updateStatus(ctx context.Context, nm *nodeMaintenance, original status) error {
	if reflect.DeepEqual(nm.Status, original) {
		return nil
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(nm)
	if err != nil {
		return err
	}
	updated, err := c.client.UpdateStatus(ctx, &unstructured.Unstructured{Object: obj}, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	nm.ResourceVersion = updated.GetResourceVersion()
	return nil
}

// newHelper configures kubectl's drain helper as createDrainer does.
func (c *controller) newHelper(ctx context.Context, log logr.Logger) *drain.Helper {
	return &drain.Helper{
		Ctx:                 ctx,
		Client:              c.kube,
		Force:               true,
		DeleteEmptyDirData:  true,
		IgnoreAllDaemonSets: true,
		GracePeriodSeconds:  -1,
		Timeout:             c.timing.DrainTimeout,
		OnPodDeletionOrEvictionFinished: func(pod *corev1.Pod, usingEviction bool, err error) {
			if err == nil {
				log.Info("pod removed", "pod", pod.Namespace+"/"+pod.Name, "eviction", usingEviction)
			}
		},
		Out:    logWriter{log: log},
		ErrOut: logWriter{log: log},
	}
}

func now() *metav1.Time {
	t := metav1.NewTime(time.Now().Truncate(time.Second))
	return &t
}

// logWriter turns the drain helper's text output into log lines.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			w.log.Info("drain helper: " + line)
		}
	}
	return len(p), nil
}
