package workload

import (
	"context"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
)

// inferenceServiceKind scales a KServe InferenceService through spec.predictor.minReplicas (and
// maxReplicas with it: KServe's validation rejects min > max). KServe writes the predictor Deployment
// or its HPA from these fields and reverts direct changes to either.
type inferenceServiceKind struct{}

const (
	isvcMinPath = "/spec/predictor/minReplicas"
	isvcMaxPath = "/spec/predictor/maxReplicas"
	// isvcWorkerPath, when present, makes the predictor multi-node: not surged.
	isvcWorkerPath = "/spec/predictor/workerSpec"
)

func (inferenceServiceKind) api() KServeAPI {
	return KServeAPI{Resource: "inferenceservices", Versions: []string{"v1beta1"}}
}

func (inferenceServiceKind) component(*appsv1.Deployment) string { return "" }

func (inferenceServiceKind) get(s *Store, ref Ref) (*Object, error) { return getKServe(s, ref) }

func (inferenceServiceKind) patch(ctx context.Context, s *Store, ref Ref, data []byte) error {
	return patchKServe(ctx, s, ref, data)
}

func (inferenceServiceKind) plan(obj *Object, _ *Target, current, delta int32, _ bool) ([]Field, error) {
	if strings.EqualFold(obj.Meta.GetAnnotations()[AutoscalerClassAnnotation], autoscalerExternal) {
		return nil, unsupported("autoscaler class %q: the replica count is owned outside KServe", autoscalerExternal)
	}
	if obj.Has(isvcWorkerPath) {
		return nil, unsupported("multi-node predictor (workerSpec): its replicas form one serving group")
	}
	// KServe defaults an absent minReplicas to 1; maxReplicas 0 or absent sets no bound.
	min := raise(obj, isvcMinPath, 1, current, delta)
	return withMax(obj, isvcMaxPath, min, false), nil
}

func (inferenceServiceKind) paths(*Target) []string { return []string{isvcMinPath, isvcMaxPath} }

func (inferenceServiceKind) reads() (values, present []string) {
	return []string{isvcMinPath, isvcMaxPath}, []string{isvcWorkerPath}
}
