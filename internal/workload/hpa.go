package workload

import (
	"context"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/types"
)

// hpaKind scales a Deployment or StatefulSet through the HorizontalPodAutoscaler that owns its count:
// minReplicas is raised (and maxReplicas with it when needed); the HPA controller scales up at once.
type hpaKind struct{}

const (
	hpaMinPath = "/spec/minReplicas"
	hpaMaxPath = "/spec/maxReplicas"
	// The HPA's status: what it runs and what it wants (see Owner.Unsettled).
	hpaCurrentPath = "/status/currentReplicas"
	hpaDesiredPath = "/status/desiredReplicas"
)

func (hpaKind) get(s *Store, ref Ref) (*Object, error) {
	h, err := s.HPAs.HorizontalPodAutoscalers(ref.Namespace).Get(ref.Name)
	if err != nil {
		return nil, err
	}
	return newObject(KindHPA, autoscalingv2.SchemeGroupVersion, h)
}

func (hpaKind) patch(ctx context.Context, s *Store, ref Ref, data []byte) error {
	_, err := s.Kube.AutoscalingV2().HorizontalPodAutoscalers(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, data, s.patchOptions())
	return err
}

func (hpaKind) plan(obj *Object, _ *Target, current, delta int32, _ bool) ([]Field, error) {
	min := raise(obj, hpaMinPath, 1, current, delta)
	return withMax(obj, hpaMaxPath, min, true), nil
}

func (hpaKind) paths(*Target) []string { return []string{hpaMinPath, hpaMaxPath} }
