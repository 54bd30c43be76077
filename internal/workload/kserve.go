package workload

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
)

// KServe's annotation choosing who owns an InferenceService's replica count, and its values.
const (
	AutoscalerClassAnnotation = "serving.kserve.io/autoscalerClass"
	autoscalerExternal        = "external"
)

// getKServe reads a KServe object from its informer; a *NotServedError while the kind is not served or
// its cache not synced, so that a surge on it is kept, not dropped.
func getKServe(s *Store, ref Ref) (*Object, error) {
	lister, gvr, ok := s.KServe(ref.Kind)
	if !ok {
		return nil, &NotServedError{Kind: ref.Kind}
	}
	u, err := lister.ByNamespace(ref.Namespace).Get(ref.Name)
	if err != nil {
		return nil, err
	}
	return newObject(ref.Kind, gvr.GroupVersion(), u)
}

// patchKServe writes a KServe object; neither kind has a /scale subresource.
func patchKServe(ctx context.Context, s *Store, ref Ref, data []byte) error {
	_, gvr, ok := s.KServe(ref.Kind)
	if !ok {
		return &NotServedError{Kind: ref.Kind}
	}
	_, err := s.Dynamic.Resource(gvr).Namespace(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, data, s.patchOptions())
	return err
}
