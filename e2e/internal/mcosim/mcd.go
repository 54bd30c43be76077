package mcosim

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	mcfgclientset "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	opclientset "github.com/openshift/client-go/operator/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MachineConfigurationName is the name of the MCO's operator knobs object,
// MachineConfiguration "cluster" (ctrlcommon.MCOOperatorKnobsObjectName),
// whose status carries the merged node disruption policies.
const MachineConfigurationName = "cluster"

// updatePlan is the machine-config-daemon's decision for one update: whether
// it asks for a drain and whether it reboots. The real daemon drains for a
// Reboot or Drain action and for an unsafe registries.conf change, and
// reboots only for a Reboot action; everything else (None, Reload, Restart,
// DaemonReload, a safe Special) is applied in place
// (performPostConfigChangeNodeDisruptionAction in pkg/daemon/update.go).
type updatePlan struct {
	// config is the desired config the plan was made for.
	config string
	drain  bool
	reboot bool
	// actions are the node disruption actions, for the log.
	actions []opv1.NodeDisruptionPolicyStatusAction
	// osChange and filesChange say whether the OS (image, extensions,
	// kernel type) and the files or SSH keys change, for the
	// MachineConfigNode's AppliedFilesAndOS message.
	osChange, filesChange bool
	// reason tells why, for the log; it names a fallback to a drain.
	reason string
}

// drainAndReboot is the plan when the simulator cannot tell what the update
// changes: the behaviour of the simulator before it read MachineConfigs, and
// what a Reboot action does.
func drainAndReboot(config, reason string) updatePlan {
	return updatePlan{
		config:  config,
		drain:   true,
		reboot:  true,
		actions: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.RebootStatusAction}},
		// Unknown: a rendered-config update usually brings a new OS.
		osChange: true,
		reason:   reason,
	}
}

// machineConfigDiff is the MCD's machineConfigDiff (pkg/daemon/update.go)
// without the on-cluster layering fields.
type machineConfigDiff struct {
	osUpdate   bool
	kargs      bool
	fips       bool
	passwd     bool
	files      bool
	units      bool
	kernelType bool
	extensions bool
}

// newMachineConfigDiff follows the MCD's newMachineConfigDiff
// (pkg/daemon/update.go): kernel arguments and extensions count as unchanged
// when both are empty (slices.Equal: nil and empty are equal), the kernel type is canonicalized ("" is "default",
// helpers.CanonicalizeKernelType), files, units and passwd are compared as a
// whole.
func newMachineConfigDiff(oldMC, newMC *mcfgv1.MachineConfig, oldIgn, newIgn *ignitionConfig) machineConfigDiff {
	return machineConfigDiff{
		osUpdate:   oldMC.Spec.OSImageURL != newMC.Spec.OSImageURL,
		kargs:      !slices.Equal(oldMC.Spec.KernelArguments, newMC.Spec.KernelArguments),
		fips:       oldMC.Spec.FIPS != newMC.Spec.FIPS,
		passwd:     oldIgn.passwd != newIgn.passwd,
		files:      !reflect.DeepEqual(oldIgn.filesCanonical(), newIgn.filesCanonical()),
		units:      !reflect.DeepEqual(oldIgn.unitsCanonical(), newIgn.unitsCanonical()),
		kernelType: canonicalizeKernelType(oldMC.Spec.KernelType) != canonicalizeKernelType(newMC.Spec.KernelType),
		extensions: !slices.Equal(oldMC.Spec.Extensions, newMC.Spec.Extensions),
	}
}

// canonicalizeKernelType is helpers.CanonicalizeKernelType: an empty kernel
// type is the default kernel.
func canonicalizeKernelType(kernelType string) string {
	if kernelType == "" {
		return "default"
	}
	return kernelType
}

