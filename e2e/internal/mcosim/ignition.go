package mcosim

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// ignitionConfig is the part of an Ignition 3.x config (a MachineConfig's
// spec.config) that the machine-config-daemon's update decision reads: files,
// systemd units and passwd. Each file, unit and the passwd section keep a
// canonical form of their whole JSON, so that a change to any field (mode,
// overwrite, a drop-in) counts as a change, as the MCO's reflect.DeepEqual
// on the typed Ignition structs does.
type ignitionConfig struct {
	files  []ignitionFile
	units  []ignitionUnit
	passwd string
}

type ignitionFile struct {
	path        string
	source      *string
	compression *string
	canonical   string
}

type ignitionUnit struct {
	name      string
	canonical string
}

// parseIgnition decodes a MachineConfig's spec.config. An empty config is an
// empty Ignition config (ctrlcommon.ParseAndConvertConfig does the same for
// canonicalizeEmptyMC's empty MachineConfig). Only Ignition 3.x is read; the
// MCO also converts 2.x, which rendered configs no longer use.
func parseIgnition(raw []byte) (*ignitionConfig, error) {
	cfg := &ignitionConfig{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return cfg, nil
	}
	var doc struct {
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
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parsing Ignition config: %w", err)
	}
	if !strings.HasPrefix(doc.Ignition.Version, "3.") {
		return nil, fmt.Errorf("unsupported Ignition config version %q (the simulator reads 3.x)", doc.Ignition.Version)
	}
	var err error
	if cfg.passwd, err = canonicalJSON(doc.Passwd); err != nil {
		return nil, fmt.Errorf("passwd: %w", err)
	}
	for _, f := range doc.Storage.Files {
		var file struct {
			Path     string `json:"path"`
			Contents struct {
				Source      *string `json:"source"`
				Compression *string `json:"compression"`
			} `json:"contents"`
		}
		if err := json.Unmarshal(f, &file); err != nil {
			return nil, fmt.Errorf("storage.files: %w", err)
		}
		c, err := canonicalJSON(f)
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", file.Path, err)
		}
		cfg.files = append(cfg.files, ignitionFile{path: file.Path, source: file.Contents.Source, compression: file.Contents.Compression, canonical: c})
	}
	for _, u := range doc.Systemd.Units {
		var unit struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(u, &unit); err != nil {
			return nil, fmt.Errorf("systemd.units: %w", err)
		}
		c, err := canonicalJSON(u)
		if err != nil {
			return nil, fmt.Errorf("unit %s: %w", unit.Name, err)
		}
		cfg.units = append(cfg.units, ignitionUnit{name: unit.Name, canonical: c})
	}
	return cfg, nil
}

// canonicalJSON returns raw re-encoded with sorted keys and without nulls,
// empty objects and empty arrays, so that two encodings of the same typed
// Ignition value compare equal.
func canonicalJSON(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	v = pruneEmpty(v)
	if v == nil {
		return "", nil
	}
	out, err := json.Marshal(v)
	return string(out), err
}

func pruneEmpty(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if p := pruneEmpty(e); p == nil {
				delete(t, k)
			} else {
				t[k] = p
			}
		}
		if len(t) == 0 {
			return nil
		}
		return t
	case []any:
		var out []any
		for _, e := range t {
			if p := pruneEmpty(e); p != nil {
				out = append(out, p)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	default:
		return v
	}
}

// calculateConfigFileDiffs follows ctrlcommon.CalculateConfigFileDiffs
// (pkg/controller/common/helpers.go): the paths of files removed, added or
// changed, sorted here for stable logs and tests.
func calculateConfigFileDiffs(oldIgn, newIgn *ignitionConfig) []string {
	oldFiles := map[string]string{}
	for _, f := range oldIgn.files {
		oldFiles[f.path] = f.canonical
	}
	newFiles := map[string]string{}
	for _, f := range newIgn.files {
		newFiles[f.path] = f.canonical
	}
	return changedKeys(oldFiles, newFiles)
}

// changedUnitNames follows ctrlcommon.GetChangedConfigUnitsByType
// (pkg/controller/common/helpers.go) as update() uses it: the names of units
// added, removed or updated.
func changedUnitNames(oldIgn, newIgn *ignitionConfig) []string {
	oldUnits := map[string]string{}
	for _, u := range oldIgn.units {
		oldUnits[u.name] = u.canonical
	}
	newUnits := map[string]string{}
	for _, u := range newIgn.units {
		newUnits[u.name] = u.canonical
	}
	return changedKeys(oldUnits, newUnits)
}

func changedKeys(oldSet, newSet map[string]string) []string {
	var diff []string
	for k := range oldSet {
		if _, ok := newSet[k]; !ok {
			diff = append(diff, k)
		}
	}
	for k, n := range newSet {
		if o, ok := oldSet[k]; !ok || o != n {
			diff = append(diff, k)
		}
	}
	slices.Sort(diff)
	return diff
}

func (c *ignitionConfig) filesCanonical() []string {
	var out []string
	for _, f := range c.files {
		out = append(out, f.canonical)
	}
	return out
}

func (c *ignitionConfig) unitsCanonical() []string {
	var out []string
	for _, u := range c.units {
		out = append(out, u.canonical)
	}
	return out
}

// fileData follows ctrlcommon.GetIgnitionFileDataByPath: the decoded data
// URL of the file at path, nil when there is none. Like the MCO's helper it
// does not decompress.
func (c *ignitionConfig) fileData(path string) ([]byte, error) {
	for _, f := range c.files {
		if f.path == path && f.source != nil {
			return decodeDataURL(*f.source)
		}
	}
	return nil, nil
}

// decodeDataURL decodes an RFC 2397 data URL, the only file source a
// rendered MachineConfig uses: "data:[<mediatype>][;base64],<data>", the data
// percent-encoded unless it is base64. (The MCO uses
// github.com/vincent-petithory/dataurl.)
func decodeDataURL(s string) ([]byte, error) {
	rest, ok := strings.CutPrefix(s, "data:")
	if !ok {
		return nil, fmt.Errorf("not a data URL: %.40q", s)
	}
	header, data, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, fmt.Errorf("data URL without a comma: %.40q", s)
	}
	if strings.HasSuffix(header, ";base64") {
		unescaped, err := url.PathUnescape(data)
		if err != nil {
			return nil, err
		}
		if out, err := base64.StdEncoding.DecodeString(unescaped); err == nil {
			return out, nil
		}
		return base64.RawStdEncoding.DecodeString(strings.TrimRight(unescaped, "="))
	}
	out, err := url.PathUnescape(data)
	if err != nil {
		return nil, fmt.Errorf("data URL: %w", err)
	}
	return []byte(out), nil
}

// encodeDataURL is the inverse of decodeDataURL with the percent-encoding
// Ignition tools write ("data:,<escaped>").
func encodeDataURL(data []byte) string {
	return "data:," + url.PathEscape(string(data))
}
