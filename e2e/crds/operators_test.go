package crds

import (
	"context"
	"reflect"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
)

// TestOperatorCRDNames: the ClusterPolicy and NodeMaintenance CRDs are served
// under the real group, names, scope and version, with a status subresource.
func TestOperatorCRDNames(t *testing.T) {
	tests := []struct {
		kind, name, plural, version string
		short                       []string
	}{
		{kind: "ClusterPolicy", name: "clusterpolicies.nvidia.com", plural: "clusterpolicies", version: "v1"},
		{kind: "NodeMaintenance", name: "nodemaintenances.nodemaintenance.medik8s.io", plural: "nodemaintenances",
			version: "v1beta1", short: []string{"nm"}},
	}
	for _, tt := range tests {
		c := crd(t, tt.kind)
		if c.Name != tt.name || c.Spec.Scope != apiextensionsv1.ClusterScoped || c.Spec.Names.Plural != tt.plural ||
			!reflect.DeepEqual(c.Spec.Names.ShortNames, tt.short) {
			t.Errorf("%s: name %s scope %s names %+v", tt.kind, c.Name, c.Spec.Scope, c.Spec.Names)
		}
		if len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Name != tt.version || !c.Spec.Versions[0].Storage ||
			c.Spec.Versions[0].Subresources == nil || c.Spec.Versions[0].Subresources.Status == nil {
			t.Errorf("%s: versions %+v, want %s with a status subresource", tt.kind, c.Spec.Versions, tt.version)
		}
		if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal(t, c)); len(errs) > 0 {
			t.Errorf("%s: invalid CRD: %v", tt.kind, errs.ToAggregate())
		}
	}
}

// admitWithDefaults is admit preceded by the API server's defaulting.
func admitWithDefaults(t *testing.T, kind, version, body string) (map[string]any, []string) {
	t.Helper()
	in := internal(t, crd(t, kind))
	s := serverFor(t, in, version)
	obj := parse(t, body)
	structuraldefaulting.Default(obj, s.structural)
	out, errs := s.admit(obj)
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return out, msgs
}

// An empty upgradePolicy gets the real CRD's defaults, which
// trigger.ReadUpgradePolicy assumes for absent fields.
func TestClusterPolicyUpgradePolicyDefaults(t *testing.T) {
	obj, errs := admitWithDefaults(t, "ClusterPolicy", "v1", `{
	  "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
	  "spec": {"operator": {"defaultRuntime": "crio"},
	           "driver": {"enabled": true, "version": "550.90.07", "upgradePolicy": {"autoUpgrade": true, "podDeletion": {}}}},
	  "status": {"state": "ready", "namespace": "nvidia-gpu-operator"}
	}`)
	if len(errs) > 0 {
		t.Fatalf("rejected: %v", errs)
	}
	want := map[string]any{
		"autoUpgrade": true, "maxParallelUpgrades": int64(1), "maxUnavailable": "25%",
		"podDeletion": map[string]any{"force": false, "timeoutSeconds": int64(300), "deleteEmptyDir": false},
	}
	if got, _ := get(obj, "spec", "driver", "upgradePolicy"); !reflect.DeepEqual(got, want) {
		t.Errorf("upgradePolicy = %v, want %v", got, want)
	}
	// The untyped rest of a real ClusterPolicy is kept.
	if got, _ := get(obj, "spec", "operator", "defaultRuntime"); got != "crio" {
		t.Errorf("spec.operator pruned: %v", obj["spec"])
	}
	if got, _ := get(obj, "status", "namespace"); got != "nvidia-gpu-operator" {
		t.Errorf("status pruned: %v", obj["status"])
	}
}

func TestClusterPolicyRejectsBadUpgradePolicy(t *testing.T) {
	for _, policy := range []string{
		`{"maxParallelUpgrades": -1}`,
		`{"maxParallelUpgrades": "two"}`,
		`{"podDeletion": {"timeoutSeconds": -5}}`,
		`{"autoUpgrade": "yes"}`,
	} {
		_, errs := admitWithDefaults(t, "ClusterPolicy", "v1", `{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
		  "metadata": {"name": "cluster-policy"}, "spec": {"driver": {"upgradePolicy": `+policy+`}}}`)
		if len(errs) == 0 {
			t.Errorf("upgradePolicy %s accepted", policy)
		}
	}
}

func TestNodeMaintenanceFields(t *testing.T) {
	obj, errs := admitWithDefaults(t, "NodeMaintenance", "v1beta1", `{
	  "apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance", "metadata": {"name": "nm-gpu-1"},
	  "spec": {"nodeName": "gpu-1", "reason": "replace a DIMM", "color": "red"},
	  "status": {"phase": "Running", "drainProgress": 50, "lastError": "Cannot evict pod",
	             "pendingPods": ["model-abc"], "pendingPodsRefs": [{"namespace": "models", "name": "model-abc"}],
	             "totalpods": 4, "evictionPods": 2, "errorOnLeaseCount": 0, "lastUpdate": "2026-12-02T14:00:00Z"}
	}`)
	if len(errs) > 0 {
		t.Fatalf("rejected: %v", errs)
	}
	if _, kept := get(obj, "spec", "color"); kept {
		t.Error("unknown spec field kept")
	}
	if got, _ := get(obj, "status", "pendingPodsRefs", 0, "name"); got != "model-abc" {
		t.Errorf("status.pendingPodsRefs = %v", obj["status"])
	}
	if _, errs := admitWithDefaults(t, "NodeMaintenance", "v1beta1", `{"apiVersion": "nodemaintenance.medik8s.io/v1beta1",
	  "kind": "NodeMaintenance", "metadata": {"name": "nm"}, "spec": {"reason": "no node"}}`); len(errs) == 0 {
		t.Error("NodeMaintenance without spec.nodeName accepted")
	}
}
