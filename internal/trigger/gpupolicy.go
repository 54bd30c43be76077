package trigger

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ClusterPolicyGVR is the GPU Operator's ClusterPolicy (NVIDIA/gpu-operator api/nvidia/v1), read
// through the dynamic client: drain-guardian does not depend on the operator's Go types.
var ClusterPolicyGVR = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1", Resource: "clusterpolicies"}

// UpgradePolicy is what of the ClusterPolicy's spec.driver.upgradePolicy shapes the drains of a
// driver upgrade (NVIDIA/k8s-operator-libs api/upgrade/v1alpha1/upgrade_spec.go,
// DriverUpgradePolicySpec).
type UpgradePolicy struct {
	// AutoUpgrade: the upgrade controller runs. When false it removes every state label
	// (NVIDIA/gpu-operator controllers/upgrade_controller.go).
	AutoUpgrade bool
	// MaxParallelUpgrades bounds the nodes upgraded at once; 0 means no limit.
	MaxParallelUpgrades int
	// MaxUnavailable bounds the managed nodes cordoned or not Ready at once: a count or a
	// percentage of the managed nodes, rounded up. Nil means all of them.
	MaxUnavailable *intstr.IntOrString
	// PodDeletionTimeout is how long the pod-deletion step keeps evicting the GPU pods before the
	// node fails its upgrade; 0 means no limit (or no podDeletion section, on which the upgrade
	// controller does not move the node at all).
	PodDeletionTimeout time.Duration
	// DrainEnabled: a failed pod deletion is followed by a full drain instead of upgrade-failed.
	DrainEnabled bool
	// DrainTimeout bounds that drain; 0 means no limit.
	DrainTimeout time.Duration
}

// DefaultUpgradePolicy is the policy the GPU Operator's Helm chart installs
// (NVIDIA/gpu-operator deployments/gpu-operator/values.yaml, driver.upgradePolicy): the policy to
// assume when the ClusterPolicy cannot be read.
func DefaultUpgradePolicy() UpgradePolicy {
	quarter := intstr.FromString("25%")
	return UpgradePolicy{
		AutoUpgrade:         true,
		MaxParallelUpgrades: 1,
		MaxUnavailable:      &quarter,
		PodDeletionTimeout:  300 * time.Second,
		DrainTimeout:        300 * time.Second,
	}
}

// ActiveUpgradePolicy is the upgrade policy of the ClusterPolicy the GPU Operator acts on: the oldest
// one (it marks any other ignored). With none, because the API is absent or not readable, it is
// DefaultUpgradePolicy: the state labels, if any, still say where each node stands.
func ActiveUpgradePolicy(clusterPolicies []*unstructured.Unstructured) (UpgradePolicy, error) {
	if len(clusterPolicies) == 0 {
		return DefaultUpgradePolicy(), nil
	}
	oldest := slices.MinFunc(clusterPolicies, func(a, b *unstructured.Unstructured) int {
		ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
		if c := ta.Compare(tb.Time); c != 0 {
			return c
		}
		return strings.Compare(a.GetName(), b.GetName())
	})
	return ReadUpgradePolicy(oldest)
}

// CRD defaults of the fields inside upgradePolicy (config/crd/bases/nvidia.com_clusterpolicies.yaml),
// which the API server fills in when the field is absent and its parent present.
const (
	defaultMaxParallelUpgrades = 1
	defaultMaxUnavailable      = "25%"
	defaultTimeoutSeconds      = 300
)

// maxTimeoutSeconds caps a timeout read from the ClusterPolicy so that it converts to a Duration
// without overflow; a century is "no limit" in all but name.
const maxTimeoutSeconds = 100 * 365 * 24 * 3600

