package kservesim

import (
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestLLMReplicas(t *testing.T) {
	tests := []struct {
		name          string
		field         *int32
		autoscaled    bool
		current       *int32
		nilKeepsCount bool
		want          *int32
	}{
		{name: "3.3 field set", field: ptr(2), current: ptr(1), want: ptr(2)},
		{name: "3.3 absent means 1", current: ptr(2), want: ptr(1)},
		{name: "3.3 absent, no Deployment yet", want: ptr(1)},
		{name: "3.3 zero is zero", field: ptr(0), current: ptr(1), want: ptr(0)},
		{name: "3.4 field set", field: ptr(2), current: ptr(1), nilKeepsCount: true, want: ptr(2)},
		{name: "3.4 absent keeps the current count", current: ptr(2), nilKeepsCount: true, want: ptr(2)},
		{name: "3.4 absent, no Deployment yet: API default", nilKeepsCount: true, want: nil},
		{name: "scaling owns the count (3.3)", autoscaled: true, current: ptr(3), want: nil},
		{name: "scaling owns the count (3.4)", autoscaled: true, current: ptr(3), nilKeepsCount: true, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := llmReplicas(tt.field, tt.autoscaled, tt.current, tt.nilKeepsCount)
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Errorf("llmReplicas = %v, want %v", fmtPtr(got), fmtPtr(tt.want))
			}
		})
	}
}

func fmtPtr(p *int32) any {
	if p == nil {
		return "absent"
	}
	return *p
}

func llmJSON(version, spec string) string {
	return `{"apiVersion": "serving.kserve.io/` + version + `", "kind": "LLMInferenceService",
	  "metadata": {"name": "chat", "namespace": "models", "uid": "llm-uid", "generation": 2,
	    "labels": {"team": "nlp", "kueue.x-k8s.io/queue-name": "gpu"},
	    "annotations": {"drain-guardian.io/surge": "{}", "k8s.v1.cni.cncf.io/networks": "rdma"}},
	  "spec": ` + spec + `}`
}

const llmTemplate = `{"containers": [{"name": "main", "image": "vllm:0.9",
  "resources": {"limits": {"nvidia.com/gpu": "1"}}}], "nodeSelector": {"gpu": "true"}}`

func TestLLMInferenceServiceDeployments(t *testing.T) {
	spec := `{"model": {"uri": "hf://org/m"}, "replicas": 1,
	  "labels": {"pod-label": "x"}, "annotations": {"e2e.drain-guardian.io/ready-delay": "40s"},
	  "template": ` + llmTemplate + `,
	  "prefill": {"replicas": 2, "annotations": {"prefill-ann": "y"}, "template": ` + llmTemplate + `}}`
	for _, version := range []string{"v1alpha1", "v1alpha2"} {
		t.Run(version, func(t *testing.T) {
			got, err := llmInferenceServiceObjects(object(t, llmJSON(version, spec)), noDeployments, false)
			if err != nil {
				t.Fatal(err)
			}
			if got.Main == nil || got.Prefill == nil {
				t.Fatalf("main %v, prefill %v: want both", got.Main != nil, got.Prefill != nil)
			}
			main := typed[appsv1.Deployment](t, got.Main)
			prefill := typed[appsv1.Deployment](t, got.Prefill)

			for _, tc := range []struct {
				d                      *appsv1.Deployment
				name, component, role  string
				replicas               int32
				podAnnotation, wantAnn string
			}{
				{main, "chat-kserve", "llminferenceservice-workload", "decode", 1, "e2e.drain-guardian.io/ready-delay", "40s"},
				{prefill, "chat-kserve-prefill", "llminferenceservice-workload-prefill", "prefill", 2, "prefill-ann", "y"},
			} {
				d := tc.d
				if d.Name != tc.name || d.Namespace != "models" {
					t.Errorf("name = %s/%s, want models/%s", d.Namespace, d.Name, tc.name)
				}
				o := d.OwnerReferences
				if len(o) != 1 || o[0].Kind != "LLMInferenceService" || !strings.HasPrefix(o[0].APIVersion, "serving.kserve.io/") ||
					o[0].UID != "llm-uid" || o[0].Controller == nil || !*o[0].Controller {
					t.Errorf("%s owner = %+v", tc.name, o)
				}
				want := map[string]string{
					"app.kubernetes.io/name": "chat", "app.kubernetes.io/part-of": "llminferenceservice",
					"app.kubernetes.io/component": tc.component, "kserve.io/component": "workload",
				}
				// The role is not selected on: it changes with spec.prefill.
				if !maps.Equal(d.Spec.Selector.MatchLabels, want) {
					t.Errorf("%s selector = %v, want %v", tc.name, d.Spec.Selector.MatchLabels, want)
				}
				want["llm-d.ai/role"] = tc.role
				for k, v := range want {
					if d.Spec.Template.Labels[k] != v || d.Labels[k] != v {
						t.Errorf("%s label %s = %q / pod %q, want %q", tc.name, k, d.Labels[k], d.Spec.Template.Labels[k], v)
					}
				}
				// Only approved prefixes of the LLMInferenceService's own
				// metadata propagate; the guardian's record does not.
				if d.Labels["kueue.x-k8s.io/queue-name"] != "gpu" || d.Labels["team"] != "" {
					t.Errorf("%s labels = %v: want kueue.x-k8s.io/* propagated, team not", tc.name, d.Labels)
				}
				if _, ok := d.Spec.Template.Annotations["drain-guardian.io/surge"]; ok {
					t.Errorf("%s: LLMInferenceService annotation copied to pods", tc.name)
				}
				if d.Spec.Template.Annotations["k8s.v1.cni.cncf.io/networks"] != "rdma" {
					t.Errorf("%s pod annotations = %v, want the CNI annotation", tc.name, d.Spec.Template.Annotations)
				}
				if d.Spec.Template.Annotations[tc.podAnnotation] != tc.wantAnn {
					t.Errorf("%s pod annotations = %v, want %s=%s from the workload", tc.name, d.Spec.Template.Annotations, tc.podAnnotation, tc.wantAnn)
				}
				if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.replicas {
					t.Errorf("%s replicas = %v, want %d", tc.name, fmtPtr(d.Spec.Replicas), tc.replicas)
				}
				c := d.Spec.Template.Spec.Containers
				if len(c) != 1 || c[0].Image != "vllm:0.9" || d.Spec.Template.Spec.NodeSelector["gpu"] != "true" {
					t.Fatalf("%s pod spec = %+v", tc.name, d.Spec.Template.Spec)
				}
				if q := c[0].Resources.Limits["nvidia.com/gpu"]; !q.Equal(resource.MustParse("1")) {
					t.Errorf("%s GPU limit = %s", tc.name, q.String())
				}
			}
			if main.Spec.Template.Labels["pod-label"] != "x" || main.Labels["pod-label"] != "" {
				t.Errorf("spec.labels belong on the main pods only: Deployment %v, pods %v", main.Labels, main.Spec.Template.Labels)
			}
		})
	}
}

