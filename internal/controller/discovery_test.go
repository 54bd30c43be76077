package controller

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// serveKServe makes the harness's discovery serve the given versions of the LLMInferenceService API
// (and InferenceService v1beta1), with a dynamic client that lists them.
func serveKServe(h *harness, llmVersions ...string) {
	fd := h.kube.Discovery().(*fakediscovery.FakeDiscovery)
	fd.Resources = append(fd.Resources, &metav1.APIResourceList{GroupVersion: "serving.kserve.io/v1beta1",
		APIResources: []metav1.APIResource{{Name: "inferenceservices", Kind: "InferenceService", Namespaced: true}}})
	kinds := map[schema.GroupVersionResource]string{isvcGVR: "InferenceServiceList"}
	for _, v := range llmVersions {
		fd.Resources = append(fd.Resources, &metav1.APIResourceList{GroupVersion: "serving.kserve.io/" + v,
			APIResources: []metav1.APIResource{{Name: "llminferenceservices", Kind: "LLMInferenceService", Namespaced: true}}})
		kinds[schema.GroupVersionResource{Group: "serving.kserve.io", Version: v, Resource: "llminferenceservices"}] = "LLMInferenceServiceList"
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds)
	h.c.informers.dynamicFactory = dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	h.c.kserve.factory = h.c.informers.dynamicFactory
}

func TestKServeDiscovery(t *testing.T) {
	for _, tc := range []struct {
		name      string
		versions  []string
		semantics string
		wantLLM   string // served version watched, "" for none
		wantKeep  bool
	}{
		{"no KServe", nil, "auto", "", false},
		{"OpenShift AI 3.3: v1alpha1 only", []string{"v1alpha1"}, "auto", "v1alpha1", false},
		{"OpenShift AI 3.4+: v1alpha2 served", []string{"v1alpha1", "v1alpha2"}, "auto", "v1alpha2", true},
		{"flag overrides discovery", []string{"v1alpha1", "v1alpha2"}, "one", "v1alpha2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(o *options.Options) { o.LLMNilSemantics = tc.semantics })
			if tc.versions != nil {
				serveKServe(h, tc.versions...)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := h.c.kserve.discover(ctx); err != nil {
				t.Fatal(err)
			}
			h.c.kserve.waitForSync(ctx)
			_, gvr, ok := h.c.kserve.lister(workload.KindLLMInferenceService)
			if ok != (tc.wantLLM != "") || (ok && gvr.Version != tc.wantLLM) {
				t.Fatalf("LLMInferenceService watched: %v %v, want %q", ok, gvr, tc.wantLLM)
			}
			if _, _, ok := h.c.kserve.lister(workload.KindInferenceService); ok != (tc.versions != nil) {
				t.Fatalf("InferenceService watched = %v", ok)
			}
			if got := h.c.kserve.nilKeepsCount(); got != tc.wantKeep {
				t.Fatalf("nil keeps count = %v, want %v", got, tc.wantKeep)
			}
			// Discovery runs again every minute: a kind already watched is not started twice.
			if err := h.c.kserve.discover(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
