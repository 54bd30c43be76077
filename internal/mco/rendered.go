package mco

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/BurntSushi/toml"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
)

// Rendered is what the machine-config daemon's drain decision reads of one rendered MachineConfig,
// and nothing more: digests of the Ignition passwd section, of each file and of each unit (never
// their contents: rendered configs carry the pull secret, SSH keys and certificates), the fields of
// the spec that force a reboot, and the registries.conf structure the daemon compares for its
// one special case. It is what the informer caches of a MachineConfig (SlimMachineConfig), so the
// secrets never reach the guardian's memory past the transform, nor its logs.
type Rendered struct {
	OSImageURL      string   `json:"osImageURL,omitempty"`
	KernelArguments []string `json:"kernelArguments,omitempty"`
	KernelType      string   `json:"kernelType,omitempty"`
	Extensions      []string `json:"extensions,omitempty"`
	FIPS            bool     `json:"fips,omitempty"`
	// Passwd digests the whole Ignition passwd section (users and their SSH keys).
	Passwd string `json:"passwd,omitempty"`
	// Files and Units digest each Ignition file by path and each systemd unit by name.
	Files map[string]string `json:"files,omitempty"`
	Units map[string]string `json:"units,omitempty"`
	// Registries is /etc/containers/registries.conf as the daemon compares it; nil when absent.
	Registries *Registries `json:"registries,omitempty"`
	// Unreadable says why the config could not be read (Ignition not 3.x, a file not decodable):
	// every decision over it is unknown.
	Unreadable string `json:"unreadable,omitempty"`
}

// Registries is the part of registries.conf (containers-registries.conf(5), v2) that the daemon's
// safe-change check compares (pkg/daemon/drain.go isSafeContainerRegistryConfChanges).
type Registries struct {
	UnqualifiedSearchRegistries []string   `toml:"unqualified-search-registries" json:"unqualifiedSearchRegistries,omitempty"`
	Registries                  []Registry `toml:"registry" json:"registries,omitempty"`
}

// Registry is one [[registry]] table.
type Registry struct {
	Prefix             string   `toml:"prefix" json:"prefix,omitempty"`
	Location           string   `toml:"location" json:"location,omitempty"`
	Blocked            bool     `toml:"blocked" json:"blocked,omitempty"`
	Insecure           bool     `toml:"insecure" json:"insecure,omitempty"`
	MirrorByDigestOnly bool     `toml:"mirror-by-digest-only" json:"mirrorByDigestOnly,omitempty"`
	Mirrors            []Mirror `toml:"mirror" json:"mirrors,omitempty"`
}

// Mirror is one mirror of a registry.
type Mirror struct {
	Location       string `toml:"location" json:"location,omitempty"`
	PullFromMirror string `toml:"pull-from-mirror" json:"pullFromMirror,omitempty"`
}

// RegistriesConfPath is the file whose changes the daemon looks into (constants.ContainerRegistryConfPath).
const RegistriesConfPath = "/etc/containers/registries.conf"

// ignition is the part of an Ignition 3.x config the decision reads; each entry is kept raw and
// digested whole, as the daemon compares whole entries (reflect.DeepEqual of ign3types.File/Unit).
type ignition struct {
	Ignition struct {
		Version string `json:"version"`
	} `json:"ignition"`
	Passwd  json.RawMessage `json:"passwd"`
	Storage struct {
		Files []json.RawMessage `json:"files"`
	} `json:"storage"`
	Systemd struct {
		Units []json.RawMessage `json:"units"`
	} `json:"systemd"`
}

// ReadRendered digests a rendered MachineConfig. An entry that differs only in how its JSON is
// written (key order, spacing) digests the same; one that differs in a default spelled out or left
// out digests differently, which can only make a drain predicted where none comes, never the
// other way round.
func ReadRendered(mc *mcfgv1.MachineConfig) *Rendered {
	r := &Rendered{
		OSImageURL: mc.Spec.OSImageURL, KernelArguments: mc.Spec.KernelArguments, KernelType: canonicalKernelType(mc.Spec.KernelType),
		Extensions: mc.Spec.Extensions, FIPS: mc.Spec.FIPS,
	}
	var ign ignition
	if len(mc.Spec.Config.Raw) > 0 {
		if err := json.Unmarshal(mc.Spec.Config.Raw, &ign); err != nil {
			r.Unreadable = "its Ignition config is not JSON"
			return r
		}
	}
	if v := ign.Ignition.Version; v != "" && !strings.HasPrefix(v, "3.") {
		r.Unreadable = fmt.Sprintf("Ignition version %q is not 3.x", v)
		return r
	}
	r.Passwd = digest(ign.Passwd)
	r.Files = map[string]string{}
	for _, raw := range ign.Storage.Files {
		var f struct {
			Path     string `json:"path"`
			Contents struct {
				Source *string `json:"source"`
			} `json:"contents"`
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			r.Unreadable = "a file entry is not readable"
			return r
		}
		r.Files[f.Path] = digest(raw)
		if f.Path == RegistriesConfPath && f.Contents.Source != nil {
			reg, err := readRegistries(*f.Contents.Source)
			if err != nil {
				r.Unreadable = RegistriesConfPath + ": " + err.Error()
				return r
			}
			r.Registries = reg
		}
	}
	r.Units = map[string]string{}
	for _, raw := range ign.Systemd.Units {
		var u struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(raw, &u); err != nil {
			r.Unreadable = "a unit entry is not readable"
			return r
		}
		r.Units[u.Name] = digest(raw)
	}
	return r
}

// digest is a short digest of a JSON value, independent of key order and spacing.
func digest(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		v = string(raw)
	}
	canonical, _ := json.Marshal(v) // maps marshal with sorted keys
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:12])
}

// readRegistries decodes registries.conf from an Ignition data URL (RFC 2397: "data:," plain or
// percent-encoded, "data:;base64,").
func readRegistries(source string) (*Registries, error) {
	rest, ok := strings.CutPrefix(source, "data:")
	if !ok {
		return nil, fmt.Errorf("its source is not a data URL")
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, fmt.Errorf("malformed data URL")
	}
	var text []byte
	if strings.HasSuffix(meta, ";base64") {
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return nil, fmt.Errorf("base64: %w", err)
		}
		text = b
	} else {
		s, err := url.PathUnescape(data)
		if err != nil {
			return nil, fmt.Errorf("percent-encoding: %w", err)
		}
		text = []byte(s)
	}
	var reg Registries
	if _, err := toml.Decode(string(text), &reg); err != nil {
		return nil, fmt.Errorf("TOML: %w", err)
	}
	return &reg, nil
}

// canonicalKernelType is the daemon's helpers.CanonicalizeKernelType (pkg/helpers/helpers.go):
// realtime and 64k-pages are themselves, anything else is the default kernel.
func canonicalKernelType(t string) string {
	if t == "realtime" || t == "64k-pages" {
		return t
	}
	return "default"
}
