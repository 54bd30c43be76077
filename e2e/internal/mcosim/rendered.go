package mcosim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	mcfgclientset "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	opclientset "github.com/openshift/client-go/operator/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
)

// RenderedConfig describes a rendered MachineConfig for tests: the fields the
// machine-config-daemon compares when it decides whether an update drains.
// MachineConfig renders it as an Ignition 3.5 config.
type RenderedConfig struct {
	OSImageURL      string
	KernelArguments []string
	KernelType      string
	Extensions      []string
	FIPS            bool
	// Files maps a path to its contents (mode 0644, overwrite).
	Files map[string]string
	// Units maps a systemd unit name to its contents (enabled).
	Units map[string]string
	// SSHKeys are the core user's authorized keys.
	SSHKeys []string
}

// BaseRenderedConfig is a plausible rendered worker config: an OS image, the
// pull secret, registries.conf with one mirror, the kubelet unit and one SSH
// key.
func BaseRenderedConfig() RenderedConfig {
	return RenderedConfig{
		OSImageURL: "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:0000000000000000000000000000000000000000000000000000000000000001",
		Files: map[string]string{
			"/var/lib/kubelet/config.json": `{"auths":{"quay.io":{"auth":"ZmFrZTpmYWtl"}}}`,
			containerRegistryConfPath: `unqualified-search-registries = ["registry.access.redhat.com", "docker.io"]

[[registry]]
  prefix = ""
  location = "quay.io/example/models"

  [[registry.mirror]]
    location = "mirror.example.com/example/models"
    pull-from-mirror = "digest-only"
`,
			"/etc/kubernetes/kubelet.conf": "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\n",
		},
		Units: map[string]string{
			"kubelet.service": "[Unit]\nDescription=Kubernetes Kubelet\n[Service]\nExecStart=/usr/bin/kubelet\n",
		},
		SSHKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBaseKeyForTheTestBed core@example"},
	}
}

// ConfigChange changes a RenderedConfig; see With.
type ConfigChange func(*RenderedConfig)

// SSHKeyChange adds an authorized key for the core user: no drain with the
// default policies.
func SSHKeyChange(key string) ConfigChange {
	return func(r *RenderedConfig) { r.SSHKeys = append(r.SSHKeys, key) }
}

// FileChange writes contents to path (a new file or new contents): drains
// unless a node disruption policy covers path.
func FileChange(path, contents string) ConfigChange {
	return func(r *RenderedConfig) { r.Files[path] = contents }
}

// UnitChange writes a systemd unit: drains unless a unit policy names it.
func UnitChange(name, contents string) ConfigChange {
	return func(r *RenderedConfig) { r.Units[name] = contents }
}

// KernelArgChange adds a kernel argument: always a reboot, so a drain.
func KernelArgChange(arg string) ConfigChange {
	return func(r *RenderedConfig) { r.KernelArguments = append(r.KernelArguments, arg) }
}

// OSImageChange moves to another OS image: always a reboot, so a drain.
func OSImageChange(image string) ConfigChange {
	return func(r *RenderedConfig) { r.OSImageURL = image }
}

// With returns a copy of r with changes applied in order.
func (r RenderedConfig) With(changes ...ConfigChange) RenderedConfig {
	c := r
	c.KernelArguments = slices.Clone(r.KernelArguments)
	c.Extensions = slices.Clone(r.Extensions)
	c.SSHKeys = slices.Clone(r.SSHKeys)
	c.Files = maps.Clone(r.Files)
	if c.Files == nil {
		c.Files = map[string]string{}
	}
	c.Units = maps.Clone(r.Units)
	if c.Units == nil {
		c.Units = map[string]string{}
	}
	for _, change := range changes {
		change(&c)
	}
	return c
}

