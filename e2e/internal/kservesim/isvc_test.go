package kservesim

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
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
		// wantReplicas nil: the desired Deployment leaves .spec.replicas out.
		wantReplicas *int32
		// wantKEDA: the count held in place of KEDA.
		wantKEDA         *int32
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
		{name: "keda holds min without HPA", class: "keda", predictor: `"minReplicas": 2, "maxReplicas": 5`, wantKEDA: ptr(2)},
		{name: "keda min absent means 1", class: "keda", predictor: ``, wantKEDA: ptr(1)},
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
			if k := got.KEDAReplicas; (k == nil) != (tt.wantKEDA == nil) || (k != nil && *k != *tt.wantKEDA) {
				t.Errorf("KEDA stand-in count = %v, want %v", fmtPtr(k), fmtPtr(tt.wantKEDA))
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

// predictorFor builds the desired predictor Deployment of an InferenceService
// of the given class, as the API server returns it from a dry run: with the
// identity of the stored object.
func predictorFor(t *testing.T, class, predictor string) *appsv1.Deployment {
	t.Helper()
	got, err := inferenceServiceObjects(object(t, isvcJSON(`{"serving.kserve.io/autoscalerClass": "`+class+`", "owner": "me"}`, predictor)))
	if err != nil {
		t.Fatal(err)
	}
	d := got.Deployment.DeepCopy()
	d.UID, d.ResourceVersion, d.Generation = "dep-uid", "42", 7
	return d
}

const sklearnPredictor = `{"minReplicas": 1, "model": {"modelFormat": {"name": "sklearn"},
  "resources": {"requests": {"cpu": "1"}}}}`

// stored returns desired as someone else left it on the cluster: a foreign
// annotation and label, the Deployment controller's revision, a status and
// the given replica count.
func stored(desired *appsv1.Deployment, replicas int32) *appsv1.Deployment {
	d := desired.DeepCopy()
	d.Annotations["someone.example/note"] = "mine"
	d.Annotations["deployment.kubernetes.io/revision"] = "1"
	d.Labels["someone.example/label"] = "mine"
	d.Spec.Replicas = &replicas
	d.Status.Replicas = replicas
	return d
}

func TestPredictorSpecEqual(t *testing.T) {
	for _, class := range []string{"hpa", "external", "keda"} {
		desired := predictorFor(t, class, sklearnPredictor)
		desired.Spec.Replicas = ptr(1) // the dry run defaults it
		if !predictorSpecEqual(stored(desired, 3), desired) {
			t.Errorf("class %s: foreign metadata or another replica count made the specs differ", class)
		}
	}

	none := predictorFor(t, "none", sklearnPredictor)
	if !predictorSpecEqual(stored(none, 1), none) {
		t.Error("class none: foreign metadata made the specs differ")
	}
	if predictorSpecEqual(stored(none, 3), none) {
		t.Error("class none: replicas 3 against minReplicas 1 compared equal")
	}

	// Quantities compare by value: "1" and "1000m" are the same request.
	milli := stored(predictorFor(t, "hpa", sklearnPredictor), 1)
	milli.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1000m")
	if !predictorSpecEqual(milli, predictorFor(t, "hpa", sklearnPredictor)) {
		t.Error("cpu 1000m and 1 compared different")
	}

	changed := predictorFor(t, "hpa", sklearnPredictor)
	changed.Spec.Template.Annotations["owner"] = "you"
	if predictorSpecEqual(stored(predictorFor(t, "hpa", sklearnPredictor), 1), changed) {
		t.Error("a changed pod annotation compared equal")
	}
}

// applyPatch applies a strategic merge patch to a Deployment as the API
// server would.
func applyPatch(t *testing.T, d *appsv1.Deployment, patch []byte) *appsv1.Deployment {
	t.Helper()
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	out, err := strategicpatch.StrategicMergePatch(raw, patch, appsv1.Deployment{})
	if err != nil {
		t.Fatalf("applying %s: %v", patch, err)
	}
	res := &appsv1.Deployment{}
	if err := json.Unmarshal(out, res); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestPredictorPatch(t *testing.T) {
	tests := []struct {
		name         string
		class        string
		existingRepl int32
		// wantReplicas is the count after the patch; patchReplicas whether
		// the patch mentions .spec.replicas at all.
		wantReplicas  int32
		patchReplicas bool
	}{
		{name: "hpa leaves the count to the HPA", class: "hpa", existingRepl: 3, wantReplicas: 3},
		{name: "external leaves the count alone", class: "external", existingRepl: 2, wantReplicas: 2},
		{name: "none reverts the count", class: "none", existingRepl: 3, wantReplicas: 1, patchReplicas: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			existing := stored(predictorFor(t, tt.class, sklearnPredictor), tt.existingRepl)
			desired := predictorFor(t, tt.class, sklearnPredictor)
			desired.Spec.Template.Annotations["owner"] = "you" // the spec change that causes the write
			desired.Annotations["owner"] = "you"
			if desired.Spec.Replicas == nil {
				desired.Spec.Replicas = ptr(1) // as the dry run defaults it
			}

			patch, err := predictorPatch(existing, desired)
			if err != nil {
				t.Fatal(err)
			}
			var p struct {
				Metadata struct {
					Annotations map[string]*string `json:"annotations"`
					Labels      map[string]*string `json:"labels"`
				} `json:"metadata"`
				Spec map[string]json.RawMessage `json:"spec"`
			}
			if err := json.Unmarshal(patch, &p); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"someone.example/note", "deployment.kubernetes.io/revision"} {
				if v, ok := p.Metadata.Annotations[k]; !ok || v != nil {
					t.Errorf("patch %s: annotation %s not set to null", patch, k)
				}
			}
			if v, ok := p.Metadata.Labels["someone.example/label"]; !ok || v != nil {
				t.Errorf("patch %s: foreign label not set to null", patch)
			}
			if _, ok := p.Spec["replicas"]; ok != tt.patchReplicas {
				t.Errorf("patch %s: mentions spec.replicas %v, want %v", patch, ok, tt.patchReplicas)
			}

			got := applyPatch(t, existing, patch)
			if _, ok := got.Annotations["someone.example/note"]; ok {
				t.Errorf("foreign annotation survived the patch: %v", got.Annotations)
			}
			if _, ok := got.Labels["someone.example/label"]; ok {
				t.Errorf("foreign label survived the patch: %v", got.Labels)
			}
			if !maps.Equal(got.Annotations, desired.Annotations) || !maps.Equal(got.Labels, desired.Labels) {
				t.Errorf("metadata after the patch: annotations %v labels %v, want %v and %v",
					got.Annotations, got.Labels, desired.Annotations, desired.Labels)
			}
			if got.Spec.Template.Annotations["owner"] != "you" {
				t.Errorf("pod annotations after the patch = %v", got.Spec.Template.Annotations)
			}
			if got.Spec.Replicas == nil || *got.Spec.Replicas != tt.wantReplicas {
				t.Errorf("replicas after the patch = %v, want %d", fmtPtr(got.Spec.Replicas), tt.wantReplicas)
			}
			if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "isvc-uid" || !*got.OwnerReferences[0].Controller {
				t.Errorf("owner after the patch = %+v", got.OwnerReferences)
			}
		})
	}
}

