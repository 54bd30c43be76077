package workload

import (
	"errors"
	"strings"
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
		scalable        ScaleResource
		pod             *corev1.Pod
		want            *Target
		wantUnsupported bool
		wantNotServed   bool
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
			served: map[Kind]bool{KindLLMInferenceService: true},
			pod:    pod("granite-predictor-7f-x", ctrlRef("apps/v1", "ReplicaSet", "granite-predictor-7f", "rs-uid")),
			// Not served may mean not synced yet: neither surged directly nor reported unsupported.
			wantNotServed: true,
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
			name: "Deployment owned by a kind with a /scale subresource: the owner is scaled",
			objects: func() []any {
				owner := ctrlRef("example.io/v1", "Notebook", "nb", "nb-uid")
				d := deployment("nb", "nb-dep-uid", &owner, nil)
				return []any{replicaSet("nb-1", "rs-uid", d), d, hpa("nb-hpa", "apps/v1", "Deployment", "nb")}
			}(),
			scalable: scalableKinds(map[string]string{"example.io/v1/Notebook": "notebooks"}),
			pod:      pod("nb-1-x", ctrlRef("apps/v1", "ReplicaSet", "nb-1", "rs-uid")),
			want: &Target{
				Ref:      Ref{Kind: Kind("Notebook"), Namespace: storeNS, Name: "nb", UID: "nb-uid", APIVersion: "example.io/v1", Resource: "notebooks"},
				PodOwner: deploymentRef("nb", "nb-dep-uid"),
			},
		},
		{
			name: "Deployment owned by a kind without a /scale subresource",
			objects: func() []any {
				owner := ctrlRef("example.io/v1", "ModelServer", "m", "m-uid")
				d := deployment("m", "m-dep-uid", &owner, nil)
				return []any{replicaSet("m-1", "rs-uid", d), d}
			}(),
			scalable:        scalableKinds(map[string]string{"example.io/v1/Notebook": "notebooks"}),
			pod:             pod("m-1-x", ctrlRef("apps/v1", "ReplicaSet", "m-1", "rs-uid")),
			wantUnsupported: true,
		},
		{
			name: "discovery of the owner's /scale fails: retry, not unsupported",
			objects: func() []any {
				owner := ctrlRef("example.io/v1", "Notebook", "nb", "nb-uid")
				d := deployment("nb", "nb-dep-uid", &owner, nil)
				return []any{replicaSet("nb-1", "rs-uid", d), d}
			}(),
			scalable: func(string, string) (string, bool, error) { return "", false, errors.New("discovery unavailable") },
			pod:      pod("nb-1-x", ctrlRef("apps/v1", "ReplicaSet", "nb-1", "rs-uid")),
			wantErr:  true,
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
			name: "StatefulSet of a LeaderWorkerSet the store cannot read: kept, not reported",
			objects: func() []any {
				lws := ctrlRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "llama-kserve-mn", "lws-uid")
				return []any{statefulSet("llama-kserve-mn", "ss-uid", &lws)}
			}(),
			pod:           pod("llama-kserve-mn-0", ctrlRef("apps/v1", "StatefulSet", "llama-kserve-mn", "ss-uid")),
			wantNotServed: true,
		},
		{
			name: "StatefulSet controlled by another kind",
			objects: func() []any {
				owner := ctrlRef("example.io/v1", "Trainer", "t", "t-uid")
				return []any{statefulSet("t", "ss-uid", &owner)}
			}(),
			pod:             pod("t-0", ctrlRef("apps/v1", "StatefulSet", "t", "ss-uid")),
			wantUnsupported: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStore(t, tt.served, tt.objects...)
			s.Scalable = tt.scalable
			got, err := s.Resolve(tt.pod)
			checkResolved(t, "Resolve()", got, err, tt.want, tt.wantUnsupported, tt.wantNotServed, tt.wantErr)
		})
	}
}

