package crds

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

const group = "serving.kserve.io"

// crd returns the embedded CRD with the given kind, defaulted as the API
// server defaults it on create.
func crd(t *testing.T, kind string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	all, err := All()
	if err != nil {
		t.Fatalf("decoding embedded CRDs: %v", err)
	}
	for _, c := range all {
		if c.Spec.Names.Kind == kind {
			apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(c)
			return c
		}
	}
	t.Fatalf("no embedded CRD of kind %s", kind)
	return nil
}

func internal(t *testing.T, in *apiextensionsv1.CustomResourceDefinition) *apiextensions.CustomResourceDefinition {
	t.Helper()
	out := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(in, out, nil); err != nil {
		t.Fatalf("converting %s: %v", in.Name, err)
	}
	return out
}

func TestEmbeddedCRDs(t *testing.T) {
	names := func(list func() ([]*apiextensionsv1.CustomResourceDefinition, error)) []string {
		all, err := list()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range all {
			out = append(out, c.Name)
		}
		return out
	}
	want := []string{"nodemaintenances.nodemaintenance.medik8s.io", "clusterpolicies.nvidia.com",
		"inferenceservices.serving.kserve.io", "llminferenceservices.serving.kserve.io"}
	if got := names(All); !slices.Equal(got, want) {
		t.Errorf("All() = %v, want %v", got, want)
	}
	if got := names(KServe); !slices.Equal(got, want[2:]) {
		t.Errorf("KServe() = %v, want %v", got, want[2:])
	}
}

func TestNamesAndVersions(t *testing.T) {
	type version struct {
		name            string
		served, storage bool
	}
	tests := []struct {
		kind, plural, singular, short string
		versions                      []version
		conversion                    apiextensionsv1.ConversionStrategyType
	}{
		{
			kind: "InferenceService", plural: "inferenceservices", singular: "inferenceservice", short: "isvc",
			versions:   []version{{"v1beta1", true, true}},
			conversion: apiextensionsv1.NoneConverter,
		},
		{
			kind: "LLMInferenceService", plural: "llminferenceservices", singular: "llminferenceservice", short: "llmisvc",
			versions:   []version{{"v1alpha1", true, false}, {"v1alpha2", true, true}},
			conversion: apiextensionsv1.NoneConverter,
		},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			c := crd(t, tt.kind)
			if c.Spec.Group != group || c.Name != tt.plural+"."+group {
				t.Errorf("group/name = %s/%s", c.Spec.Group, c.Name)
			}
			if c.Spec.Scope != apiextensionsv1.NamespaceScoped {
				t.Errorf("scope = %s, want Namespaced", c.Spec.Scope)
			}
			n := c.Spec.Names
			if n.Plural != tt.plural || n.Singular != tt.singular || n.ListKind != tt.kind+"List" || !slices.Equal(n.ShortNames, []string{tt.short}) {
				t.Errorf("names = %+v", n)
			}
			if c.Spec.Conversion == nil || c.Spec.Conversion.Strategy != tt.conversion {
				t.Errorf("conversion = %+v, want %s", c.Spec.Conversion, tt.conversion)
			}
			var got []version
			for _, v := range c.Spec.Versions {
				got = append(got, version{v.Name, v.Served, v.Storage})
				if v.Subresources == nil || v.Subresources.Status == nil {
					t.Errorf("%s: no status subresource", v.Name)
				}
				if v.Subresources != nil && v.Subresources.Scale != nil {
					t.Errorf("%s: has a scale subresource; the real CRD has none", v.Name)
				}
			}
			if !slices.Equal(got, tt.versions) {
				t.Errorf("versions = %+v, want %+v", got, tt.versions)
			}
		})
	}
}

// TestCRDsPassAPIServerValidation runs the API server's own CRD validation:
// structural schemas, CEL rules that compile and fit the cost budget.
func TestCRDsPassAPIServerValidation(t *testing.T) {
	for _, kind := range []string{"InferenceService", "LLMInferenceService"} {
		t.Run(kind, func(t *testing.T) {
			if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal(t, crd(t, kind))); len(errs) > 0 {
				t.Fatalf("invalid CRD: %v", errs.ToAggregate())
			}
		})
	}
}

// server validates and prunes an object against one version of a CRD the
// way the API server does on create: pruning, OpenAPI schema validation, CEL
// rules.
type server struct {
	structural *structuralschema.Structural
	validator  validation.SchemaValidator
	cel        *cel.Validator
}

