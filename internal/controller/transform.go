package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// lastAppliedAnnotation holds kubectl apply's copy of the whole object: often the largest annotation.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// slim is the informers' transform: every cached object loses its managedFields, and the kinds the
// guardian caches in bulk (Pods, Nodes, ReplicaSets, Deployments, StatefulSets) keep only what its
// decisions read. The guardian never writes a cached object back whole (its writes are patches, the
// Eviction API and Surge status updates), so nothing dropped here can be lost on the server.
//
// What a decision reads and the transform dropped is caught by the controller's unit tests, whose
// caches hold transformed objects (see harness.refresh), and by TestSlimKeepsWhatDecisionsRead.
func slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return slimPod(o), nil
	case *corev1.Node:
		return slimNode(o), nil
	case *appsv1.ReplicaSet:
		o.ManagedFields = nil
		// Only the owner chain is read: a ReplicaSet's template is a copy of its Deployment's.
		o.Spec.Template = corev1.PodTemplateSpec{}
		return o, nil
	case *appsv1.Deployment:
		o.ManagedFields = nil
		// The template's labels tell an LLMInferenceService's prefill Deployment apart; its pod spec
		// is never read.
		o.Spec.Template.Spec = corev1.PodSpec{}
		return o, nil
	case *appsv1.StatefulSet:
		o.ManagedFields = nil
		o.Spec.Template.Spec = corev1.PodSpec{}
		o.Spec.VolumeClaimTemplates = nil
		return o, nil
	}
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// slimMeta keeps the identity, labels, owners, lifecycle timestamps and annotations of an object
// (without kubectl's last-applied copy).
func slimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion, Generation: m.Generation,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
		DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds,
		Labels:                     m.Labels, OwnerReferences: m.OwnerReferences,
	}
	if len(m.Annotations) > 0 {
		out.Annotations = make(map[string]string, len(m.Annotations))
		for k, v := range m.Annotations {
			if k != lastAppliedAnnotation {
				out.Annotations[k] = v
			}
		}
	}
	return out
}

// podAnnotations are the only pod annotations a decision reads.
var podAnnotations = []string{corev1.MirrorPodAnnotationKey, deletionCostAnnotation}

// slimPod keeps what the blocking, capacity and survivor decisions read: identity, labels, owners,
// the mirror-pod and deletion-cost annotations, the node, what the scheduler matches (node
// selector, affinity, tolerations, and what the pod requests), the phase and the Ready and
// PodScheduled conditions. What the pod requests is kept as one container holding the pod's
// effective requests (init containers, sidecars and overhead folded in, as the scheduler adds them
// up): one resource list per pod instead of one per container. Images, commands, env, volumes,
// probes, limits, other annotations and container statuses are dropped.
func slimPod(p *corev1.Pod) *corev1.Pod {
	var conditions []corev1.PodCondition
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.PodScheduled {
			conditions = append(conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, LastTransitionTime: c.LastTransitionTime})
		}
	}
	m := slimMeta(p.ObjectMeta)
	m.Annotations = nil
	for _, k := range podAnnotations {
		if v, ok := p.Annotations[k]; ok {
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[k] = v
		}
	}
	var containers []corev1.Container
	if requests := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}); len(requests) > 0 {
		containers = []corev1.Container{{Name: slimContainer, Resources: corev1.ResourceRequirements{Requests: requests}}}
	}
	return &corev1.Pod{
		ObjectMeta: m,
		Spec: corev1.PodSpec{
			NodeName: p.Spec.NodeName, NodeSelector: p.Spec.NodeSelector, Affinity: p.Spec.Affinity,
			Tolerations: p.Spec.Tolerations, Priority: p.Spec.Priority, PriorityClassName: p.Spec.PriorityClassName,
			Containers: containers,
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase, Conditions: conditions},
	}
}

// slimContainer names the one container of a slimmed pod, which holds the pod's requests.
const slimContainer = "requests"

// slimNode keeps metadata, the spec (unschedulable, taints) and what the capacity check reads
// (allocatable, conditions); the image list, the largest part of a GPU node's status, is dropped.
// The conditions lose their heartbeat times, which the kubelet renews on every status report: a
// slimmed node that only reported in is equal to the cached one but for its resourceVersion (see
// changed).
func slimNode(n *corev1.Node) *corev1.Node {
	conditions := make([]corev1.NodeCondition, len(n.Status.Conditions))
	for i, c := range n.Status.Conditions {
		c.LastHeartbeatTime = metav1.Time{}
		conditions[i] = c
	}
	return &corev1.Node{
		ObjectMeta: slimMeta(n.ObjectMeta),
		Spec:       n.Spec,
		Status:     corev1.NodeStatus{Allocatable: n.Status.Allocatable, Capacity: n.Status.Capacity, Conditions: conditions},
	}
}

// changed reports whether an update changed anything of a cached (slimmed) Pod or Node but its
// resourceVersion; any other kind always counts as changed. On a large cluster most node updates are
// status reports that change nothing a decision reads (heartbeats are dropped by slimNode), and a
// pod's status writes often touch only what slimPod drops (container statuses, IPs); each such
// update would otherwise re-examine nodes and re-run the prediction.
func changed(old, cur any) bool {
	switch c := cur.(type) {
	case *corev1.Pod:
		o, ok := old.(*corev1.Pod)
		return !ok || changedBesidesVersion(*o, *c, func(p *corev1.Pod) *string { return &p.ResourceVersion })
	case *corev1.Node:
		o, ok := old.(*corev1.Node)
		return !ok || changedBesidesVersion(*o, *c, func(n *corev1.Node) *string { return &n.ResourceVersion })
	}
	return true
}

// changedBesidesVersion compares two copies of an object whose resourceVersions rv points at: a
// resync (the same resourceVersion) counts as a change, the periodic re-examination being its point.
func changedBesidesVersion[T any](old, cur T, rv func(*T) *string) bool {
	if *rv(&old) == *rv(&cur) {
		return true
	}
	*rv(&old), *rv(&cur) = "", ""
	return !equality.Semantic.DeepEqual(&old, &cur)
}