// ResolveOwner is what the lifecycle calls on every sync to check that a Surge's target still controls
// its pod owner; it must answer like Resolve does for the owner's pods.
func TestResolveOwner(t *testing.T) {
	isvcRef := ctrlRef(KServeGroup+"/v1beta1", "InferenceService", "granite", "isvc-uid")
	llmRef := ctrlRef(KServeGroup+"/v1alpha2", "LLMInferenceService", "llama", "llm-uid")
	lwsRef := ctrlRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "llama-kserve-mn", "lws-uid")
	nbRef := ctrlRef("example.io/v1", "Notebook", "nb", "nb-uid")
	ssRef := Ref{Kind: KindStatefulSet, Namespace: storeNS, Name: "db", UID: "db-uid"}
	kserve := map[Kind]bool{KindInferenceService: true, KindLLMInferenceService: true}

	tests := []struct {
		name            string
		objects         []any
		served          map[Kind]bool
		scalable        ScaleResource
		owner           Ref
		want            *Target
		wantUnsupported bool
		wantNotServed   bool
		wantErr         bool
	}{
		{
			name:    "Deployment owns its own count",
			objects: []any{deployment("plain", "plain-uid", nil, nil)},
			owner:   deploymentRef("plain", "plain-uid"),
			want:    &Target{Ref: deploymentRef("plain", "plain-uid"), PodOwner: deploymentRef("plain", "plain-uid")},
		},
		{
			name:    "Deployment scaled by an HPA",
			objects: []any{deployment("plain", "plain-uid", nil, nil), hpa("plain-hpa", "apps/v1", "Deployment", "plain")},
			owner:   deploymentRef("plain", "plain-uid"),
			want:    &Target{Ref: Ref{Kind: KindHPA, Namespace: storeNS, Name: "plain-hpa", UID: "plain-hpa-uid"}, PodOwner: deploymentRef("plain", "plain-uid")},
		},
		{
			name:    "an HPA of a StatefulSet namesake does not scale the Deployment",
			objects: []any{deployment("plain", "plain-uid", nil, nil), hpa("ss-hpa", "apps/v1", "StatefulSet", "plain")},
			owner:   deploymentRef("plain", "plain-uid"),
			want:    &Target{Ref: deploymentRef("plain", "plain-uid"), PodOwner: deploymentRef("plain", "plain-uid")},
		},
		{
			name:    "Deployment of an InferenceService, KServe served",
			objects: []any{deployment("granite-predictor", "pred-uid", &isvcRef, nil), hpa("granite-predictor", "apps/v1", "Deployment", "granite-predictor")},
			served:  kserve,
			owner:   deploymentRef("granite-predictor", "pred-uid"),
			want:    &Target{Ref: Ref{Kind: KindInferenceService, Namespace: storeNS, Name: "granite", UID: "isvc-uid"}, PodOwner: deploymentRef("granite-predictor", "pred-uid")},
		},
		{
			name:          "Deployment of an InferenceService, KServe not served or not synced",
			objects:       []any{deployment("granite-predictor", "pred-uid", &isvcRef, nil)},
			served:        map[Kind]bool{KindLLMInferenceService: true},
			owner:         deploymentRef("granite-predictor", "pred-uid"),
			wantNotServed: true,
		},
		{
			name:    "LLMInferenceService main workload",
			objects: []any{deployment("llama-kserve", "main-uid", &llmRef, map[string]string{"app.kubernetes.io/component": "llminferenceservice-workload"})},
			served:  kserve,
			owner:   deploymentRef("llama-kserve", "main-uid"),
			want: &Target{
				Ref:       Ref{Kind: KindLLMInferenceService, Namespace: storeNS, Name: "llama", UID: "llm-uid"},
				PodOwner:  deploymentRef("llama-kserve", "main-uid"),
				Component: ComponentMain,
			},
		},
		{
			name:    "LLMInferenceService prefill workload, told by its pod template label",
			objects: []any{deployment("llama-kserve-prefill", "prefill-uid", &llmRef, map[string]string{"app.kubernetes.io/component": "llminferenceservice-workload-prefill"})},
			served:  kserve,
			owner:   deploymentRef("llama-kserve-prefill", "prefill-uid"),
			want: &Target{
				Ref:       Ref{Kind: KindLLMInferenceService, Namespace: storeNS, Name: "llama", UID: "llm-uid"},
				PodOwner:  deploymentRef("llama-kserve-prefill", "prefill-uid"),
				Component: ComponentPrefill,
			},
		},
		{
			name:          "LLMInferenceService not served",
			objects:       []any{deployment("llama-kserve", "main-uid", &llmRef, nil)},
			served:        map[Kind]bool{KindInferenceService: true},
			owner:         deploymentRef("llama-kserve", "main-uid"),
			wantNotServed: true,
		},
		{
			name:     "Deployment of an owner with /scale",
			objects:  []any{deployment("nb", "nb-dep-uid", &nbRef, nil)},
			scalable: scalableKinds(map[string]string{"example.io/v1/Notebook": "notebooks"}),
			owner:    deploymentRef("nb", "nb-dep-uid"),
			want: &Target{
				Ref:      Ref{Kind: Kind("Notebook"), Namespace: storeNS, Name: "nb", UID: "nb-uid", APIVersion: "example.io/v1", Resource: "notebooks"},
				PodOwner: deploymentRef("nb", "nb-dep-uid"),
			},
		},
		{
			name:            "Deployment of an owner without /scale discovery",
			objects:         []any{deployment("nb", "nb-dep-uid", &nbRef, nil)},
			owner:           deploymentRef("nb", "nb-dep-uid"),
			wantUnsupported: true,
		},
		{
			name:    "StatefulSet owns its own count",
			objects: []any{statefulSet("db", "db-uid", nil)},
			owner:   ssRef,
			want:    &Target{Ref: ssRef, PodOwner: ssRef},
		},
		{
			name:    "StatefulSet scaled by an HPA",
			objects: []any{statefulSet("db", "db-uid", nil), hpa("db-hpa", "apps/v1", "StatefulSet", "db")},
			owner:   ssRef,
			want:    &Target{Ref: Ref{Kind: KindHPA, Namespace: storeNS, Name: "db-hpa", UID: "db-hpa-uid"}, PodOwner: ssRef},
		},
		{
			name:            "StatefulSet controlled by a LeaderWorkerSet",
			objects:         []any{statefulSet("llama-kserve-mn", "ss-uid", &lwsRef), hpa("mn-hpa", "apps/v1", "StatefulSet", "llama-kserve-mn")},
			owner:           Ref{Kind: KindStatefulSet, Namespace: storeNS, Name: "llama-kserve-mn", UID: "ss-uid"},
			wantUnsupported: true,
		},
		{
			name:    "Deployment replaced by a namesake",
			objects: []any{deployment("plain", "new-uid", nil, nil)},
			owner:   deploymentRef("plain", "plain-uid"),
			wantErr: true,
		},
		{
			name:    "StatefulSet replaced by a namesake",
			objects: []any{statefulSet("db", "new-uid", nil)},
			owner:   ssRef,
			wantErr: true,
		},
		{
			name:    "Deployment not in the cache",
			owner:   deploymentRef("plain", "plain-uid"),
			wantErr: true,
		},
		{
			name:    "a kind that owns no pods",
			objects: []any{hpa("plain-hpa", "apps/v1", "Deployment", "plain")},
			owner:   Ref{Kind: KindHPA, Namespace: storeNS, Name: "plain-hpa", UID: "plain-hpa-uid"},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStore(t, tt.served, tt.objects...)
			s.Scalable = tt.scalable
			got, err := s.ResolveOwner(tt.owner)
			checkResolved(t, "ResolveOwner()", got, err, tt.want, tt.wantUnsupported, tt.wantNotServed, tt.wantErr)
		})
	}
}

