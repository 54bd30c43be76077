package kservesim

import (
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Condition types written to status.
const (
	ConditionReady                = "Ready"
	ConditionPredictorReady       = "PredictorReady"
	ConditionMainWorkloadReady    = "MainWorkloadReady"
	ConditionPrefillWorkloadReady = "PrefillWorkloadReady"
	ConditionWorkloadsReady       = "WorkloadsReady"
	// The multi-node workloads' conditions mirror their LeaderWorkerSet's Available.
	ConditionWorkerWorkloadReady        = "WorkerWorkloadReady"
	ConditionPrefillWorkerWorkloadReady = "PrefillWorkerWorkloadReady"
)

type condition struct {
	Type    string
	Status  corev1.ConditionStatus
	Reason  string
	Message string
}

// deploymentCondition mirrors a Deployment's Available condition, as
// KServe's status propagation does.
func deploymentCondition(typ string, d *appsv1.Deployment) condition {
	if d == nil {
		return condition{Type: typ, Status: corev1.ConditionUnknown, Reason: "DeploymentPending", Message: "the Deployment does not exist yet"}
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return condition{Type: typ, Status: c.Status, Reason: c.Reason, Message: c.Message}
		}
	}
	return condition{Type: typ, Status: corev1.ConditionUnknown, Reason: "DeploymentProgressing", Message: "the Deployment reports no availability yet"}
}

func invalidConditions(err error, types ...string) []condition {
	var out []condition
	for _, t := range types {
		out = append(out, condition{Type: t, Status: corev1.ConditionFalse, Reason: "InvalidSpec", Message: err.Error()})
	}
	return out
}

// inferenceServiceStatus is the status KServe reports for a raw-deployment
// InferenceService: PredictorReady mirrors the predictor Deployment's
// Available, and Ready follows it (routing is not simulated).
func inferenceServiceStatus(isvc *unstructured.Unstructured, predictor *appsv1.Deployment, invalid error, now time.Time) map[string]any {
	var conds []condition
	if invalid != nil {
		conds = invalidConditions(invalid, ConditionPredictorReady, ConditionReady)
	} else {
		p := deploymentCondition(ConditionPredictorReady, predictor)
		r := p
		r.Type = ConditionReady
		conds = []condition{p, r}
	}
	return map[string]any{
		"observedGeneration": isvc.GetGeneration(),
		"conditions":         conditionsField(isvc, conds, now),
	}
}

// llmWorkloads is what the reconciler applied and found for an
// LLMInferenceService.
type llmWorkloads struct {
	want        *llmObjects
	deployments map[string]*appsv1.Deployment // by role: "main", "prefill"
	// sets are the multi-node LeaderWorkerSets, by role.
	sets map[string]*unstructured.Unstructured
}

// llmStatus is the status of an LLMInferenceService: one condition per
// workload mirroring its Deployment's Available, WorkloadsReady when all
// are, and Ready following it. status.workloads (v1alpha2 only) is not
// written: server-side apply of a field that one served version lacks fails
// for objects created through that version.
func llmStatus(llm *unstructured.Unstructured, w *llmWorkloads, invalid error, now time.Time) map[string]any {
	status := map[string]any{"observedGeneration": llm.GetGeneration()}
	if invalid != nil {
		status["conditions"] = conditionsField(llm, invalidConditions(invalid, ConditionWorkloadsReady, ConditionReady), now)
		return status
	}
	// One condition per workload KServe runs: a Deployment's mirrors its Available, a multi-node
	// LeaderWorkerSet's the set's Available.
	var conds []condition
	if w.want.Main != nil {
		conds = append(conds, deploymentCondition(ConditionMainWorkloadReady, w.deployments["main"]))
	}
	if w.want.Prefill != nil {
		conds = append(conds, deploymentCondition(ConditionPrefillWorkloadReady, w.deployments["prefill"]))
	}
	if w.want.MainSet != nil {
		conds = append(conds, lwsCondition(ConditionWorkerWorkloadReady, w.sets["main"]))
	}
	if w.want.PrefillSet != nil {
		conds = append(conds, lwsCondition(ConditionPrefillWorkerWorkloadReady, w.sets["prefill"]))
	}
	all := condition{Type: ConditionWorkloadsReady, Status: corev1.ConditionTrue, Reason: "WorkloadsReady"}
	for _, c := range conds {
		if all.Status == corev1.ConditionTrue && c.Status != corev1.ConditionTrue {
			all = condition{Type: ConditionWorkloadsReady, Status: c.Status, Reason: c.Reason, Message: c.Type + ": " + c.Message}
		}
	}
	ready := all
	ready.Type = ConditionReady
	conds = append(conds, all, ready)
	status["conditions"] = conditionsField(llm, conds, now)
	return status
}

// conditionsField renders conditions, keeping the lastTransitionTime of a
// condition whose status did not change.
func conditionsField(obj *unstructured.Unstructured, conds []condition, now time.Time) []any {
	old, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	since := map[string]string{}
	for _, o := range old {
		m, ok := o.(map[string]any)
		if !ok {
			continue
		}
		typ, _ := m["type"].(string)
		st, _ := m["status"].(string)
		ts, _ := m["lastTransitionTime"].(string)
		since[typ+"="+st] = ts
	}
	out := make([]any, 0, len(conds))
	for _, c := range conds {
		ts := since[c.Type+"="+string(c.Status)]
		if ts == "" {
			ts = now.UTC().Format(time.RFC3339)
		}
		m := map[string]any{"type": c.Type, "status": string(c.Status), "lastTransitionTime": ts}
		if c.Reason != "" {
			m["reason"] = c.Reason
		}
		if c.Message != "" {
			m["message"] = c.Message
		}
		out = append(out, m)
	}
	return out
}

// statusFields are the status fields the simulator writes.
var statusFields = []string{"observedGeneration", "conditions"}

// sameStatus reports whether old already holds want in every field the
// simulator writes (a field absent from want must be absent from old).
func sameStatus(old, want map[string]any) bool {
	for _, k := range statusFields {
		if !reflect.DeepEqual(old[k], want[k]) {
			return false
		}
	}
	return true
}
