package workload

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// scaleKind scales an owner of a kind the guardian does not know through its /scale subresource. It
// is read live: the guardian keeps no informer for such kinds.
type scaleKind struct{}

func scaleGVR(ref Ref) schema.GroupVersionResource {
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	return gv.WithResource(ref.Resource)
}

// get reads the owner's Scale. Its fields are the Scale's (/spec/replicas); its metadata carries the
// owner's resourceVersion, which guards the patch like any other.
func (scaleKind) get(s *Store, ref Ref) (*Object, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := s.Dynamic.Resource(scaleGVR(ref)).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}, "scale")
	if err != nil {
		return nil, err
	}
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	obj, err := newObject(ref.Kind, gv, u)
	if err != nil {
		return nil, err
	}
	// A Scale carries its owner's metadata, UID included; keep the ref's where it has none.
	uid := obj.Ref.UID
	obj.Ref = ref
	if uid != "" {
		obj.Ref.UID = uid
	}
	return obj, nil
}

func (scaleKind) patch(ctx context.Context, s *Store, ref Ref, data []byte) error {
	_, err := s.Dynamic.Resource(scaleGVR(ref)).Namespace(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, data, s.patchOptions(), "scale")
	return err
}

func (scaleKind) plan(obj *Object, _ *Target, current, delta int32, _ bool) ([]Field, error) {
	return []Field{raise(obj, replicasPath, 1, current, delta)}, nil
}

func (scaleKind) paths(*Target) []string { return []string{replicasPath} }
