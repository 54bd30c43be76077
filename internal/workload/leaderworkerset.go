package workload

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// A LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, kubernetes-sigs/lws) runs spec.replicas groups of
// spec.leaderWorkerTemplate.size pods: one leader and size-1 workers, usually one GPU node each. What
// the guardian relies on was read in lws v0.8.0: pkg/controllers/leaderworkerset_controller.go (the
// leader StatefulSet, named as the set and controlled by it, runs one leader pod per group; its
// scale-down removes the highest group index) and pod_controller.go (each leader pod controls the
// worker StatefulSet of its group, named <set>-<group index>; with restartPolicy
// RecreateGroupOnPodRestart, the default, a pod of a group that goes away takes the whole group with
// it), pkg/webhooks/pod_webhook.go (the group-index and group-key labels, and the exclusive-topology
// annotation turned into pod affinity: one group per topology domain).
const (
	// LWSGroup is the LeaderWorkerSet's API group.
	LWSGroup = "leaderworkerset.x-k8s.io"
	// LWSSetNameLabel names the set on every pod of it.
	LWSSetNameLabel = "leaderworkerset.sigs.k8s.io/name"
	// LWSGroupIndexLabel is the index of a pod's group.
	LWSGroupIndexLabel = "leaderworkerset.sigs.k8s.io/group-index"
	// LWSWorkerIndexLabel is a pod's index in its group (0: the leader).
	LWSWorkerIndexLabel = "leaderworkerset.sigs.k8s.io/worker-index"
	// LWSGroupKeyLabel is unique per group; exclusive placement keys its affinity on it.
	LWSGroupKeyLabel = "leaderworkerset.sigs.k8s.io/group-key"
	// LWSExclusiveTopologyAnnotation, on the set, names the node label of the topology domain each
	// group has to itself.
	LWSExclusiveTopologyAnnotation = "leaderworkerset.sigs.k8s.io/exclusive-topology"
	// MaxGroupSize bounds the size of a group the guardian surges. The size is the tenant's number:
	// a capacity check places every pod of a new group, and a size of a million must not make the
	// guardian compute (or book) a million placements. A larger set is reported, never surged.
	MaxGroupSize = 64
)

var lwsGVR = schema.GroupVersionResource{Group: LWSGroup, Version: "v1", Resource: "leaderworkersets"}

const (
	lwsReplicasPath       = "/spec/replicas"
	lwsSizePath           = "/spec/leaderWorkerTemplate/size"
	lwsLeaderLabelsPath   = "/spec/leaderWorkerTemplate/leaderTemplate/metadata/labels"
	lwsWorkerLabelsPath   = "/spec/leaderWorkerTemplate/workerTemplate/metadata/labels"
	lwsStatusReplicas     = "/status/replicas"
	lwsStatusUpdated      = "/status/updatedReplicas"
	lwsStatusReady        = "/status/readyReplicas"
	leaderPrefillTemplate = "llminferenceservice-workload-leader-prefill"
	workerPrefillTemplate = "llminferenceservice-workload-worker-prefill"
)

// leaderWorkerSetKind scales a LeaderWorkerSet that no controller owns through spec.replicas, one
// group per replica. It is read live: the guardian keeps no informer for it (its pods and
// StatefulSets, which it watches, move every surge along).
type leaderWorkerSetKind struct{}

func (leaderWorkerSetKind) get(s *Store, ref Ref) (*Object, error) {
	u, err := s.getLWS(ref.Namespace, ref.Name)
	if err != nil {
		return nil, err
	}
	return newObject(KindLeaderWorkerSet, lwsGVR.GroupVersion(), u)
}

func (leaderWorkerSetKind) patch(ctx context.Context, s *Store, ref Ref, data []byte) error {
	_, err := s.Dynamic.Resource(lwsGVR).Namespace(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, data, s.patchOptions())
	return err
}

func (leaderWorkerSetKind) plan(obj *Object, _ *Target, current, delta int32, _ bool) ([]Field, error) {
	return []Field{raise(obj, lwsReplicasPath, 1, current, delta)}, nil
}

func (leaderWorkerSetKind) paths(*Target) []string { return []string{lwsReplicasPath} }

