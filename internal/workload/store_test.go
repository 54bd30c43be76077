package workload

import (
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const storeNS = "models"

func TestResolve(t *testing.T) {
	isvcRef := ctrlRef(KServeGroup+"/v1beta1", "InferenceService", "granite", "isvc-uid")
	llmRef := ctrlRef(KServeGroup+"/v1alpha2", "LLMInferenceService", "llama", "llm-uid")
	plain := deployment("plain", "plain-uid", nil, nil)

	tests := []struct {
		name            string
		objects         []any
		served          map[Kind]bool
		pod             *corev1.Pod
		want            *Target
		wantUnsupported bool
		wantErr         bool
	}{
		{
			name:    "Pod -> ReplicaSet -> Deployment",
			objects: []any{replicaSet("plain-5d9", "rs-uid", plain), plain},
			pod:     pod("plain-5d9-x", ctrlRef("apps/v1", "ReplicaSet", "plain-5d9", "rs-uid")),
			want:    &Target{Ref: deploymentRef("plain", "plain-uid"), PodOwner: deploymentRef("plain", "plain-uid")},
		},
		{
			name: "Deployment scaled by an HPA: the HPA is the target",
			objects: []any{
				replicaSet("plain-5d9", "rs-uid", plain), plain,
				hpa("other", "apps/v1", "Deployment", "not-plain"),
				hpa("wrong-group", "example.com/v1", "Deployment", "plain"),
				hpa("plain-hpa", "apps/v1", "Deployment", "plain"),
			},
			pod: pod("plain-5d9-x", ctrlRef("apps/v1", "ReplicaSet", "plain-5d9", "rs-uid")),
			want: &Target{
				Ref:      Ref{Kind: KindHPA, Namespace: storeNS, Name: "plain-hpa", UID: "plain-hpa-uid"},
				PodOwner: deploymentRef("plain", "plain-uid"),
			},
		},
		{
			name:    "HPA of another Deployment is ignored",
			objects: []any{replicaSet("plain-5d9", "rs-uid", plain), plain, hpa("other", "apps/v1", "Deployment", "not-plain")},
			pod:     pod("plain-5d9-x", ctrlRef("apps/v1", "ReplicaSet", "plain-5d9", "rs-uid")),
			want:    &Target{Ref: deploymentRef("plain", "plain-uid"), PodOwner: deploymentRef("plain", "plain-uid")},
		},
		{
			name: "Deployment owned by an InferenceService",
			objects: func() []any {
				d := deployment("granite-predictor", "pred-uid", &isvcRef, nil)
				return []any{replicaSet("granite-predictor-7f", "rs-uid", d), d, hpa("granite-predictor", "apps/v1", "Deployment", "granite-predictor")}
			}(),
			served: map[Kind]bool{KindInferenceService: true, KindLLMInferenceService: true},
			pod:    pod("granite-predictor-7f-x", ctrlRef("apps/v1", "ReplicaSet", "granite-predictor-7f", "rs-uid")),
			want: &Target{
				Ref:      Ref{Kind: KindInferenceService, Namespace: storeNS, Name: "granite", UID: "isvc-uid"},
				PodOwner: deploymentRef("granite-predictor", "pred-uid"),
			},
		},
		{
			name: "InferenceService owner while KServe is not served",
			objects: func() []any {
				d := deployment("granite-predictor", "pred-uid", &isvcRef, nil)
				return []any{replicaSet("granite-predictor-7f", "rs-uid", d), d}
			}(),
			served:          map[Kind]bool{KindLLMInferenceService: true},
			pod:             pod("granite-predictor-7f-x", ctrlRef("apps/v1", "ReplicaSet", "granite-predictor-7f", "rs-uid")),
			wantUnsupported: true,
		},
		{
			name: "InferenceService kind of another API group",
			objects: func() []any {
				other := ctrlRef("example.com/v1", "InferenceService", "granite", "isvc-uid")
				d := deployment("granite-predictor", "pred-uid", &other, nil)
				return []any{replicaSet("granite-predictor-7f", "rs-uid", d), d}
			}(),
			served:          map[Kind]bool{KindInferenceService: true},
			pod:             pod("granite-predictor-7f-x", ctrlRef("apps/v1", "ReplicaSet", "granite-predictor-7f", "rs-uid")),
			wantUnsupported: true,
		},
		{
			name: "LLMInferenceService main workload",
			objects: func() []any {
				d := deployment("llama-kserve", "main-uid", &llmRef, map[string]string{"app.kubernetes.io/component": "llminferenceservice-workload"})
				return []any{replicaSet("llama-kserve-6c", "rs-uid", d), d}
			}(),
			served: map[Kind]bool{KindLLMInferenceService: true},
			pod:    pod("llama-kserve-6c-x", ctrlRef("apps/v1", "ReplicaSet", "llama-kserve-6c", "rs-uid")),
			want: &Target{
				Ref:       Ref{Kind: KindLLMInferenceService, Namespace: storeNS, Name: "llama", UID: "llm-uid"},
				PodOwner:  deploymentRef("llama-kserve", "main-uid"),
				Component: ComponentMain,
			},
		},
		{
			name: "LLMInferenceService prefill workload",
			objects: func() []any {
				d := deployment("llama-kserve-prefill", "prefill-uid", &llmRef, map[string]string{"app.kubernetes.io/component": "llminferenceservice-workload-prefill"})
				return []any{replicaSet("llama-kserve-prefill-9b", "rs-uid", d), d}
			}(),
			served: map[Kind]bool{KindLLMInferenceService: true},
			pod:    pod("llama-kserve-prefill-9b-x", ctrlRef("apps/v1", "ReplicaSet", "llama-kserve-prefill-9b", "rs-uid")),
			want: &Target{
				Ref:       Ref{Kind: KindLLMInferenceService, Namespace: storeNS, Name: "llama", UID: "llm-uid"},
				PodOwner:  deploymentRef("llama-kserve-prefill", "prefill-uid"),
				Component: ComponentPrefill,
			},
		},
		{
			name: "Deployment owned by an unknown kind",
			objects: func() []any {
				owner := ctrlRef("example.com/v1", "ModelServer", "m", "m-uid")
				d := deployment("m", "m-dep-uid", &owner, nil)
				return []any{replicaSet("m-1", "rs-uid", d), d}
			}(),
			served:          map[Kind]bool{KindInferenceService: true, KindLLMInferenceService: true},
			pod:             pod("m-1-x", ctrlRef("apps/v1", "ReplicaSet", "m-1", "rs-uid")),
			wantUnsupported: true,
		},
		{
			name:            "ReplicaSet without a Deployment",
			objects:         []any{replicaSet("lonely", "rs-uid", nil)},
			pod:             pod("lonely-x", ctrlRef("apps/v1", "ReplicaSet", "lonely", "rs-uid")),
			wantUnsupported: true,
		},
		{
			name:            "bare pod",
			pod:             pod("bare"),
			wantUnsupported: true,
		},
		{
			name:            "pod of a Job",
			pod:             pod("job-x", ctrlRef("batch/v1", "Job", "job", "job-uid")),
			wantUnsupported: true,
		},
		{
			name:    "ReplicaSet UID differs from the pod's owner reference",
			objects: []any{replicaSet("plain-5d9", "new-rs-uid", plain), plain},
			pod:     pod("plain-5d9-x", ctrlRef("apps/v1", "ReplicaSet", "plain-5d9", "rs-uid")),
			wantErr: true,
		},
		{
			name: "Deployment UID differs from the ReplicaSet's owner reference",
			objects: []any{
				replicaSet("plain-5d9", "rs-uid", deployment("plain", "old-plain-uid", nil, nil)),
				plain,
			},
			pod:     pod("plain-5d9-x", ctrlRef("apps/v1", "ReplicaSet", "plain-5d9", "rs-uid")),
			wantErr: true,
		},
		{
			name:    "ReplicaSet not in the cache yet",
			objects: []any{plain},
			pod:     pod("plain-5d9-x", ctrlRef("apps/v1", "ReplicaSet", "plain-5d9", "rs-uid")),
			wantErr: true,
		},
		{
			name:    "StatefulSet",
			objects: []any{statefulSet("db", "db-uid", nil)},
			pod:     pod("db-0", ctrlRef("apps/v1", "StatefulSet", "db", "db-uid")),
			want:    &Target{Ref: Ref{Kind: KindStatefulSet, Namespace: storeNS, Name: "db", UID: "db-uid"}, PodOwner: Ref{Kind: KindStatefulSet, Namespace: storeNS, Name: "db", UID: "db-uid"}},
		},
		{
			name:    "StatefulSet scaled by an HPA",
			objects: []any{statefulSet("db", "db-uid", nil), hpa("db-hpa", "apps/v1", "StatefulSet", "db")},
			pod:     pod("db-0", ctrlRef("apps/v1", "StatefulSet", "db", "db-uid")),
			want: &Target{
				Ref:      Ref{Kind: KindHPA, Namespace: storeNS, Name: "db-hpa", UID: "db-hpa-uid"},
				PodOwner: Ref{Kind: KindStatefulSet, Namespace: storeNS, Name: "db", UID: "db-uid"},
			},
		},
		{
			name: "StatefulSet of a LeaderWorkerSet",
			objects: func() []any {
				lws := ctrlRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "llama-kserve-mn", "lws-uid")
				return []any{statefulSet("llama-kserve-mn", "ss-uid", &lws)}
			}(),
			pod:             pod("llama-kserve-mn-0", ctrlRef("apps/v1", "StatefulSet", "llama-kserve-mn", "ss-uid")),
			wantUnsupported: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStore(t, tt.served, tt.objects...)
			got, err := s.Resolve(tt.pod)
			var unsup *UnsupportedError
			isUnsup := errors.As(err, &unsup)
			switch {
			case tt.wantUnsupported:
				if !isUnsup {
					t.Fatalf("Resolve() = %+v, %v; want an *UnsupportedError", got, err)
				}
			case tt.wantErr:
				if err == nil || isUnsup {
					t.Fatalf("Resolve() = %+v, %v; want a plain (retryable) error", got, err)
				}
			default:
				if err != nil {
					t.Fatalf("Resolve() error = %v", err)
				}
				// Compared field by field: which object carries the record is the controller's concern.
				if got.Ref != tt.want.Ref || got.PodOwner != tt.want.PodOwner || got.Component != tt.want.Component {
					t.Errorf("Resolve() = {Ref:%+v PodOwner:%+v Component:%q}, want {Ref:%+v PodOwner:%+v Component:%q}",
						got.Ref, got.PodOwner, got.Component, tt.want.Ref, tt.want.PodOwner, tt.want.Component)
				}
			}
		})
	}
}