// decideUpdate is what the MCD's update() decides before it touches the node
// (pkg/daemon/update.go): the diff (newMachineConfigDiff), the node
// disruption actions (calculatePostConfigChangeNodeDisruptionAction) and the
// drain (isDrainRequiredForNodeDisruptionActions, pkg/daemon/drain.go).
// policies is MachineConfiguration cluster's
// status.nodeDisruptionPolicyStatus.clusterPolicies.
func decideUpdate(oldMC, newMC *mcfgv1.MachineConfig, policies opv1.NodeDisruptionPolicyClusterStatus) (updatePlan, error) {
	oldIgn, err := parseIgnition(oldMC.Spec.Config.Raw)
	if err != nil {
		return updatePlan{}, fmt.Errorf("MachineConfig %s: %w", oldMC.Name, err)
	}
	newIgn, err := parseIgnition(newMC.Spec.Config.Raw)
	if err != nil {
		return updatePlan{}, fmt.Errorf("MachineConfig %s: %w", newMC.Name, err)
	}
	diff := newMachineConfigDiff(oldMC, newMC, oldIgn, newIgn)
	actions := calculatePostConfigChangeNodeDisruptionAction(diff, calculateConfigFileDiffs(oldIgn, newIgn), changedUnitNames(oldIgn, newIgn), policies)
	drain, err := isDrainRequiredForNodeDisruptionActions(actions, oldIgn, newIgn)
	if err != nil {
		return updatePlan{}, err
	}
	return updatePlan{
		config:      newMC.Name,
		drain:       drain,
		reboot:      hasAction(actions, opv1.RebootStatusAction),
		actions:     actions,
		osChange:    diff.osUpdate || diff.extensions || diff.kernelType,
		filesChange: diff.passwd || diff.files,
		reason:      describeDiff(diff),
	}, nil
}

// describeDiff names what changed, for the log.
func describeDiff(d machineConfigDiff) string {
	var parts []string
	for _, c := range []struct {
		changed bool
		what    string
	}{
		{d.osUpdate, "OS image"}, {d.kargs, "kernel arguments"}, {d.fips, "FIPS"}, {d.kernelType, "kernel type"},
		{d.extensions, "extensions"}, {d.files, "files"}, {d.units, "units"}, {d.passwd, "passwd"},
	} {
		if c.changed {
			parts = append(parts, c.what)
		}
	}
	if len(parts) == 0 {
		return "no change"
	}
	return "changed: " + strings.Join(parts, ", ")
}

// calculatePostConfigChangeNodeDisruptionAction follows the MCD's function of
// that name (pkg/daemon/update.go) once MachineConfiguration cluster is
// observed: OS image, kernel arguments, FIPS, kernel type and extensions
// reboot; no file, unit or passwd change means None; otherwise the policies
// decide (calculatePostConfigChangeNodeDisruptionActionFromMCDiffs). The
// force file (/run/machine-config-daemon-force) is not simulated.
func calculatePostConfigChangeNodeDisruptionAction(diff machineConfigDiff, diffFiles, diffUnits []string,
	policies opv1.NodeDisruptionPolicyClusterStatus) []opv1.NodeDisruptionPolicyStatusAction {
	if diff.osUpdate || diff.kargs || diff.fips || diff.kernelType || diff.extensions {
		return []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.RebootStatusAction}}
	}
	if !diff.files && !diff.units && !diff.passwd {
		return []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}}
	}
	return calculatePostConfigChangeNodeDisruptionActionFromMCDiffs(diff.passwd, diffFiles, diffUnits, policies)
}

// calculatePostConfigChangeNodeDisruptionActionFromMCDiffs is the MCD's
// function of that name (pkg/daemon/update.go): every changed file needs a
// policy (the closest path match, ctrlcommon.FindClosestFilePolicyPathMatch),
// every changed unit a policy by name, else Reboot; an SSH change takes the
// SSH policy; any Reboot makes the whole list one Reboot, and None is dropped
// next to other actions.
func calculatePostConfigChangeNodeDisruptionActionFromMCDiffs(diffSSH bool, diffFiles, diffUnits []string,
	policies opv1.NodeDisruptionPolicyClusterStatus) []opv1.NodeDisruptionPolicyStatusAction {
	reboot := []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.RebootStatusAction}}
	actions := []opv1.NodeDisruptionPolicyStatusAction{}
	for _, path := range diffFiles {
		found, fileActions := findClosestFilePolicyPathMatch(path, policies.Files)
		if !found {
			return reboot
		}
		actions = append(actions, fileActions...)
	}
	for _, unit := range diffUnits {
		found := false
		for _, p := range policies.Units {
			if string(p.Name) == unit {
				actions = append(actions, p.Actions...)
				found = true
				break
			}
		}
		if !found {
			return reboot
		}
	}
	if diffSSH {
		actions = append(actions, policies.SSHKey.Actions...)
	}
	if hasAction(actions, opv1.RebootStatusAction) {
		return reboot
	}
	if hasAction(actions, opv1.NoneStatusAction) {
		if hasAction(actions, opv1.DrainStatusAction, opv1.ReloadStatusAction, opv1.RestartStatusAction,
			opv1.DaemonReloadStatusAction, opv1.SpecialStatusAction) {
			var rest []opv1.NodeDisruptionPolicyStatusAction
			for _, a := range actions {
				if a.Type != opv1.NoneStatusAction {
					rest = append(rest, a)
				}
			}
			return rest
		}
		return []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}}
	}
	return actions
}

