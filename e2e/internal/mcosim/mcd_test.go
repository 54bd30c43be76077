package mcosim

import (
	"context"
	"encoding/base64"
	"reflect"
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	mcfgfake "github.com/openshift/client-go/machineconfiguration/clientset/versioned/fake"
	opfake "github.com/openshift/client-go/operator/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// registries.conf versions from the MCO's TestIsDrainRequired
// (pkg/daemon/drain_test.go): mc1, mc2 adds a digest-only mirror to a
// registry, mc3 removes a registry.
const (
	registriesMC1 = `
unqualified-search-registries = ["example.com", "foo.com"]

[[registry]]
  prefix = ""
  location = "example.com/repo/test-img"

  [[registry.mirror]]
    location = "mirror.com/repo/test-img"

[[registry]]
  prefix = ""
  location = "example.com/repo1/test-img1"

  [[registry.mirror]]
    location = "mirror.com/repo1/test-img1"
	pull-from-mirror= "digest-only"
`
	registriesMC2 = `
unqualified-search-registries = ["example.com", "foo.com"]

[[registry]]
prefix = ""
location = "example.com/repo/test-img"

[[registry.mirror]]
	location = "mirror.com/repo/test-img"

[[registry]]
prefix = ""
location = "example.com/repo1/test-img1"

[[registry.mirror]]
	location = "mirror.com/repo1/test-img1"
	pull-from-mirror = "digest-only"

[[registry.mirror]]
	location = "mirror1.com/repo1/test-img1"
	pull-from-mirror = "digest-only"
`
	registriesMC3 = `
unqualified-search-registries = ["example.com", "foo.com"]

[[registry]]
	prefix = ""
	location = "example.com/repo/test-img"

	[[registry.mirror]]
	location = "mirror.com/repo/test-img"
`
)

func fileAction(path string, actions ...opv1.NodeDisruptionPolicySpecAction) opv1.NodeDisruptionPolicySpecFile {
	return opv1.NodeDisruptionPolicySpecFile{Path: path, Actions: actions}
}

var (
	specNone         = opv1.NodeDisruptionPolicySpecAction{Type: opv1.NoneSpecAction}
	specDrain        = opv1.NodeDisruptionPolicySpecAction{Type: opv1.DrainSpecAction}
	specReboot       = opv1.NodeDisruptionPolicySpecAction{Type: opv1.RebootSpecAction}
	specDaemonReload = opv1.NodeDisruptionPolicySpecAction{Type: opv1.DaemonReloadSpecAction}
	specReloadCrio   = opv1.NodeDisruptionPolicySpecAction{Type: opv1.ReloadSpecAction, Reload: &opv1.ReloadService{ServiceName: "crio.service"}}
	specRestartCrio  = opv1.NodeDisruptionPolicySpecAction{Type: opv1.RestartSpecAction, Restart: &opv1.RestartService{ServiceName: "crio.service"}}
)

// TestDecideUpdate is the simulator's drain decision on cases taken from the
// MCO's own tests: TestCalculatePostConfigChangeAction and
// TestFindClosestFilePolicyPathMatch (pkg/daemon/update_test.go),
// TestIsDrainRequired (pkg/daemon/drain_test.go) and the e2e tests
// TestNodeDisruptionPolicies / TestNodeDisruptionPolicySpecialAction
// (test/e2e-2of2/nodedisrupt_test.go), with the MCO's default policies
// merged with the case's admin policies as the operator does.
func TestDecideUpdate(t *testing.T) {
	base := BaseRenderedConfig()
	tests := []struct {
		name       string
		from       RenderedConfig // zero: base
		change     []ConfigChange
		admin      opv1.NodeDisruptionPolicyConfig
		wantDrain  bool
		wantReboot bool
		wantAction []opv1.NodeDisruptionPolicyStatusAction
	}{
		{
			// TestCalculatePostConfigChangeAction: "a SSH key change is none"
			name:       "SSH key only: no drain",
			change:     []ConfigChange{SSHKeyChange("ssh-ed25519 AAAA new@example")},
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}},
		},
		{
			// TestCalculatePostConfigChangeAction: "a pull secret change is none"
			name:       "pull secret only: no drain",
			change:     []ConfigChange{FileChange("/var/lib/kubelet/config.json", `{"auths":{}}`)},
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}},
		},
		{
			// TestCalculatePostConfigChangeAction: "adding a pull secret is none"
			name:       "pull secret added: no drain",
			from:       base.With(func(r *RenderedConfig) { delete(r.Files, "/var/lib/kubelet/config.json") }),
			change:     []ConfigChange{FileChange("/var/lib/kubelet/config.json", `{"auths":{}}`)},
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}},
		},
		{
			name:       "pull secret and SSH key: no drain",
			change:     []ConfigChange{FileChange("/var/lib/kubelet/config.json", "{}"), SSHKeyChange("ssh-rsa AAAA x")},
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}},
		},
		{
			// TestCalculatePostConfigChangeAction: "mixed test - final should be reboot due to kargs changes"
			name:       "kernel argument: drain and reboot",
			change:     []ConfigChange{KernelArgChange("karg1"), SSHKeyChange("ssh-rsa AAAA x")},
			wantDrain:  true,
			wantReboot: true,
		},
		{
			// TestCalculatePostConfigChangeAction: "a osImage change (reboot) overwrites registries (reload) and SSH keys (none)"
			name:       "OS image: drain and reboot",
			change:     []ConfigChange{OSImageChange("quay.io/example/os@sha256:2"), SSHKeyChange("ssh-rsa AAAA x")},
			wantDrain:  true,
			wantReboot: true,
		},
		{
			name:       "kernel type: drain and reboot",
			change:     []ConfigChange{func(r *RenderedConfig) { r.KernelType = "realtime" }},
			wantDrain:  true,
			wantReboot: true,
		},
		{
			name:       "extension: drain and reboot",
			change:     []ConfigChange{func(r *RenderedConfig) { r.Extensions = []string{"usbguard"} }},
			wantDrain:  true,
			wantReboot: true,
		},
		{
			name:       "kernel type default spelled out: no change",
			change:     []ConfigChange{func(r *RenderedConfig) { r.KernelType = "default" }},
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}},
		},
		{
			// TestCalculatePostConfigChangeAction: "a normal file change is reboot"
			name:       "file without a policy: drain and reboot",
			change:     []ConfigChange{FileChange("/etc/random-reboot-file", "test 2\n")},
			wantDrain:  true,
			wantReboot: true,
		},
		{
			name:       "file removed, no policy: drain and reboot",
			change:     []ConfigChange{func(r *RenderedConfig) { delete(r.Files, "/etc/kubernetes/kubelet.conf") }},
			wantDrain:  true,
			wantReboot: true,
		},
		{
			// TestNodeDisruptionPolicies (testFilePolicy) with each action
			name:       "file with admin policy None: no drain",
			change:     []ConfigChange{FileChange("/etc/test-file", "x")},
			admin:      opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{fileAction("/etc/test-file", specNone)}},
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}},
		},
		{
			name:      "file with admin policy Reload: no drain, no reboot",
			change:    []ConfigChange{FileChange("/etc/test-file", "x")},
			admin:     opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{fileAction("/etc/test-file", specReloadCrio)}},
			wantDrain: false,
		},
		{
			name:   "file with admin policy Restart: no drain, no reboot",
			change: []ConfigChange{FileChange("/etc/test-file", "x")},
			admin:  opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{fileAction("/etc/test-file", specRestartCrio)}},
		},
		{
			name:   "file with admin policy DaemonReload and Restart: no drain, no reboot",
			change: []ConfigChange{FileChange("/etc/test-file", "x")},
			admin:  opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{fileAction("/etc/test-file", specDaemonReload, specRestartCrio)}},
		},
		{
			name:       "file with admin policy Drain: drain, no reboot",
			change:     []ConfigChange{FileChange("/etc/test-file", "x")},
			admin:      opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{fileAction("/etc/test-file", specDrain)}},
			wantDrain:  true,
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.DrainStatusAction}},
		},
		{
			name:       "file with admin policy Reboot: drain and reboot",
			change:     []ConfigChange{FileChange("/etc/test-file", "x")},
			admin:      opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{fileAction("/etc/test-file", specReboot)}},
			wantDrain:  true,
			wantReboot: true,
		},
		{
			// the admin's policy replaces the default None of the pull secret
			name:       "admin Drain overrides the pull secret's default None",
			change:     []ConfigChange{FileChange("/var/lib/kubelet/config.json", "{}")},
			admin:      opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{fileAction("/var/lib/kubelet/config.json", specDrain)}},
			wantDrain:  true,
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.DrainStatusAction}},
		},
		{
			// TestNodeDisruptionPolicies (testSSHKeyPolicy)
			name:       "SSH key with admin policy Drain: drain, no reboot",
			change:     []ConfigChange{SSHKeyChange("ssh-rsa AAAA x")},
			admin:      opv1.NodeDisruptionPolicyConfig{SSHKey: opv1.NodeDisruptionPolicySpecSSHKey{Actions: []opv1.NodeDisruptionPolicySpecAction{specDrain}}},
			wantDrain:  true,
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.DrainStatusAction}},
		},
		{
			// TestNodeDisruptionPolicies (testUnitPolicy)
			name:   "unit with admin policy Reload: no drain",
			change: []ConfigChange{UnitChange("test.service", "[Service]\nExecStart=/bin/true\n")},
			admin: opv1.NodeDisruptionPolicyConfig{Units: []opv1.NodeDisruptionPolicySpecUnit{{
				Name: "test.service", Actions: []opv1.NodeDisruptionPolicySpecAction{specReloadCrio}}}},
		},
		{
			name:   "unit with admin policy Drain: drain",
			change: []ConfigChange{UnitChange("test.service", "x")},
			admin: opv1.NodeDisruptionPolicyConfig{Units: []opv1.NodeDisruptionPolicySpecUnit{{
				Name: "test.service", Actions: []opv1.NodeDisruptionPolicySpecAction{specDrain}}}},
			wantDrain:  true,
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.DrainStatusAction}},
		},
		{
			name:       "unit without a policy: drain and reboot",
			change:     []ConfigChange{UnitChange("kubelet.service", "[Service]\nExecStart=/usr/bin/kubelet --v=4\n")},
			wantDrain:  true,
			wantReboot: true,
		},
		{
			// TestFindClosestFilePolicyPathMatch: the closest match wins
			name:   "closest path match: the deeper directory's Reboot",
			change: []ConfigChange{FileChange("/etc/mco/f1/f2/example", "x")},
			admin: opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{
				fileAction("/etc/mco/f1", specNone), fileAction("/etc/mco/f1/f2", specReboot), fileAction("/etc/mco/f1/f2/f3", specReloadCrio)}},
			wantDrain:  true,
			wantReboot: true,
		},
		{
			name:   "closest path match: the parent directory's None",
			change: []ConfigChange{FileChange("/etc/mco/f1/other", "x")},
			admin: opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{
				fileAction("/etc/mco/f1", specNone), fileAction("/etc/mco/f1/f2", specReboot)}},
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}},
		},
		{
			// TestFindClosestFilePolicyPathMatch: "a partial parent dir match, but no actual dir match"
			name:   "closest path match: a sibling's prefix does not match",
			change: []ConfigChange{FileChange("/etc/mco/f1/f2/f3", "x")},
			admin: opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{
				fileAction("/etc/mco/f1/f2/f3/f4", specNone), fileAction("/etc/mco/f1/f2/test", specNone)}},
			wantDrain:  true,
			wantReboot: true,
		},
		{
			// None next to a Reboot: one Reboot
			name:       "mixed None and Reboot: drain and reboot",
			change:     []ConfigChange{FileChange("/var/lib/kubelet/config.json", "{}"), FileChange("/etc/random-reboot-file", "x")},
			wantDrain:  true,
			wantReboot: true,
		},
		{
			// None next to a Reload: the None is dropped
			name:       "mixed None and Reload: the Reload, no drain",
			change:     []ConfigChange{FileChange("/var/lib/kubelet/config.json", "{}"), FileChange("/etc/containers/policy.json", "{}")},
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.ReloadStatusAction, Reload: &opv1.ReloadService{ServiceName: "crio.service"}}},
		},
		{
			// TestCalculatePostConfigChangeAction: "updating openshift-config-user-ca-bundle.crt is crio restart"
			name:   "user CA bundle: restarts, no drain",
			change: []ConfigChange{FileChange("/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt", "ca")},
		},
		{
			// TestIsDrainRequired: "only new mirrors got added to the registry with pull-from-mirror=digest-only"
			name:       "registries.conf: a digest-only mirror added: no drain",
			from:       base.With(FileChange(containerRegistryConfPath, registriesMC1)),
			change:     []ConfigChange{FileChange(containerRegistryConfPath, registriesMC2)},
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.SpecialStatusAction}},
		},
		{
			// TestIsDrainRequired: "only new registry added with pull-from-mirror=digest-only"
			name:   "registries.conf: a registry with digest-only mirrors added: no drain",
			from:   base.With(FileChange(containerRegistryConfPath, registriesMC3)),
			change: []ConfigChange{FileChange(containerRegistryConfPath, registriesMC1)},
		},
		{
			// TestIsDrainRequired: "one or more registry has been removed"
			name:       "registries.conf: a registry removed: drain, no reboot",
			from:       base.With(FileChange(containerRegistryConfPath, registriesMC1)),
			change:     []ConfigChange{FileChange(containerRegistryConfPath, registriesMC3)},
			wantDrain:  true,
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.SpecialStatusAction}},
		},
		{
			name: "registries.conf: a mirror that serves tags added: drain",
			change: []ConfigChange{FileChange(containerRegistryConfPath, BaseRenderedConfig().Files[containerRegistryConfPath]+
				"\n  [[registry.mirror]]\n    location = \"tags.example.com/models\"\n")},
			wantDrain: true,
		},
		{
			name:       "no change: no drain",
			wantAction: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from := tt.from
			if from.Files == nil {
				from = base
			}
			oldMC := from.MachineConfig("rendered-old")
			newMC := from.With(tt.change...).MachineConfig("rendered-new")
			plan, err := decideUpdate(oldMC, newMC, MergeNodeDisruptionPolicies(tt.admin))
			if err != nil {
				t.Fatal(err)
			}
			if plan.drain != tt.wantDrain || plan.reboot != tt.wantReboot {
				t.Errorf("drain %v reboot %v (actions %v, %s), want drain %v reboot %v",
					plan.drain, plan.reboot, actionTypes(plan.actions), plan.reason, tt.wantDrain, tt.wantReboot)
			}
			if tt.wantAction != nil && !reflect.DeepEqual(plan.actions, tt.wantAction) {
				t.Errorf("actions = %+v, want %+v", plan.actions, tt.wantAction)
			}
			if plan.config != "rendered-new" {
				t.Errorf("plan for %q", plan.config)
			}
		})
	}
}

