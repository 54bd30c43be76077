package workload

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// ScaleResource returns the resource of an owner kind when the cluster serves it with a /scale
// subresource; ok is false when it has none.
type ScaleResource func(apiVersion, kind string) (resource string, ok bool, err error)

// KServeLister returns the lister and resource of a KServe kind, or ok=false while the cluster does
// not serve that kind.
type KServeLister func(kind Kind) (lister cache.GenericLister, gvr schema.GroupVersionResource, ok bool)

// Store reads scalable objects from informer listers and writes them with JSON patches.
type Store struct {
	ReplicaSets  appslisters.ReplicaSetLister
	Deployments  appslisters.DeploymentLister
	StatefulSets appslisters.StatefulSetLister
	HPAs         autoscalinglisters.HorizontalPodAutoscalerLister
	KServe       KServeLister
	// Scalable finds the /scale subresource of owners of other kinds; nil disables them.
	Scalable ScaleResource

	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// FieldManager names the guardian in managedFields of every object it writes.
	FieldManager string
}

// Target is what to scale for a blocked pod.
type Target struct {
	// Ref is the object whose fields are raised.
	Ref Ref
	// Carrier is the object that carries the surge record: Ref itself, except for an InferenceService
	// (see Record.Target).
	Carrier Ref
	// PodOwner is the Deployment or StatefulSet that owns the pods.
	PodOwner Ref
	// Component is ComponentMain or ComponentPrefill for an LLMInferenceService.
	Component string
}

// Resolve follows the pod's controller ownerReferences (Pod → ReplicaSet → Deployment → owner, or
// Pod → StatefulSet) to the object that owns its replica count. It matches owners by API group and
// kind and checks UIDs, never by building names. An *UnsupportedError says why the pod's replicas
// cannot be surged.
func (s *Store) Resolve(pod *corev1.Pod) (*Target, error) {
	ctrl := metav1.GetControllerOf(pod)
	if ctrl == nil {
		return nil, unsupported("pod %s/%s has no controller: a bare pod has no replicas to add", pod.Namespace, pod.Name)
	}
	switch {
	case ctrl.Kind == "ReplicaSet" && groupOf(ctrl) == "apps":
		rs, err := s.ReplicaSets.ReplicaSets(pod.Namespace).Get(ctrl.Name)
		if err != nil || rs.UID != ctrl.UID {
			return nil, fmt.Errorf("replicaset %s/%s of pod %s not in cache yet", pod.Namespace, ctrl.Name, pod.Name)
		}
		dctrl := metav1.GetControllerOf(rs)
		if dctrl == nil || dctrl.Kind != "Deployment" || groupOf(dctrl) != "apps" {
			return nil, unsupported("ReplicaSet %s is not managed by a Deployment", rs.Name)
		}
		d, err := s.Deployments.Deployments(pod.Namespace).Get(dctrl.Name)
		if err != nil || d.UID != dctrl.UID {
			return nil, fmt.Errorf("deployment %s/%s of pod %s not in cache yet", pod.Namespace, dctrl.Name, pod.Name)
		}
		return s.resolveDeployment(d)
	case ctrl.Kind == "StatefulSet" && groupOf(ctrl) == "apps":
		ss, err := s.StatefulSets.StatefulSets(pod.Namespace).Get(ctrl.Name)
		if err != nil || ss.UID != ctrl.UID {
			return nil, fmt.Errorf("statefulset %s/%s of pod %s not in cache yet", pod.Namespace, ctrl.Name, pod.Name)
		}
		owner := Ref{Kind: KindStatefulSet, Namespace: ss.Namespace, Name: ss.Name, UID: ss.UID}
		if c := metav1.GetControllerOf(ss); c != nil {
			return nil, unsupported("StatefulSet %s is controlled by %s %s (for example a LeaderWorkerSet): not surged", ss.Name, c.Kind, c.Name)
		}
		return s.withHPA(owner)
	}
	return nil, unsupported("pod %s/%s is controlled by a %s, which has no replica count to raise", pod.Namespace, pod.Name, ctrl.Kind)
}

