package gather

import "strings"

// Redacted replaces every value gather must not copy out of the cluster.
const Redacted = "<redacted>"

// lastApplied is kubectl's copy of the whole applied object: it repeats the env values that
// Redact removes from the spec.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Redact strips an object, as the API returns it unstructured, of what a support bundle must not
// hold: the literal value of every environment variable anywhere in it (a Deployment's template,
// an InferenceService's predictor, an LLMInferenceService's template and worker all nest containers
// differently, so every list under a key "env" is treated as container env), the
// last-applied-configuration annotation that repeats them, and managedFields. References
// (valueFrom, envFrom) name a ConfigMap or Secret and key but hold no value; they are kept. obj is
// changed in place.
func Redact(obj map[string]any) {
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
		if ann, ok := md["annotations"].(map[string]any); ok {
			delete(ann, lastApplied)
		}
	}
	redactEnv(obj)
}

func redactEnv(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			if k == "env" {
				if list, ok := child.([]any); ok {
					for _, e := range list {
						if ev, ok := e.(map[string]any); ok {
							if _, has := ev["value"]; has {
								ev["value"] = Redacted
							}
						}
					}
					continue
				}
			}
			redactEnv(child)
		}
	case []any:
		for _, child := range t {
			redactEnv(child)
		}
	}
}

// safeName reports whether s can name a file under the destination directory: object names are
// DNS subdomains, but gather does not rely on the API server for the files it creates.
func safeName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`) && !strings.Contains(s, "\x00")
}
