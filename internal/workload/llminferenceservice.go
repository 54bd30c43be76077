package workload

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
)

// Components of an LLMInferenceService whose replicas the guardian can surge.
const (
	ComponentMain    = "main"
	ComponentPrefill = "prefill"
)

// ComponentLabel is the pod template label that tells an LLMInferenceService's Deployments apart: the
// only part of a Deployment's template the guardian reads.
const ComponentLabel = "app.kubernetes.io/component"

// prefillTemplateComponent is the ComponentLabel of the prefill workload's pods.
const prefillTemplateComponent = "llminferenceservice-workload-prefill"

// llmInferenceServiceKind scales a KServe LLMInferenceService through spec.replicas (main workload) or
// spec.prefill.replicas (prefill workload).
type llmInferenceServiceKind struct{}

const (
	llmMainPath    = "/spec/replicas"
	llmPrefillPath = "/spec/prefill/replicas"
	// Either, when present, keeps the object from being surged.
	llmWorkerPath  = "/spec/worker"
	llmScalingPath = "/spec/scaling"
)

func (llmInferenceServiceKind) api() KServeAPI {
	// v1alpha1 up to OpenShift AI 3.3, stored as v1alpha2 from 3.4.
	return KServeAPI{Resource: "llminferenceservices", Versions: []string{"v1alpha2", "v1alpha1"}}
}

// component tells the prefill workload's Deployment from the main one by its pods' component label.
func (llmInferenceServiceKind) component(d *appsv1.Deployment) string {
	if d.Spec.Template.Labels[ComponentLabel] == prefillTemplateComponent {
		return ComponentPrefill
	}
	return ComponentMain
}

func (llmInferenceServiceKind) get(s *Store, ref Ref) (*Object, error) { return getKServe(s, ref) }

func (llmInferenceServiceKind) patch(ctx context.Context, s *Store, ref Ref, data []byte) error {
	return patchKServe(ctx, s, ref, data)
}

func (llmInferenceServiceKind) plan(obj *Object, t *Target, current, delta int32, nilKeepsCount bool) ([]Field, error) {
	if obj.Has(llmWorkerPath) && t.PodOwner.Kind != KindLeaderWorkerSet {
		// Multi-node: the pods are a LeaderWorkerSet's groups, resolved through the set.
		return nil, unsupported("multi-node LLMInferenceService (spec.worker) whose pods are not run by its LeaderWorkerSet")
	}
	if obj.Has(llmScalingPath) {
		return nil, unsupported("LLMInferenceService with spec.scaling: its replicas are owned by an autoscaler")
	}
	absentMeans := int64(1)
	if nilKeepsCount {
		absentMeans = int64(current)
	}
	f := raise(obj, llmPath(t.Component), absentMeans, current, delta)
	if f.Original == nil && nilKeepsCount {
		// Removing the field at once would keep the surged count: write the original count first.
		n := int64(current)
		f.ExplicitBeforeRemove = &n
	}
	return []Field{f}, nil
}

func (llmInferenceServiceKind) paths(t *Target) []string { return []string{llmPath(t.Component)} }

func (llmInferenceServiceKind) reads() (values, present []string) {
	return []string{llmMainPath, llmPrefillPath}, []string{llmWorkerPath, llmScalingPath}
}

func llmPath(component string) string {
	if component == ComponentPrefill {
		return llmPrefillPath
	}
	return llmMainPath
}
