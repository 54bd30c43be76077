package kservesim

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// Names and labels of KServe's raw-deployment mode.
const (
	// AutoscalerClassAnnotation selects who owns the predictor's replica count.
	AutoscalerClassAnnotation = "serving.kserve.io/autoscalerClass"
	// InferenceServiceLabel carries the InferenceService name on its objects and pods.
	InferenceServiceLabel = "serving.kserve.io/inferenceservice"
	// PredictorContainerName is the model server container of a predictor.
	PredictorContainerName = "kserve-container"

	componentLabel   = "component"
	predictorSuffix  = "-predictor"
	defaultCPUTarget = int32(80)
)

// AutoscalerClass is a value of the serving.kserve.io/autoscalerClass annotation.
type AutoscalerClass string

// The autoscaler classes KServe accepts in raw-deployment mode.
const (
	AutoscalerHPA      AutoscalerClass = "hpa"
	AutoscalerNone     AutoscalerClass = "none"
	AutoscalerKEDA     AutoscalerClass = "keda"
	AutoscalerExternal AutoscalerClass = "external"
)

// annotationsNotPropagated are InferenceService annotations KServe does not
// copy to the predictor (its default ServiceAnnotationDisallowedList). Every
// other annotation of the InferenceService is copied to the Deployment and to
// its pod template, so changing one rolls the predictor's pods, as it does
// on a cluster.
var annotationsNotPropagated = []string{
	"autoscaling.knative.dev/min-scale",
	"autoscaling.knative.dev/max-scale",
	"internal.serving.kserve.io/storage-initializer-sourceuri",
	"kubectl.kubernetes.io/last-applied-configuration",
}

// predictorImplementations are the predictor fields that describe the model
// server container, in the order KServe looks for them: the generic "model"
// and the older per-framework fields.
var predictorImplementations = []string{
	"model", "huggingface", "lightgbm", "onnx", "paddle", "pmml", "pytorch", "sklearn", "tensorflow", "triton", "xgboost",
}

// predictorExtension is the part of spec.predictor that is not a PodSpec
// field (KServe's ComponentExtensionSpec), as far as the simulator uses it.
type predictorExtension struct {
	MinReplicas        *int32                     `json:"minReplicas"`
	MaxReplicas        *int32                     `json:"maxReplicas"`
	ScaleMetric        string                     `json:"scaleMetric"`
	ScaleTarget        *int32                     `json:"scaleTarget"`
	Labels             map[string]string          `json:"labels"`
	Annotations        map[string]string          `json:"annotations"`
	DeploymentStrategy *appsv1.DeploymentStrategy `json:"deploymentStrategy"`
}

// modelSpec is a predictor implementation: a container plus the model's
// description.
type modelSpec struct {
	corev1.Container
	ModelFormat struct {
		Name string `json:"name"`
	} `json:"modelFormat"`
	Runtime string `json:"runtime"`
}

// isvcObjects is what KServe's raw-deployment reconciler wants in place for
// one InferenceService: the objects it would build before comparing them
// with what exists.
type isvcObjects struct {
	Class AutoscalerClass
	// Deployment is the desired predictor. Its .spec.replicas is set only
	// for class "none"; for the other classes the field is left to the API
	// default on creation and ignored afterwards.
	Deployment *appsv1.Deployment
	// KEDAReplicas is, for class "keda", the count the simulator holds the
	// Deployment at in place of KEDA's ScaledObject (minReplicas, absent
	// meaning 1); nil for the other classes.
	KEDAReplicas *int32
	// HPA is nil when no HPA may exist for the InferenceService.
	HPA *autoscalingv2.HorizontalPodAutoscaler
}

// predictorName is the name of the predictor's Deployment and HPA.
func predictorName(isvc string) string { return isvc + predictorSuffix }

// autoscalerClass returns the class an object's annotations select; absent
// means hpa, KServe's default.
func autoscalerClass(annotations map[string]string) AutoscalerClass {
	if c := annotations[AutoscalerClassAnnotation]; c != "" {
		return AutoscalerClass(c)
	}
	return AutoscalerHPA
}

