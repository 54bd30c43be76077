package kservesim

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
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
	MinReplicas        *int32                                         `json:"minReplicas"`
	MaxReplicas        *int32                                         `json:"maxReplicas"`
	ScaleMetric        string                                         `json:"scaleMetric"`
	ScaleTarget        *int32                                         `json:"scaleTarget"`
	Labels             map[string]string                              `json:"labels"`
	Annotations        map[string]string                              `json:"annotations"`
	DeploymentStrategy *appsv1ac.DeploymentStrategyApplyConfiguration `json:"deploymentStrategy"`
}

// modelSpec is a predictor implementation: a container plus the model's
// description.
type modelSpec struct {
	corev1ac.ContainerApplyConfiguration
	ModelFormat struct {
		Name string `json:"name"`
	} `json:"modelFormat"`
	Runtime string `json:"runtime"`
}

// isvcObjects is what KServe's raw-deployment reconciler keeps in place for
// one InferenceService.
type isvcObjects struct {
	Class      AutoscalerClass
	Deployment *appsv1ac.DeploymentApplyConfiguration
	// HPA is nil when no HPA may exist for the InferenceService.
	HPA *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration
}

// predictorName is the name of the predictor's Deployment and HPA.
func predictorName(isvc string) string { return isvc + predictorSuffix }

// inferenceServiceObjects maps an InferenceService to its Deployment and HPA.
// It is pure: the result depends on the object alone.
func inferenceServiceObjects(isvc *unstructured.Unstructured) (*isvcObjects, error) {
	class := AutoscalerClass(isvc.GetAnnotations()[AutoscalerClassAnnotation])
	switch class {
	case "":
		class = AutoscalerHPA
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
	podSpec := &corev1ac.PodSpecApplyConfiguration{}
	if err := json.Unmarshal(raw, podSpec); err != nil {
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

	owner := metav1ac.OwnerReference().
		WithAPIVersion(GroupVersionInferenceService.String()).
		WithKind("InferenceService").
		WithName(isvc.GetName()).
		WithUID(isvc.GetUID()).
		WithController(true).
		WithBlockOwnerDeletion(true)

	spec := appsv1ac.DeploymentSpec().
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{"app": "isvc." + name})).
		WithTemplate(corev1ac.PodTemplateSpec().
			WithLabels(labels).
			WithAnnotations(annotations).
			WithSpec(podSpec))
	if ext.DeploymentStrategy != nil {
		spec.WithStrategy(ext.DeploymentStrategy)
	}
	switch class {
	case AutoscalerNone, AutoscalerKEDA:
		// KServe writes minReplicas into the Deployment and reverts other
		// values. With "keda" the ScaledObject (not simulated) would own the
		// count; holding minReplicas stands in for its lower bound.
		spec.WithReplicas(deref(ext.MinReplicas, 1))
	case AutoscalerHPA, AutoscalerExternal:
		// The HPA or an external autoscaler owns the count: the replicas
		// field is left out of the apply, so it is neither set nor reverted.
	}

	out := &isvcObjects{
		Class: class,
		Deployment: appsv1ac.Deployment(name, ns).
			WithLabels(labels).
			WithAnnotations(annotations).
			WithOwnerReferences(owner).
			WithSpec(spec),
	}
	if class == AutoscalerHPA {
		minReplicas, maxReplicas := hpaBounds(ext.MinReplicas, ext.MaxReplicas)
		out.HPA = autoscalingv2ac.HorizontalPodAutoscaler(name, ns).
			WithLabels(labels).
			WithAnnotations(annotations).
			WithOwnerReferences(owner).
			WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().
				WithScaleTargetRef(autoscalingv2ac.CrossVersionObjectReference().
					WithAPIVersion("apps/v1").WithKind("Deployment").WithName(name)).
				WithMinReplicas(minReplicas).
				WithMaxReplicas(maxReplicas).
				WithMetrics(autoscalingv2ac.MetricSpec().
					WithType(autoscalingv2.ResourceMetricSourceType).
					WithResource(autoscalingv2ac.ResourceMetricSource().
						WithName(hpaResource(ext.ScaleMetric)).
						WithTarget(autoscalingv2ac.MetricTarget().
							WithType(autoscalingv2.UtilizationMetricType).
							WithAverageUtilization(deref(ext.ScaleTarget, defaultCPUTarget))))))
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

// hpaResource is the resource metric of the HPA; KServe's HPA supports cpu
// and memory and falls back to cpu.
func hpaResource(metric string) corev1.ResourceName {
	if metric == "memory" {
		return corev1.ResourceMemory
	}
	return corev1.ResourceCPU
}

// predictorContainers returns the pod's containers: the model server built
// from the predictor implementation (model, sklearn, ...) named
// kserve-container, followed by the other containers of the predictor; or,
// for a custom predictor, spec.predictor.containers as given.
func predictorContainers(pred map[string]any, containers []corev1ac.ContainerApplyConfiguration) ([]corev1ac.ContainerApplyConfiguration, error) {
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
		c := m.ContainerApplyConfiguration
		c.WithName(PredictorContainerName)
		if c.Image == nil || *c.Image == "" {
			// The image would come from the ServingRuntime, which the
			// test bed does not have; the fake kubelets pull nothing.
			runtime := m.Runtime
			if runtime == "" {
				runtime = m.ModelFormat.Name
			}
			if runtime == "" {
				runtime = field
			}
			c.WithImage("kserve-sim/" + strings.ToLower(runtime) + "-runtime")
		}
		out := []corev1ac.ContainerApplyConfiguration{c}
		for _, other := range containers {
			if other.Name == nil || *other.Name != PredictorContainerName {
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

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