func newServer(t *testing.T, kind, version string) *server {
	t.Helper()
	return serverFor(t, internal(t, crd(t, kind)), version)
}

// serverFor is newServer for any CRD.
func serverFor(t *testing.T, in *apiextensions.CustomResourceDefinition, version string) *server {
	t.Helper()
	kind := in.Spec.Names.Kind
	var props *apiextensions.JSONSchemaProps
	for _, v := range in.Spec.Versions {
		if v.Name == version && v.Schema != nil {
			props = v.Schema.OpenAPIV3Schema
		}
	}
	if props == nil && in.Spec.Validation != nil {
		props = in.Spec.Validation.OpenAPIV3Schema
	}
	if props == nil {
		t.Fatalf("%s %s: no schema", kind, version)
	}
	s, err := structuralschema.NewStructural(props)
	if err != nil {
		t.Fatalf("%s %s: not structural: %v", kind, version, err)
	}
	v, _, err := validation.NewSchemaValidator(props)
	if err != nil {
		t.Fatalf("%s %s: %v", kind, version, err)
	}
	return &server{structural: s, validator: v, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}
}

// admit returns the pruned object and the validation errors.
func (s *server) admit(obj map[string]any) (map[string]any, field.ErrorList) {
	obj = deepCopy(obj)
	pruning.Prune(obj, s.structural, true)
	errs := validation.ValidateCustomResource(nil, obj, s.validator)
	celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return obj, append(errs, celErrs...)
}

func deepCopy(obj map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: obj}).DeepCopy().Object
}

func parse(t *testing.T, s string) map[string]any {
	t.Helper()
	// Decoded as the API server decodes a request body: whole numbers
	// become int64, which is what schema validation and CEL expect.
	var obj map[string]any
	if err := utiljson.Unmarshal([]byte(s), &obj); err != nil {
		t.Fatalf("bad test object: %v", err)
	}
	return obj
}

const isvcFull = `{
  "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
  "metadata": {"name": "llm", "namespace": "models", "annotations": {"serving.kserve.io/autoscalerClass": "none"}},
  "spec": {"predictor": {
    "minReplicas": 1, "maxReplicas": 2, "scaleTarget": 70, "scaleMetric": "cpu",
    "labels": {"team": "a"}, "annotations": {"e2e.drain-guardian.io/ready-delay": "30s"},
    "nodeSelector": {"gpu": "true"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname"}]}},
    "deploymentStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "0%"}},
    "model": {"modelFormat": {"name": "vLLM"}, "runtime": "vllm", "storageUri": "hf://m/m",
              "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "16Gi"}, "requests": {"cpu": "2"}}},
    "workerSpec": {"pipelineParallelSize": 2, "tensorParallelSize": 1,
                   "containers": [{"name": "worker-container", "image": "w", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
  }}
}`

const llmFull = `{
  "apiVersion": "serving.kserve.io/VERSION", "kind": "LLMInferenceService",
  "metadata": {"name": "chat", "namespace": "models"},
  "spec": {
    "model": {"uri": "hf://org/model", "name": "model"},
    "replicas": 1,
    "labels": {"team": "a"}, "annotations": {"e2e.drain-guardian.io/ready-delay": "30s"},
    "template": {"containers": [{"name": "main", "image": "vllm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}], "nodeSelector": {"gpu": "true"}},
    "prefill": {"replicas": 2,
                "template": {"containers": [{"name": "main", "image": "vllm", "resources": {"requests": {"nvidia.com/gpu": 1}}}]}},
    "parallelism": {"tensor": 1, "pipeline": 1}
  }
}`

// get walks a path of map keys and list indexes.
func get(obj any, path ...any) (any, bool) {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := obj.(map[string]any)
			if !ok {
				return nil, false
			}
			if obj, ok = m[k]; !ok {
				return nil, false
			}
		case int:
			l, ok := obj.([]any)
			if !ok || k >= len(l) {
				return nil, false
			}
			obj = l[k]
		}
	}
	return obj, true
}

