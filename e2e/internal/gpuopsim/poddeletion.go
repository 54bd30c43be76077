package gpuopsim

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubectl/pkg/drain"
)

// isGPUPod is the GPU Operator's pod deletion filter: a Running or Pending
// pod with a container that requests or limits a GPU or a MIG slice
// (cmd/gpu-operator/main.go gpuPodSpecFilter, without its DRA claim check).
func isGPUPod(pod corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning && pod.Status.Phase != corev1.PodPending {
		return false
	}
	gpu := func(rl corev1.ResourceList) bool {
		for name := range rl {
			if strings.HasPrefix(string(name), "nvidia.com/gpu") || strings.HasPrefix(string(name), "nvidia.com/mig-") {
				return true
			}
		}
		return false
	}
	for _, c := range pod.Spec.Containers {
		if gpu(c.Resources.Limits) || gpu(c.Resources.Requests) {
			return true
		}
	}
	return false
}

// deleteGPUPods removes the node's GPU pods with kubectl's drain helper, as
// pod_manager.go SchedulePodEviction does: through the Eviction API, each
// pod with its own grace period, all within the policy's timeout. When some
// GPU pod cannot be removed (not evictable under the policy's force and
// emptyDir settings, or its eviction still refused at the timeout) the node
// goes to upgrade-failed, or to drain-required when the policy enables a
// drain.
func (c *controller) deleteGPUPods(ctx context.Context, node *corev1.Node, spec podDeletionSpec, drainEnabled bool) {
	log := c.log.WithValues("node", node.Name)
	pods, err := c.kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil {
		log.Error(err, "pod deletion: cannot list pods")
		return
	}
	toDelete := 0
	for _, p := range pods.Items {
		if isGPUPod(p) {
			toDelete++
		}
	}
	if toDelete == 0 {
		log.Info("pod deletion: no GPU pods")
		c.setStateLogged(ctx, node, StatePodRestartRequired)
		return
	}

	timeout := c.timing.timeout(spec.TimeoutSecond)
	helper := &drain.Helper{
		Ctx:                 ctx,
		Client:              c.kube,
		GracePeriodSeconds:  -1,
		IgnoreAllDaemonSets: true,
		DeleteEmptyDirData:  spec.DeleteEmptyDir,
		Force:               spec.Force,
		Timeout:             timeout,
		AdditionalFilters: []drain.PodFilter{func(p corev1.Pod) drain.PodDeleteStatus {
			if !isGPUPod(p) {
				return drain.MakePodDeleteStatusSkip()
			}
			return drain.MakePodDeleteStatusOkay()
		}},
		OnPodDeletionOrEvictionFinished: podDone(log),
		Out:                             logWriter{log: log},
		ErrOut:                          logWriter{log: log},
	}
	list, errs := helper.GetPodsForDeletion(node.Name)
	if list == nil || len(list.Pods()) != toDelete {
		log.Info("pod deletion: cannot delete all GPU pods", "errors", fmt.Sprint(errs))
		c.failPodDeletion(ctx, node, drainEnabled)
		return
	}
	log.Info("pod deletion: evicting GPU pods", "pods", toDelete, "timeout", timeout.String())
	if err := helper.DeleteOrEvictPods(list.Pods()); err != nil {
		log.Info("pod deletion failed", "error", err.Error())
		c.recorder.Eventf(node, corev1.EventTypeWarning, EventReason,
			"Failed to delete workload pods on the node for the driver upgrade, %s", err.Error())
		c.failPodDeletion(ctx, node, drainEnabled)
		return
	}
	c.setStateLogged(ctx, node, StatePodRestartRequired)
	c.recorder.Event(node, corev1.EventTypeNormal, EventReason, "Deleted workload pods on the node for the driver upgrade")
}

func (c *controller) failPodDeletion(ctx context.Context, node *corev1.Node, drainEnabled bool) {
	if drainEnabled {
		c.recorder.Event(node, corev1.EventTypeWarning, EventReason, "Pod deletion failed but drain is enabled in spec. Will attempt a node drain")
		c.setStateLogged(ctx, node, StateDrainRequired)
		return
	}
	c.setStateLogged(ctx, node, StateFailed)
}

// drainNode cordons and drains the node as drain_manager.go
// ScheduleNodesDrain does; success moves it to pod-restart-required, failure
// to upgrade-failed.
func (c *controller) drainNode(ctx context.Context, node *corev1.Node, spec drainSpec) {
	log := c.log.WithValues("node", node.Name)
	selector := SkipDrainSelector
	if spec.PodSelector != "" {
		selector = spec.PodSelector + "," + SkipDrainSelector
	}
	helper := &drain.Helper{
		Ctx:                             ctx,
		Client:                          c.kube,
		Force:                           spec.Force,
		IgnoreAllDaemonSets:             true,
		DeleteEmptyDirData:              spec.DeleteEmptyDir,
		GracePeriodSeconds:              -1,
		Timeout:                         c.timing.timeout(spec.TimeoutSecond),
		PodSelector:                     selector,
		OnPodDeletionOrEvictionFinished: podDone(log),
		Out:                             logWriter{log: log},
		ErrOut:                          logWriter{log: log},
	}
	c.recorder.Event(node, corev1.EventTypeNormal, EventReason, "Scheduling drain of the node")
	if err := drain.RunCordonOrUncordon(helper, node, true); err != nil {
		c.recorder.Eventf(node, corev1.EventTypeWarning, EventReason, "Failed to cordon the node, %s", err.Error())
		c.setStateLogged(ctx, node, StateFailed)
		return
	}
	if err := drain.RunNodeDrain(helper, node.Name); err != nil {
		log.Info("drain failed", "error", err.Error())
		c.recorder.Eventf(node, corev1.EventTypeWarning, EventReason, "Failed to drain the node, %s", err.Error())
		c.setStateLogged(ctx, node, StateFailed)
		return
	}
	c.recorder.Event(node, corev1.EventTypeNormal, EventReason, "Successfully drained the node")
	c.setStateLogged(ctx, node, StatePodRestartRequired)
}

// setStateLogged is setState from a background operation, which has no
// caller to return an error to (the real one drops it too); the next resync
// finds the node where it is.
func (c *controller) setStateLogged(ctx context.Context, node *corev1.Node, state string) {
	if err := c.setState(ctx, node, state); err != nil && ctx.Err() == nil {
		c.log.Error(err, "cannot change node upgrade state", "node", node.Name, "state", state)
	}
}

func podDone(log logr.Logger) func(*corev1.Pod, bool, error) {
	return func(pod *corev1.Pod, usingEviction bool, err error) {
		if err != nil {
			log.Info("pod removal failed", "pod", pod.Namespace+"/"+pod.Name, "eviction", usingEviction, "error", err.Error())
			return
		}
		log.Info("pod removed", "pod", pod.Namespace+"/"+pod.Name, "eviction", usingEviction)
	}
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
