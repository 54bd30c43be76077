package mcosim

import (
	opv1 "github.com/openshift/api/operator/v1"
)

// DefaultNodeDisruptionPolicies returns the MCO's default node disruption
// policies, defaultClusterPolicies in pkg/apihelpers/apihelpers.go of
// openshift/machine-config-operator (paths from pkg/daemon/constants): the
// pull secret and /etc/nmstate/openshift need nothing, registries.conf is
// Special, the other CRI-O files reload crio, the user CA bundle restarts
// coreos-update-ca-trust and crio, credential providers restart the kubelet,
// SSH keys need nothing. (The kubelet CA bundle, /etc/kubernetes/kubelet-ca.crt,
// has no policy: the MCD writes it from the ControllerConfig, outside of
// rendered MachineConfigs, and only the legacy first-boot path lists it.)
func DefaultNodeDisruptionPolicies() opv1.NodeDisruptionPolicyClusterStatus {
	none := []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}}
	reload := func(service string) []opv1.NodeDisruptionPolicyStatusAction {
		return []opv1.NodeDisruptionPolicyStatusAction{{
			Type: opv1.ReloadStatusAction, Reload: &opv1.ReloadService{ServiceName: opv1.NodeDisruptionPolicyServiceName(service)},
		}}
	}
	restart := func(service string) opv1.NodeDisruptionPolicyStatusAction {
		return opv1.NodeDisruptionPolicyStatusAction{
			Type: opv1.RestartStatusAction, Restart: &opv1.RestartService{ServiceName: opv1.NodeDisruptionPolicyServiceName(service)},
		}
	}
	const (
		crio          = "crio.service"
		updateCATrust = "coreos-update-ca-trust.service"
		kubelet       = "kubelet.service"
		iriRegistry   = "iri-registry.service"
	)
	return opv1.NodeDisruptionPolicyClusterStatus{
		Files: []opv1.NodeDisruptionPolicyStatusFile{
			{Path: "/var/lib/kubelet/config.json", Actions: none},
			{Path: "/etc/machine-config-daemon/no-reboot/containers-gpg.pub", Actions: reload(crio)},
			{Path: "/etc/containers/policy.json", Actions: reload(crio)},
			{Path: containerRegistryConfPath, Actions: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.SpecialStatusAction}}},
			{Path: "/etc/containers/registries.d", Actions: reload(crio)},
			{Path: "/etc/crio/policies", Actions: reload(crio)},
			{Path: "/etc/nmstate/openshift", Actions: none},
			{Path: "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt",
				Actions: []opv1.NodeDisruptionPolicyStatusAction{restart(updateCATrust), restart(crio)}},
			{Path: "/etc/kubernetes/credential-providers", Actions: []opv1.NodeDisruptionPolicyStatusAction{restart(kubelet)}},
			{Path: "/etc/systemd/system/kubelet.service.d/40-kubelet-crio-image-credential-provider.conf",
				Actions: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.DaemonReloadStatusAction}, restart(kubelet)}},
			{Path: "/etc/iri-registry", Actions: []opv1.NodeDisruptionPolicyStatusAction{restart(iriRegistry)}},
			{Path: "/usr/local/bin/load-registry-image.sh", Actions: []opv1.NodeDisruptionPolicyStatusAction{restart(iriRegistry)}},
			{Path: "/etc/pki/ca-trust/source/anchors/iri-root-ca.crt", Actions: []opv1.NodeDisruptionPolicyStatusAction{restart(updateCATrust)}},
		},
		Units: []opv1.NodeDisruptionPolicyStatusUnit{
			{Name: iriRegistry, Actions: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.DaemonReloadStatusAction}, restart(iriRegistry)}},
		},
		SSHKey: opv1.NodeDisruptionPolicyStatusSSHKey{Actions: none},
	}
}

// MergeNodeDisruptionPolicies is the MCO's apihelpers.MergeClusterPolicies:
// the defaults, each replaced by an admin policy of the same path or unit
// name, followed by the admin's other policies; the admin's SSH policy
// replaces the default one when it has actions. The result is what the
// operator writes to MachineConfiguration cluster's
// status.nodeDisruptionPolicyStatus.clusterPolicies.
func MergeNodeDisruptionPolicies(admin opv1.NodeDisruptionPolicyConfig) opv1.NodeDisruptionPolicyClusterStatus {
	defaults := DefaultNodeDisruptionPolicies()
	merged := opv1.NodeDisruptionPolicyClusterStatus{
		Files: append([]opv1.NodeDisruptionPolicyStatusFile(nil), defaults.Files...),
		Units: append([]opv1.NodeDisruptionPolicyStatusUnit(nil), defaults.Units...),
	}
	for _, f := range admin.Files {
		status := opv1.NodeDisruptionPolicyStatusFile{Path: f.Path, Actions: statusActions(f.Actions)}
		replaced := false
		for i, d := range defaults.Files {
			if d.Path == f.Path {
				merged.Files[i], replaced = status, true
				break
			}
		}
		if !replaced {
			merged.Files = append(merged.Files, status)
		}
	}
	for _, u := range admin.Units {
		status := opv1.NodeDisruptionPolicyStatusUnit{Name: u.Name, Actions: statusActions(u.Actions)}
		replaced := false
		for i, d := range defaults.Units {
			if d.Name == u.Name {
				merged.Units[i], replaced = status, true
				break
			}
		}
		if !replaced {
			merged.Units = append(merged.Units, status)
		}
	}
	merged.SSHKey = defaults.SSHKey
	if len(admin.SSHKey.Actions) > 0 {
		merged.SSHKey = opv1.NodeDisruptionPolicyStatusSSHKey{Actions: statusActions(admin.SSHKey.Actions)}
	}
	return merged
}

// statusActions is apihelpers' convertSpecActiontoStatusAction over a list.
func statusActions(spec []opv1.NodeDisruptionPolicySpecAction) []opv1.NodeDisruptionPolicyStatusAction {
	out := []opv1.NodeDisruptionPolicyStatusAction{}
	for _, a := range spec {
		s := opv1.NodeDisruptionPolicyStatusAction{Type: opv1.NodeDisruptionPolicyStatusActionType(a.Type)}
		if a.Reload != nil {
			s.Reload = &opv1.ReloadService{ServiceName: a.Reload.ServiceName}
		}
		if a.Restart != nil {
			s.Restart = &opv1.RestartService{ServiceName: a.Restart.ServiceName}
		}
		out = append(out, s)
	}
	return out
}