// TestTypedFieldsAreKept checks that a complete, valid object is admitted and
// that the fields the guardian and the simulator read survive pruning.
func TestTypedFieldsAreKept(t *testing.T) {
	type check struct {
		path []any
		want any
	}
	predictor := []any{"spec", "predictor"}
	p := func(rest ...any) []any { return append(slices.Clone(predictor), rest...) }
	isvcChecks := []check{
		{p("minReplicas"), int64(1)},
		{p("maxReplicas"), int64(2)},
		{p("annotations", "e2e.drain-guardian.io/ready-delay"), "30s"},
		{p("labels", "team"), "a"},
		{p("nodeSelector", "gpu"), "true"},
		{p("tolerations", 0, "key"), "nvidia.com/gpu"},
		{p("affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", 0, "topologyKey"), "kubernetes.io/hostname"},
		{p("deploymentStrategy", "rollingUpdate", "maxUnavailable"), "0%"},
		{p("model", "modelFormat", "name"), "vLLM"},
		{p("model", "resources", "limits", "nvidia.com/gpu"), int64(1)},
		{p("workerSpec", "pipelineParallelSize"), int64(2)},
		{p("workerSpec", "containers", 0, "resources", "limits", "nvidia.com/gpu"), "1"},
		{[]any{"metadata", "annotations", "serving.kserve.io/autoscalerClass"}, "none"},
	}
	llmChecks := []check{
		{[]any{"spec", "replicas"}, int64(1)},
		{[]any{"spec", "annotations", "e2e.drain-guardian.io/ready-delay"}, "30s"},
		{[]any{"spec", "template", "containers", 0, "resources", "limits", "nvidia.com/gpu"}, "1"},
		{[]any{"spec", "template", "tolerations", 0, "key"}, "nvidia.com/gpu"},
		{[]any{"spec", "prefill", "replicas"}, int64(2)},
		{[]any{"spec", "prefill", "template", "containers", 0, "resources", "requests", "nvidia.com/gpu"}, int64(1)},
		{[]any{"spec", "parallelism", "tensor"}, int64(1)},
	}
	run := func(t *testing.T, s *server, obj map[string]any, checks []check) {
		got, errs := s.admit(obj)
		if len(errs) > 0 {
			t.Fatalf("valid object rejected: %v", errs.ToAggregate())
		}
		for _, c := range checks {
			v, ok := get(got, c.path...)
			if !ok || v != c.want {
				t.Errorf("%v = %v (present %v), want %v", c.path, v, ok, c.want)
			}
		}
	}
	t.Run("InferenceService/v1beta1", func(t *testing.T) {
		run(t, newServer(t, "InferenceService", "v1beta1"), parse(t, isvcFull), isvcChecks)
	})
	for _, v := range []string{"v1alpha1", "v1alpha2"} {
		t.Run("LLMInferenceService/"+v, func(t *testing.T) {
			run(t, newServer(t, "LLMInferenceService", v), parse(t, strings.ReplaceAll(llmFull, "VERSION", v)), llmChecks)
		})
	}
}

// TestUnknownPredictorFieldsArePruned: the predictor is typed field by field,
// so a misspelt field is dropped as on a real cluster instead of being kept.
func TestUnknownPredictorFieldsArePruned(t *testing.T) {
	obj := parse(t, isvcFull)
	pred, _ := get(obj, "spec", "predictor")
	pred.(map[string]any)["minReplica"] = int64(2)
	got, errs := newServer(t, "InferenceService", "v1beta1").admit(obj)
	if len(errs) > 0 {
		t.Fatalf("rejected: %v", errs.ToAggregate())
	}
	if v, ok := get(got, "spec", "predictor", "minReplica"); ok {
		t.Errorf("misspelt field kept: %v", v)
	}
}

// set returns a copy of obj with the value at path replaced (or removed when
// value is nil).
func set(obj map[string]any, value any, path ...string) map[string]any {
	obj = deepCopy(obj)
	m := obj
	for _, k := range path[:len(path)-1] {
		m = m[k].(map[string]any)
	}
	if value == nil {
		delete(m, path[len(path)-1])
	} else {
		m[path[len(path)-1]] = value
	}
	return obj
}

