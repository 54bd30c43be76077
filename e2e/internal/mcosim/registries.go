package mcosim

import (
	"fmt"
	"reflect"

	"github.com/BurntSushi/toml"
)

// containerRegistryConfPath is the file whose changes the MCO treats
// specially (constants.ContainerRegistryConfPath): its default node
// disruption policy is Special, and a drain is needed only when
// isSafeContainerRegistryConfChanges says the change is unsafe.
const containerRegistryConfPath = "/etc/containers/registries.conf"

// mirrorByDigestOnly is sysregistriesv2.MirrorByDigestOnly.
const mirrorByDigestOnly = "digest-only"

// The parts of containers/image's sysregistriesv2.V2RegistriesConf that
// isSafeContainerRegistryConfChanges compares, with the same TOML keys.
type registriesConf struct {
	UnqualifiedSearchRegistries []string            `toml:"unqualified-search-registries"`
	Registries                  []registryConfEntry `toml:"registry"`
}

type registryEndpoint struct {
	Location       string `toml:"location"`
	Insecure       bool   `toml:"insecure"`
	PullFromMirror string `toml:"pull-from-mirror"`
}

type registryConfEntry struct {
	Prefix string `toml:"prefix"`
	registryEndpoint
	Mirrors            []registryEndpoint `toml:"mirror"`
	Blocked            bool               `toml:"blocked"`
	MirrorByDigestOnly bool               `toml:"mirror-by-digest-only"`
}

// isSafeContainerRegistryConfChanges follows the machine-config-daemon's
// function of that name (pkg/daemon/drain.go): a registries.conf change needs
// no drain when it only adds mirrors with pull-from-mirror = "digest-only"
// (or registries all of whose mirrors are digest-only), and removes, reorders
// or loosens nothing. A missing file reads as empty, as
// ctrlcommon.GetIgnitionFileDataByPath returns no data for it.
func isSafeContainerRegistryConfChanges(oldIgn, newIgn *ignitionConfig) (bool, error) {
	oldData, err := oldIgn.fileData(containerRegistryConfPath)
	if err != nil {
		return false, err
	}
	newData, err := newIgn.fileData(containerRegistryConfPath)
	if err != nil {
		return false, err
	}
	var oldConf, newConf registriesConf
	if _, err := toml.Decode(string(oldData), &oldConf); err != nil {
		return false, fmt.Errorf("failed decoding TOML content from file %s: %w", containerRegistryConfPath, err)
	}
	if _, err := toml.Decode(string(newData), &newConf); err != nil {
		return false, fmt.Errorf("failed decoding TOML content from file %s: %w", containerRegistryConfPath, err)
	}

	// No unqualified-search registry removed, the order kept.
	if len(oldConf.UnqualifiedSearchRegistries) > len(newConf.UnqualifiedSearchRegistries) {
		return false, nil
	}
	for i, reg := range oldConf.UnqualifiedSearchRegistries {
		if newConf.UnqualifiedSearchRegistries[i] != reg {
			return false, nil
		}
	}

	byScope := func(regs []registryConfEntry) map[string]registryConfEntry {
		m := make(map[string]registryConfEntry, len(regs))
		for _, r := range regs {
			scope := r.Location
			if r.Prefix != "" {
				scope = r.Prefix
			}
			m[scope] = r
		}
		return m
	}
	oldRegs, newRegs := byScope(oldConf.Registries), byScope(newConf.Registries)
	for scope := range oldRegs {
		if _, ok := newRegs[scope]; !ok {
			return false, nil // a registry was removed
		}
	}
	for scope, newReg := range newRegs {
		oldReg, ok := oldRegs[scope]
		if !ok {
			if !allDigestOnlyMirror(newReg) {
				return false, nil
			}
			continue
		}
		if reflect.DeepEqual(oldReg, newReg) {
			continue
		}
		if oldReg.Prefix != newReg.Prefix || oldReg.Location != newReg.Location ||
			oldReg.Blocked != newReg.Blocked || oldReg.Insecure != newReg.Insecure {
			return false, nil
		}
		for _, m := range oldReg.Mirrors {
			if _, found := searchRegistryMirror(m.Location, newReg.Mirrors); !found {
				return false, nil // a mirror was removed
			}
		}
		for _, m := range newReg.Mirrors {
			old, found := searchRegistryMirror(m.Location, oldReg.Mirrors)
			if found && m.PullFromMirror != old.PullFromMirror && m.PullFromMirror != mirrorByDigestOnly {
				return false, nil // pull-from-mirror loosened
			}
			if !found && m.PullFromMirror != mirrorByDigestOnly && !newReg.MirrorByDigestOnly {
				return false, nil // a mirror added that serves tags too
			}
		}
	}
	return true, nil
}

// searchRegistryMirror is the MCO's helper of that name (pkg/daemon/drain.go).
func searchRegistryMirror(location string, mirrors []registryEndpoint) (registryEndpoint, bool) {
	for _, m := range mirrors {
		if m.Location == location {
			return m, true
		}
	}
	return registryEndpoint{}, false
}

// allDigestOnlyMirror is the MCO's helper of that name (pkg/daemon/drain.go).
func allDigestOnlyMirror(reg registryConfEntry) bool {
	if len(reg.Mirrors) == 0 {
		return reg.MirrorByDigestOnly
	}
	for _, m := range reg.Mirrors {
		if m.PullFromMirror != mirrorByDigestOnly {
			return false
		}
	}
	return true
}
