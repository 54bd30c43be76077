package kservesim

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
)

// Labels of the LLMInferenceService workloads.
const (
	LLMNameLabel      = "app.kubernetes.io/name"
	LLMPartOfLabel    = "app.kubernetes.io/part-of"
	LLMComponentLabel = "app.kubernetes.io/component"
	KServeComponent   = "kserve.io/component"
	llmRoleLabel      = "llm-d.ai/role"

	llmPartOf           = "llminferenceservice"
	llmWorkload         = "llminferenceservice-workload"
	llmWorkloadPrefill  = "llminferenceservice-workload-prefill"
	mainSuffix          = "-kserve"
	prefillSuffix       = "-kserve-prefill"
	defaultLLMContainer = "main"
	defaultLLMImage     = "kserve-sim/vllm"
)

// llmPropagatedPrefixes are the prefixes of LLMInferenceService labels and
// annotations KServe copies to its Deployments and pods; every other
// metadata key stays on the LLMInferenceService.
var llmPropagatedPrefixes = []string{"k8s.v1.cni.cncf.io", "kueue.x-k8s.io"}

// workloadSpec is the part of an LLMInferenceService workload (the top level
// of spec, or spec.prefill) the simulator reads.
type workloadSpec struct {
	Replicas    *int32                              `json:"replicas"`
	Scaling     *json.RawMessage                    `json:"scaling"`
	Labels      map[string]string                   `json:"labels"`
	Annotations map[string]string                   `json:"annotations"`
	Template    *corev1ac.PodSpecApplyConfiguration `json:"template"`
	Worker      *json.RawMessage                    `json:"worker"`
	Parallelism *parallelism                        `json:"parallelism"`
}

type llmSpec struct {
	workloadSpec
	Prefill *workloadSpec `json:"prefill"`
}

// llmObjects is what KServe's LLMInferenceService reconciler keeps in place.
type llmObjects struct {
	// Main is nil when the main workload is not a Deployment (spec.worker
	// set: a multi-node LeaderWorkerSet, MainSet).
	Main *appsv1ac.DeploymentApplyConfiguration
	// Prefill is nil without spec.prefill, or when it is multi-node.
	Prefill *appsv1ac.DeploymentApplyConfiguration
	// MainSet and PrefillSet are the multi-node LeaderWorkerSets (see
	// llmisvc_multinode.go); nil for a workload without a worker spec.
	MainSet, PrefillSet *unstructured.Unstructured
}

// llmReplicas returns the replica count the controller applies for one
// workload, nil meaning "leave .spec.replicas out of the apply".
//
//   - spec.scaling set: the autoscaler owns the count.
//   - the field set: its value.
//   - absent, up to RHOAI 3.3 (nilKeepsCount false): 1.
//   - absent, from 3.4 (nilKeepsCount true): the Deployment's current count,
//     re-applied so that it stays what it is; nil before the Deployment
//     exists, which lets the API server default it to 1.
func llmReplicas(field *int32, autoscaled bool, current *int32, nilKeepsCount bool) *int32 {
	switch {
	case autoscaled:
		return nil
	case field != nil:
		return field
	case !nilKeepsCount:
		one := int32(1)
		return &one
	default:
		return current
	}
}

// MainDeploymentName is the name of an LLMInferenceService's main Deployment.
func MainDeploymentName(llm string) string { return childName(llm, mainSuffix) }

// PrefillDeploymentName is the name of an LLMInferenceService's prefill Deployment.
func PrefillDeploymentName(llm string) string { return childName(llm, prefillSuffix) }

