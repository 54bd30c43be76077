package mco

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// renderedMC builds a rendered MachineConfig from Ignition files (path: contents), units (name:
// contents), SSH keys and kernel arguments.
type renderedMC struct {
	files map[string]string
	units map[string]string
	ssh   []string
	kargs []string
	os    string
}

func (r renderedMC) build(t *testing.T) *mcfgv1.MachineConfig {
	t.Helper()
	ign := map[string]any{"ignition": map[string]any{"version": "3.5.0"}}
	var files, units []any
	for p, c := range r.files {
		files = append(files, map[string]any{"path": p, "mode": 420, "contents": map[string]any{
			"source": "data:text/plain;charset=utf-8;base64," + base64.StdEncoding.EncodeToString([]byte(c))}})
	}
	for n, c := range r.units {
		units = append(units, map[string]any{"name": n, "enabled": true, "contents": c})
	}
	ign["storage"] = map[string]any{"files": files}
	ign["systemd"] = map[string]any{"units": units}
	ign["passwd"] = map[string]any{"users": []any{map[string]any{"name": "core", "sshAuthorizedKeys": r.ssh}}}
	raw, err := json.Marshal(ign)
	if err != nil {
		t.Fatal(err)
	}
	os := r.os
	if os == "" {
		os = "quay.io/openshift/rhcos@sha256:1"
	}
	return &mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: "rendered"}, Spec: mcfgv1.MachineConfigSpec{
		OSImageURL: os, KernelArguments: r.kargs, Config: runtime.RawExtension{Raw: raw},
	}}
}

// defaultPolicies is a subset of the MCO's default cluster policies (pkg/apihelpers/apihelpers.go
// defaultClusterPolicies) as MachineConfiguration cluster publishes them, plus admin policies.
func defaultPolicies(admin ...opv1.NodeDisruptionPolicyStatusFile) *opv1.NodeDisruptionPolicyClusterStatus {
	act := func(t opv1.NodeDisruptionPolicyStatusActionType) []opv1.NodeDisruptionPolicyStatusAction {
		return []opv1.NodeDisruptionPolicyStatusAction{{Type: t}}
	}
	p := &opv1.NodeDisruptionPolicyClusterStatus{
		Files: []opv1.NodeDisruptionPolicyStatusFile{
			{Path: "/var/lib/kubelet/config.json", Actions: act(opv1.NoneStatusAction)},
			{Path: RegistriesConfPath, Actions: act(opv1.SpecialStatusAction)},
			{Path: "/etc/containers/policy.json", Actions: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.ReloadStatusAction, Reload: &opv1.ReloadService{ServiceName: "crio.service"}}}},
		},
		Units:  []opv1.NodeDisruptionPolicyStatusUnit{{Name: "registry.service", Actions: act(opv1.DaemonReloadStatusAction)}},
		SSHKey: opv1.NodeDisruptionPolicyStatusSSHKey{Actions: act(opv1.NoneStatusAction)},
	}
	p.Files = append(p.Files, admin...)
	return p
}

func policy(path string, types ...opv1.NodeDisruptionPolicyStatusActionType) opv1.NodeDisruptionPolicyStatusFile {
	f := opv1.NodeDisruptionPolicyStatusFile{Path: path}
	for _, t := range types {
		f.Actions = append(f.Actions, opv1.NodeDisruptionPolicyStatusAction{Type: t})
	}
	return f
}

const registriesBase = `
unqualified-search-registries = ["example.com", "foo.com"]

[[registry]]
  location = "example.com/repo/img"

  [[registry.mirror]]
    location = "mirror.com/repo/img"
`

