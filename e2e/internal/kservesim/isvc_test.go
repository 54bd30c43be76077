package kservesim

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// object decodes a JSON test object as the informers deliver it (whole
// numbers as int64).
func object(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := utiljson.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("bad test object: %v", err)
	}
	return &unstructured.Unstructured{Object: m}
}

// typed renders an apply configuration as the typed object it describes.
// Fields left out of the apply stay zero (nil pointers).
func typed[T any](t *testing.T, ac any) *T {
	t.Helper()
	raw, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func isvcJSON(annotations, predictor string) string {
	return `{"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
	  "metadata": {"name": "granite", "namespace": "models", "uid": "isvc-uid", "generation": 3,
	    "labels": {"team": "nlp"}, "annotations": ` + annotations + `},
	  "spec": {"predictor": ` + predictor + `}}`
}

const modelPredictor = `{"minReplicas": 1,
  "labels": {"tier": "gold"},
  "annotations": {"e2e.drain-guardian.io/ready-delay": "20s"},
  "nodeSelector": {"gpu": "true"},
  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
  "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "isvc.granite-predictor"}}}]}},
  "model": {"modelFormat": {"name": "vLLM"}, "storageUri": "hf://ibm/granite",
            "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "2", "memory": "8Gi"}}}}`

func TestInferenceServiceDeployment(t *testing.T) {
	isvc := object(t, isvcJSON(`{"serving.kserve.io/autoscalerClass": "hpa", "owner": "me",
	  "kubectl.kubernetes.io/last-applied-configuration": "{}"}`, modelPredictor))
	got, err := inferenceServiceObjects(isvc)
	if err != nil {
		t.Fatal(err)
	}
	d := typed[appsv1.Deployment](t, got.Deployment)

	if d.Name != "granite-predictor" || d.Namespace != "models" {
		t.Errorf("Deployment = %s/%s, want models/granite-predictor", d.Namespace, d.Name)
	}
	if len(d.OwnerReferences) != 1 {
		t.Fatalf("ownerReferences = %+v", d.OwnerReferences)
	}
	o := d.OwnerReferences[0]
	if o.APIVersion != "serving.kserve.io/v1beta1" || o.Kind != "InferenceService" || o.Name != "granite" || o.UID != "isvc-uid" ||
		o.Controller == nil || !*o.Controller || o.BlockOwnerDeletion == nil || !*o.BlockOwnerDeletion {
		t.Errorf("owner = %+v, want the InferenceService as controller blocking deletion", o)
	}
	if want := map[string]string{"app": "isvc.granite-predictor"}; !maps.Equal(d.Spec.Selector.MatchLabels, want) {
		t.Errorf("selector = %v, want %v", d.Spec.Selector.MatchLabels, want)
	}
	wantLabels := map[string]string{
		"team": "nlp", "tier": "gold",
		"serving.kserve.io/inferenceservice": "granite", "component": "predictor", "app": "isvc.granite-predictor",
	}
	if !maps.Equal(d.Spec.Template.Labels, wantLabels) || !maps.Equal(d.Labels, wantLabels) {
		t.Errorf("labels = %v, pod labels = %v, want %v on both", d.Labels, d.Spec.Template.Labels, wantLabels)
	}
	// InferenceService annotations (except the disallowed list) and the
	// predictor's go to the Deployment and its pods.
	wantAnn := map[string]string{
		"serving.kserve.io/autoscalerClass": "hpa", "owner": "me", "e2e.drain-guardian.io/ready-delay": "20s",
	}
	if !maps.Equal(d.Spec.Template.Annotations, wantAnn) || !maps.Equal(d.Annotations, wantAnn) {
		t.Errorf("annotations = %v, pod annotations = %v, want %v on both", d.Annotations, d.Spec.Template.Annotations, wantAnn)
	}

	pod := d.Spec.Template.Spec
	if pod.NodeSelector["gpu"] != "true" {
		t.Errorf("nodeSelector = %v", pod.NodeSelector)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "nvidia.com/gpu" || pod.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("tolerations = %+v", pod.Tolerations)
	}
	if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("affinity = %+v", pod.Affinity)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("containers = %+v", pod.Containers)
	}
	c := pod.Containers[0]
	if c.Name != "kserve-container" || c.Image == "" {
		t.Errorf("container = %s image %q, want kserve-container with an image", c.Name, c.Image)
	}
	if q := c.Resources.Limits["nvidia.com/gpu"]; !q.Equal(resource.MustParse("1")) {
		t.Errorf("GPU limit = %s, want 1", q.String())
	}
	if q := c.Resources.Requests[corev1.ResourceMemory]; !q.Equal(resource.MustParse("8Gi")) {
		t.Errorf("memory request = %s, want 8Gi", q.String())
	}
}