// llmInferenceServiceObjects maps an LLMInferenceService to its Deployments,
// and its multi-node workloads to LeaderWorkerSets. currentReplicas reports
// the .spec.replicas of an existing Deployment or LeaderWorkerSet by name
// (nil when there is none); for a Deployment it only matters with
// nilKeepsCount, a LeaderWorkerSet always keeps its count when the field is
// absent (PreserveLWSReplicas).
func llmInferenceServiceObjects(llm *unstructured.Unstructured, currentReplicas func(name string) *int32, nilKeepsCount bool) (*llmObjects, error) {
	specMap, _, err := unstructured.NestedMap(llm.Object, "spec")
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	raw, err := json.Marshal(specMap)
	if err != nil {
		return nil, err
	}
	var spec llmSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}

	owner := metav1ac.OwnerReference().
		WithAPIVersion(GroupVersionLLMInferenceService.String()).
		WithKind("LLMInferenceService").
		WithName(llm.GetName()).
		WithUID(llm.GetUID()).
		WithController(true).
		WithBlockOwnerDeletion(true)

	out := &llmObjects{}
	if spec.Worker == nil {
		role := "both"
		if spec.Prefill != nil {
			role = "decode"
		}
		name := MainDeploymentName(llm.GetName())
		out.Main = llmDeployment(llm, name, llmWorkload, role, &spec.workloadSpec, owner,
			llmReplicas(spec.Replicas, spec.Scaling != nil, currentReplicas(name), nilKeepsCount))
	}
	if p := spec.Prefill; p != nil && p.Worker == nil {
		name := PrefillDeploymentName(llm.GetName())
		out.Prefill = llmDeployment(llm, name, llmWorkloadPrefill, "prefill", p, owner,
			llmReplicas(p.Replicas, p.Scaling != nil, currentReplicas(name), nilKeepsCount))
	}
	var err2 error
	if spec.Worker != nil {
		role := "both"
		if spec.Prefill != nil {
			role = "decode"
		}
		name := MainLeaderWorkerSetName(llm.GetName())
		out.MainSet, err2 = multiNodeLWS(llm, name, &spec.workloadSpec, role, currentReplicas(name))
	}
	if p := spec.Prefill; p != nil && p.Worker != nil && err2 == nil {
		name := PrefillLeaderWorkerSetName(llm.GetName())
		out.PrefillSet, err2 = multiNodeLWS(llm, name, p, "prefill", currentReplicas(name))
	}
	return out, err2
}

func llmDeployment(llm *unstructured.Unstructured, name, component, role string, w *workloadSpec,
	owner *metav1ac.OwnerReferenceApplyConfiguration, replicas *int32) *appsv1ac.DeploymentApplyConfiguration {
	// KServe selects on every workload label, the role included; the role
	// of the main workload flips between "both" and "decode" when prefill is
	// added or removed, and a selector is immutable, so here the role is a
	// pod label but not part of the selector.
	selector := map[string]string{
		LLMNameLabel:      llm.GetName(),
		LLMPartOfLabel:    llmPartOf,
		LLMComponentLabel: component,
		KServeComponent:   "workload",
	}
	labels := withPrefixes(llm.GetLabels())
	maps.Copy(labels, selector)
	labels[llmRoleLabel] = role
	annotations := withPrefixes(llm.GetAnnotations())

	podLabels := maps.Clone(labels)
	maps.Copy(podLabels, w.Labels)
	maps.Copy(podLabels, selector)
	podLabels[llmRoleLabel] = role
	podAnnotations := maps.Clone(annotations)
	maps.Copy(podAnnotations, w.Annotations)

	podSpec := &corev1ac.PodSpecApplyConfiguration{}
	if w.Template != nil {
		podSpec = w.Template
	}
	if len(podSpec.Containers) == 0 {
		// The real controller fills the template from its presets
		// (LLMInferenceServiceConfig), which the test bed does not have.
		podSpec.WithContainers(corev1ac.Container().WithName(defaultLLMContainer).WithImage(defaultLLMImage))
	}

	spec := appsv1ac.DeploymentSpec().
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
		WithTemplate(corev1ac.PodTemplateSpec().
			WithLabels(podLabels).
			WithAnnotations(podAnnotations).
			WithSpec(podSpec))
	if replicas != nil {
		spec.WithReplicas(*replicas)
	}
	d := appsv1ac.Deployment(name, llm.GetNamespace()).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithSpec(spec)
	if len(annotations) > 0 {
		d.WithAnnotations(annotations)
	}
	return d
}

// withPrefixes returns the entries of m whose key has one of the prefixes
// KServe propagates.
func withPrefixes(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		for _, p := range llmPropagatedPrefixes {
			if strings.HasPrefix(k, p) {
				out[k] = v
			}
		}
	}
	return out
}

// childName builds the name of an object owned by parent the way KServe does
// (knative's kmeta.ChildName): parent+suffix, or, when that is longer than
// 63 characters, a prefix of parent followed by the MD5 of parent and the
// suffix. Owners must therefore be found through ownerReferences, never by
// building names.
func childName(parent, suffix string) string {
	const longest, hashLen = 63, 2 * md5.Size
	if len(parent)+len(suffix) <= longest {
		return parent + suffix
	}
	sum := md5.Sum([]byte(parent))
	return parent[:longest-hashLen-len(suffix)] + hex.EncodeToString(sum[:]) + suffix
}
