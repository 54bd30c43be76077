package workload

import (
	"fmt"
	"strings"
)

// KServe's annotation choosing who owns an InferenceService's replica count, and its values.
const (
	AutoscalerClassAnnotation = "serving.kserve.io/autoscalerClass"
	autoscalerExternal        = "external"
)

// Components of an LLMInferenceService whose replicas the guardian can surge.
const (
	ComponentMain    = "main"
	ComponentPrefill = "prefill"
)

// UnsupportedError says why a workload is reported instead of surged.
type UnsupportedError struct {
	// Detail is a human sentence for the Event.
	Detail string
}

func (e *UnsupportedError) Error() string { return e.Detail }

func unsupported(format string, args ...any) error {
	return &UnsupportedError{Detail: fmt.Sprintf(format, args...)}
}

// PlanSurge returns the fields to write on obj to add delta replicas to a workload whose pod owner
// currently wants `current` replicas. component tells an LLMInferenceService's main workload from its
// prefill workload; nilKeepsCount selects OpenShift AI 3.4+ semantics, where an absent LLMInferenceService
// replica field keeps the Deployment's count instead of meaning one.
func PlanSurge(obj *Object, component string, current, delta int32, nilKeepsCount bool) ([]Field, error) {
	if delta < 1 {
		return nil, fmt.Errorf("surge of %d replicas", delta)
	}
	if obj.Ref.ViaScale() {
		return []Field{raise(obj, "/spec/replicas", 1, current, delta)}, nil
	}
	switch obj.Ref.Kind {
	case KindDeployment, KindStatefulSet:
		return []Field{raise(obj, "/spec/replicas", 1, current, delta)}, nil
	case KindHPA:
		min := raise(obj, "/spec/minReplicas", 1, current, delta)
		return withMax(obj, "/spec/maxReplicas", min, true), nil
	case KindInferenceService:
		if strings.EqualFold(obj.Meta.GetAnnotations()[AutoscalerClassAnnotation], autoscalerExternal) {
			return nil, unsupported("autoscaler class %q: the replica count is owned outside KServe", autoscalerExternal)
		}
		if obj.Has("/spec/predictor/workerSpec") {
			return nil, unsupported("multi-node predictor (workerSpec): its replicas form one serving group")
		}
		// KServe defaults an absent minReplicas to 1; maxReplicas 0 or absent sets no bound.
		min := raise(obj, "/spec/predictor/minReplicas", 1, current, delta)
		return withMax(obj, "/spec/predictor/maxReplicas", min, false), nil
	case KindLLMInferenceService:
		if obj.Has("/spec/worker") {
			return nil, unsupported("multi-node LLMInferenceService (spec.worker, LeaderWorkerSet)")
		}
		if obj.Has("/spec/scaling") {
			return nil, unsupported("LLMInferenceService with spec.scaling: its replicas are owned by an autoscaler")
		}
		path := "/spec/replicas"
		if component == ComponentPrefill {
			path = "/spec/prefill/replicas"
		}
		absentMeans := int64(1)
		if nilKeepsCount {
			absentMeans = int64(current)
		}
		f := raise(obj, path, absentMeans, current, delta)
		if f.Original == nil && nilKeepsCount {
			// Removing the field at once would keep the surged count: write the original count first.
			n := int64(current)
			f.ExplicitBeforeRemove = &n
		}
		return []Field{f}, nil
	}
	return nil, unsupported("kind %s cannot be surged", obj.Ref.Kind)
}

// raise plans field = max(its value, current) + delta, where an absent field counts as absentMeans.
func raise(obj *Object, path string, absentMeans int64, current, delta int32) Field {
	f := Field{Path: path}
	base := absentMeans
	if v, ok := obj.Int(path); ok {
		f.Original = &v
		base = v
	}
	base = max(base, int64(current))
	f.Set = base + int64(delta)
	return f
}

// withMax adds the maximum field when it would otherwise be below the raised minimum: the HPA and
// KServe's validation both reject min > max. An absent or zero KServe maxReplicas sets no bound;
// an HPA's maxReplicas is required.
func withMax(obj *Object, path string, min Field, required bool) []Field {
	fields := []Field{min}
	v, ok := obj.Int(path)
	if !ok && !required {
		return fields
	}
	if !required && v == 0 {
		return fields
	}
	if v < min.Set {
		orig := v
		f := Field{Path: path, Set: min.Set}
		if ok {
			f.Original = &orig
		}
		fields = append(fields, f)
	}
	return fields
}