// ReadUpgradePolicy reads spec.driver.upgradePolicy of a ClusterPolicy. A ClusterPolicy without
// one disables driver upgrades (AutoUpgrade false). Fields the object leaves out take the CRD's
// defaults. A field of the wrong type or out of range is an error: the caller then falls back to
// DefaultUpgradePolicy rather than guess.
func ReadUpgradePolicy(clusterPolicy *unstructured.Unstructured) (UpgradePolicy, error) {
	policy, found, err := unstructured.NestedMap(clusterPolicy.Object, "spec", "driver", "upgradePolicy")
	if err != nil {
		return UpgradePolicy{}, fmt.Errorf("spec.driver.upgradePolicy: %w", err)
	}
	if !found {
		return UpgradePolicy{}, nil
	}
	r := policyReader{obj: policy}
	out := UpgradePolicy{
		AutoUpgrade:         r.boolean(false, "autoUpgrade"),
		MaxParallelUpgrades: r.count(defaultMaxParallelUpgrades, "maxParallelUpgrades"),
		MaxUnavailable:      r.intOrPercent(defaultMaxUnavailable, "maxUnavailable"),
	}
	if r.has("podDeletion") {
		out.PodDeletionTimeout = r.seconds(defaultTimeoutSeconds, "podDeletion", "timeoutSeconds")
	}
	if r.has("drain") {
		out.DrainEnabled = r.boolean(false, "drain", "enable")
		out.DrainTimeout = r.seconds(defaultTimeoutSeconds, "drain", "timeoutSeconds")
	}
	if r.err != nil {
		return UpgradePolicy{}, r.err
	}
	return out, nil
}

// policyReader reads fields of upgradePolicy, keeping the first error.
type policyReader struct {
	obj map[string]any
	err error
}

func (r *policyReader) field(path ...string) (any, bool) {
	v, found, err := unstructured.NestedFieldNoCopy(r.obj, path...)
	if err != nil {
		r.fail(path, err)
		return nil, false
	}
	return v, found && v != nil
}

func (r *policyReader) fail(path []string, err error) {
	if r.err == nil {
		r.err = fmt.Errorf("spec.driver.upgradePolicy.%s: %w", strings.Join(path, "."), err)
	}
}

func (r *policyReader) has(path ...string) bool {
	_, ok := r.field(path...)
	return ok
}

func (r *policyReader) boolean(def bool, path ...string) bool {
	v, ok := r.field(path...)
	if !ok {
		return def
	}
	b, isBool := v.(bool)
	if !isBool {
		r.fail(path, fmt.Errorf("not a boolean: %v", v))
	}
	return b
}

// count reads a non-negative integer.
func (r *policyReader) count(def int64, path ...string) int {
	v, ok := r.field(path...)
	if !ok {
		return int(def)
	}
	n, err := integer(v)
	if err == nil && (n < 0 || n > math.MaxInt32) {
		err = fmt.Errorf("out of range: %d", n)
	}
	if err != nil {
		r.fail(path, err)
	}
	return int(n)
}

func (r *policyReader) seconds(def int64, path ...string) time.Duration {
	v, ok := r.field(path...)
	n := def
	if ok {
		var err error
		if n, err = integer(v); err == nil && n < 0 {
			err = fmt.Errorf("negative: %d", n)
		}
		if err != nil {
			r.fail(path, err)
			return 0
		}
	}
	return time.Duration(min(n, maxTimeoutSeconds)) * time.Second
}

func (r *policyReader) intOrPercent(def string, path ...string) *intstr.IntOrString {
	v, ok := r.field(path...)
	if !ok {
		d := intstr.FromString(def)
		return &d
	}
	var out intstr.IntOrString
	if s, isString := v.(string); isString {
		out = intstr.FromString(s)
	} else {
		n, err := integer(v)
		if err == nil && (n < 0 || n > math.MaxInt32) {
			err = fmt.Errorf("out of range: %d", n)
		}
		if err != nil {
			r.fail(path, err)
			return nil
		}
		out = intstr.FromInt32(int32(n))
	}
	// Validate as the upgrade controller will use it: a malformed percentage fails there too.
	if scaled, err := intstr.GetScaledValueFromIntOrPercent(&out, 100, true); err != nil || scaled < 0 {
		r.fail(path, fmt.Errorf("not a count or a percentage: %v", v))
		return nil
	}
	return &out
}

// integer accepts the number types a JSON or YAML decoder produces for an integer.
func integer(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > math.MaxInt64/2 {
			return 0, fmt.Errorf("not an integer: %v", n)
		}
		return int64(n), nil
	}
	return 0, fmt.Errorf("not an integer: %v", v)
}