func TestInferenceServiceReplicaOwnership(t *testing.T) {
	tests := []struct {
		name      string
		class     string // "" = annotation absent
		predictor string
		wantErr   bool
		// wantReplicas nil: the apply leaves .spec.replicas out.
		wantReplicas     *int32
		wantHPA          bool
		wantMin, wantMax int32
	}{
		{name: "default is hpa", predictor: `"minReplicas": 1`, wantHPA: true, wantMin: 1, wantMax: 1},
		{name: "hpa min absent", class: "hpa", predictor: ``, wantHPA: true, wantMin: 1, wantMax: 1},
		{name: "hpa min 0 floors at 1", class: "hpa", predictor: `"minReplicas": 0`, wantHPA: true, wantMin: 1, wantMax: 1},
		{name: "hpa surge min 2 raises max", class: "hpa", predictor: `"minReplicas": 2`, wantHPA: true, wantMin: 2, wantMax: 2},
		{name: "hpa max 0 means min", class: "hpa", predictor: `"minReplicas": 2, "maxReplicas": 0`, wantHPA: true, wantMin: 2, wantMax: 2},
		{name: "hpa bounds", class: "hpa", predictor: `"minReplicas": 1, "maxReplicas": 4`, wantHPA: true, wantMin: 1, wantMax: 4},
		{name: "none min absent means 1", class: "none", predictor: ``, wantReplicas: ptr(1)},
		{name: "none follows min", class: "none", predictor: `"minReplicas": 2, "maxReplicas": 2`, wantReplicas: ptr(2)},
		{name: "none min 0", class: "none", predictor: `"minReplicas": 0`, wantReplicas: ptr(0)},
		{name: "keda holds min without HPA", class: "keda", predictor: `"minReplicas": 2, "maxReplicas": 5`, wantReplicas: ptr(2)},
		{name: "external leaves replicas alone", class: "external", predictor: `"minReplicas": 3`},
		{name: "unknown class", class: "kpa", predictor: ``, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ann := `{}`
			if tt.class != "" {
				ann = `{"serving.kserve.io/autoscalerClass": "` + tt.class + `"}`
			}
			pred := `{` + tt.predictor
			if tt.predictor != "" {
				pred += `, `
			}
			pred += `"model": {"modelFormat": {"name": "sklearn"}}}`
			got, err := inferenceServiceObjects(object(t, isvcJSON(ann, pred)))
			if tt.wantErr {
				if err == nil {
					t.Fatal("no error for an invalid autoscaler class")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d := typed[appsv1.Deployment](t, got.Deployment)
			switch {
			case tt.wantReplicas == nil && d.Spec.Replicas != nil:
				t.Errorf("replicas = %d, want the field left to its owner", *d.Spec.Replicas)
			case tt.wantReplicas != nil && (d.Spec.Replicas == nil || *d.Spec.Replicas != *tt.wantReplicas):
				t.Errorf("replicas = %v, want %d", d.Spec.Replicas, *tt.wantReplicas)
			}
			if !tt.wantHPA {
				if got.HPA != nil {
					t.Errorf("HPA wanted for class %q", tt.class)
				}
				return
			}
			if got.HPA == nil {
				t.Fatal("no HPA")
			}
			h := typed[autoscalingv2.HorizontalPodAutoscaler](t, got.HPA)
			if h.Name != "granite-predictor" || h.Spec.ScaleTargetRef != (autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "granite-predictor"}) {
				t.Errorf("HPA %s targets %+v", h.Name, h.Spec.ScaleTargetRef)
			}
			if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas != tt.wantMin || h.Spec.MaxReplicas != tt.wantMax {
				t.Errorf("HPA bounds = %v..%d, want %d..%d", h.Spec.MinReplicas, h.Spec.MaxReplicas, tt.wantMin, tt.wantMax)
			}
			if len(h.OwnerReferences) != 1 || h.OwnerReferences[0].UID != "isvc-uid" || !*h.OwnerReferences[0].Controller {
				t.Errorf("HPA owner = %+v", h.OwnerReferences)
			}
		})
	}
}

func TestInferenceServiceContainers(t *testing.T) {
	tests := []struct {
		name      string
		predictor string
		want      []string // container names
		wantImage string   // of the first container
		wantErr   bool
	}{
		{
			name:      "custom predictor keeps its containers",
			predictor: `{"containers": [{"name": "kserve-container", "image": "quay.io/me/server:1"}, {"name": "proxy", "image": "p"}]}`,
			want:      []string{"kserve-container", "proxy"}, wantImage: "quay.io/me/server:1",
		},
		{
			name:      "model with its own image and a sidecar",
			predictor: `{"model": {"modelFormat": {"name": "onnx"}, "image": "triton:24"}, "containers": [{"name": "sidecar", "image": "a"}]}`,
			want:      []string{"kserve-container", "sidecar"}, wantImage: "triton:24",
		},
		{
			name:      "model without image gets a stand-in runtime image",
			predictor: `{"model": {"modelFormat": {"name": "vLLM"}, "runtime": "vllm-cuda"}}`,
			want:      []string{"kserve-container"}, wantImage: "kserve-sim/vllm-cuda-runtime",
		},
		{
			name:      "framework field",
			predictor: `{"sklearn": {"storageUri": "gs://m"}}`,
			want:      []string{"kserve-container"}, wantImage: "kserve-sim/sklearn-runtime",
		},
		{name: "no model server", predictor: `{"minReplicas": 1}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := inferenceServiceObjects(object(t, isvcJSON(`{}`, tt.predictor)))
			if tt.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d := typed[appsv1.Deployment](t, got.Deployment)
			var names []string
			for _, c := range d.Spec.Template.Spec.Containers {
				names = append(names, c.Name)
			}
			if strings.Join(names, ",") != strings.Join(tt.want, ",") {
				t.Errorf("containers = %v, want %v", names, tt.want)
			}
			if img := d.Spec.Template.Spec.Containers[0].Image; img != tt.wantImage {
				t.Errorf("image = %q, want %q", img, tt.wantImage)
			}
		})
	}
}

func ptr(i int32) *int32 { return &i }
