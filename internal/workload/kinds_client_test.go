package workload

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const testFieldManager = "drain-guardian"

var (
	notebookGVR = schema.GroupVersionResource{Group: "example.io", Version: "v1", Resource: "notebooks"}
	isvcGVR     = schema.GroupVersionResource{Group: KServeGroup, Version: "v1beta1", Resource: "inferenceservices"}
	llmGVR      = schema.GroupVersionResource{Group: KServeGroup, Version: "v1alpha1", Resource: "llminferenceservices"}
	notebookRef = Ref{Kind: Kind("Notebook"), Namespace: storeNS, Name: "nb", UID: "nb-uid", APIVersion: "example.io/v1", Resource: "notebooks"}
)

// scaleObject is the autoscaling/v1 Scale of the notebook, as the API server serves its /scale.
func scaleObject(uid types.UID, replicas int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling/v1", "kind": "Scale",
		"metadata": map[string]any{"name": "nb", "namespace": storeNS, "uid": string(uid), "resourceVersion": "17"},
		"spec":     map[string]any{"replicas": replicas},
	}}
}

func newDynamic(objects ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		notebookGVR: "NotebookList", isvcGVR: "InferenceServiceList", llmGVR: "LLMInferenceServiceList",
	}, objects...)
}

// An owner of a kind the guardian has no informer for is read live through its /scale subresource;
// the Scale's resourceVersion guards the patch, and a namesake of the owner is not the owner.
func TestStoreGetThroughScale(t *testing.T) {
	for _, tc := range []struct {
		name         string
		scaleUID     types.UID
		wantNotFound bool
	}{
		{name: "same owner", scaleUID: "nb-uid"},
		{name: "Scale without a UID: the ref's is kept", scaleUID: ""},
		{name: "owner replaced by a namesake", scaleUID: "other-uid", wantNotFound: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dyn := newDynamic()
			var sub string
			dyn.PrependReactor("get", "notebooks", func(a k8stesting.Action) (bool, runtime.Object, error) {
				sub = a.GetSubresource()
				return true, scaleObject(tc.scaleUID, 1), nil
			})
			s := newTestStore(t, nil)
			s.Dynamic = dyn
			obj, err := s.Get(notebookRef)
			if sub != "scale" {
				t.Errorf("read subresource %q, want scale", sub)
			}
			if tc.wantNotFound {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("Get() = %v, %v; want NotFound", obj, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if obj.Ref != notebookRef {
				t.Errorf("Get().Ref = %+v, want %+v", obj.Ref, notebookRef)
			}
			if n, ok := obj.Int("/spec/replicas"); !ok || n != 1 {
				t.Errorf("/spec/replicas = %d (present %v), want 1", n, ok)
			}
			if rv := obj.Meta.GetResourceVersion(); rv != "17" {
				t.Errorf("resourceVersion = %q, want the Scale's 17", rv)
			}
			fields, err := PlanSurge(obj, &Target{Ref: notebookRef}, 1, 1, false)
			if err != nil {
				t.Fatal(err)
			}
			assertTestsResourceVersion(t, SurgePatch(obj, fields), "17")
		})
	}
}

func TestStoreGetThroughScaleNotFound(t *testing.T) {
	s := newTestStore(t, nil)
	s.Dynamic = newDynamic()
	if _, err := s.Get(notebookRef); !apierrors.IsNotFound(err) {
		t.Errorf("Get() of a deleted owner error = %v, want NotFound", err)
	}
}

// Each kind is written through its own client with a JSON patch and the guardian's field manager.
func TestStorePatch(t *testing.T) {
	ctx := context.Background()
	patch := func(path string) []byte { return []byte(`[{"op":"add","path":"` + path + `","value":2}]`) }

	t.Run("typed kinds", func(t *testing.T) {
		d := deployment("plain", "plain-uid", nil, nil)
		ss := statefulSet("db", "db-uid", nil)
		h := hpa("plain-hpa", "apps/v1", "Deployment", "plain")
		kube := kubefake.NewClientset(d, ss, h)
		s := newTestStore(t, nil)
		s.Kube, s.FieldManager = kube, testFieldManager

		for _, tc := range []struct {
			ref      Ref
			resource string
			path     string
		}{
			{ref: deploymentRef("plain", "plain-uid"), resource: "deployments", path: "/spec/replicas"},
			{ref: Ref{Kind: KindStatefulSet, Namespace: storeNS, Name: "db"}, resource: "statefulsets", path: "/spec/replicas"},
			{ref: Ref{Kind: KindHPA, Namespace: storeNS, Name: "plain-hpa"}, resource: "horizontalpodautoscalers", path: "/spec/minReplicas"},
		} {
			kube.ClearActions()
			if err := s.Patch(ctx, tc.ref, patch(tc.path)); err != nil {
				t.Fatalf("Patch(%s) error = %v", tc.ref, err)
			}
			checkPatchAction(t, kube.Actions(), tc.resource, "")
		}
		got, _ := kube.AppsV1().Deployments(storeNS).Get(ctx, "plain", metav1.GetOptions{})
		if *got.Spec.Replicas != 2 {
			t.Errorf("Deployment replicas after the patch = %d, want 2", *got.Spec.Replicas)
		}
		gotSS, _ := kube.AppsV1().StatefulSets(storeNS).Get(ctx, "db", metav1.GetOptions{})
		if gotSS.Spec.Replicas == nil || *gotSS.Spec.Replicas != 2 {
			t.Errorf("StatefulSet replicas after the patch = %v, want 2", gotSS.Spec.Replicas)
		}
		gotHPA, _ := kube.AutoscalingV2().HorizontalPodAutoscalers(storeNS).Get(ctx, "plain-hpa", metav1.GetOptions{})
		if gotHPA.Spec.MinReplicas == nil || *gotHPA.Spec.MinReplicas != 2 {
			t.Errorf("HPA minReplicas after the patch = %v, want 2", gotHPA.Spec.MinReplicas)
		}
	})

	t.Run("KServe kind through the dynamic client", func(t *testing.T) {
		isvc := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": KServeGroup + "/v1beta1", "kind": "InferenceService",
			"metadata": map[string]any{"name": "granite", "namespace": storeNS, "uid": "isvc-uid"},
			"spec":     map[string]any{"predictor": map[string]any{"minReplicas": int64(1)}},
		}}
		dyn := newDynamic(isvc)
		s := newTestStore(t, map[Kind]bool{KindInferenceService: true})
		s.Dynamic, s.FieldManager = dyn, testFieldManager
		ref := Ref{Kind: KindInferenceService, Namespace: storeNS, Name: "granite", UID: "isvc-uid"}
		if err := s.Patch(ctx, ref, patch("/spec/predictor/minReplicas")); err != nil {
			t.Fatal(err)
		}
		checkPatchAction(t, dyn.Actions(), "inferenceservices", "")
		got, err := dyn.Resource(isvcGVR).Namespace(storeNS).Get(ctx, "granite", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n, _, _ := unstructured.NestedInt64(got.Object, "spec", "predictor", "minReplicas"); n != 2 {
			t.Errorf("minReplicas after the patch = %d, want 2", n)
		}
	})

	t.Run("KServe kind not served", func(t *testing.T) {
		dyn := newDynamic()
		s := newTestStore(t, map[Kind]bool{KindInferenceService: true})
		s.Dynamic = dyn
		err := s.Patch(ctx, Ref{Kind: KindLLMInferenceService, Namespace: storeNS, Name: "llama"}, patch("/spec/replicas"))
		var notServed *NotServedError
		if !errors.As(err, &notServed) {
			t.Errorf("Patch() error = %v, want a *NotServedError", err)
		}
		if len(dyn.Actions()) != 0 {
			t.Errorf("wrote %v to a kind that is not served", dyn.Actions())
		}
	})

	t.Run("owner through /scale", func(t *testing.T) {
		dyn := newDynamic()
		dyn.PrependReactor("patch", "notebooks", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, scaleObject("nb-uid", 2), nil
		})
		s := newTestStore(t, nil)
		s.Dynamic, s.FieldManager = dyn, testFieldManager
		if err := s.Patch(ctx, notebookRef, patch("/spec/replicas")); err != nil {
			t.Fatal(err)
		}
		checkPatchAction(t, dyn.Actions(), "notebooks", "scale")
	})

	t.Run("unknown kind", func(t *testing.T) {
		s := newTestStore(t, nil)
		if err := s.Patch(ctx, Ref{Kind: Kind("ReplicaSet"), Namespace: storeNS, Name: "rs"}, patch("/spec/replicas")); err == nil {
			t.Error("Patch() of an unknown kind succeeded")
		}
	})
}

