package blocking

import (
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// Replacements lists what a surge in flight still waits for, which the scheduler places before any
// new replacement: the workload's unscheduled pods, then a stand-in for each replica the surge asks
// for (want, the surged count) that the pod owner has not created yet (a Pending Surge, or a
// ReplicaSet not caught up).
//
// The list never holds more than delta pods, the replicas the surge adds. want comes from a count
// the tenant chose: a Deployment of 2,000,000,000 replicas held at one pod by a quota would otherwise
// ask for two billion stand-ins, one capacity check would need terabytes, and the guardian would
// crash-loop for every tenant. The pods the workload cannot create are not the surge's to book.
//
// The stand-ins copy a live pod (not finished, not being deleted): a finished pod requests nothing
// the scheduler counts, and is no model of what the owner creates. With no live pod, none are made.
func Replacements(pods []*podinfo.Pod, want int64, delta int32, standIn func(*podinfo.Pod) *podinfo.Pod) []*podinfo.Pod {
	if delta <= 0 {
		return nil
	}
	out := make([]*podinfo.Pod, 0, delta)
	var live int64
	var model *podinfo.Pod
	for _, p := range pods {
		if Skip(p) {
			continue
		}
		live++
		if model == nil {
			model = p
		}
		if p.Spec.NodeName == "" && len(out) < int(delta) {
			out = append(out, p)
		}
	}
	if model == nil {
		return out
	}
	for i := live; i < want && len(out) < int(delta); i++ {
		out = append(out, standIn(model))
	}
	return out
}
