package workload

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	"k8s.io/client-go/tools/cache"
)

// MetadataIndex reads objects of one resource by namespace and name from an informer's indexer,
// whatever the cached type, as metadata: the guardian caches ReplicaSets as PartialObjectMetadata.
type MetadataIndex struct {
	Indexer  cache.Indexer
	Resource schema.GroupResource
}

// Get returns the metadata of the cached object, or a NotFound error.
func (x MetadataIndex) Get(namespace, name string) (metav1.Object, error) {
	o, exists, err := x.Indexer.GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(x.Resource, name)
	}
	return meta.Accessor(o)
}

// ScaleResource returns the resource of an owner kind when the cluster serves it with a /scale
// subresource; ok is false when it has none.
type ScaleResource func(apiVersion, kind string) (resource string, ok bool, err error)

// KServeLister returns the lister and resource of a KServe kind, or ok=false while the cluster does
// not serve that kind or its informer has not synced.
type KServeLister func(kind Kind) (lister cache.GenericLister, gvr schema.GroupVersionResource, ok bool)

// Store reads scalable objects from informer listers and writes them with JSON patches.
type Store struct {
	// ReplicaSets holds the ReplicaSets' metadata: only their UID and controller are read (a
	// ReplicaSet's spec is a copy of its Deployment's).
	ReplicaSets  MetadataIndex
	Deployments  appslisters.DeploymentLister
	StatefulSets appslisters.StatefulSetLister
	HPAs         autoscalinglisters.HorizontalPodAutoscalerLister
	KServe       KServeLister
	// Scalable finds the /scale subresource of owners of other kinds; nil disables them.
	Scalable ScaleResource
	// Pods reads a cached pod by namespace and name: the leader pod that controls a LeaderWorkerSet
	// group's worker StatefulSet. nil: worker pods are not resolved.
	Pods func(namespace, name string) (metav1.Object, error)

	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// FieldManager names the guardian in managedFields of every object it writes.
	FieldManager string
}

// Target is what to scale for a blocked pod.
type Target struct {
	// Ref is the object whose fields are raised.
	Ref Ref
	// PodOwner is the Deployment or StatefulSet that owns the pods.
	PodOwner Ref
	// Component is ComponentMain or ComponentPrefill for an LLMInferenceService.
	Component string
}

// Resolve follows the pod's controller ownerReferences (Pod → ReplicaSet → Deployment, or Pod →
// StatefulSet) to its pod owner, then to the object that owns its replica count (ResolveOwner). It
// matches owners by API group and kind and checks UIDs, never by building names. An *UnsupportedError
// says why the pod's replicas cannot be surged.
func (s *Store) Resolve(pod metav1.Object) (*Target, error) {
	namespace, name := pod.GetNamespace(), pod.GetName()
	ctrl := metav1.GetControllerOf(pod)
	if ctrl == nil {
		return nil, unsupported("pod %s/%s has no controller: a bare pod has no replicas to add", namespace, name)
	}
	switch {
	case ctrl.Kind == "ReplicaSet" && groupOf(ctrl) == "apps":
		rs, err := s.ReplicaSets.Get(namespace, ctrl.Name)
		if err != nil || rs.GetUID() != ctrl.UID {
			return nil, fmt.Errorf("replicaset %s/%s of pod %s not in cache yet", namespace, ctrl.Name, name)
		}
		dctrl := metav1.GetControllerOf(rs)
		if dctrl == nil || dctrl.Kind != "Deployment" || groupOf(dctrl) != "apps" {
			return nil, unsupported("ReplicaSet %s is not managed by a Deployment", rs.GetName())
		}
		return s.ResolveOwner(Ref{Kind: KindDeployment, Namespace: namespace, Name: dctrl.Name, UID: dctrl.UID})
	case ctrl.Kind == "StatefulSet" && groupOf(ctrl) == "apps":
		lws, err := s.lwsOf(pod)
		if err != nil {
			return nil, err
		}
		if lws != nil {
			return s.ResolveOwner(Ref{Kind: KindLeaderWorkerSet, Namespace: namespace, Name: lws.Name, UID: lws.UID})
		}
		return s.ResolveOwner(Ref{Kind: KindStatefulSet, Namespace: namespace, Name: ctrl.Name, UID: ctrl.UID})
	}
	return nil, unsupported("pod %s/%s is controlled by a %s, which has no replica count to raise", namespace, name, ctrl.Kind)
}

