// Package crds holds the CustomResourceDefinitions the local test bed installs
// for kinds of other operators: KServe's InferenceService and
// LLMInferenceService, the NVIDIA GPU Operator's ClusterPolicy and medik8s'
// NodeMaintenance. They are written for this project (see the header of each
// file) and embedded, so a test installs them without reading files relative
// to its working directory.
package crds

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed *.yaml
var files embed.FS

// FS returns the embedded CRD manifests, one YAML document per file.
func FS() fs.FS { return files }

// All decodes every embedded manifest, sorted by file name.
func All() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, name := range names {
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		// Strict, so that a misspelt schema keyword fails here instead of
		// being dropped silently.
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// KServe returns the embedded KServe CRDs, sorted by file name.
func KServe() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, c := range all {
		if c.Spec.Group == "serving.kserve.io" {
			out = append(out, c)
		}
	}
	return out, nil
}
