package blocking

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Candidate is a node with the pods that run on it, as read from the listers.
type Candidate struct {
	Node *corev1.Node
	Pods []*corev1.Pod
}

// FitsElsewhere reports whether a copy of pod could be scheduled on one of the candidates other than
// the node it runs on, and on which. It checks what the scheduler would check and what is knowable
// without running it: the node is Ready and schedulable, untolerated NoSchedule/NoExecute taints,
// nodeSelector and required node affinity, required pod anti-affinity on the hostname, and free
// allocatable resources for every resource the pod requests (nvidia.com/gpu included).
func FitsElsewhere(pod *corev1.Pod, candidates []Candidate) (string, bool) {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	for _, c := range candidates {
		n := c.Node
		if n.Name == pod.Spec.NodeName || n.Spec.Unschedulable || !nodeReady(n) {
			continue
		}
		if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(n.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}); untolerated {
			continue
		}
		if ok, err := affinity.Match(n); err != nil || !ok {
			continue
		}
		if antiAffinityConflict(pod, c.Pods) {
			continue
		}
		if resourcesFit(requests, n.Status.Allocatable, c.Pods) {
			return n.Name, true
		}
	}
	return "", false
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// resourcesFit reports whether requests fit in allocatable minus what the node's live pods request.
func resourcesFit(requests, allocatable corev1.ResourceList, pods []*corev1.Pod) bool {
	used := corev1.ResourceList{}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			sum := used[name]
			sum.Add(q)
			used[name] = sum
		}
	}
	for name, want := range requests {
		if want.IsZero() {
			continue
		}
		free, ok := allocatable[name]
		if !ok {
			return false
		}
		free = free.DeepCopy()
		free.Sub(used[name])
		if free.Cmp(want) < 0 {
			return false
		}
	}
	return true
}

// antiAffinityConflict reports whether a required pod anti-affinity term on the hostname topology
// excludes a node running pods. Other topology keys need the scheduler's view of every domain and are
// left to it.
func antiAffinityConflict(pod *corev1.Pod, onNode []*corev1.Pod) bool {
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.PodAntiAffinity == nil {
		return false
	}
	for _, term := range pod.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey != corev1.LabelHostname {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err != nil {
			continue
		}
		namespaces := map[string]bool{pod.Namespace: len(term.Namespaces) == 0 && term.NamespaceSelector == nil}
		for _, ns := range term.Namespaces {
			namespaces[ns] = true
		}
		for _, other := range onNode {
			if Skip(other) {
				continue
			}
			if (namespaces[other.Namespace] || term.NamespaceSelector != nil) && sel.Matches(labels.Set(other.Labels)) {
				return true
			}
		}
	}
	return false
}