// ResolveOwner returns the object that owns the replica count of a Deployment or StatefulSet: its
// KServe owner, its owner with a /scale subresource, the HPA that scales it, or itself. The surge
// lifecycle calls it on every sync to check that a Surge's target still controls its pod owner.
func (s *Store) ResolveOwner(owner Ref) (*Target, error) {
	switch owner.Kind {
	case KindDeployment:
		d, err := s.Deployments.Deployments(owner.Namespace).Get(owner.Name)
		if err != nil || (owner.UID != "" && d.UID != owner.UID) {
			return nil, fmt.Errorf("deployment %s/%s not in cache yet", owner.Namespace, owner.Name)
		}
		return s.resolveDeployment(d)
	case KindStatefulSet:
		ss, err := s.StatefulSets.StatefulSets(owner.Namespace).Get(owner.Name)
		if err != nil || (owner.UID != "" && ss.UID != owner.UID) {
			return nil, fmt.Errorf("statefulset %s/%s not in cache yet", owner.Namespace, owner.Name)
		}
		ref := Ref{Kind: KindStatefulSet, Namespace: ss.Namespace, Name: ss.Name, UID: ss.UID}
		if c := metav1.GetControllerOf(ss); c != nil {
			return nil, unsupported("StatefulSet %s is controlled by %s %s: not surged", ss.Name, c.Kind, c.Name)
		}
		return s.withHPA(ref)
	case KindLeaderWorkerSet:
		return s.resolveLWS(owner)
	}
	return nil, fmt.Errorf("kind %s does not own pods", owner.Kind)
}

func (s *Store) resolveDeployment(d *appsv1.Deployment) (*Target, error) {
	owner := Ref{Kind: KindDeployment, Namespace: d.Namespace, Name: d.Name, UID: d.UID}
	c := metav1.GetControllerOf(d)
	if c == nil {
		return s.withHPA(owner)
	}
	if k, ok := kinds[Kind(c.Kind)].(kserveKind); ok && groupOf(c) == KServeGroup {
		kind := Kind(c.Kind)
		if _, _, ok := s.KServe(kind); !ok {
			return nil, &NotServedError{Kind: kind}
		}
		return &Target{Ref: Ref{Kind: kind, Namespace: d.Namespace, Name: c.Name, UID: c.UID}, PodOwner: owner, Component: k.component(d)}, nil
	}
	if s.Scalable != nil {
		resource, ok, err := s.Scalable(c.APIVersion, c.Kind)
		if err != nil {
			return nil, fmt.Errorf("discovering %s %s: %w", c.APIVersion, c.Kind, err)
		}
		if ok {
			// Scale the owner, never the Deployment behind its back.
			ref := Ref{Kind: Kind(c.Kind), Namespace: d.Namespace, Name: c.Name, UID: c.UID, APIVersion: c.APIVersion, Resource: resource}
			return &Target{Ref: ref, PodOwner: owner}, nil
		}
	}
	return nil, unsupported("Deployment %s is controlled by %s %s, which has no /scale subresource: scaling the Deployment directly would fight that controller", d.Name, c.Kind, c.Name)
}

