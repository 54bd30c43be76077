package mco

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	opv1 "github.com/openshift/api/operator/v1"
)

// SourceRendered is the Answer.Source of a decision computed from the rendered MachineConfigs.
const SourceRendered = "rendered MachineConfigs"

// DecideDrain computes, as the machine-config daemon does on a running cluster, whether the update
// from one rendered config to another drains the node (openshift/machine-config-operator
// pkg/daemon/update.go newMachineConfigDiff, calculatePostConfigChangeNodeDisruptionAction,
// calculatePostConfigChangeNodeDisruptionActionFromMCDiffs; pkg/daemon/drain.go
// isDrainRequiredForNodeDisruptionActions, isSafeContainerRegistryConfChanges;
// pkg/controller/common/helpers.go CalculateConfigFileDiffs, GetChangedConfigUnitsByType,
// FindClosestFilePolicyPathMatch). policies is MachineConfiguration cluster's
// status.nodeDisruptionPolicyStatus.clusterPolicies, the merge of the MCO's defaults and the
// admin's policies; nil when it cannot be read or is not current, in which case the daemon itself
// waits for it and fails the update after two minutes: the answer is unknown.
//
// Not modelled, each answered as unknown or as a drain: image-mode (layered) pools, whose OS
// update compares images; the daemon's force file; a node's first boot (no policies then).
func DecideDrain(from, to *Rendered, policies *opv1.NodeDisruptionPolicyClusterStatus) Answer {
	unknown := func(why string) Answer { return Answer{Source: SourceRendered, Reason: why} }
	drain := func(why string) Answer { return Answer{Need: NeedDrain, Source: SourceRendered, Reason: why} }
	noDrain := func(why string) Answer { return Answer{Need: NeedNoDrain, Source: SourceRendered, Reason: why} }
	switch {
	case from == nil || to == nil:
		return unknown("a rendered MachineConfig is not readable")
	case from.Unreadable != "":
		return unknown(from.Unreadable)
	case to.Unreadable != "":
		return unknown(to.Unreadable)
	}
	if why := rebootDiff(from, to); why != "" {
		return drain(why + ": the node reboots")
	}
	files, units := changedFiles(from, to), changedUnits(from, to)
	ssh := from.Passwd != to.Passwd
	if len(files) == 0 && len(units) == 0 && !ssh {
		return noDrain("no change of files, units or SSH keys")
	}
	if policies == nil {
		return unknown("the MachineConfiguration's node disruption policies are not readable or not current")
	}
	actions, why := disruptionActions(ssh, files, units, policies)
	switch {
	case hasAction(actions, opv1.RebootStatusAction):
		return drain(why)
	case hasAction(actions, opv1.DrainStatusAction):
		return drain(why + ": policy Drain")
	case hasAction(actions, opv1.SpecialStatusAction):
		if safeRegistriesChange(from.Registries, to.Registries) {
			return noDrain(RegistriesConfPath + ": only mirrors with pull-from-mirror digest-only added")
		}
		return drain(RegistriesConfPath + " changed beyond digest-only mirrors")
	}
	return noDrain(why)
}

// rebootDiff says what, of the fields that always reboot (newMachineConfigDiff: OS image, kernel
// arguments, FIPS, kernel type, extensions), differs; "" when none. Empty and absent lists are the
// same (slices.Equal), as the daemon compares them.
func rebootDiff(from, to *Rendered) string {
	switch {
	case from.OSImageURL != to.OSImageURL:
		return "OS image changed"
	case !slices.Equal(from.KernelArguments, to.KernelArguments):
		return "kernel arguments changed"
	case from.FIPS != to.FIPS:
		return "FIPS changed"
	case from.KernelType != to.KernelType:
		return "kernel type changed"
	case !slices.Equal(from.Extensions, to.Extensions):
		return "extensions changed"
	}
	return ""
}

// changedFiles lists the paths of the files added, removed or changed, sorted.
func changedFiles(from, to *Rendered) []string { return changedKeys(from.Files, to.Files) }

// changedUnits lists the names of the units added, removed or changed, sorted.
func changedUnits(from, to *Rendered) []string { return changedKeys(from.Units, to.Units) }