// checkResolved compares Resolve's or ResolveOwner's answer with what is wanted: a target, an
// *UnsupportedError (reported, never retried), a *NotServedError (kept, retried) or a plain error.
func checkResolved(t *testing.T, call string, got *Target, err error, want *Target, wantUnsupported, wantNotServed, wantErr bool) {
	t.Helper()
	var unsup *UnsupportedError
	var notServed *NotServedError
	isUnsup, isNotServed := errors.As(err, &unsup), errors.As(err, &notServed)
	switch {
	case wantUnsupported:
		if !isUnsup {
			t.Fatalf("%s = %+v, %v; want an *UnsupportedError", call, got, err)
		}
		if unsup.Detail == "" {
			t.Error("UnsupportedError has no detail for the Event")
		}
	case wantNotServed:
		if !isNotServed || isUnsup {
			t.Fatalf("%s = %+v, %v; want a *NotServedError", call, got, err)
		}
	case wantErr:
		if err == nil || isUnsup || isNotServed {
			t.Fatalf("%s = %+v, %v; want a plain (retryable) error", call, got, err)
		}
	default:
		if err != nil {
			t.Fatalf("%s error = %v", call, err)
		}
		if *got != *want {
			t.Errorf("%s = %+v, want %+v", call, *got, *want)
		}
	}
}