// checkPatchAction checks that the only action is a JSON patch of resource (and subresource). The
// dynamic fake drops the patch options, so the field manager is checked on typed clients only.
func checkPatchAction(t *testing.T, actions []k8stesting.Action, resource, subresource string) {
	t.Helper()
	if len(actions) != 1 {
		t.Fatalf("actions = %v, want one patch", actions)
	}
	a, ok := actions[0].(k8stesting.PatchActionImpl)
	if !ok || a.GetVerb() != "patch" {
		t.Fatalf("action = %#v, want a patch", actions[0])
	}
	if a.GetResource().Resource != resource || a.GetSubresource() != subresource || a.GetNamespace() != storeNS {
		t.Errorf("patched %s/%s in %q, want %s/%s in %q", a.GetResource().Resource, a.GetSubresource(), a.GetNamespace(), resource, subresource, storeNS)
	}
	if a.GetPatchType() != types.JSONPatchType {
		t.Errorf("patch type = %s, want %s", a.GetPatchType(), types.JSONPatchType)
	}
	if a.GetResource().Group == "apps" || a.GetResource().Group == "autoscaling" {
		if a.PatchOptions.FieldManager != testFieldManager {
			t.Errorf("field manager = %q, want %q", a.PatchOptions.FieldManager, testFieldManager)
		}
	}
}