// withHPA returns the HPA as the target when one scales the pod owner: the replica count is the HPA's.
func (s *Store) withHPA(owner Ref) (*Target, error) {
	hpas, err := s.HPAs.HorizontalPodAutoscalers(owner.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, h := range hpas {
		ref := h.Spec.ScaleTargetRef
		gv, _ := schema.ParseGroupVersion(ref.APIVersion)
		if ref.Kind == string(owner.Kind) && ref.Name == owner.Name && gv.Group == "apps" {
			return &Target{Ref: Ref{Kind: KindHPA, Namespace: h.Namespace, Name: h.Name, UID: h.UID}, PodOwner: owner}, nil
		}
	}
	return &Target{Ref: owner, PodOwner: owner}, nil
}

func groupOf(ref *metav1.OwnerReference) string {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

// Owns reports whether the pod's controller chain leads to the pod owner of that kind and UID: Pod →
// ReplicaSet → Deployment, Pod → StatefulSet, or Pod → StatefulSet (→ leader Pod → StatefulSet) →
// LeaderWorkerSet, each link by UID. A selector says which pods an
// owner counts, not which it controls: a pod that merely carries the labels (a decoy, or a pod of
// another workload whose selector overlaps) must neither make a surge Ready nor be evicted or
// re-costed by it. A pod whose ReplicaSet is not in the cache yet is not counted until it is.
func (s *Store) Owns(kind Kind, uid types.UID, pod metav1.Object) bool {
	ctrl := metav1.GetControllerOf(pod)
	if ctrl == nil || groupOf(ctrl) != "apps" {
		return false
	}
	if kind == KindLeaderWorkerSet {
		lws, err := s.lwsOf(pod)
		return err == nil && lws != nil && lws.UID == uid
	}
	switch {
	case kind == KindStatefulSet && ctrl.Kind == "StatefulSet":
		return ctrl.UID == uid
	case kind == KindDeployment && ctrl.Kind == "ReplicaSet":
		rs, err := s.ReplicaSets.Get(pod.GetNamespace(), ctrl.Name)
		if err != nil || rs.GetUID() != ctrl.UID {
			return false
		}
		dctrl := metav1.GetControllerOf(rs)
		return dctrl != nil && dctrl.Kind == "Deployment" && groupOf(dctrl) == "apps" && dctrl.UID == uid
	}
	return false
}

// PodOwnerState is what the guardian needs to know of a Deployment or StatefulSet.
type PodOwnerState struct {
	// UID is the owner's: its pods are those whose controller chain leads to it (see Store.Owns).
	UID      types.UID
	Selector labels.Selector
	// Replicas is spec.replicas; StatusReplicas the pods that exist for it, UpdatedReplicas those of
	// its current revision and ReadyReplicas those Ready.
	Replicas, StatusReplicas, UpdatedReplicas, ReadyReplicas int32
	// UpdatesOnDelete: a StatefulSet whose pods move to a new revision only when someone deletes them
	// (updateStrategy OnDelete): its pods of an older revision are at rest, not a rollout.
	UpdatesOnDelete bool
	// ReplicaFailure is the message of the owner's ReplicaFailure condition when its reason is
	// FailedCreate (a quota, a LimitRange or an admission webhook refused a pod; the Deployment
	// controller copies its ReplicaSets' condition), "" when pods are not being refused.
	ReplicaFailure string
	// Generation and ObservedGeneration tell whether the status describes the current spec.
	Generation, ObservedGeneration int64
	Annotations                    map[string]string
	// GroupSize is, for a LeaderWorkerSet, the pods of each group (its counts above are groups); 0
	// for the other kinds, whose replicas are pods.
	GroupSize int32
	// TopologyKey is a LeaderWorkerSet's exclusive topology: the node label whose every domain runs
	// at most one group. "" when it has none.
	TopologyKey string
}

// CaughtUp reports whether the owner's controller has acted on its current spec and runs exactly
// want pods: a two-step restore removes an explicit count only then.
func (st *PodOwnerState) CaughtUp(want int32) bool {
	return st.Replicas == want && st.ObservedGeneration >= st.Generation && st.StatusReplicas == want && st.UpdatedReplicas == want
}

// PodOwner reads the pod owner's selector and replica counts.
func (s *Store) PodOwner(ref Ref) (*PodOwnerState, error) {
	var sel *metav1.LabelSelector
	var st PodOwnerState
	var uid types.UID
	switch ref.Kind {
	case KindDeployment:
		d, err := s.Deployments.Deployments(ref.Namespace).Get(ref.Name)
		if err != nil {
			return nil, err
		}
		sel, uid, st.Annotations = d.Spec.Selector, d.UID, d.Annotations
		st.StatusReplicas, st.UpdatedReplicas, st.ReadyReplicas = d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas
		st.Generation, st.ObservedGeneration = d.Generation, d.Status.ObservedGeneration
		st.Replicas = ptrOr(d.Spec.Replicas, 1)
		for _, c := range d.Status.Conditions {
			st.ReplicaFailure = failedCreate(string(c.Type), c.Status, c.Reason, c.Message, st.ReplicaFailure)
		}
	case KindStatefulSet:
		ss, err := s.StatefulSets.StatefulSets(ref.Namespace).Get(ref.Name)
		if err != nil {
			return nil, err
		}
		sel, uid, st.Annotations = ss.Spec.Selector, ss.UID, ss.Annotations
		st.StatusReplicas, st.UpdatedReplicas, st.ReadyReplicas = ss.Status.Replicas, ss.Status.UpdatedReplicas, ss.Status.ReadyReplicas
		st.Generation, st.ObservedGeneration = ss.Generation, ss.Status.ObservedGeneration
		st.Replicas = ptrOr(ss.Spec.Replicas, 1)
		st.UpdatesOnDelete = ss.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType
		for _, c := range ss.Status.Conditions {
			st.ReplicaFailure = failedCreate(string(c.Type), c.Status, c.Reason, c.Message, st.ReplicaFailure)
		}
	case KindLeaderWorkerSet:
		return s.lwsPodOwner(ref)
	default:
		return nil, fmt.Errorf("kind %s does not own pods", ref.Kind)
	}
	if ref.UID != "" && uid != ref.UID {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: string(ref.Kind)}, ref.Name)
	}
	st.UID = uid
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("%s: invalid selector: %w", ref, err)
	}
	st.Selector = selector
	return &st, nil
}