// TestFindClosestFilePolicyPathMatch is the MCO's test of that name
// (pkg/daemon/update_test.go).
func TestFindClosestFilePolicyPathMatch(t *testing.T) {
	none := []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}}
	reboot := []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.RebootStatusAction}}
	reload := []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.ReloadStatusAction, Reload: &opv1.ReloadService{ServiceName: "crio.service"}}}
	nested := []opv1.NodeDisruptionPolicyStatusFile{{Path: "/etc/mco/f1", Actions: none}, {Path: "/etc/mco/f1/f2", Actions: reboot}, {Path: "/etc/mco/f1/f2/f3", Actions: reload}}
	tests := []struct {
		path     string
		policies []opv1.NodeDisruptionPolicyStatusFile
		found    bool
		actions  []opv1.NodeDisruptionPolicyStatusAction
	}{
		{"/etc/mco/test", []opv1.NodeDisruptionPolicyStatusFile{{Path: "/etc/example", Actions: none}}, false, nil},
		{"/etc/mco/test1", []opv1.NodeDisruptionPolicyStatusFile{{Path: "/etc/mco/test1", Actions: none}, {Path: "/etc/mco/test2", Actions: reboot}}, true, none},
		{"/etc/mco/f1/f2/example", nested, true, reboot},
		{"/etc/mco/f1/f2/f3", nested, true, reload},
		{"/etc/mco/f1/f2/f3", []opv1.NodeDisruptionPolicyStatusFile{{Path: "/etc/mco/f1/test", Actions: none}, {Path: "/etc/mco/f1/f2/test", Actions: reboot}, {Path: "/etc/mco/f1/f2/f3/f4", Actions: reload}}, false, nil},
	}
	for _, tt := range tests {
		found, actions := findClosestFilePolicyPathMatch(tt.path, tt.policies)
		if found != tt.found || !reflect.DeepEqual(actions, tt.actions) {
			t.Errorf("%s: %v %v, want %v %v", tt.path, found, actions, tt.found, tt.actions)
		}
	}
}

