package workload

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
)

// statefulSetKind scales a StatefulSet that no controller owns through spec.replicas. Its scale-down
// removes the highest ordinal, which pod-deletion-cost cannot steer.
type statefulSetKind struct{}

func (statefulSetKind) get(s *Store, ref Ref) (*Object, error) {
	ss, err := s.StatefulSets.StatefulSets(ref.Namespace).Get(ref.Name)
	if err != nil {
		return nil, err
	}
	return newObject(KindStatefulSet, appsv1.SchemeGroupVersion, ss)
}

func (statefulSetKind) patch(ctx context.Context, s *Store, ref Ref, data []byte) error {
	_, err := s.Kube.AppsV1().StatefulSets(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, data, s.patchOptions())
	return err
}

func (statefulSetKind) plan(obj *Object, _ *Target, current, delta int32, _ bool) ([]Field, error) {
	return []Field{raise(obj, replicasPath, 1, current, delta)}, nil
}

func (statefulSetKind) paths(*Target) []string { return []string{replicasPath} }