// ConditionReplicaFailure is the status condition a ReplicaSet (and, copied from it, its Deployment)
// carries while its controller cannot create pods; ReasonFailedCreate is its reason then.
const (
	ConditionReplicaFailure = "ReplicaFailure"
	ReasonFailedCreate      = "FailedCreate"
)

// failedCreate returns the message of a true ReplicaFailure condition with reason FailedCreate, else
// prev. The StatefulSet controller sets no such condition (it records FailedCreate Events only): a
// StatefulSet whose pods are refused is caught by --ready-timeout.
func failedCreate(typ string, status corev1.ConditionStatus, reason, message, prev string) string {
	if typ == ConditionReplicaFailure && status == corev1.ConditionTrue && reason == ReasonFailedCreate {
		if message == "" {
			return ReasonFailedCreate
		}
		return message
	}
	return prev
}

// Unsettled says how the owner does not run what it asks for, "" when it is at rest: its controller
// has acted on its latest spec, every wanted pod exists, is of the current revision and is Ready, and
// no more exist. A surge adds replicas to what the workload runs; on a workload that does not run its
// count (a quota holding 2000000000 wanted replicas at one pod, a rollout, a pod that never turns
// Ready) the added replicas are never created or Ready, and the surge would hold a slot for nothing.
func (st *PodOwnerState) Unsettled() string {
	switch {
	case st.ObservedGeneration < st.Generation:
		return fmt.Sprintf("its controller has not acted on its latest spec (generation %d, observed %d)", st.Generation, st.ObservedGeneration)
	case st.StatusReplicas != st.Replicas:
		return fmt.Sprintf("%d replicas wanted, %d running", st.Replicas, st.StatusReplicas)
	case st.UpdatedReplicas != st.Replicas && !st.UpdatesOnDelete:
		return fmt.Sprintf("a rollout is in progress: %d of %d replicas updated", st.UpdatedReplicas, st.Replicas)
	case st.ReadyReplicas != st.Replicas:
		return fmt.Sprintf("%d replicas wanted, %d Ready", st.Replicas, st.ReadyReplicas)
	}
	return ""
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}