func TestStoreGet(t *testing.T) {
	isvc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": KServeGroup + "/v1beta1", "kind": "InferenceService",
		"metadata": map[string]any{"name": "granite", "namespace": storeNS, "uid": "isvc-uid", "resourceVersion": "9"},
		"spec":     map[string]any{"predictor": map[string]any{"minReplicas": int64(1)}},
	}}
	s := newTestStore(t, map[Kind]bool{KindInferenceService: true},
		deployment("plain", "plain-uid", nil, nil), isvc)

	d, err := s.Get(deploymentRef("plain", "plain-uid"))
	if err != nil {
		t.Fatalf("Get(Deployment) error = %v", err)
	}
	if n, ok := d.Int("/spec/replicas"); !ok || n != 1 {
		t.Errorf("Deployment /spec/replicas = %d (present %v), want 1", n, ok)
	}
	if d.APIVersion != "apps/v1" || d.Meta.GetResourceVersion() != "5" {
		t.Errorf("Deployment view: apiVersion %q resourceVersion %q", d.APIVersion, d.Meta.GetResourceVersion())
	}

	i, err := s.Get(Ref{Kind: KindInferenceService, Namespace: storeNS, Name: "granite", UID: "isvc-uid"})
	if err != nil {
		t.Fatalf("Get(InferenceService) error = %v", err)
	}
	if n, ok := i.Int("/spec/predictor/minReplicas"); !ok || n != 1 {
		t.Errorf("InferenceService minReplicas = %d (present %v), want 1", n, ok)
	}

	for name, ref := range map[string]Ref{
		"replaced by a namesake": deploymentRef("plain", "old-uid"),
		"deleted":                deploymentRef("gone", ""),
		"KServe kind not served": {Kind: KindLLMInferenceService, Namespace: storeNS, Name: "llama"},
	} {
		if _, err := s.Get(ref); !apierrors.IsNotFound(err) {
			t.Errorf("Get(%s) [%s] error = %v, want NotFound", ref, name, err)
		}
	}
}