func TestInvalidWritesAreRejected(t *testing.T) {
	isvc := parse(t, isvcFull)
	llm := parse(t, llmFull)
	pred := func(k string) []string { return []string{"spec", "predictor", k} }
	tests := []struct {
		name, kind string
		obj        map[string]any
		wantErr    string // substring of the aggregated error; "" = admitted
	}{
		{"isvc minReplicas string", "InferenceService", set(isvc, "two", pred("minReplicas")...), "minReplicas"},
		{"isvc maxReplicas fraction", "InferenceService", set(isvc, 1.5, pred("maxReplicas")...), "maxReplicas"},
		{"isvc min above max", "InferenceService", set(isvc, int64(3), pred("minReplicas")...), "MinReplicas cannot be greater than MaxReplicas."},
		{"isvc min above max 0 means unbounded", "InferenceService", set(set(isvc, int64(3), pred("minReplicas")...), int64(0), pred("maxReplicas")...), ""},
		{"isvc min raised with max", "InferenceService", set(set(isvc, int64(3), pred("minReplicas")...), int64(3), pred("maxReplicas")...), ""},
		{"isvc min without max", "InferenceService", set(set(isvc, int64(5), pred("minReplicas")...), nil, pred("maxReplicas")...), ""},
		{"isvc negative min", "InferenceService", set(isvc, int64(-1), pred("minReplicas")...), "MinReplicas cannot be less than 0."},
		{"isvc negative max", "InferenceService", set(isvc, int64(-1), pred("maxReplicas")...), "MaxReplicas cannot be less than 0."},
		{"isvc bad scaleMetric", "InferenceService", set(isvc, "gpu", pred("scaleMetric")...), "scaleMetric"},
		{"isvc predictor missing", "InferenceService", set(isvc, nil, "spec", "predictor"), "predictor"},
		{"isvc model without format name", "InferenceService", set(isvc, map[string]any{"version": "1"}, "spec", "predictor", "model", "modelFormat"), "name"},
		{"isvc bad GPU quantity", "InferenceService", set(isvc, "lots", "spec", "predictor", "model", "resources", "limits", "nvidia.com/gpu"), "nvidia.com/gpu"},
		{"isvc container without name", "InferenceService", set(isvc, []any{map[string]any{"image": "x"}}, pred("containers")...), "name"},
		{"isvc annotation not a string", "InferenceService", set(isvc, map[string]any{"a": int64(1)}, pred("annotations")...), "annotations"},
		{"llm replicas string", "LLMInferenceService", set(llm, "two", "spec", "replicas"), "replicas"},
		{"llm negative replicas", "LLMInferenceService", set(llm, int64(-1), "spec", "replicas"), "replicas"},
		{"llm zero replicas", "LLMInferenceService", set(llm, int64(0), "spec", "replicas"), ""},
		{"llm prefill replicas string", "LLMInferenceService", set(llm, "2", "spec", "prefill", "replicas"), "replicas"},
		{"llm replicas with scaling", "LLMInferenceService",
			set(llm, map[string]any{"maxReplicas": int64(3), "wva": map[string]any{"hpa": map[string]any{}}}, "spec", "scaling"),
			"replicas and scaling are mutually exclusive"},
		{"llm scaling alone", "LLMInferenceService",
			set(set(llm, map[string]any{"maxReplicas": int64(3), "wva": map[string]any{"hpa": map[string]any{}}}, "spec", "scaling"), nil, "spec", "replicas"),
			""},
		{"llm scaling min above max", "LLMInferenceService",
			set(set(llm, map[string]any{"minReplicas": int64(4), "maxReplicas": int64(3), "wva": map[string]any{"hpa": map[string]any{}}}, "spec", "scaling"), nil, "spec", "replicas"),
			"minReplicas cannot exceed maxReplicas"},
		{"llm model without uri", "LLMInferenceService", set(llm, map[string]any{"name": "m"}, "spec", "model"), "uri"},
	}
	servers := map[string][]*server{
		"InferenceService":    {newServer(t, "InferenceService", "v1beta1")},
		"LLMInferenceService": {newServer(t, "LLMInferenceService", "v1alpha1"), newServer(t, "LLMInferenceService", "v1alpha2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, s := range servers[tt.kind] {
				_, errs := s.admit(tt.obj)
				switch {
				case tt.wantErr == "" && len(errs) > 0:
					t.Errorf("schema %d: rejected: %v", i, errs.ToAggregate())
				case tt.wantErr != "" && len(errs) == 0:
					t.Errorf("schema %d: admitted, want an error about %q", i, tt.wantErr)
				case tt.wantErr != "" && !strings.Contains(errs.ToAggregate().Error(), tt.wantErr):
					t.Errorf("schema %d: error %v does not mention %q", i, errs.ToAggregate(), tt.wantErr)
				}
			}
		})
	}
}