func noDeployments(string) *int32 { return nil }

func TestLLMInferenceServiceShapes(t *testing.T) {
	tests := []struct {
		name             string
		spec             string
		nilKeepsCount    bool
		current          map[string]int32
		wantMain         bool
		wantMainReplicas *int32
		wantPrefill      bool
		wantRole         string
	}{
		{name: "main only, role both", spec: `{"replicas": 1, "template": ` + llmTemplate + `}`,
			wantMain: true, wantMainReplicas: ptr(1), wantRole: "both"},
		{name: "3.3 absent replicas", spec: `{"template": ` + llmTemplate + `}`, current: map[string]int32{"chat-kserve": 2},
			wantMain: true, wantMainReplicas: ptr(1), wantRole: "both"},
		{name: "3.4 absent replicas keeps 2", spec: `{"template": ` + llmTemplate + `}`, nilKeepsCount: true,
			current: map[string]int32{"chat-kserve": 2}, wantMain: true, wantMainReplicas: ptr(2), wantRole: "both"},
		{name: "scaling leaves replicas out", spec: `{"scaling": {"maxReplicas": 3, "wva": {"hpa": {}}}, "template": ` + llmTemplate + `}`,
			current: map[string]int32{"chat-kserve": 2}, wantMain: true, wantRole: "both"},
		{name: "multi-node main is not a Deployment", spec: `{"template": ` + llmTemplate + `, "worker": {"containers": [{"name": "w", "image": "w"}]}}`},
		{name: "multi-node prefill is not a Deployment",
			spec:     `{"replicas": 1, "prefill": {"replicas": 1, "worker": {"containers": [{"name": "w", "image": "w"}]}}}`,
			wantMain: true, wantMainReplicas: ptr(1), wantRole: "decode"},
		{name: "no template gets a stand-in container", spec: `{"replicas": 1}`,
			wantMain: true, wantMainReplicas: ptr(1), wantRole: "both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			current := func(name string) *int32 {
				if n, ok := tt.current[name]; ok {
					return &n
				}
				return nil
			}
			got, err := llmInferenceServiceObjects(object(t, llmJSON("v1alpha2", tt.spec)), current, tt.nilKeepsCount)
			if err != nil {
				t.Fatal(err)
			}
			if (got.Main != nil) != tt.wantMain || (got.Prefill != nil) != tt.wantPrefill {
				t.Fatalf("main %v prefill %v, want %v %v", got.Main != nil, got.Prefill != nil, tt.wantMain, tt.wantPrefill)
			}
			if got.Main == nil {
				return
			}
			d := typed[appsv1.Deployment](t, got.Main)
			if r := d.Spec.Replicas; (r == nil) != (tt.wantMainReplicas == nil) || (r != nil && *r != *tt.wantMainReplicas) {
				t.Errorf("replicas = %v, want %v", fmtPtr(r), fmtPtr(tt.wantMainReplicas))
			}
			if role := d.Spec.Template.Labels["llm-d.ai/role"]; role != tt.wantRole {
				t.Errorf("role = %q, want %q", role, tt.wantRole)
			}
			if len(d.Spec.Template.Spec.Containers) == 0 || d.Spec.Template.Spec.Containers[0].Image == "" {
				t.Errorf("pod has no runnable container: %+v", d.Spec.Template.Spec.Containers)
			}
		})
	}
}