// MachineConfig renders r as the rendered MachineConfig name, its Ignition
// config in spec.config as the MCO's render controller writes it (files and
// units sorted by name, contents as data URLs).
func (r RenderedConfig) MachineConfig(name string) *mcfgv1.MachineConfig {
	type contents struct {
		Source      string `json:"source"`
		Compression string `json:"compression"`
	}
	type file struct {
		Path      string   `json:"path"`
		Mode      int      `json:"mode"`
		Overwrite bool     `json:"overwrite"`
		Contents  contents `json:"contents"`
	}
	type unit struct {
		Name     string `json:"name"`
		Enabled  bool   `json:"enabled"`
		Contents string `json:"contents"`
	}
	type user struct {
		Name              string   `json:"name"`
		SSHAuthorizedKeys []string `json:"sshAuthorizedKeys,omitempty"`
	}
	var ign struct {
		Ignition struct {
			Version string `json:"version"`
		} `json:"ignition"`
		Passwd struct {
			Users []user `json:"users,omitempty"`
		} `json:"passwd"`
		Storage struct {
			Files []file `json:"files,omitempty"`
		} `json:"storage"`
		Systemd struct {
			Units []unit `json:"units,omitempty"`
		} `json:"systemd"`
	}
	ign.Ignition.Version = "3.5.0"
	if len(r.SSHKeys) > 0 {
		ign.Passwd.Users = []user{{Name: "core", SSHAuthorizedKeys: r.SSHKeys}}
	}
	for _, p := range slices.Sorted(maps.Keys(r.Files)) {
		ign.Storage.Files = append(ign.Storage.Files, file{Path: p, Mode: 0o644, Overwrite: true,
			Contents: contents{Source: encodeDataURL([]byte(r.Files[p]))}})
	}
	for _, n := range slices.Sorted(maps.Keys(r.Units)) {
		ign.Systemd.Units = append(ign.Systemd.Units, unit{Name: n, Enabled: true, Contents: r.Units[n]})
	}
	raw, err := json.Marshal(ign)
	if err != nil {
		panic(err) // plain structs always marshal
	}
	return &mcfgv1.MachineConfig{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Annotations: map[string]string{
				"machineconfiguration.openshift.io/generated-by-controller-version": "mcosim",
			},
		},
		Spec: mcfgv1.MachineConfigSpec{
			OSImageURL:      r.OSImageURL,
			Config:          runtime.RawExtension{Raw: raw},
			KernelArguments: slices.Clone(r.KernelArguments),
			KernelType:      r.KernelType,
			Extensions:      slices.Clone(r.Extensions),
			FIPS:            r.FIPS,
		},
	}
}

// ApplyRenderedConfig creates the rendered MachineConfig name from r, or
// replaces the spec of an existing one.
func ApplyRenderedConfig(ctx context.Context, mcfg mcfgclientset.Interface, name string, r RenderedConfig) error {
	want := r.MachineConfig(name)
	client := mcfg.MachineconfigurationV1().MachineConfigs()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		mc, err := client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = client.Create(ctx, want, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		mc.Spec = want.Spec
		_, err = client.Update(ctx, mc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("MachineConfig %s: %w", name, err)
	}
	return nil
}

// ApplyNodeDisruptionPolicies creates or updates MachineConfiguration cluster
// with the admin's node disruption policies in its spec and, standing in for
// the machine-config-operator, the merged policies (MergeNodeDisruptionPolicies:
// the MCO's defaults plus admin) in
// status.nodeDisruptionPolicyStatus.clusterPolicies, with
// status.observedGeneration = generation, which the daemon waits for. The
// policies apply to every pool of the cluster.
func ApplyNodeDisruptionPolicies(ctx context.Context, op opclientset.Interface, admin opv1.NodeDisruptionPolicyConfig) error {
	client := op.OperatorV1().MachineConfigurations()
	if len(admin.SSHKey.Actions) == 0 {
		// The CRD requires sshkey.actions once sshkey is written, and the Go type always writes it:
		// spell out the MCO's default for SSH keys (pkg/apihelpers/apihelpers.go), None.
		admin.SSHKey.Actions = []opv1.NodeDisruptionPolicySpecAction{{Type: opv1.NoneSpecAction}}
	}
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		mc, err := client.Get(ctx, MachineConfigurationName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			mc = &opv1.MachineConfiguration{ObjectMeta: metav1.ObjectMeta{Name: MachineConfigurationName}}
			mc.Spec.ManagementState = opv1.Managed
			mc.Spec.NodeDisruptionPolicy = admin
			mc, err = client.Create(ctx, mc, metav1.CreateOptions{})
		} else if err == nil {
			mc.Spec.NodeDisruptionPolicy = admin
			mc, err = client.Update(ctx, mc, metav1.UpdateOptions{})
		}
		if err != nil {
			return err
		}
		mc.Status.ObservedGeneration = mc.Generation
		mc.Status.NodeDisruptionPolicyStatus.ClusterPolicies = MergeNodeDisruptionPolicies(admin)
		_, err = client.UpdateStatus(ctx, mc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("MachineConfiguration %s: %w", MachineConfigurationName, err)
	}
	return nil
}