// inferenceServiceObjects maps an InferenceService to its Deployment and HPA.
// It is pure: the result depends on the object alone.
func inferenceServiceObjects(isvc *unstructured.Unstructured) (*isvcObjects, error) {
	class := autoscalerClass(isvc.GetAnnotations())
	switch class {
	case AutoscalerHPA, AutoscalerNone, AutoscalerKEDA, AutoscalerExternal:
	default:
		return nil, fmt.Errorf("unknown autoscaler class %q: must be one of hpa, none, keda, external", class)
	}

	pred, found, err := unstructured.NestedMap(isvc.Object, "spec", "predictor")
	if err != nil || !found {
		return nil, fmt.Errorf("spec.predictor: missing or not an object")
	}
	raw, err := json.Marshal(pred)
	if err != nil {
		return nil, err
	}
	var ext predictorExtension
	if err := json.Unmarshal(raw, &ext); err != nil {
		return nil, fmt.Errorf("spec.predictor: %w", err)
	}
	// The predictor inlines a PodSpec: its pod-level fields (affinity,
	// tolerations, nodeSelector, containers, volumes, ...) are the pod's.
	var podSpec corev1.PodSpec
	if err := json.Unmarshal(raw, &podSpec); err != nil {
		return nil, fmt.Errorf("spec.predictor: %w", err)
	}
	containers, err := predictorContainers(pred, podSpec.Containers)
	if err != nil {
		return nil, err
	}
	podSpec.Containers = containers

	name := predictorName(isvc.GetName())
	ns := isvc.GetNamespace()

	labels := map[string]string{}
	maps.Copy(labels, isvc.GetLabels())
	maps.Copy(labels, ext.Labels)
	labels[InferenceServiceLabel] = isvc.GetName()
	labels[componentLabel] = "predictor"
	labels["app"] = "isvc." + name

	annotations := map[string]string{}
	for k, v := range isvc.GetAnnotations() {
		if !slices.Contains(annotationsNotPropagated, k) {
			annotations[k] = v
		}
	}
	maps.Copy(annotations, ext.Annotations)

	// The component's metadata (name, labels, annotations, the
	// InferenceService as controller) is the same on the Deployment, its
	// pods and the HPA, as in KServe where one ObjectMeta is shared.
	objectMeta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name:        name,
			Namespace:   ns,
			Labels:      maps.Clone(labels),
			Annotations: maps.Clone(annotations),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         GroupVersionInferenceService.String(),
				Kind:               "InferenceService",
				Name:               isvc.GetName(),
				UID:                isvc.GetUID(),
				Controller:         pointerTo(true),
				BlockOwnerDeletion: pointerTo(true),
			}},
		}
	}

	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: objectMeta(),
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "isvc." + name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels), Annotations: maps.Clone(annotations)},
				Spec:       podSpec,
			},
		},
	}
	if ext.DeploymentStrategy != nil {
		d.Spec.Strategy = *ext.DeploymentStrategy
	}
	out := &isvcObjects{Class: class, Deployment: d}
	switch class {
	case AutoscalerNone:
		// KServe writes minReplicas into the Deployment (absent leaves the
		// field to the API default, 1) and compares it on every reconcile:
		// another count is reverted.
		d.Spec.Replicas = pointerTo(deref(ext.MinReplicas, 1))
	case AutoscalerKEDA:
		// KServe leaves the count to KEDA's ScaledObject (not simulated);
		// holding minReplicas stands in for its lower bound.
		out.KEDAReplicas = pointerTo(deref(ext.MinReplicas, 1))
	case AutoscalerHPA, AutoscalerExternal:
		// The HPA or an external autoscaler owns the count: KServe neither
		// sets nor compares nor patches .spec.replicas.
	}

	if class == AutoscalerHPA {
		minReplicas, maxReplicas := hpaBounds(ext.MinReplicas, ext.MaxReplicas)
		out.HPA = &autoscalingv2.HorizontalPodAutoscaler{
			TypeMeta:   metav1.TypeMeta{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler"},
			ObjectMeta: objectMeta(),
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
				MinReplicas:    &minReplicas,
				MaxReplicas:    maxReplicas,
				Metrics:        hpaMetrics(ext.ScaleMetric, ext.ScaleTarget),
				// An empty behavior, as KServe's createHPA writes it. The
				// API server fills in the default scale-up and scale-down
				// rules, so the desired spec never equals the stored one
				// and every reconcile rewrites the HPA (see reconcileHPA).
				Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{},
			},
		}
	}
	return out, nil
}

// hpaBounds returns the HPA bounds KServe derives from the predictor:
// min = max(minReplicas, 1), max = max(maxReplicas, min).
func hpaBounds(minReplicas, maxReplicas *int32) (int32, int32) {
	lo := max(deref(minReplicas, 1), 1)
	hi := max(deref(maxReplicas, 0), lo)
	return lo, hi
}