// scalableKinds is a ScaleResource answering from a map of "apiVersion/Kind" to resource.
func scalableKinds(m map[string]string) ScaleResource {
	return func(apiVersion, kind string) (string, bool, error) {
		r, ok := m[apiVersion+"/"+kind]
		return r, ok, nil
	}
}

func TestStoreGet(t *testing.T) {
	isvc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": KServeGroup + "/v1beta1", "kind": "InferenceService",
		"metadata": map[string]any{"name": "granite", "namespace": storeNS, "uid": "isvc-uid", "resourceVersion": "9"},
		"spec":     map[string]any{"predictor": map[string]any{"minReplicas": int64(1)}},
	}}
	s := newTestStore(t, map[Kind]bool{KindInferenceService: true},
		deployment("plain", "plain-uid", nil, nil), isvc, statefulSet("db", "db-uid", nil), hpa("plain-hpa", "apps/v1", "Deployment", "plain"))

	ss, err := s.Get(Ref{Kind: KindStatefulSet, Namespace: storeNS, Name: "db", UID: "db-uid"})
	if err != nil || ss.APIVersion != "apps/v1" || ss.Ref.Kind != KindStatefulSet {
		t.Errorf("Get(StatefulSet) = %+v, %v", ss, err)
	}
	h, err := s.Get(Ref{Kind: KindHPA, Namespace: storeNS, Name: "plain-hpa", UID: "plain-hpa-uid"})
	if err != nil {
		t.Fatalf("Get(HPA) error = %v", err)
	}
	if n, ok := h.Int("/spec/maxReplicas"); !ok || n != 3 || h.APIVersion != "autoscaling/v2" {
		t.Errorf("HPA view: maxReplicas %d (present %v), apiVersion %q; want 3, autoscaling/v2", n, ok, h.APIVersion)
	}

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
		"InferenceService replaced by a namesake": {Kind: KindInferenceService, Namespace: storeNS, Name: "granite", UID: "old-isvc-uid"},
		"InferenceService deleted":                {Kind: KindInferenceService, Namespace: storeNS, Name: "gone"},
	} {
		if _, err := s.Get(ref); !apierrors.IsNotFound(err) {
			t.Errorf("Get(%s) [%s] error = %v, want NotFound", ref, name, err)
		}
	}

	// A KServe kind whose lister is not available may well have the object: never NotFound, which
	// would make the lifecycle drop the Surge as if its target were deleted.
	_, err = s.Get(Ref{Kind: KindLLMInferenceService, Namespace: storeNS, Name: "llama", UID: "llm-uid"})
	var notServed *NotServedError
	if !errors.As(err, &notServed) || apierrors.IsNotFound(err) {
		t.Errorf("Get(LLMInferenceService not served) error = %v, want a *NotServedError", err)
	} else if notServed.Kind != KindLLMInferenceService {
		t.Errorf("NotServedError.Kind = %q, want %q", notServed.Kind, KindLLMInferenceService)
	}

	if _, err := s.Get(Ref{Kind: Kind("ReplicaSet"), Namespace: storeNS, Name: "plain-5d9"}); err == nil || apierrors.IsNotFound(err) {
		t.Errorf("Get(unknown kind) error = %v, want a plain error", err)
	}
}