// The cases follow the machine-config daemon's own tests: pkg/daemon/update_test.go
// (TestCalculatePostConfigChangeAction, the node disruption policy cases) and
// pkg/daemon/drain_test.go (TestIsDrainRequired, registries.conf).
func TestDecideDrain(t *testing.T) {
	base := renderedMC{
		files: map[string]string{"/etc/motd": "hello", "/var/lib/kubelet/config.json": "{}", RegistriesConfPath: registriesBase},
		units: map[string]string{"kubelet.service": "[Unit]"},
		ssh:   []string{"ssh-ed25519 AAAA one"},
	}
	with := func(mutate func(r *renderedMC)) renderedMC {
		r := renderedMC{files: map[string]string{}, units: map[string]string{}, ssh: base.ssh, kargs: base.kargs}
		for k, v := range base.files {
			r.files[k] = v
		}
		for k, v := range base.units {
			r.units[k] = v
		}
		mutate(&r)
		return r
	}
	tests := []struct {
		name     string
		to       renderedMC
		policies *opv1.NodeDisruptionPolicyClusterStatus
		want     Need
		reason   string
	}{
		{"nothing changed", base, defaultPolicies(), NeedNoDrain, "no change"},
		{"SSH keys only", with(func(r *renderedMC) { r.ssh = []string{"ssh-ed25519 AAAA two"} }), defaultPolicies(), NeedNoDrain, "SSH keys only"},
		{"pull secret only", with(func(r *renderedMC) { r.files["/var/lib/kubelet/config.json"] = `{"auths":{}}` }), defaultPolicies(), NeedNoDrain, "policy None for /var/lib/kubelet/config.json"},
		{"kernel argument", with(func(r *renderedMC) { r.kargs = []string{"nosmt"} }), defaultPolicies(), NeedDrain, "kernel arguments"},
		{"OS image", with(func(r *renderedMC) { r.os = "quay.io/openshift/rhcos@sha256:2" }), defaultPolicies(), NeedDrain, "OS image"},
		{"file without a policy", with(func(r *renderedMC) { r.files["/etc/motd"] = "bye" }), defaultPolicies(), NeedDrain, "no policy for /etc/motd"},
		{"file added without a policy", with(func(r *renderedMC) { r.files["/etc/new"] = "x" }), defaultPolicies(), NeedDrain, "no policy for /etc/new"},
		{"file removed without a policy", with(func(r *renderedMC) { delete(r.files, "/etc/motd") }), defaultPolicies(), NeedDrain, "no policy for /etc/motd"},
		{"admin policy None", with(func(r *renderedMC) { r.files["/etc/motd"] = "bye" }), defaultPolicies(policy("/etc/motd", opv1.NoneStatusAction)), NeedNoDrain, "policy None for /etc/motd"},
		{"admin policy Restart", with(func(r *renderedMC) { r.files["/etc/motd"] = "bye" }), defaultPolicies(policy("/etc/motd", opv1.RestartStatusAction)), NeedNoDrain, "policy Restart"},
		{"admin policy DaemonReload+Reload", with(func(r *renderedMC) { r.files["/etc/motd"] = "bye" }), defaultPolicies(policy("/etc/motd", opv1.DaemonReloadStatusAction, opv1.ReloadStatusAction)), NeedNoDrain, "policy DaemonReload+Reload"},
		{"admin policy Drain", with(func(r *renderedMC) { r.files["/etc/motd"] = "bye" }), defaultPolicies(policy("/etc/motd", opv1.DrainStatusAction)), NeedDrain, "policy Drain"},
		{"admin policy Reboot", with(func(r *renderedMC) { r.files["/etc/motd"] = "bye" }), defaultPolicies(policy("/etc/motd", opv1.RebootStatusAction)), NeedDrain, "reboots"},
		{"closest directory policy", with(func(r *renderedMC) { r.files["/etc/app/conf.d/a.conf"] = "x" }), defaultPolicies(policy("/etc/app", opv1.RebootStatusAction), policy("/etc/app/conf.d", opv1.NoneStatusAction)), NeedNoDrain, "policy None for /etc/app/conf.d/a.conf"},
		{"a prefix that is no parent directory", with(func(r *renderedMC) { r.files["/etc/application"] = "x" }), defaultPolicies(policy("/etc/app", opv1.NoneStatusAction)), NeedDrain, "no policy for /etc/application"},
		{"None with a file that reboots", with(func(r *renderedMC) {
			r.files["/var/lib/kubelet/config.json"] = "{1}"
			r.files["/etc/motd"] = "bye"
		}), defaultPolicies(), NeedDrain, "no policy for /etc/motd"},
		{"unit with a policy", with(func(r *renderedMC) { r.units["registry.service"] = "[Unit]" }), defaultPolicies(), NeedNoDrain, "policy DaemonReload for unit registry.service"},
		{"unit without a policy", with(func(r *renderedMC) { r.units["kubelet.service"] = "[Unit]\n#" }), defaultPolicies(), NeedDrain, "no policy for unit kubelet.service"},
		{"policies not readable", with(func(r *renderedMC) { r.ssh = nil }), nil, NeedUnknown, "not readable"},
		{"policies not needed: kernel argument", with(func(r *renderedMC) { r.kargs = []string{"nosmt"} }), nil, NeedDrain, "kernel arguments"},
		{"digest-only mirror added", with(func(r *renderedMC) {
			r.files[RegistriesConfPath] = registriesBase + "\n  [[registry.mirror]]\n    location = \"mirror2.com/repo/img\"\n    pull-from-mirror = \"digest-only\"\n"
		}), defaultPolicies(), NeedNoDrain, "digest-only"},
		{"mirror added without digest-only", with(func(r *renderedMC) {
			r.files[RegistriesConfPath] = registriesBase + "\n  [[registry.mirror]]\n    location = \"mirror2.com/repo/img\"\n"
		}), defaultPolicies(), NeedDrain, "beyond digest-only"},
		{"mirror removed", with(func(r *renderedMC) {
			r.files[RegistriesConfPath] = "unqualified-search-registries = [\"example.com\", \"foo.com\"]\n[[registry]]\n  location = \"example.com/repo/img\"\n"
		}), defaultPolicies(), NeedDrain, "beyond digest-only"},
		{"search registry reordered", with(func(r *renderedMC) {
			r.files[RegistriesConfPath] = strings.Replace(registriesBase, `["example.com", "foo.com"]`, `["foo.com", "example.com"]`, 1)
		}), defaultPolicies(), NeedDrain, "beyond digest-only"},
		{"search registry added", with(func(r *renderedMC) {
			r.files[RegistriesConfPath] = strings.Replace(registriesBase, `["example.com", "foo.com"]`, `["example.com", "foo.com", "bar.com"]`, 1)
		}), defaultPolicies(), NeedNoDrain, "digest-only"},
		{"registry added, all mirrors digest-only", with(func(r *renderedMC) {
			r.files[RegistriesConfPath] = registriesBase + "\n[[registry]]\n  location = \"quay.io/x\"\n  [[registry.mirror]]\n    location = \"m.io/x\"\n    pull-from-mirror = \"digest-only\"\n"
		}), defaultPolicies(), NeedNoDrain, "digest-only"},
		{"registry blocked", with(func(r *renderedMC) {
			r.files[RegistriesConfPath] = strings.Replace(registriesBase, `location = "example.com/repo/img"`, "location = \"example.com/repo/img\"\n  blocked = true", 1)
		}), defaultPolicies(), NeedDrain, "beyond digest-only"},
	}
	from := ReadRendered(base.build(t))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecideDrain(from, ReadRendered(tt.to.build(t)), tt.policies)
			if got.Need != tt.want || !strings.Contains(got.Reason, tt.reason) || got.Source != SourceRendered {
				t.Errorf("DecideDrain() = %+v, want %v with %q", got, tt.want, tt.reason)
			}
		})
	}
}

// What the guardian keeps of a rendered config holds no file content, no SSH key: the configs
// carry the pull secret and keys, and the digest is all the decision needs.
func TestReadRenderedKeepsNoSecret(t *testing.T) {
	secret := "c2VjcmV0LXB1bGwtc2VjcmV0"
	mc := renderedMC{files: map[string]string{"/var/lib/kubelet/config.json": secret}, ssh: []string{"ssh-ed25519 AAAA-private-looking"}}.build(t)
	r := ReadRendered(mc)
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{secret, "AAAA-private-looking", base64.StdEncoding.EncodeToString([]byte(secret))} {
		if strings.Contains(string(out), s) {
			t.Fatalf("the digest keeps %q: %s", s, out)
		}
	}
	if r.Files["/var/lib/kubelet/config.json"] == "" || r.Passwd == "" {
		t.Fatalf("digest %s lacks the file or passwd", out)
	}
	mc.Spec.Config.Raw = []byte(`{"ignition":{"version":"2.2.0"}}`)
	if got := DecideDrain(ReadRendered(mc), r, defaultPolicies()); got.Known() {
		t.Errorf("an Ignition 2 config: %+v, want unknown", got)
	}
}