func changedKeys(from, to map[string]string) []string {
	var out []string
	for k, v := range from {
		if w, ok := to[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range to {
		if _, ok := from[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// disruptionActions is calculatePostConfigChangeNodeDisruptionActionFromMCDiffs: the actions of
// the policies matching each changed file (closest path), unit (exact name) and the SSH keys; a
// file or unit without a policy reboots. why describes the outcome for check.
func disruptionActions(ssh bool, files, units []string, p *opv1.NodeDisruptionPolicyClusterStatus) ([]opv1.NodeDisruptionPolicyStatusAction, string) {
	var actions []opv1.NodeDisruptionPolicyStatusAction
	var parts []string
	for _, f := range files {
		found, acts := closestFilePolicy(f, p.Files)
		if !found {
			return []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.RebootStatusAction}}, "no policy for " + f + ": the node reboots"
		}
		actions = append(actions, acts...)
		parts = append(parts, fmt.Sprintf("policy %s for %s", actionNames(acts), f))
	}
	for _, u := range units {
		i := slices.IndexFunc(p.Units, func(pu opv1.NodeDisruptionPolicyStatusUnit) bool { return string(pu.Name) == u })
		if i < 0 {
			return []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.RebootStatusAction}}, "no policy for unit " + u + ": the node reboots"
		}
		actions = append(actions, p.Units[i].Actions...)
		parts = append(parts, fmt.Sprintf("policy %s for unit %s", actionNames(p.Units[i].Actions), u))
	}
	if ssh {
		actions = append(actions, p.SSHKey.Actions...)
		parts = append(parts, fmt.Sprintf("policy %s for SSH keys", actionNames(p.SSHKey.Actions)))
	}
	why := strings.Join(parts, ", ")
	if ssh && len(files) == 0 && len(units) == 0 {
		why = "SSH keys only (" + why + ")"
	}
	if hasAction(actions, opv1.RebootStatusAction) {
		return []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.RebootStatusAction}}, why + ": the node reboots"
	}
	return actions, why
}

// closestFilePolicy is FindClosestFilePolicyPathMatch: the policy of the path itself or of its
// closest parent directory.
func closestFilePolicy(path string, policies []opv1.NodeDisruptionPolicyStatusFile) (bool, []opv1.NodeDisruptionPolicyStatusAction) {
	best, found := -1, false
	var actions []opv1.NodeDisruptionPolicyStatusAction
	for _, p := range policies {
		dir := filepath.Clean(p.Path) + string(filepath.Separator)
		if (path == p.Path || strings.HasPrefix(filepath.Clean(path), dir)) && len(p.Path) > best {
			best, found, actions = len(p.Path), true, p.Actions
		}
	}
	return found, actions
}

func hasAction(actions []opv1.NodeDisruptionPolicyStatusAction, t opv1.NodeDisruptionPolicyStatusActionType) bool {
	return slices.ContainsFunc(actions, func(a opv1.NodeDisruptionPolicyStatusAction) bool { return a.Type == t })
}

func actionNames(actions []opv1.NodeDisruptionPolicyStatusAction) string {
	names := make([]string, 0, len(actions))
	for _, a := range actions {
		names = append(names, string(a.Type))
	}
	return strings.Join(names, "+")
}

// safeRegistriesChange is isSafeContainerRegistryConfChanges: no unqualified-search registry
// removed or reordered, no registry removed, none changed in prefix, location, blocked or
// insecure, no mirror removed, no pull-from-mirror changed other than to digest-only, and every
// mirror added (or registry added) digest-only. A file added or removed is not safe.
func safeRegistriesChange(from, to *Registries) bool {
	if from == nil || to == nil {
		return false
	}
	if len(from.UnqualifiedSearchRegistries) > len(to.UnqualifiedSearchRegistries) {
		return false
	}
	for i, r := range from.UnqualifiedSearchRegistries {
		if to.UnqualifiedSearchRegistries[i] != r {
			return false
		}
	}
	old, next := registriesByScope(from), registriesByScope(to)
	for scope := range old {
		if _, ok := next[scope]; !ok {
			return false
		}
	}
	for scope, n := range next {
		o, ok := old[scope]
		if !ok {
			if !allDigestOnly(n) {
				return false
			}
			continue
		}
		if !safeRegistryChange(o, n) {
			return false
		}
	}
	return true
}

func safeRegistryChange(o, n Registry) bool {
	if o.Prefix != n.Prefix || o.Location != n.Location || o.Blocked != n.Blocked || o.Insecure != n.Insecure {
		return false
	}
	for _, m := range o.Mirrors {
		if _, found := mirrorAt(m.Location, n.Mirrors); !found {
			return false
		}
	}
	for _, m := range n.Mirrors {
		prev, found := mirrorAt(m.Location, o.Mirrors)
		switch {
		case found && m.PullFromMirror != prev.PullFromMirror && m.PullFromMirror != digestOnly:
			return false
		case !found && m.PullFromMirror != digestOnly && !n.MirrorByDigestOnly:
			return false
		}
	}
	return true
}

const digestOnly = "digest-only"

func registriesByScope(r *Registries) map[string]Registry {
	out := map[string]Registry{}
	for _, reg := range r.Registries {
		scope := reg.Location
		if reg.Prefix != "" {
			scope = reg.Prefix
		}
		out[scope] = reg
	}
	return out
}

func mirrorAt(location string, mirrors []Mirror) (Mirror, bool) {
	for _, m := range mirrors {
		if m.Location == location {
			return m, true
		}
	}
	return Mirror{}, false
}

func allDigestOnly(r Registry) bool {
	if len(r.Mirrors) == 0 {
		return r.MirrorByDigestOnly
	}
	for _, m := range r.Mirrors {
		if m.PullFromMirror != digestOnly {
			return false
		}
	}
	return true
}