// A multi-node LLMInferenceService becomes a LeaderWorkerSet as KServe writes it: owned by the
// service, its count from spec.replicas or, when absent, the set's own (PreserveLWSReplicas), its
// group size from spec.parallelism, the leader and worker templates labelled by component.
func TestLLMInferenceServiceMultiNode(t *testing.T) {
	worker := `{"containers": [{"name": "w", "image": "w"}]}`
	tests := []struct {
		name         string
		spec         string
		current      *int32
		wantReplicas any
		wantSize     any
		wantLeader   bool
	}{
		{"replicas and pipeline", `{"replicas": 1, "parallelism": {"pipeline": 2}, "template": ` + llmTemplate + `, "worker": ` + worker + `}`,
			ptr(3), int64(1), int64(2), true},
		{"absent replicas keep the set's", `{"parallelism": {"data": 8, "dataLocal": 4}, "worker": ` + worker + `}`,
			ptr(2), int64(2), int64(2), false},
		{"absent replicas, no set yet", `{"worker": ` + worker + `}`, nil, nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			llm := object(t, llmJSON("v1alpha2", tt.spec))
			got, err := llmInferenceServiceObjects(llm, func(string) *int32 { return tt.current }, false)
			if err != nil {
				t.Fatal(err)
			}
			if got.Main != nil || got.MainSet == nil {
				t.Fatalf("main Deployment %v, set %v: want a LeaderWorkerSet only", got.Main != nil, got.MainSet != nil)
			}
			set := got.MainSet
			if set.GetName() != "chat-kserve-mn" || !controlledBy(set, llm.GetUID()) {
				t.Errorf("set %s owned by %v", set.GetName(), set.GetOwnerReferences())
			}
			if r, _, _ := unstructured.NestedFieldNoCopy(set.Object, "spec", "replicas"); r != tt.wantReplicas {
				t.Errorf("replicas = %v, want %v", r, tt.wantReplicas)
			}
			if n, _, _ := unstructured.NestedFieldNoCopy(set.Object, "spec", "leaderWorkerTemplate", "size"); n != tt.wantSize {
				t.Errorf("size = %v, want %v", n, tt.wantSize)
			}
			c, _, _ := unstructured.NestedString(set.Object, "spec", "leaderWorkerTemplate", "workerTemplate", "metadata", "labels", LLMComponentLabel)
			if c != llmWorker {
				t.Errorf("worker component %q, want %q", c, llmWorker)
			}
			if _, has, _ := unstructured.NestedMap(set.Object, "spec", "leaderWorkerTemplate", "leaderTemplate"); has != tt.wantLeader {
				t.Errorf("leader template %v, want %v", has, tt.wantLeader)
			}
		})
	}
}

func TestChildName(t *testing.T) {
	long := strings.Repeat("a", 60)
	tests := []struct {
		parent, suffix string
		want           string // "" = only check the invariants
	}{
		{"chat", "-kserve", "chat-kserve"},
		{strings.Repeat("b", 56), "-kserve", strings.Repeat("b", 56) + "-kserve"}, // exactly 63
		{long, "-kserve", ""},
		{long, "-kserve-prefill", ""},
	}
	for _, tt := range tests {
		got := childName(tt.parent, tt.suffix)
		if tt.want != "" && got != tt.want {
			t.Errorf("childName(%q, %q) = %q, want %q", tt.parent, tt.suffix, got, tt.want)
		}
		if len(got) > 63 || !strings.HasSuffix(got, tt.suffix) || !strings.HasPrefix(got, tt.parent[:min(len(tt.parent), 8)]) {
			t.Errorf("childName(%q, %q) = %q: want <= 63 chars, the parent's start and the suffix", tt.parent, tt.suffix, got)
		}
	}
	// Long names are hashed, so two parents sharing a long prefix still
	// get distinct children, and building "<name>-kserve" finds neither.
	a, b := childName(long+"x", "-kserve"), childName(long+"y", "-kserve")
	if a == b || a == long+"x-kserve" {
		t.Errorf("long names not hashed apart: %q, %q", a, b)
	}
}