// getLWS reads a LeaderWorkerSet live. A 404 that names no object is the API not being served: a
// *NotServedError, so that a Surge on it is kept rather than taken for deleted.
func (s *Store) getLWS(namespace, name string) (*unstructured.Unstructured, error) {
	if s.Dynamic == nil {
		return nil, &NotServedError{Kind: KindLeaderWorkerSet}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := s.Dynamic.Resource(lwsGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if st, ok := err.(apierrors.APIStatus); ok && (st.Status().Details == nil || st.Status().Details.Name == "") {
			return nil, &NotServedError{Kind: KindLeaderWorkerSet}
		}
	}
	return u, err
}

// lwsOf walks a pod's controller chain to its LeaderWorkerSet, each link by UID against the cache:
// a leader pod's StatefulSet is controlled by the set; a worker pod's StatefulSet by the leader pod
// of its group, whose StatefulSet is. It returns nil (and no error) when the chain leads elsewhere.
func (s *Store) lwsOf(pod metav1.Object) (*metav1.OwnerReference, error) {
	for depth := 0; depth < 2; depth++ {
		ctrl := metav1.GetControllerOf(pod)
		if ctrl == nil || ctrl.Kind != "StatefulSet" || groupOf(ctrl) != "apps" {
			return nil, nil
		}
		ss, err := s.StatefulSets.StatefulSets(pod.GetNamespace()).Get(ctrl.Name)
		if err != nil || ss.UID != ctrl.UID {
			return nil, fmt.Errorf("statefulset %s/%s of pod %s not in cache yet", pod.GetNamespace(), ctrl.Name, pod.GetName())
		}
		sctrl := metav1.GetControllerOf(ss)
		switch {
		case sctrl == nil:
			return nil, nil
		case sctrl.Kind == string(KindLeaderWorkerSet) && groupOf(sctrl) == LWSGroup:
			return sctrl, nil
		case sctrl.Kind == "Pod" && groupOf(sctrl) == "" && depth == 0 && s.Pods != nil:
			leader, err := s.Pods(pod.GetNamespace(), sctrl.Name)
			if err != nil || leader.GetUID() != sctrl.UID {
				return nil, fmt.Errorf("leader pod %s/%s of statefulset %s not in cache yet", pod.GetNamespace(), sctrl.Name, ss.Name)
			}
			pod = leader
		default:
			return nil, nil
		}
	}
	return nil, nil
}

// resolveLWS returns what scales a LeaderWorkerSet: the LLMInferenceService whose multi-node
// workload it runs (KServe reverts a direct change of its count), or the set itself.
func (s *Store) resolveLWS(owner Ref) (*Target, error) {
	obj, err := leaderWorkerSetKind{}.get(s, owner)
	if err != nil {
		return nil, err
	}
	if owner.UID != "" && obj.Ref.UID != owner.UID {
		return nil, notFound(owner)
	}
	ref := obj.Ref
	hpas, err := s.HPAs.HorizontalPodAutoscalers(ref.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, h := range hpas {
		t := h.Spec.ScaleTargetRef
		gv, _ := schema.ParseGroupVersion(t.APIVersion)
		if t.Kind == string(KindLeaderWorkerSet) && t.Name == ref.Name && gv.Group == LWSGroup {
			return nil, unsupported("LeaderWorkerSet %s is scaled by HorizontalPodAutoscaler %s: its group count is the autoscaler's", ref.Name, h.Name)
		}
	}
	c := metav1.GetControllerOf(obj.Meta)
	if c == nil {
		return &Target{Ref: ref, PodOwner: ref}, nil
	}
	if Kind(c.Kind) == KindLLMInferenceService && groupOf(c) == KServeGroup {
		if _, _, ok := s.KServe(KindLLMInferenceService); !ok {
			return nil, &NotServedError{Kind: KindLLMInferenceService}
		}
		return &Target{Ref: Ref{Kind: KindLLMInferenceService, Namespace: ref.Namespace, Name: c.Name, UID: c.UID}, PodOwner: ref, Component: lwsComponent(obj)}, nil
	}
	return nil, unsupported("LeaderWorkerSet %s is controlled by %s %s: scaling it directly would fight that controller", ref.Name, c.Kind, c.Name)
}

// lwsComponent tells the prefill LeaderWorkerSet of a multi-node LLMInferenceService from the main
// one by its templates' component label, as KServe stamps it.
func lwsComponent(obj *Object) string {
	for _, p := range []string{lwsLeaderLabelsPath, lwsWorkerLabelsPath} {
		v, _ := valueAt(obj.Content, p)
		m, _ := v.(map[string]any)
		if c, _ := m[ComponentLabel].(string); c == leaderPrefillTemplate || c == workerPrefillTemplate {
			return ComponentPrefill
		}
	}
	return ComponentMain
}

// lwsPodOwner reads a LeaderWorkerSet as the owner of its pods: counts are groups (status.readyReplicas
// counts the groups whose every pod is Ready), GroupSize the pods of each.
func (s *Store) lwsPodOwner(ref Ref) (*PodOwnerState, error) {
	obj, err := leaderWorkerSetKind{}.get(s, ref)
	if err != nil {
		return nil, err
	}
	if ref.UID != "" && obj.Ref.UID != ref.UID {
		return nil, notFound(ref)
	}
	size := int64(1)
	if v, ok := obj.Int(lwsSizePath); ok {
		size = v
	}
	if size < 1 || size > MaxGroupSize {
		return nil, unsupported("LeaderWorkerSet %s has groups of %d pods; the guardian surges groups of 1 to %d pods", ref.Name, size, MaxGroupSize)
	}
	st := &PodOwnerState{UID: obj.Ref.UID, Annotations: obj.Meta.GetAnnotations(), GroupSize: int32(size),
		TopologyKey: obj.Meta.GetAnnotations()[LWSExclusiveTopologyAnnotation]}
	st.Replicas = 1
	if v, ok := obj.Int(lwsReplicasPath); ok {
		st.Replicas = clampInt32(v)
	}
	st.StatusReplicas = intOr(obj, lwsStatusReplicas)
	st.UpdatedReplicas = intOr(obj, lwsStatusUpdated)
	st.ReadyReplicas = intOr(obj, lwsStatusReady)
	// The set's status has no observedGeneration: its counts are taken as they are.
	st.Generation, st.ObservedGeneration = obj.Meta.GetGeneration(), obj.Meta.GetGeneration()
	st.Selector = labels.SelectorFromSet(labels.Set{LWSSetNameLabel: obj.Ref.Name})
	return st, nil
}

func intOr(obj *Object, pointer string) int32 {
	v, _ := obj.Int(pointer)
	return clampInt32(v)
}

func clampInt32(v int64) int32 {
	return int32(max(min(v, 1<<31-1), -1<<31))
}
