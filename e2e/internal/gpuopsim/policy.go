package gpuopsim

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// upgradePolicy is spec.driver.upgradePolicy, decoded as the operator
// decodes it (NVIDIA/k8s-operator-libs api/upgrade/v1alpha1/upgrade_spec.go).
type upgradePolicy struct {
	AutoUpgrade         bool                `json:"autoUpgrade,omitempty"`
	MaxParallelUpgrades int                 `json:"maxParallelUpgrades,omitempty"`
	MaxUnavailable      *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	PodDeletion         *podDeletionSpec    `json:"podDeletion,omitempty"`
	Drain               *drainSpec          `json:"drain,omitempty"`
}

type podDeletionSpec struct {
	Force          bool `json:"force,omitempty"`
	TimeoutSecond  int  `json:"timeoutSeconds,omitempty"`
	DeleteEmptyDir bool `json:"deleteEmptyDir,omitempty"`
}

type drainSpec struct {
	Enable         bool   `json:"enable,omitempty"`
	Force          bool   `json:"force,omitempty"`
	PodSelector    string `json:"podSelector,omitempty"`
	TimeoutSecond  int    `json:"timeoutSeconds,omitempty"`
	DeleteEmptyDir bool   `json:"deleteEmptyDir,omitempty"`
}

type driverSpec struct {
	Version       string         `json:"version,omitempty"`
	UpgradePolicy *upgradePolicy `json:"upgradePolicy,omitempty"`
}

type clusterPolicySpec struct {
	Driver driverSpec `json:"driver"`
}

// activePolicy picks the ClusterPolicy the operator acts on, the oldest one
// (the operator marks any other as ignored), and decodes its driver spec.
// ok is false when there is none.
func activePolicy(objs []*unstructured.Unstructured) (driverSpec, bool, error) {
	if len(objs) == 0 {
		return driverSpec{}, false, nil
	}
	sorted := append([]*unstructured.Unstructured{}, objs...)
	sort.Slice(sorted, func(i, j int) bool {
		ti, tj := sorted[i].GetCreationTimestamp(), sorted[j].GetCreationTimestamp()
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return sorted[i].GetName() < sorted[j].GetName()
	})
	spec, _, err := unstructured.NestedMap(sorted[0].Object, "spec")
	if err != nil {
		return driverSpec{}, false, fmt.Errorf("ClusterPolicy %s: %w", sorted[0].GetName(), err)
	}
	var out clusterPolicySpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &out); err != nil {
		return driverSpec{}, false, fmt.Errorf("ClusterPolicy %s: %w", sorted[0].GetName(), err)
	}
	return out.Driver, true, nil
}
