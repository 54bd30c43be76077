package trigger

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

func clusterPolicy(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(manifest), &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

func intOrString(v intstr.IntOrString) *intstr.IntOrString { return &v }

func TestReadUpgradePolicy(t *testing.T) {
	tests := []struct {
		name     string
		manifest string
		want     UpgradePolicy
	}{
		{
			name:     "no upgrade policy: upgrades off",
			manifest: "spec: {driver: {enabled: true}}",
			want:     UpgradePolicy{},
		},
		{
			name:     "empty upgrade policy takes the CRD defaults",
			manifest: "spec: {driver: {upgradePolicy: {}}}",
			want:     UpgradePolicy{MaxParallelUpgrades: 1, MaxUnavailable: intOrString(intstr.FromString("25%"))},
		},
		{
			name: "the Helm chart's policy",
			manifest: `
spec:
  driver:
    upgradePolicy:
      autoUpgrade: true
      maxParallelUpgrades: 1
      maxUnavailable: 25%
      waitForCompletion: {timeoutSeconds: 0, podSelector: ""}
      podDeletion: {force: false, timeoutSeconds: 300, deleteEmptyDir: false}
      drain: {enable: false, force: false, podSelector: "", timeoutSeconds: 300, deleteEmptyDir: false}
`,
			want: DefaultUpgradePolicy(),
		},
		{
			name: "explicit values, sections without timeouts take the defaults",
			manifest: `
spec:
  driver:
    upgradePolicy:
      autoUpgrade: true
      maxParallelUpgrades: 0
      maxUnavailable: 2
      podDeletion: {force: true}
      drain: {enable: true, timeoutSeconds: 0}
`,
			want: UpgradePolicy{AutoUpgrade: true, MaxUnavailable: intOrString(intstr.FromInt32(2)),
				PodDeletionTimeout: 300 * time.Second, DrainEnabled: true},
		},
		{
			name:     "an absurd timeout is capped",
			manifest: "spec: {driver: {upgradePolicy: {podDeletion: {timeoutSeconds: 99999999999999}}}}",
			want: UpgradePolicy{MaxParallelUpgrades: 1, MaxUnavailable: intOrString(intstr.FromString("25%")),
				PodDeletionTimeout: maxTimeoutSeconds * time.Second},
		},
	}
	for _, tt := range tests {
		got, err := ReadUpgradePolicy(clusterPolicy(t, tt.manifest))
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: ReadUpgradePolicy() = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestReadUpgradePolicyRejectsBadValues(t *testing.T) {
	for _, manifest := range []string{
		"spec: {driver: {upgradePolicy: {autoUpgrade: yes-please}}}",
		"spec: {driver: {upgradePolicy: {maxParallelUpgrades: -1}}}",
		"spec: {driver: {upgradePolicy: {maxParallelUpgrades: 1.5}}}",
		"spec: {driver: {upgradePolicy: {maxParallelUpgrades: 99999999999}}}",
		"spec: {driver: {upgradePolicy: {maxUnavailable: lots}}}",
		"spec: {driver: {upgradePolicy: {maxUnavailable: -3}}}",
		"spec: {driver: {upgradePolicy: {maxUnavailable: '-10%'}}}",
		"spec: {driver: {upgradePolicy: {podDeletion: {timeoutSeconds: -5}}}}",
		"spec: {driver: {upgradePolicy: {drain: {timeoutSeconds: soon}}}}",
		"spec: {driver: {upgradePolicy: [1, 2]}}",
		"spec: {driver: {upgradePolicy: {podDeletion: 7}}}",
	} {
		if got, err := ReadUpgradePolicy(clusterPolicy(t, manifest)); err == nil {
			t.Errorf("%s: ReadUpgradePolicy() = %+v, want an error", manifest, got)
		}
	}
}

func TestActiveUpgradePolicy(t *testing.T) {
	// No ClusterPolicy (the API absent, or not readable): the Helm chart's policy.
	if got, err := ActiveUpgradePolicy(nil); err != nil || !reflect.DeepEqual(got, DefaultUpgradePolicy()) {
		t.Errorf("ActiveUpgradePolicy(nil) = %+v, %v; want the default policy", got, err)
	}
	older := clusterPolicy(t, "spec: {driver: {upgradePolicy: {autoUpgrade: true, maxParallelUpgrades: 3}}}")
	older.SetName("b-policy")
	older.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	newer := clusterPolicy(t, "spec: {driver: {upgradePolicy: {autoUpgrade: true, maxParallelUpgrades: 7}}}")
	newer.SetName("a-policy")
	newer.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)))
	got, err := ActiveUpgradePolicy([]*unstructured.Unstructured{newer, older})
	if err != nil || got.MaxParallelUpgrades != 3 {
		t.Errorf("ActiveUpgradePolicy() = %+v, %v; want the oldest ClusterPolicy's (maxParallelUpgrades 3)", got, err)
	}
}