func TestStorePodOwner(t *testing.T) {
	d := deployment("plain", "plain-uid", nil, nil)
	d.Spec.Replicas = nil
	d.Annotations = map[string]string{IgnoreAnnotation: "true"}
	d.Generation, d.Status.ObservedGeneration = 4, 3
	d.Status.Replicas, d.Status.UpdatedReplicas = 2, 1
	ss := statefulSet("db", "db-uid", nil)
	ss.Spec.Replicas = ptr.To[int32](3)
	ss.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	ss.Generation, ss.Status.ObservedGeneration = 2, 2
	ss.Status.Replicas, ss.Status.UpdatedReplicas = 3, 3
	s := newTestStore(t, nil, d, ss)

	st, err := s.PodOwner(deploymentRef("plain", "plain-uid"))
	if err != nil {
		t.Fatal(err)
	}
	want := PodOwnerState{Replicas: 1, StatusReplicas: 2, UpdatedReplicas: 1, Generation: 4, ObservedGeneration: 3}
	if st.Replicas != want.Replicas || st.StatusReplicas != want.StatusReplicas || st.UpdatedReplicas != want.UpdatedReplicas ||
		st.Generation != want.Generation || st.ObservedGeneration != want.ObservedGeneration {
		t.Errorf("PodOwner(Deployment) = %+v, want spec 1 (defaulted), status 2, updated 1, generation 4, observed 3", *st)
	}
	if !IgnoredByAnnotation(st.Annotations) {
		t.Errorf("PodOwner(Deployment) annotations = %v, want the opt-out carried", st.Annotations)
	}
	if !st.Selector.Matches(labels.Set{"app": "plain"}) || st.Selector.Matches(labels.Set{"app": "other"}) {
		t.Errorf("PodOwner() selector = %s, want app=plain", st.Selector)
	}

	st, err = s.PodOwner(Ref{Kind: KindStatefulSet, Namespace: storeNS, Name: "db", UID: "db-uid"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Replicas != 3 || st.StatusReplicas != 3 || st.UpdatedReplicas != 3 || st.Generation != 2 || st.ObservedGeneration != 2 {
		t.Errorf("PodOwner(StatefulSet) = %+v, want 3/3/3 at generation 2 observed", *st)
	}
	if !st.Selector.Matches(labels.Set{"app": "db"}) {
		t.Errorf("PodOwner(StatefulSet) selector = %s, want app=db", st.Selector)
	}

	for name, ref := range map[string]Ref{
		"replaced Deployment":  deploymentRef("plain", "old-uid"),
		"deleted Deployment":   deploymentRef("gone", "gone-uid"),
		"replaced StatefulSet": {Kind: KindStatefulSet, Namespace: storeNS, Name: "db", UID: "old-uid"},
	} {
		if _, err := s.PodOwner(ref); !apierrors.IsNotFound(err) {
			t.Errorf("PodOwner(%s) [%s] error = %v, want NotFound", ref, name, err)
		}
	}
	if _, err := s.PodOwner(Ref{Kind: KindHPA, Namespace: storeNS, Name: "h"}); err == nil || apierrors.IsNotFound(err) {
		t.Errorf("PodOwner(HPA) error = %v, want a plain error: an HPA owns no pods", err)
	}
}

// CaughtUp gates the removal of a two-step restore's explicit count: removing it before the pod owner
// runs exactly that count would keep the surged replicas for good.
func TestPodOwnerStateCaughtUp(t *testing.T) {
	caughtUp := PodOwnerState{Replicas: 1, StatusReplicas: 1, UpdatedReplicas: 1, Generation: 5, ObservedGeneration: 5}
	tests := []struct {
		name string
		mod  func(*PodOwnerState)
		want int32
		ok   bool
	}{
		{name: "runs exactly the wanted count", want: 1, ok: true},
		{name: "status observed a later generation than the spec read", mod: func(s *PodOwnerState) { s.ObservedGeneration = 6 }, want: 1, ok: true},
		{name: "spec not scaled down yet", mod: func(s *PodOwnerState) { s.Replicas = 2 }, want: 1},
		{name: "controller has not seen the new spec", mod: func(s *PodOwnerState) { s.ObservedGeneration = 4 }, want: 1},
		{name: "surplus pod still exists", mod: func(s *PodOwnerState) { s.StatusReplicas = 2 }, want: 1},
		{name: "pod of the current revision missing", mod: func(s *PodOwnerState) { s.UpdatedReplicas = 0 }, want: 1},
		{name: "another count wanted", want: 2},
		{name: "three replicas, caught up", mod: func(s *PodOwnerState) { s.Replicas, s.StatusReplicas, s.UpdatedReplicas = 3, 3, 3 }, want: 3, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := caughtUp
			if tt.mod != nil {
				tt.mod(&st)
			}
			if got := st.CaughtUp(tt.want); got != tt.ok {
				t.Errorf("%+v.CaughtUp(%d) = %v, want %v", st, tt.want, got, tt.ok)
			}
		})
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
		ReplicaSets:  MetadataIndex{Indexer: rs, Resource: appsv1.Resource("replicasets")},
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

// A surge is made only on a workload at rest: one that runs what it asks for.
func TestPodOwnerStateUnsettled(t *testing.T) {
	atRest := PodOwnerState{Replicas: 1, StatusReplicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, Generation: 2, ObservedGeneration: 2}
	tests := []struct {
		name string
		mod  func(*PodOwnerState)
		want string
	}{
		{name: "at rest"},
		{name: "quota holds the count at one pod", mod: func(s *PodOwnerState) { s.Replicas = 2000000000 }, want: "2000000000 replicas wanted, 1 running"},
		{name: "surplus pod still running", mod: func(s *PodOwnerState) { s.StatusReplicas = 2 }, want: "1 replicas wanted, 2 running"},
		{name: "spec not observed", mod: func(s *PodOwnerState) { s.Generation = 3 }, want: "generation 3, observed 2"},
		{name: "rollout", mod: func(s *PodOwnerState) { s.UpdatedReplicas = 0 }, want: "rollout is in progress"},
		{name: "pod not Ready", mod: func(s *PodOwnerState) { s.ReadyReplicas = 0 }, want: "1 replicas wanted, 0 Ready"},
		// An OnDelete StatefulSet keeps its pods of an older revision until someone deletes them.
		{name: "OnDelete StatefulSet with pods of an older revision", mod: func(s *PodOwnerState) { s.UpdatedReplicas, s.UpdatesOnDelete = 0, true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := atRest
			if tt.mod != nil {
				tt.mod(&st)
			}
			got := st.Unsettled()
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("Unsettled() = %q, want %q", got, tt.want)
			}
		})
	}
}

// An HPA that is scaling its target is not at rest either; nor is the pod owner behind it.
func TestOwnerUnsettled(t *testing.T) {
	hpa := func(current, desired int64) *Object {
		return &Object{Ref: Ref{Kind: KindHPA, Name: "h"}, Content: map[string]any{"status": map[string]any{"currentReplicas": current, "desiredReplicas": desired}}}
	}
	owner := Ref{Kind: KindDeployment, Name: "model"}
	atRest := &PodOwnerState{Replicas: 1, StatusReplicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1}
	tests := []struct {
		name string
		o    Owner
		want string
	}{
		{name: "HPA at rest", o: Owner{Target: &Target{Ref: Ref{Kind: KindHPA, Name: "h"}, PodOwner: owner}, Object: hpa(1, 1), PodOwner: atRest}},
		{name: "HPA scaling", o: Owner{Target: &Target{Ref: Ref{Kind: KindHPA, Name: "h"}, PodOwner: owner}, Object: hpa(1, 3), PodOwner: atRest},
			want: "HorizontalPodAutoscaler h is scaling: 3 replicas desired, 1 current"},
		{name: "HPA not looked at yet", o: Owner{Target: &Target{Ref: Ref{Kind: KindHPA, Name: "h"}, PodOwner: owner}, Object: &Object{Content: map[string]any{}}, PodOwner: atRest}},
		{name: "KServe object's Deployment not at rest", o: Owner{Target: &Target{Ref: Ref{Kind: KindInferenceService, Name: "m"}, PodOwner: owner},
			PodOwner: &PodOwnerState{Replicas: 2, StatusReplicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1}}, want: "Deployment model: 2 replicas wanted, 1 running"},
		{name: "owner not read", o: Owner{Err: errors.New("cache miss")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.o.Unsettled()
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("Unsettled() = %q, want %q", got, tt.want)
			}
		})
	}
}

// The Deployment controller copies a ReplicaSet's FailedCreate onto the Deployment: the pod owner
// carries its message.
func TestStorePodOwnerReplicaFailure(t *testing.T) {
	d := deployment("plain", "plain-uid", nil, nil)
	d.Status.Conditions = []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
		{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: ReasonFailedCreate, Message: `pods "plain-5d9-x" is forbidden: exceeded quota: pods`},
	}
	s := newTestStore(t, nil, d)
	st, err := s.PodOwner(deploymentRef("plain", "plain-uid"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.ReplicaFailure, "exceeded quota") {
		t.Errorf("ReplicaFailure = %q, want the condition's message", st.ReplicaFailure)
	}
	d.Status.Conditions[1].Status = corev1.ConditionFalse
	s = newTestStore(t, nil, d)
	if st, _ = s.PodOwner(deploymentRef("plain", "plain-uid")); st.ReplicaFailure != "" {
		t.Errorf("ReplicaFailure = %q from a false condition, want none", st.ReplicaFailure)
	}
}
