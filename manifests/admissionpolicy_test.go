package manifests

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"
	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/drain-guardian/drain-guardian/internal/options"
)

// policyEval evaluates the ValidatingAdmissionPolicy's variables and validations with cel-go, as the
// API server does for a request of the guardian's ServiceAccount (without the API server's typed
// schemas: objects are plain maps). An expression that fails to evaluate refuses, as failurePolicy
// Fail does.
type policyEval struct {
	t *testing.T
	p *admissionregistrationv1.ValidatingAdmissionPolicy
}

func (e policyEval) admit(resource, subResource string, object, oldObject map[string]any) (bool, string) {
	e.t.Helper()
	env, err := cel.NewEnv(cel.Variable("request", cel.DynType), cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType), cel.Variable("variables", cel.DynType))
	if err != nil {
		e.t.Fatal(err)
	}
	request := map[string]any{"namespace": "models", "name": "llm", "resource": map[string]any{"resource": resource},
		"userInfo": map[string]any{"username": "system:serviceaccount:drain-guardian:drain-guardian"}}
	if subResource != "" {
		request["subResource"] = subResource
	}
	vars := map[string]any{}
	eval := func(expr string) (ref.Val, error) {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			e.t.Fatalf("compiling %q: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			e.t.Fatal(err)
		}
		out, _, err := prg.Eval(map[string]any{"request": request, "object": object, "oldObject": oldObject, "variables": vars})
		return out, err
	}
	for _, v := range e.p.Spec.Variables {
		// Variables are evaluated when first used; an error only counts if a validation reads it.
		if out, err := eval(v.Expression); err == nil {
			vars[v.Name] = out
		}
	}
	for _, v := range e.p.Spec.Validations {
		out, err := eval(v.Expression)
		if err != nil {
			return false, err.Error()
		}
		if out.Value() != true {
			msg, _ := eval(v.MessageExpression)
			return false, fmt.Sprint(msg.Value())
		}
	}
	return true, ""
}

func withSpec(spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "X", "metadata": map[string]any{"name": "llm", "namespace": "models", "resourceVersion": "1"},
		"spec": spec}
}

