package controller

import (
	"bytes"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// lastAppliedAnnotation holds kubectl apply's copy of the whole object: often the largest annotation.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// slim is the informers' transform: every cached object loses its managedFields, and the kinds the
// guardian caches in bulk (Pods, Nodes, ReplicaSets, Deployments, StatefulSets, PDBs, HPAs; KServe
// objects in slimKServe) keep only what its decisions read; pods become the compact *podinfo.Pod
// (read through podinfo.Lister), ReplicaSets their metadata. What a tenant writes beyond that (a
// megabyte of annotations on each of hundreds of PDBs) then costs the guardian nothing. The guardian
// never writes a cached object back whole (its writes are JSON patches of the replica fields tested
// against the resourceVersion, the Eviction API and Surge status updates), so nothing dropped here
// can be lost on the server.
//
// What a decision reads and the transform dropped is caught by the controller's unit tests, whose
// caches hold transformed objects (see harness.refresh), and by TestSlimKeepsWhatDecisionsRead.
func slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return podinfo.From(o), nil
	case *corev1.Node:
		return slimNode(o), nil
	case *appsv1.ReplicaSet:
		// Only the owner chain is read (workload.MetadataIndex): a ReplicaSet's spec is a copy of its
		// Deployment's, its labels and annotations are the Deployment controller's bookkeeping.
		return &metav1.PartialObjectMetadata{
			TypeMeta: metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "ReplicaSet"},
			ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, UID: o.UID, ResourceVersion: o.ResourceVersion,
				OwnerReferences: o.OwnerReferences, DeletionTimestamp: o.DeletionTimestamp},
		}, nil
	case *policyv1.PodDisruptionBudget:
		return slimPDB(o), nil
	case *autoscalingv2.HorizontalPodAutoscaler:
		return slimHPA(o), nil
	case *appsv1.Deployment:
		o.ObjectMeta = workload.SlimMeta(o.ObjectMeta)
		o.Spec.Template.ObjectMeta = slimTemplateMeta(o.Spec.Template.ObjectMeta)
		// The template's labels tell an LLMInferenceService's prefill Deployment apart; its pod spec
		// is never read, nor are the status conditions (the counts are) but ReplicaFailure, which says
		// why the replacements of a surge are not created.
		o.Spec.Template.Spec = corev1.PodSpec{}
		o.Status.Conditions = replicaFailure(o.Status.Conditions, func(c appsv1.DeploymentCondition) string { return string(c.Type) })
		return o, nil
	case *appsv1.StatefulSet:
		o.ObjectMeta = workload.SlimMeta(o.ObjectMeta)
		o.Spec.Template.ObjectMeta = metav1.ObjectMeta{}
		o.Spec.Template.Spec = corev1.PodSpec{}
		o.Spec.VolumeClaimTemplates = nil
		o.Status.Conditions = replicaFailure(o.Status.Conditions, func(c appsv1.StatefulSetCondition) string { return string(c.Type) })
		return o, nil
	}
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// slimPDB keeps what the stall decision, the eviction path and the selector cache read of a PDB:
// identity, selector, budget and the status counts (not the per-pod DisruptedPods map nor the
// conditions).
func slimPDB(p *policyv1.PodDisruptionBudget) *policyv1.PodDisruptionBudget {
	// The selector cache then shares the selector's values instead of keeping a sorted copy.
	blocking.SortSelectorValues(p.Spec.Selector)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Generation: p.Generation, DeletionTimestamp: p.DeletionTimestamp},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: p.Spec.Selector, MinAvailable: p.Spec.MinAvailable,
			MaxUnavailable: p.Spec.MaxUnavailable, UnhealthyPodEvictionPolicy: p.Spec.UnhealthyPodEvictionPolicy},
		Status: policyv1.PodDisruptionBudgetStatus{ObservedGeneration: p.Status.ObservedGeneration, DisruptionsAllowed: p.Status.DisruptionsAllowed,
			CurrentHealthy: p.Status.CurrentHealthy, DesiredHealthy: p.Status.DesiredHealthy, ExpectedPods: p.Status.ExpectedPods},
	}
}

// slimHPA keeps what a surge reads of an HPA: its scale target, the counts it raises and whether it
// is scaling (not its metrics, behavior or conditions).
func slimHPA(h *autoscalingv2.HorizontalPodAutoscaler) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		TypeMeta:   h.TypeMeta,
		ObjectMeta: workload.SlimMeta(h.ObjectMeta),
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: h.Spec.ScaleTargetRef, MinReplicas: h.Spec.MinReplicas,
			MaxReplicas: h.Spec.MaxReplicas},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: h.Status.CurrentReplicas, DesiredReplicas: h.Status.DesiredReplicas},
	}
}

// slimTemplateMeta keeps, of a Deployment's pod template metadata, the label that tells an
// LLMInferenceService's prefill Deployment apart.
func slimTemplateMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	v, ok := m.Labels[workload.ComponentLabel]
	if !ok {
		return metav1.ObjectMeta{}
	}
	return metav1.ObjectMeta{Labels: map[string]string{workload.ComponentLabel: v}}
}

// slimKServe is the transform of the KServe informers (see workload.SlimKServe).
func slimKServe(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return workload.SlimKServe(u), nil
	}
	return stripManagedFields(obj)
}

// replicaFailure keeps, of a workload's status conditions, the ReplicaFailure one (nil when none).
func replicaFailure[C any](conditions []C, typeOf func(C) string) []C {
	i := slices.IndexFunc(conditions, func(c C) bool { return typeOf(c) == workload.ConditionReplicaFailure })
	if i < 0 {
		return nil
	}
	return []C{conditions[i]}
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

// changed reports whether an update changed anything of a cached Pod or Node but its
// resourceVersion; any other kind always counts as changed, and so does a resync (the same
// resourceVersion), the periodic re-examination being its point. On a large cluster most node
// updates are status reports that change nothing a decision reads (heartbeats are dropped by
// slimNode), and a pod's status writes often touch only what podinfo.From drops (container statuses,
// IPs); each such update would otherwise re-examine nodes and re-run the prediction.
func changed(old, cur any) bool {
	switch c := cur.(type) {
	case *podinfo.Pod:
		o, ok := old.(*podinfo.Pod)
		return !ok || o.ResourceVersion == c.ResourceVersion || !podinfo.EqualButVersion(o, c)
	case *corev1.Node:
		o, ok := old.(*corev1.Node)
		return !ok || o.ResourceVersion == c.ResourceVersion || !sameButVersion(o, c)
	}
	return true
}

// sameButVersion compares two slimmed nodes but for their resourceVersions by their protobuf
// encodings: every field the transform keeps takes part, and the generated encoder costs a fraction
// of a reflective comparison (BenchmarkNodeHeartbeat). The encoding is deterministic (map keys
// sorted); a quantity written two ways compares unequal, which only costs a needless re-examination.
func sameButVersion(old, cur *corev1.Node) bool {
	a, b := *old, *cur
	a.ResourceVersion, b.ResourceVersion = "", ""
	ab, err := a.Marshal()
	if err != nil {
		return false
	}
	bb, err := b.Marshal()
	return err == nil && bytes.Equal(ab, bb)
}