func (s *Store) resolveDeployment(d *appsv1.Deployment) (*Target, error) {
	owner := Ref{Kind: KindDeployment, Namespace: d.Namespace, Name: d.Name, UID: d.UID}
	c := metav1.GetControllerOf(d)
	if c == nil {
		return s.withHPA(owner)
	}
	if groupOf(c) == KServeGroup && (c.Kind == string(KindInferenceService) || c.Kind == string(KindLLMInferenceService)) {
		kind := Kind(c.Kind)
		if _, _, ok := s.KServe(kind); !ok {
			return nil, unsupported("Deployment %s is owned by %s %s, but this cluster does not serve that API", d.Name, c.Kind, c.Name)
		}
		t := &Target{Ref: Ref{Kind: kind, Namespace: d.Namespace, Name: c.Name, UID: c.UID}, PodOwner: owner}
		t.Carrier = t.Ref
		if kind == KindInferenceService {
			t.Carrier = owner
		}
		if kind == KindLLMInferenceService {
			t.Component = ComponentMain
			if d.Spec.Template.Labels["app.kubernetes.io/component"] == "llminferenceservice-workload-prefill" {
				t.Component = ComponentPrefill
			}
		}
		return t, nil
	}
	if s.Scalable != nil {
		resource, ok, err := s.Scalable(c.APIVersion, c.Kind)
		if err != nil {
			return nil, fmt.Errorf("discovering %s %s: %w", c.APIVersion, c.Kind, err)
		}
		if ok {
			// Scale the owner, never the Deployment behind its back; the owner's own object may be
			// rewritten by its controller at any time, so the record lives on the Deployment.
			ref := Ref{Kind: Kind(c.Kind), Namespace: d.Namespace, Name: c.Name, UID: c.UID, APIVersion: c.APIVersion, Resource: resource}
			return &Target{Ref: ref, Carrier: owner, PodOwner: owner}, nil
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
			ref := Ref{Kind: KindHPA, Namespace: h.Namespace, Name: h.Name, UID: h.UID}
			return &Target{Ref: ref, Carrier: ref, PodOwner: owner}, nil
		}
	}
	return &Target{Ref: owner, Carrier: owner, PodOwner: owner}, nil
}

func groupOf(ref *metav1.OwnerReference) string {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

// Get returns the current object from the listers; a NotFound error when it is gone or was replaced
// by a namesake (different UID, when the ref has one). An owner scaled through /scale is read live:
// the guardian keeps no informer for kinds it does not know.
func (s *Store) Get(ref Ref) (*Object, error) {
	var obj *Object
	var err error
	if ref.ViaScale() {
		return s.getScale(ref)
	}
	switch ref.Kind {
	case KindDeployment:
		var d *appsv1.Deployment
		if d, err = s.Deployments.Deployments(ref.Namespace).Get(ref.Name); err == nil {
			obj, err = newObject(ref.Kind, appsv1.SchemeGroupVersion, d)
		}
	case KindStatefulSet:
		var ss *appsv1.StatefulSet
		if ss, err = s.StatefulSets.StatefulSets(ref.Namespace).Get(ref.Name); err == nil {
			obj, err = newObject(ref.Kind, appsv1.SchemeGroupVersion, ss)
		}
	case KindHPA:
		var h *autoscalingv2.HorizontalPodAutoscaler
		if h, err = s.HPAs.HorizontalPodAutoscalers(ref.Namespace).Get(ref.Name); err == nil {
			obj, err = newObject(ref.Kind, autoscalingv2.SchemeGroupVersion, h)
		}
	case KindInferenceService, KindLLMInferenceService:
		lister, gvr, ok := s.KServe(ref.Kind)
		if !ok {
			return nil, apierrors.NewNotFound(schema.GroupResource{Group: KServeGroup, Resource: string(ref.Kind)}, ref.Name)
		}
		u, gerr := lister.ByNamespace(ref.Namespace).Get(ref.Name)
		if gerr != nil {
			return nil, gerr
		}
		obj, err = newObject(ref.Kind, gvr.GroupVersion(), u)
	default:
		return nil, fmt.Errorf("unknown kind %q", ref.Kind)
	}
	if err != nil {
		return nil, err
	}
	if ref.UID != "" && obj.Ref.UID != ref.UID {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: string(ref.Kind)}, ref.Name)
	}
	return obj, nil
}