func TestMergeNodeDisruptionPolicies(t *testing.T) {
	defaults := DefaultNodeDisruptionPolicies()
	merged := MergeNodeDisruptionPolicies(opv1.NodeDisruptionPolicyConfig{
		Files: []opv1.NodeDisruptionPolicySpecFile{fileAction("/var/lib/kubelet/config.json", specDrain), fileAction("/etc/new", specNone)},
		Units: []opv1.NodeDisruptionPolicySpecUnit{{Name: "a.service", Actions: []opv1.NodeDisruptionPolicySpecAction{specReloadCrio}}},
	})
	if len(merged.Files) != len(defaults.Files)+1 || merged.Files[0].Path != "/var/lib/kubelet/config.json" ||
		merged.Files[0].Actions[0].Type != opv1.DrainStatusAction || merged.Files[len(merged.Files)-1].Path != "/etc/new" {
		t.Errorf("files = %+v", merged.Files)
	}
	if len(merged.Units) != len(defaults.Units)+1 || merged.Units[len(merged.Units)-1].Actions[0].Reload.ServiceName != "crio.service" {
		t.Errorf("units = %+v", merged.Units)
	}
	if !reflect.DeepEqual(merged.SSHKey, defaults.SSHKey) || merged.SSHKey.Actions[0].Type != opv1.NoneStatusAction {
		t.Errorf("SSH policy = %+v, want the default None", merged.SSHKey)
	}
}

