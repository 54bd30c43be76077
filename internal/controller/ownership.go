package controller

import (
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// podsOf lists the pods of a pod owner (a Deployment or StatefulSet of that kind): those its selector
// matches and whose controller chain leads to it (workload.Store.Owns). Everything the guardian counts,
// evicts or re-costs for a surge comes from here, never from the selector alone.
func (v *view) podsOf(namespace string, kind workload.Kind, owner *workload.PodOwnerState) ([]*podinfo.Pod, error) {
	matched, err := v.pods.Pods(namespace).List(owner.Selector)
	if err != nil {
		return nil, err
	}
	out := matched[:0:0]
	for _, p := range matched {
		if v.store.Owns(kind, owner.UID, p) {
			out = append(out, p)
		}
	}
	return out, nil
}