// The policy bounds the counts the guardian's token may write: never below 1, and never changed by
// more than --max-surge-replicas in one write, whichever kind and field.
func TestAdmissionPolicyBoundsReplicaWrites(t *testing.T) {
	r, _ := render(t, "base")
	e := policyEval{t: t, p: find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, r, "drain-guardian-writes")}
	type m = map[string]any
	tests := []struct {
		name, resource, sub string
		old, cur            m
		allowed             bool
	}{
		{"surge 1 → 2", "deployments", "", m{"replicas": 1}, m{"replicas": 2}, true},
		{"restore 3 → 1", "statefulsets", "", m{"replicas": 3}, m{"replicas": 1}, true},
		{"scale up by 3", "deployments", "", m{"replicas": 1}, m{"replicas": 4}, false},
		{"scale to two billion", "deployments", "", m{"replicas": 1}, m{"replicas": 2000000000}, false},
		{"scale to 0", "deployments", "", m{"replicas": 1}, m{"replicas": 0}, false},
		{"other field", "deployments", "", m{"replicas": 1, "paused": false}, m{"replicas": 1, "paused": true}, false},
		{"HPA minimum added", "horizontalpodautoscalers", "", m{"maxReplicas": 3}, m{"minReplicas": 2, "maxReplicas": 3}, true},
		{"HPA minimum and maximum raised", "horizontalpodautoscalers", "", m{"minReplicas": 1, "maxReplicas": 1}, m{"minReplicas": 2, "maxReplicas": 2}, true},
		{"HPA maximum raised by 9", "horizontalpodautoscalers", "", m{"minReplicas": 1, "maxReplicas": 1}, m{"minReplicas": 1, "maxReplicas": 10}, false},
		{"HPA minimum removed", "horizontalpodautoscalers", "", m{"minReplicas": 2, "maxReplicas": 2}, m{"maxReplicas": 2}, true},
		{"InferenceService min raised, unbounded max of 0 untouched", "inferenceservices", "",
			m{"predictor": m{"minReplicas": 1, "maxReplicas": 0}}, m{"predictor": m{"minReplicas": 2, "maxReplicas": 0}}, true},
		{"InferenceService min to 0", "inferenceservices", "", m{"predictor": m{"minReplicas": 1}}, m{"predictor": m{"minReplicas": 0}}, false},
		{"LLMInferenceService prefill raised", "llminferenceservices", "", m{"prefill": m{"replicas": 1}}, m{"prefill": m{"replicas": 2}}, true},
		{"LLMInferenceService prefill raised by 5", "llminferenceservices", "", m{"prefill": m{"replicas": 1}}, m{"prefill": m{"replicas": 6}}, false},
		{"LLMInferenceService count removed", "llminferenceservices", "", m{"replicas": 2}, m{}, true},
		{"LeaderWorkerSet one group added", "leaderworkersets", "", m{"replicas": 1, "leaderWorkerTemplate": m{"size": 2}}, m{"replicas": 2, "leaderWorkerTemplate": m{"size": 2}}, true},
		{"LeaderWorkerSet restored 2 → 1", "leaderworkersets", "", m{"replicas": 2}, m{"replicas": 1}, true},
		{"LeaderWorkerSet raised by 3 groups", "leaderworkersets", "", m{"replicas": 1}, m{"replicas": 4}, false},
		{"LeaderWorkerSet to 0 groups", "leaderworkersets", "", m{"replicas": 1}, m{"replicas": 0}, false},
		{"LeaderWorkerSet group size changed", "leaderworkersets", "", m{"replicas": 1, "leaderWorkerTemplate": m{"size": 2}}, m{"replicas": 1, "leaderWorkerTemplate": m{"size": 20}}, false},
		{"Scale 1 → 2", "rollouts", "scale", m{"replicas": 1}, m{"replicas": 2}, true},
		{"Scale 1 → 100", "rollouts", "scale", m{"replicas": 1}, m{"replicas": 100}, false},
		{"Scale to 0", "deployments", "scale", m{"replicas": 1}, m{"replicas": 0}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, msg := e.admit(tt.resource, tt.sub, withSpec(tt.cur), withSpec(tt.old))
			if ok != tt.allowed {
				t.Errorf("allowed = %v (%s), want %v", ok, msg, tt.allowed)
			}
			if !ok && strings.Contains(tt.name, "0") && tt.name != "other field" && !strings.Contains(msg, "below 1") {
				t.Errorf("refused with %q, want the bound named", msg)
			}
		})
	}
	pod := map[string]any{"metadata": map[string]any{"name": "p", "annotations": map[string]any{"controller.kubernetes.io/pod-deletion-cost": "-1000"}}, "spec": map[string]any{}}
	oldPod := map[string]any{"metadata": map[string]any{"name": "p"}, "spec": map[string]any{}}
	if ok, msg := e.admit("pods", "", pod, oldPod); !ok {
		t.Errorf("a pod-deletion-cost write is refused: %s", msg)
	}
}

// The policy's bound is the daemon's --max-surge-replicas in every install: the flag's value when the
// Deployment passes it, else its default.
func TestAdmissionPolicyBoundsFollowMaxSurgeReplicas(t *testing.T) {
	for _, dir := range installable {
		t.Run(dir, func(t *testing.T) {
			r, _ := render(t, dir)
			p := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, r, "drain-guardian-writes")
			policy := ""
			for _, v := range p.Spec.Variables {
				if v.Name == "maxSurgeReplicas" {
					policy = v.Expression
				}
			}
			o := options.NewOptions()
			fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
			fs.SetOutput(&bytes.Buffer{})
			o.AddFlags(fs)
			args := find[*appsv1.Deployment](t, r, "drain-guardian").Spec.Template.Spec.Containers[0].Args
			if err := fs.Parse(args[1:]); err != nil {
				t.Fatal(err)
			}
			if policy != strconv.Itoa(o.MaxSurgeReplicas) {
				t.Errorf("the policy's maxSurgeReplicas is %q, the daemon's --max-surge-replicas %d", policy, o.MaxSurgeReplicas)
			}
		})
	}
}
