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
	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/options"
)

// policyEval evaluates the ValidatingAdmissionPolicy's variables and validations with cel-go, as the
// API server does for a request of the guardian's ServiceAccount (without the API server's typed
// schemas: objects are plain maps). An expression that fails to evaluate refuses, as failurePolicy
// Fail does.
type policyEval struct {
	t *testing.T
	p *admissionregistrationv1.ValidatingAdmissionPolicy
	// params is the parameter object (the settings ConfigMap) as a map; nil under a binding without
	// a parameter, which the API server evaluates with params null.
	params map[string]any
}

// newPolicyEval evaluates the rendered policy with the rendered settings ConfigMap as its parameter.
func newPolicyEval(t *testing.T, r rendered) policyEval {
	t.Helper()
	return policyEval{t: t, p: find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, r, "drain-guardian-writes"),
		params: settingsParams(find[*corev1.ConfigMap](t, r, "drain-guardian-settings").Data)}
}

func settingsParams(data map[string]string) map[string]any {
	d := map[string]any{}
	for k, v := range data {
		d[k] = v
	}
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": d}
}

func (e policyEval) admit(resource, subResource string, object, oldObject map[string]any) (bool, string) {
	e.t.Helper()
	env, err := cel.NewEnv(cel.Variable("request", cel.DynType), cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType), cel.Variable("variables", cel.DynType), cel.Variable("params", cel.DynType))
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
		var params any
		if e.params != nil {
			params = e.params
		}
		out, _, err := prg.Eval(map[string]any{"request": request, "object": object, "oldObject": oldObject, "variables": vars, "params": params})
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
	e := newPolicyEval(t, r)
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

// The policy's bound and the daemon's --max-surge-replicas are one setting in every install: the
// Deployment takes the flag from the settings ConfigMap's key and passes no --max-surge-replicas
// argument, a binding passes the same ConfigMap to the policy as its parameter, and the policy then
// admits a change by exactly that much. A second binding without a parameter holds the flag's ceiling
// whatever happens to the ConfigMap (the API server skips a binding whose parameter is missing), and a
// setting outside the flag's range refuses every write of the guardian.
func TestAdmissionPolicyBoundsFollowMaxSurgeReplicas(t *testing.T) {
	for _, dir := range installable {
		t.Run(dir, func(t *testing.T) {
			r, _ := render(t, dir)
			e := newPolicyEval(t, r)
			settings := find[*corev1.ConfigMap](t, r, "drain-guardian-settings")
			if pk := e.p.Spec.ParamKind; pk == nil || pk.APIVersion != "v1" || pk.Kind != "ConfigMap" {
				t.Fatalf("the policy's paramKind is %+v, want v1 ConfigMap", pk)
			}
			if ref := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, r, "drain-guardian-writes").Spec.ParamRef; ref != nil {
				t.Errorf("binding drain-guardian-writes has paramRef %+v: the ceiling must hold without the ConfigMap", ref)
			}
			ref := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, r, "drain-guardian-writes-settings").Spec.ParamRef
			if ref == nil || ref.Name != settings.Name || ref.Namespace != settings.Namespace {
				t.Fatalf("binding drain-guardian-writes-settings has paramRef %+v, want ConfigMap %s/%s", ref, settings.Namespace, settings.Name)
			}
			if ref.ParameterNotFoundAction == nil || *ref.ParameterNotFoundAction != admissionregistrationv1.AllowAction {
				t.Errorf("parameterNotFoundAction %v: Deny refuses every user's matched writes while the ConfigMap is missing", ref.ParameterNotFoundAction)
			}

			// The daemon's value: its flags parsed from the Deployment's arguments, then its
			// environment resolved from the ConfigMap, as the kubelet and the daemon do.
			c := find[*appsv1.Deployment](t, r, "drain-guardian").Spec.Template.Spec.Containers[0]
			env := map[string]string{}
			for _, v := range c.Env {
				switch {
				case v.ValueFrom == nil:
					env[v.Name] = v.Value
				case v.ValueFrom.ConfigMapKeyRef != nil && v.ValueFrom.ConfigMapKeyRef.Name == settings.Name:
					env[v.Name] = settings.Data[v.ValueFrom.ConfigMapKeyRef.Key]
				}
			}
			daemon := func(env map[string]string) int {
				t.Helper()
				o := options.NewOptions()
				fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
				fs.SetOutput(&bytes.Buffer{})
				o.AddFlags(fs)
				if err := fs.Parse(c.Args[1:]); err != nil {
					t.Fatal(err)
				}
				if fs.Changed("max-surge-replicas") {
					t.Fatalf("the Deployment passes --max-surge-replicas, which wins over the settings ConfigMap")
				}
				if err := options.ApplyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
					t.Fatal(err)
				}
				return o.MaxSurgeReplicas
			}
			if got, want := daemon(env), settings.Data["max-surge-replicas"]; strconv.Itoa(got) != want {
				t.Fatalf("the daemon's --max-surge-replicas is %d, the settings say %q", got, want)
			}

			raise := func(e policyEval, by int) (bool, string) {
				return e.admit("deployments", "", withSpec(map[string]any{"replicas": 1 + by}), withSpec(map[string]any{"replicas": 1}))
			}
			for _, v := range []int{daemon(env), 1, 5, options.MaxSurgeReplicasCeiling} {
				data := map[string]string{"max-surge-replicas": strconv.Itoa(v)}
				e := policyEval{t: t, p: e.p, params: settingsParams(data)}
				if got := daemon(map[string]string{options.EnvName("max-surge-replicas"): data["max-surge-replicas"]}); got != v {
					t.Errorf("setting %d: the daemon runs with %d", v, got)
				}
				if ok, msg := raise(e, v); !ok {
					t.Errorf("setting %d: a surge by %d is refused: %s", v, v, msg)
				}
				if ok, _ := raise(e, v+1); ok {
					t.Errorf("setting %d: a change by %d is admitted", v, v+1)
				}
			}
			// The binding without a parameter: the flag's ceiling.
			ceiling := policyEval{t: t, p: e.p}
			if ok, msg := raise(ceiling, options.MaxSurgeReplicasCeiling); !ok {
				t.Errorf("without a parameter a change by the ceiling %d is refused: %s", options.MaxSurgeReplicasCeiling, msg)
			}
			if ok, _ := raise(ceiling, options.MaxSurgeReplicasCeiling+1); ok {
				t.Errorf("without a parameter a change by %d is admitted", options.MaxSurgeReplicasCeiling+1)
			}
			for name, data := range map[string]map[string]string{
				"missing key":            {},
				"no number":              {"max-surge-replicas": "two"},
				"zero":                   {"max-surge-replicas": "0"},
				"above the flag's range": {"max-surge-replicas": strconv.Itoa(options.MaxSurgeReplicasCeiling + 1)},
			} {
				if ok, msg := raise(policyEval{t: t, p: e.p, params: settingsParams(data)}, 1); ok || !strings.Contains(msg, "drain-guardian-settings") {
					t.Errorf("%s: admitted %v (%q), want every write refused naming the settings", name, ok, msg)
				}
			}
		})
	}
}