func TestParseIgnition(t *testing.T) {
	a := []byte(`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/a","contents":{"source":"data:,hello%20world"},"mode":420}]},"passwd":{}}`)
	b := []byte(`{"passwd":{"users":[]},"storage":{"files":[{"mode":420,"contents":{"source":"data:;base64,` +
		base64.StdEncoding.EncodeToString([]byte("hello world")) + `"},"path":"/etc/a"}]},"ignition":{"version":"3.4.0"}}`)
	ia, err := parseIgnition(a)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := parseIgnition(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*ignitionConfig{ia, ib} {
		data, err := c.fileData("/etc/a")
		if err != nil || string(data) != "hello world" {
			t.Errorf("fileData = %q, %v", data, err)
		}
	}
	if ia.passwd != ib.passwd {
		t.Errorf("an empty passwd differs from an absent one: %q vs %q", ia.passwd, ib.passwd)
	}
	// Same file, other encoding of its contents: a change, as in the MCO.
	if diff := calculateConfigFileDiffs(ia, ib); len(diff) != 1 {
		t.Errorf("diff = %v", diff)
	}
	reordered := []byte(`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"mode":420,"contents":{"source":"data:,hello%20world"},"path":"/etc/a"}]}}`)
	ic, err := parseIgnition(reordered)
	if err != nil {
		t.Fatal(err)
	}
	if diff := calculateConfigFileDiffs(ia, ic); len(diff) != 0 {
		t.Errorf("key order made a diff: %v", diff)
	}
	if _, err := parseIgnition([]byte(`{"ignition":{"version":"2.2.0"}}`)); err == nil {
		t.Error("Ignition 2 accepted")
	}
	if empty, err := parseIgnition(nil); err != nil || len(empty.files) != 0 {
		t.Errorf("empty config: %+v, %v", empty, err)
	}
}

// TestPlanUpdateFallsBackToADrain: whatever the simulator cannot read, it
// drains and reboots, as before it read MachineConfigs.
func TestPlanUpdateFallsBackToADrain(t *testing.T) {
	ctx := context.Background()
	base := BaseRenderedConfig()
	oldMC := base.MachineConfig("rendered-1")
	newMC := base.With(SSHKeyChange("ssh-rsa AAAA new")).MachineConfig("rendered-2")
	observed := func(generation, observed int64) runtime.Object {
		mc := &opv1.MachineConfiguration{ObjectMeta: metav1.ObjectMeta{Name: MachineConfigurationName, Generation: generation}}
		mc.Status.ObservedGeneration = observed
		mc.Status.NodeDisruptionPolicyStatus.ClusterPolicies = DefaultNodeDisruptionPolicies()
		return mc
	}
	tests := []struct {
		name      string
		mcs       []runtime.Object
		op        []runtime.Object
		wantDrain bool
	}{
		{"both configs and the policies: the MCD's decision", []runtime.Object{oldMC, newMC}, []runtime.Object{observed(2, 2)}, false},
		{"no MachineConfigs (the scenarios' rendered-2)", nil, []runtime.Object{observed(2, 2)}, true},
		{"the desired MachineConfig missing", []runtime.Object{oldMC}, []runtime.Object{observed(2, 2)}, true},
		{"no MachineConfiguration cluster", []runtime.Object{oldMC, newMC}, nil, true},
		{"policies not observed yet", []runtime.Object{oldMC, newMC}, []runtime.Object{observed(3, 2)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := planUpdate(ctx, mcfgfake.NewClientset(tt.mcs...), opfake.NewClientset(tt.op...), "rendered-1", "rendered-2")
			if err != nil {
				t.Fatal(err)
			}
			if plan.drain != tt.wantDrain || plan.reboot != tt.wantDrain || plan.config != "rendered-2" {
				t.Errorf("plan = %+v, want drain %v", plan, tt.wantDrain)
			}
		})
	}
	var badConfig mcfgv1.MachineConfig
	newMC.DeepCopyInto(&badConfig)
	badConfig.Spec.Config.Raw = []byte(`{"ignition":{"version":"2.2.0"}}`)
	plan, err := planUpdate(ctx, mcfgfake.NewClientset(oldMC, &badConfig), opfake.NewClientset(observed(1, 1)), "rendered-1", "rendered-2")
	if err != nil || !plan.drain {
		t.Errorf("an unreadable config: %+v, %v; want a drain", plan, err)
	}
}