// Patch applies a JSON patch to the object with the guardian's field manager.
func (s *Store) Patch(ctx context.Context, ref Ref, data []byte) error {
	opts := metav1.PatchOptions{FieldManager: s.FieldManager}
	var err error
	if ref.ViaScale() {
		_, err = s.Dynamic.Resource(scaleGVR(ref)).Namespace(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, data, opts, "scale")
		return err
	}
	switch ref.Kind {
	case KindDeployment:
		_, err = s.Kube.AppsV1().Deployments(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, data, opts)
	case KindStatefulSet:
		_, err = s.Kube.AppsV1().StatefulSets(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, data, opts)
	case KindHPA:
		_, err = s.Kube.AutoscalingV2().HorizontalPodAutoscalers(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, data, opts)
	case KindInferenceService, KindLLMInferenceService:
		_, gvr, ok := s.KServe(ref.Kind)
		if !ok {
			return fmt.Errorf("%s is not served by this cluster", ref.Kind)
		}
		_, err = s.Dynamic.Resource(gvr).Namespace(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, data, opts)
	default:
		err = fmt.Errorf("unknown kind %q", ref.Kind)
	}
	return err
}

// PodOwnerState is what the guardian needs to know of a Deployment or StatefulSet.
type PodOwnerState struct {
	Selector labels.Selector
	// Replicas is spec.replicas; StatusReplicas the pods that exist for it.
	Replicas, StatusReplicas int32
	Annotations              map[string]string
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
		sel, uid, st.StatusReplicas, st.Annotations = d.Spec.Selector, d.UID, d.Status.Replicas, d.Annotations
		st.Replicas = ptrOr(d.Spec.Replicas, 1)
	case KindStatefulSet:
		ss, err := s.StatefulSets.StatefulSets(ref.Namespace).Get(ref.Name)
		if err != nil {
			return nil, err
		}
		sel, uid, st.StatusReplicas, st.Annotations = ss.Spec.Selector, ss.UID, ss.Status.Replicas, ss.Annotations
		st.Replicas = ptrOr(ss.Spec.Replicas, 1)
	default:
		return nil, fmt.Errorf("kind %s does not own pods", ref.Kind)
	}
	if ref.UID != "" && uid != ref.UID {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: string(ref.Kind)}, ref.Name)
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("%s: invalid selector: %w", ref, err)
	}
	st.Selector = selector
	return &st, nil
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

func scaleGVR(ref Ref) schema.GroupVersionResource {
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	return gv.WithResource(ref.Resource)
}

// getScale reads an owner's Scale. Its fields are the Scale's (/spec/replicas); its metadata carries
// the owner's resourceVersion, which guards the patch like any other.
func (s *Store) getScale(ref Ref) (*Object, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := s.Dynamic.Resource(scaleGVR(ref)).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}, "scale")
	if err != nil {
		return nil, err
	}
	if ref.UID != "" && u.GetUID() != "" && u.GetUID() != ref.UID {
		return nil, apierrors.NewNotFound(scaleGVR(ref).GroupResource(), ref.Name)
	}
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	obj, err := newObject(ref.Kind, gv, u)
	if err != nil {
		return nil, err
	}
	obj.Ref = ref
	return obj, nil
}