func TestStorePodOwner(t *testing.T) {
	d := deployment("plain", "plain-uid", nil, nil)
	d.Spec.Replicas = nil
	d.Status.Replicas = 2
	s := newTestStore(t, nil, d)

	st, err := s.PodOwner(deploymentRef("plain", "plain-uid"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Replicas != 1 || st.StatusReplicas != 2 {
		t.Errorf("PodOwner() replicas %d/%d, want spec 1 (defaulted), status 2", st.Replicas, st.StatusReplicas)
	}
	if !st.Selector.Matches(labels.Set{"app": "plain"}) || st.Selector.Matches(labels.Set{"app": "other"}) {
		t.Errorf("PodOwner() selector = %s, want app=plain", st.Selector)
	}
	if _, err := s.PodOwner(deploymentRef("plain", "old-uid")); !apierrors.IsNotFound(err) {
		t.Errorf("PodOwner() of a replaced Deployment error = %v, want NotFound", err)
	}
}

// newTestStore builds a Store whose listers hold objects; served says which KServe kinds the cluster serves.
func newTestStore(t *testing.T, served map[Kind]bool, objects ...any) *Store {
	t.Helper()
	newIndexer := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	rs, deps, sss, hpas := newIndexer(), newIndexer(), newIndexer(), newIndexer()
	kserve := map[Kind]cache.Indexer{KindInferenceService: newIndexer(), KindLLMInferenceService: newIndexer()}
	for _, o := range objects {
		var idx cache.Indexer
		switch o := o.(type) {
		case *appsv1.ReplicaSet:
			idx = rs
		case *appsv1.Deployment:
			idx = deps
		case *appsv1.StatefulSet:
			idx = sss
		case *autoscalingv2.HorizontalPodAutoscaler:
			idx = hpas
		case *unstructured.Unstructured:
			idx = kserve[Kind(o.GetKind())]
		default:
			t.Fatalf("unexpected %T", o)
		}
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return &Store{
		ReplicaSets:  appslisters.NewReplicaSetLister(rs),
		Deployments:  appslisters.NewDeploymentLister(deps),
		StatefulSets: appslisters.NewStatefulSetLister(sss),
		HPAs:         autoscalinglisters.NewHorizontalPodAutoscalerLister(hpas),
		KServe: func(kind Kind) (cache.GenericLister, schema.GroupVersionResource, bool) {
			if !served[kind] {
				return nil, schema.GroupVersionResource{}, false
			}
			gvr := schema.GroupVersionResource{Group: KServeGroup, Version: "v1beta1", Resource: "inferenceservices"}
			if kind == KindLLMInferenceService {
				gvr = schema.GroupVersionResource{Group: KServeGroup, Version: "v1alpha1", Resource: "llminferenceservices"}
			}
			return cache.NewGenericLister(kserve[kind], gvr.GroupResource()), gvr, true
		},
	}
}

func ctrlRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

func pod(name string, owners ...metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: storeNS, OwnerReferences: owners}}
}

func replicaSet(name string, uid types.UID, owner *appsv1.Deployment) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: storeNS, UID: uid}}
	if owner != nil {
		rs.OwnerReferences = []metav1.OwnerReference{ctrlRef("apps/v1", "Deployment", owner.Name, owner.UID)}
	}
	return rs
}

func deployment(name string, uid types.UID, owner *metav1.OwnerReference, templateLabels map[string]string) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: storeNS, UID: uid, ResourceVersion: "5"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: templateLabels}},
		},
	}
	if owner != nil {
		d.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return d
}

func statefulSet(name string, uid types.UID, owner *metav1.OwnerReference) *appsv1.StatefulSet {
	ss := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: storeNS, UID: uid}}
	if owner != nil {
		ss.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return ss
}

func hpa(name, apiVersion, kind, target string) *autoscalingv2.HorizontalPodAutoscaler {
	uid := types.UID(name + "-uid")
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: storeNS, UID: uid},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: apiVersion, Kind: kind, Name: target},
			MaxReplicas:    3,
		},
	}
}

func deploymentRef(name string, uid types.UID) Ref {
	return Ref{Kind: KindDeployment, Namespace: storeNS, Name: name, UID: uid}
}
