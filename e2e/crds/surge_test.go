package crds

import (
	"context"
	"os"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// surgeCRDFile is the guardian's own CRD, generated from api/v1alpha1 by `make generate` and shipped
// in manifests/base; the test bed installs it from there too.
const surgeCRDFile = "../../manifests/base/crd/drain-guardian.io_surges.yaml"

func surgeCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(surgeCRDFile)
	if err != nil {
		t.Fatal(err)
	}
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		t.Fatalf("%s: %v", surgeCRDFile, err)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(c)
	return c
}

// TestSurgeCRDPassesAPIServerValidation: the generated CRD is structural, and its CEL rules compile
// and fit the API server's cost budget.
func TestSurgeCRDPassesAPIServerValidation(t *testing.T) {
	c := surgeCRD(t)
	if c.Name != "surges.drain-guardian.io" || c.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("CRD %s scope %s, want surges.drain-guardian.io Namespaced", c.Name, c.Spec.Scope)
	}
	if len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Subresources == nil || c.Spec.Versions[0].Subresources.Status == nil {
		t.Errorf("want one version with a status subresource, got %+v", c.Spec.Versions)
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal(t, c)); len(errs) > 0 {
		t.Fatalf("invalid CRD: %v", errs.ToAggregate())
	}
}

const surgeFull = `{
  "apiVersion": "drain-guardian.io/v1alpha1", "kind": "Surge",
  "metadata": {"name": "deployment-llm", "namespace": "models"},
  "spec": {
    "target": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm", "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
    "podOwner": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm", "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
    "fields": [{"path": "/spec/replicas", "original": 1, "set": 2}],
    "node": "worker-1", "pool": "worker", "trigger": "MCODrain", "drain": "rendered-worker-abc",
    "pdb": "llm", "blockedPod": "llm-5d8f7-x2x", "delta": 1, "replicas": 1, "readyBefore": 0,
    "startTime": "2025-01-01T00:00:00Z"
  },
  "status": {"phase": "Surged", "conditions": [
    {"type": "Surged", "status": "True", "reason": "Surged", "message": "", "lastTransitionTime": "2025-01-01T00:00:01Z"}
  ]}
}`

func TestSurgeSchema(t *testing.T) {
	s := serverFor(t, internal(t, surgeCRD(t)), "v1alpha1")
	valid := parse(t, surgeFull)
	spec := func(k ...string) []string { return append([]string{"spec"}, k...) }
	field0 := func(k string, v any) map[string]any {
		f := map[string]any{"path": "/spec/replicas", "set": int64(2)}
		f[k] = v
		return set(valid, []any{f}, "spec", "fields")
	}
	tests := []struct {
		name    string
		obj     map[string]any
		wantErr string // substring of the aggregated error; "" = admitted
	}{
		{"complete", valid, ""},
		{"no status", set(valid, nil, "status"), ""},
		{"absent original", set(valid, []any{map[string]any{"path": "/spec/replicas", "set": int64(2), "explicitBeforeRemove": int64(1)}}, spec("fields")...), ""},
		{"no fields", set(valid, []any{}, spec("fields")...), "fields"},
		{"five fields", set(valid, []any{map[string]any{"path": "/a", "set": int64(1)}, map[string]any{"path": "/b", "set": int64(1)},
			map[string]any{"path": "/c", "set": int64(1)}, map[string]any{"path": "/d", "set": int64(1)}, map[string]any{"path": "/e", "set": int64(1)}}, spec("fields")...), "fields"},
		{"path not a pointer", field0("path", "spec/replicas"), "path"},
		{"path with an escape", field0("path", "/spec/~1x"), "path"},
		{"set missing", set(valid, []any{map[string]any{"path": "/spec/replicas"}}, spec("fields")...), "set"},
		{"zero delta", set(valid, int64(0), spec("delta")...), "delta"},
		{"negative replicas", set(valid, int64(-1), spec("replicas")...), "replicas"},
		{"negative readyBefore", set(valid, int64(-1), spec("readyBefore")...), "readyBefore"},
		{"empty uid", set(valid, "", spec("target", "uid")...), "uid"},
		{"empty node", set(valid, "", spec("node")...), "node"},
		{"missing podOwner", set(valid, nil, spec("podOwner")...), "podOwner"},
		{"missing spec", set(valid, nil, "spec"), "spec"},
		{"bad startTime", set(valid, "yesterday", spec("startTime")...), "startTime"},
		{"unknown phase", set(valid, "Done", "status", "phase"), "phase"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := s.admit(tt.obj)
			checkErrs(t, errs, tt.wantErr)
		})
	}

	t.Run("unknown fields are pruned", func(t *testing.T) {
		got, errs := s.admit(set(valid, "x", spec("extra")...))
		checkErrs(t, errs, "")
		if _, ok := get(got, "spec", "extra"); ok {
			t.Error("unknown spec field kept")
		}
	})
}

// TestSurgeSpecImmutable: the spec is fixed at creation (CEL transition rule); the status is not.
func TestSurgeSpecImmutable(t *testing.T) {
	s := serverFor(t, internal(t, surgeCRD(t)), "v1alpha1")
	old := parse(t, surgeFull)
	update := func(obj map[string]any) field.ErrorList {
		t.Helper()
		errs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, old, celconfig.RuntimeCELCostBudget)
		return errs
	}
	checkErrs(t, update(set(old, "Ready", "status", "phase")), "")
	checkErrs(t, update(set(old, int64(2), "spec", "delta")), "spec is immutable")
	checkErrs(t, update(set(old, "worker-2", "spec", "node")), "spec is immutable")
	checkErrs(t, update(set(old, []any{map[string]any{"path": "/spec/replicas", "set": int64(3)}}, "spec", "fields")), "spec is immutable")
}

func checkErrs(t *testing.T, errs field.ErrorList, wantErr string) {
	t.Helper()
	switch {
	case wantErr == "" && len(errs) > 0:
		t.Errorf("rejected: %v", errs.ToAggregate())
	case wantErr != "" && len(errs) == 0:
		t.Errorf("admitted, want an error about %q", wantErr)
	case wantErr != "" && !strings.Contains(errs.ToAggregate().Error(), wantErr):
		t.Errorf("error %v does not mention %q", errs.ToAggregate(), wantErr)
	}
}
