package workload

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// deploymentKind scales a Deployment that no controller owns through spec.replicas.
type deploymentKind struct{}

func (deploymentKind) get(s *Store, ref Ref) (*Object, error) {
	d, err := s.Deployments.Deployments(ref.Namespace).Get(ref.Name)
	if err != nil {
		return nil, err
	}
	return newObject(KindDeployment, appsv1.SchemeGroupVersion, d)
}

func (deploymentKind) patch(ctx context.Context, s *Store, ref Ref, data []byte) error {
	_, err := s.Kube.AppsV1().Deployments(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, data, s.patchOptions())
	return err
}

func (deploymentKind) plan(obj *Object, _ *Target, current, delta int32, _ bool) ([]Field, error) {
	return []Field{raise(obj, replicasPath, 1, current, delta)}, nil
}

func (deploymentKind) paths(*Target) []string { return []string{replicasPath} }

// replicasPath is the replica count of the apps kinds and of a Scale.
const replicasPath = "/spec/replicas"

func (s *Store) patchOptions() metav1.PatchOptions {
	return metav1.PatchOptions{FieldManager: s.FieldManager}
}