func TestHPAEqual(t *testing.T) {
	desired := func(class string) *autoscalingv2.HorizontalPodAutoscaler {
		ann := `{}`
		if class != "" {
			ann = `{"serving.kserve.io/autoscalerClass": "` + class + `"}`
		}
		got, err := inferenceServiceObjects(object(t, isvcJSON(ann, `{"minReplicas": 1, "maxReplicas": 3, "model": {"modelFormat": {"name": "sklearn"}}}`)))
		if err != nil {
			t.Fatal(err)
		}
		return got.HPA
	}
	want := desired("hpa")

	same := want.DeepCopy()
	same.Annotations["someone.example/note"] = "x"
	same.Labels["someone.example/label"] = "x"
	same.ResourceVersion = "9"
	if !hpaEqual(want, same) {
		t.Error("foreign metadata made the HPAs differ")
	}
	edited := want.DeepCopy()
	edited.Spec.MinReplicas = ptr(2)
	if hpaEqual(want, edited) {
		t.Error("an edited minReplicas compared equal")
	}
	if hpaEqual(want, desired("")) {
		t.Error("an explicit class and an absent one compared equal")
	}
	// As stored, the HPA carries the API server's default scaling rules; the
	// empty behavior KServe writes never equals them.
	defaulted := want.DeepCopy()
	defaulted.Spec.Behavior.ScaleUp = &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr(0)}
	if hpaEqual(want, defaulted) {
		t.Error("a defaulted behavior compared equal to the empty one")
	}
}

func TestHPAMetrics(t *testing.T) {
	tests := []struct {
		metric string
		target *int32
		want   string // resource:utilization, "" = no metric
	}{
		{"", nil, "cpu:80"},
		{"cpu", ptr(50), "cpu:50"},
		{"memory", ptr(70), "memory:70"},
		{"memory", nil, ""},
		{"concurrency", ptr(5), ""},
	}
	for _, tt := range tests {
		got := ""
		if m := hpaMetrics(tt.metric, tt.target); len(m) == 1 {
			got = fmt.Sprintf("%s:%d", m[0].Resource.Name, *m[0].Resource.Target.AverageUtilization)
		} else if len(m) > 1 {
			got = fmt.Sprint(m)
		}
		if got != tt.want {
			t.Errorf("hpaMetrics(%q, %v) = %q, want %q", tt.metric, fmtPtr(tt.target), got, tt.want)
		}
	}
}