// findClosestFilePolicyPathMatch is ctrlcommon.FindClosestFilePolicyPathMatch
// (pkg/controller/common/helpers.go): the policy of the longest path that is
// the file itself or one of its parent directories.
func findClosestFilePolicyPathMatch(diffPath string, policies []opv1.NodeDisruptionPolicyStatusFile) (bool, []opv1.NodeDisruptionPolicyStatusAction) {
	matchLength := 0
	found := false
	var actions []opv1.NodeDisruptionPolicyStatusAction
	for _, p := range policies {
		if diffPath == p.Path || isSubdirectory(p.Path, diffPath) {
			if len(p.Path) > matchLength {
				found, matchLength, actions = true, len(p.Path), p.Actions
			}
		}
	}
	return found, actions
}

// isSubdirectory is ctrlcommon.IsSubdirectory.
func isSubdirectory(dirPath, targetPath string) bool {
	dirPath = filepath.Clean(dirPath) + string(filepath.Separator)
	return strings.HasPrefix(filepath.Clean(targetPath), dirPath)
}

// isDrainRequiredForNodeDisruptionActions is the MCD's function of that name
// (pkg/daemon/drain.go): Reboot and Drain drain; Special (registries.conf)
// drains unless isSafeContainerRegistryConfChanges; the rest do not.
func isDrainRequiredForNodeDisruptionActions(actions []opv1.NodeDisruptionPolicyStatusAction, oldIgn, newIgn *ignitionConfig) (bool, error) {
	if hasAction(actions, opv1.RebootStatusAction, opv1.DrainStatusAction) {
		return true, nil
	}
	if hasAction(actions, opv1.SpecialStatusAction) {
		safe, err := isSafeContainerRegistryConfChanges(oldIgn, newIgn)
		if err != nil {
			return false, err
		}
		return !safe, nil
	}
	return false, nil
}

// hasAction is apihelpers.CheckNodeDisruptionActionsForTargetActions.
func hasAction(actions []opv1.NodeDisruptionPolicyStatusAction, targets ...opv1.NodeDisruptionPolicyStatusActionType) bool {
	for _, a := range actions {
		for _, t := range targets {
			if a.Type == t {
				return true
			}
		}
	}
	return false
}

// planUpdate reads what the MCD reads from the API to decide an update from
// current to desired: both rendered MachineConfigs and MachineConfiguration
// cluster. Where the simulator cannot decide, it drains and reboots, as it
// did before it read MachineConfigs, and says why in the plan's reason:
//
//   - A missing MachineConfig (the scenarios name rendered configs that do
//     not exist) or one it cannot parse: drain. The real MCD would fail the
//     update.
//   - MachineConfiguration cluster missing, or its status not observed
//     (generation != status.observedGeneration): drain. The real MCD polls
//     every 5 s for 2 minutes, then fails the update and retries it.
//
// Any other API error is returned, for the sync to retry.
func planUpdate(ctx context.Context, mcfg mcfgclientset.Interface, op opclientset.Interface, current, desired string) (updatePlan, error) {
	getMC := func(name string) (*mcfgv1.MachineConfig, error) {
		return mcfg.MachineconfigurationV1().MachineConfigs().Get(ctx, name, metav1.GetOptions{})
	}
	oldMC, err := getMC(current)
	if apierrors.IsNotFound(err) {
		return drainAndReboot(desired, "MachineConfig "+current+" not found"), nil
	}
	if err != nil {
		return updatePlan{}, err
	}
	newMC, err := getMC(desired)
	if apierrors.IsNotFound(err) {
		return drainAndReboot(desired, "MachineConfig "+desired+" not found"), nil
	}
	if err != nil {
		return updatePlan{}, err
	}
	if op == nil {
		return drainAndReboot(desired, "MachineConfiguration/cluster cannot be read (no client)"), nil
	}
	mcop, err := op.OperatorV1().MachineConfigurations().Get(ctx, MachineConfigurationName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return drainAndReboot(desired, "MachineConfiguration/cluster has not been created yet"), nil
	}
	if err != nil {
		return updatePlan{}, err
	}
	if mcop.Generation != mcop.Status.ObservedGeneration {
		return drainAndReboot(desired, "NodeDisruptionPolicyStatus is not up to date"), nil
	}
	plan, err := decideUpdate(oldMC, newMC, mcop.Status.NodeDisruptionPolicyStatus.ClusterPolicies)
	if err != nil {
		return drainAndReboot(desired, "cannot tell what the update changes: "+err.Error()), nil
	}
	return plan, nil
}