// hpaMetrics are the metrics of KServe's HPA for scaleMetric and
// scaleTarget (getHPAMetrics, without spec.predictor.autoScaling): cpu
// utilization (target 80 unless given) when the metric is cpu or absent,
// memory utilization when the metric is memory and a target is given, and
// none otherwise (the API server then defaults to cpu at 80%).
func hpaMetrics(metric string, target *int32) []autoscalingv2.MetricSpec {
	utilization := func(res corev1.ResourceName, v int32) []autoscalingv2.MetricSpec {
		return []autoscalingv2.MetricSpec{{
			Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricSource{
				Name:   res,
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: pointerTo(v)},
			},
		}}
	}
	switch corev1.ResourceName(metric) {
	case "", corev1.ResourceCPU:
		return utilization(corev1.ResourceCPU, deref(target, defaultCPUTarget))
	case corev1.ResourceMemory:
		if target != nil {
			return utilization(corev1.ResourceMemory, *target)
		}
	}
	return nil
}

// predictorContainers returns the pod's containers: the model server built
// from the predictor implementation (model, sklearn, ...) named
// kserve-container, followed by the other containers of the predictor; or,
// for a custom predictor, spec.predictor.containers as given.
func predictorContainers(pred map[string]any, containers []corev1.Container) ([]corev1.Container, error) {
	for _, field := range predictorImplementations {
		impl, ok := pred[field]
		if !ok {
			continue
		}
		raw, err := json.Marshal(impl)
		if err != nil {
			return nil, err
		}
		var m modelSpec
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("spec.predictor.%s: %w", field, err)
		}
		c := m.Container
		c.Name = PredictorContainerName
		if c.Image == "" {
			// The image would come from the ServingRuntime, which the
			// test bed does not have; the fake kubelets pull nothing.
			runtime := m.Runtime
			if runtime == "" {
				runtime = m.ModelFormat.Name
			}
			if runtime == "" {
				runtime = field
			}
			c.Image = "kserve-sim/" + strings.ToLower(runtime) + "-runtime"
		}
		out := []corev1.Container{c}
		for _, other := range containers {
			if other.Name != PredictorContainerName {
				out = append(out, other)
			}
		}
		return out, nil
	}
	if len(containers) == 0 {
		return nil, fmt.Errorf("spec.predictor: neither a model nor containers")
	}
	return containers, nil
}

// predictorSpecEqual reports whether an existing predictor Deployment
// already has the spec of defaulted, the dry-run result of the desired
// Deployment: KServe's checkDeploymentExist, which diffs the specs with
// .spec.replicas ignored unless the existing Deployment's autoscaler class is
// "none". The comparison is semantic (quantities by value), and both sides
// carry the API defaults, so an unchanged InferenceService compares equal.
func predictorSpecEqual(existing, defaulted *appsv1.Deployment) bool {
	have, want := existing.Spec.DeepCopy(), defaulted.Spec.DeepCopy()
	if autoscalerClass(existing.Annotations) != AutoscalerNone {
		want.Replicas = have.Replicas
	}
	return equality.Semantic.DeepEqual(*have, *want)
}

// predictorPatch is the write KServe's DeploymentReconciler sends when the
// spec differs: strategicpatch.CreateTwoWayMergePatch from the whole
// existing object to the whole desired one (here, as there, the dry-run
// result), sent as a strategic merge patch. Every annotation or label of the
// existing Deployment that the desired one lacks is set to null, whoever
// put it there. Unless the desired autoscaler class is "none", .spec.replicas
// is cleared on both sides first, so the patch neither sets nor removes it.
func predictorPatch(existing, desired *appsv1.Deployment) ([]byte, error) {
	cur, mod := existing.DeepCopy(), desired.DeepCopy()
	if autoscalerClass(mod.Annotations) != AutoscalerNone {
		cur.Spec.Replicas, mod.Spec.Replicas = nil, nil
	}
	curJSON, err := json.Marshal(cur)
	if err != nil {
		return nil, err
	}
	modJSON, err := json.Marshal(mod)
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateTwoWayMergePatch(curJSON, modJSON, appsv1.Deployment{})
}

// hpaEqual is KServe's semanticHPAEquals: the specs are semantically equal
// and the autoscaler class annotation is the same (or absent on both).
// Metadata is not compared otherwise.
func hpaEqual(desired, existing *autoscalingv2.HorizontalPodAutoscaler) bool {
	d, dok := desired.Annotations[AutoscalerClassAnnotation]
	e, eok := existing.Annotations[AutoscalerClassAnnotation]
	return dok == eok && d == e && equality.Semantic.DeepEqual(desired.Spec, existing.Spec)
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func pointerTo[T any](v T) *T { return &v }
