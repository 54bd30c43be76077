package kservesim

import (
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
)

func deployment(name string, available corev1.ConditionStatus, ready int32) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	d.Name = name
	d.Status.ReadyReplicas = ready
	if available != "" {
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: available, Reason: "R", Message: "m"}}
	}
	return d
}

// conds returns type -> status of the conditions of a status map.
func conds(t *testing.T, status map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	list, _, err := unstructured.NestedSlice(status, "conditions")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		m := c.(map[string]any)
		out[m["type"].(string)] = m["status"].(string)
	}
	return out
}

func TestInferenceServiceStatus(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name      string
		predictor *appsv1.Deployment
		invalid   error
		want      string
	}{
		{"available", deployment("p", corev1.ConditionTrue, 1), nil, "True"},
		{"unavailable", deployment("p", corev1.ConditionFalse, 0), nil, "False"},
		{"no condition yet", deployment("p", "", 0), nil, "Unknown"},
		{"no Deployment", nil, nil, "Unknown"},
		{"invalid spec", nil, errors.New("bad"), "False"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isvc := object(t, isvcJSON(`{}`, modelPredictor))
			s := inferenceServiceStatus(isvc, tt.predictor, tt.invalid, now)
			c := conds(t, s)
			if c[ConditionPredictorReady] != tt.want || c[ConditionReady] != tt.want {
				t.Errorf("conditions = %v, want PredictorReady and Ready %s", c, tt.want)
			}
			if s["observedGeneration"] != int64(3) {
				t.Errorf("observedGeneration = %v, want 3", s["observedGeneration"])
			}
		})
	}
}

func TestConditionTransitionTime(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	isvc := object(t, isvcJSON(`{}`, modelPredictor))
	first := inferenceServiceStatus(isvc, deployment("p", corev1.ConditionTrue, 1), nil, t0)
	isvc.Object["status"] = first

	same := inferenceServiceStatus(isvc, deployment("p", corev1.ConditionTrue, 1), nil, t1)
	if !sameStatus(first, same) {
		t.Errorf("unchanged readiness produced a new status:\n%v\n%v", first, same)
	}
	changed := inferenceServiceStatus(isvc, deployment("p", corev1.ConditionFalse, 0), nil, t1)
	if sameStatus(first, changed) {
		t.Fatal("changed readiness not detected")
	}
	list, _, _ := unstructured.NestedSlice(changed, "conditions")
	if ts := list[0].(map[string]any)["lastTransitionTime"]; ts != t1.Format(time.RFC3339) {
		t.Errorf("lastTransitionTime = %v, want %s", ts, t1.Format(time.RFC3339))
	}
}

func TestLLMStatus(t *testing.T) {
	now := time.Now()
	llm := object(t, llmJSON("v1alpha2", `{"replicas": 1}`))
	both := &llmObjects{Main: appsv1ac.Deployment("chat-kserve", "models"), Prefill: appsv1ac.Deployment("chat-kserve-prefill", "models")}
	tests := []struct {
		name        string
		w           *llmWorkloads
		wantReady   string
		wantPrefill string
	}{
		{"all available", &llmWorkloads{want: both, deployments: map[string]*appsv1.Deployment{
			"main": deployment("chat-kserve", corev1.ConditionTrue, 1), "prefill": deployment("chat-kserve-prefill", corev1.ConditionTrue, 2)}},
			"True", "True"},
		{"prefill unavailable", &llmWorkloads{want: both, deployments: map[string]*appsv1.Deployment{
			"main": deployment("chat-kserve", corev1.ConditionTrue, 1), "prefill": deployment("chat-kserve-prefill", corev1.ConditionFalse, 0)}},
			"False", "False"},
		{"main only", &llmWorkloads{want: &llmObjects{Main: both.Main}, deployments: map[string]*appsv1.Deployment{
			"main": deployment("chat-kserve", corev1.ConditionTrue, 1)}},
			"True", ""},
		{"multi-node available", &llmWorkloads{want: &llmObjects{MainSet: lwsWith("")}, sets: map[string]*unstructured.Unstructured{
			"main": lwsWith("True")}}, "True", ""},
		{"multi-node progressing", &llmWorkloads{want: &llmObjects{MainSet: lwsWith("")}, sets: map[string]*unstructured.Unstructured{
			"main": lwsWith("")}}, "False", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := llmStatus(llm, tt.w, nil, now)
			c := conds(t, s)
			if c[ConditionReady] != tt.wantReady || c[ConditionWorkloadsReady] != tt.wantReady {
				t.Errorf("conditions = %v, want Ready/WorkloadsReady %s", c, tt.wantReady)
			}
			if c[ConditionPrefillWorkloadReady] != tt.wantPrefill {
				t.Errorf("PrefillWorkloadReady = %q, want %q", c[ConditionPrefillWorkloadReady], tt.wantPrefill)
			}
		})
	}
}

// lwsWith is a LeaderWorkerSet whose Available condition has the status, or none when "".
func lwsWith(available string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "chat-kserve-mn"}}}
	if available != "" {
		u.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Available", "status": available}}}
	}
	return u
}
