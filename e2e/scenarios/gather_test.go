package scenarios

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// gatherMarker is put where gather must never look or copy from: a Secret and a model's env value.
const gatherMarker = "gather-must-not-copy-this-7f3a"

// TestGatherMidSurge runs `drain-guardian gather` while an LLMInferenceService is surged and
// checks the directory holds what support asks for first: the Surge, the guardian's Events, the
// pool, the nodes' MCO annotations and the summary, and nothing of the Secret or the env value.
// The test bed runs the guardian as a process, not as a pod of a Deployment: gather must say that it
// found no guardian Deployment (and so no pod logs) rather than fail; the log collection itself is
// covered by internal/gather's tests.
func TestGatherMidSurge(t *testing.T) {
	name := "llama"
	app := map[string]string{"app.kubernetes.io/name": name, "kserve.io/component": "workload"}
	s := newScenario(t, "gather", gpuNodes(3, 1), selectorOf(app))
	if _, err := s.kube.CoreV1().Secrets(s.ns).Create(s.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "hf-token"}, StringData: map[string]string{"token": gatherMarker},
	}, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating secret: %v", err)
	}
	spec := testbed.ModelPodSpec(s.pool, app)
	spec.Containers[0].Env = append(spec.Containers[0].Env, corev1.EnvVar{Name: "HF_TOKEN", Value: gatherMarker})
	template, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		t.Fatal(err)
	}
	llm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": testbed.LLMInferenceServices.GroupVersion().String(),
		"kind":       "LLMInferenceService",
		"metadata":   map[string]any{"name": name, "namespace": s.ns},
		"spec": map[string]any{
			"model":       map[string]any{"uri": "hf://meta-llama/Llama-3.1-8B-Instruct", "name": name},
			"annotations": map[string]any{controlplane.ReadyDelayAnnotation: loadingDelay},
			"template":    template,
		},
	}}
	if _, err := testBed.CP.Dynamic().Resource(testbed.LLMInferenceServices).Namespace(s.ns).Create(s.ctx, llm, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating LLMInferenceService: %v", err)
	}
	s.waitModelReady(selectorOf(app), 1)
	s.createModelPDB(testbed.MinAvailablePDB(s.ns, name, app))

	semantics := "--kserve-llm-nil-semantics=one"
	if llmNilKeepsCount {
		semantics = "--kserve-llm-nil-semantics=auto"
	}
	s.startGuardian(semantics)
	s.obs.StartSampling()
	s.updatePool()
	s.eventually(rolloutTimeout, "a Surge past Pending and its SurgeStarted Event", func() (bool, error) {
		items := s.surges()
		if len(items) != 1 {
			return false, nil
		}
		phase, _, _ := unstructured.NestedString(items[0].Object, "status", "phase")
		return phase != "" && phase != "Pending" && len(s.events()["SurgeStarted"]) > 0, nil
	})

	dest := t.TempDir()
	cmd := exec.CommandContext(s.ctx, testBed.GuardianBinary, "gather", "--dest", dest,
		"--kubeconfig", testBed.CP.AdminKubeconfig(), "--timeout=2m")
	out, err := cmd.CombinedOutput()
	s.note("gather: %s", strings.TrimSpace(string(out)))
	if err != nil {
		s.fatalf("gather: %v\n%s", err, out)
	}
	files := map[string]string{}
	if err := filepath.WalkDir(dest, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dest, path)
		files[filepath.ToSlash(rel)] = string(data)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"surges.yaml":                     {"kind: Surge", "namespace: " + s.ns, "kind: LLMInferenceService"},
		"events.yaml":                     {"reason: SurgeStarted", "reportingComponent: drain-guardian"},
		"cluster/machineconfigpools.yaml": {"name: " + s.pool},
		"cluster/nodes.yaml":              {"name: " + s.nodes[0], "machineconfiguration.openshift.io/desiredConfig"},
		"workloads/" + s.ns + "/llminferenceservice_" + name + ".yaml": {"name: HF_TOKEN"},
		"workloads/" + s.ns + "/poddisruptionbudget_" + name + ".yaml": {"kind: PodDisruptionBudget"},
		"check.json":   {`"pools"`},
		"summary.txt":  {"Surges: 1", "LLMInferenceService " + s.ns + "/" + name},
		"problems.txt": {"deployment drain-guardian/drain-guardian"},
	}
	for file, subs := range want {
		got, ok := files[file]
		if !ok {
			t.Errorf("gather wrote no %s (wrote %d files)", file, len(files))
			continue
		}
		for _, sub := range subs {
			if !strings.Contains(got, sub) {
				t.Errorf("%s lacks %q:\n%s", file, sub, got)
			}
		}
	}
	t.Logf("summary.txt:\n%s", files["summary.txt"])
	for file, content := range files {
		if strings.Contains(content, gatherMarker) {
			t.Errorf("%s holds the Secret's data or the env value", file)
		}
		if strings.Contains(content, "kind: Secret") {
			t.Errorf("%s holds a Secret", file)
		}
	}

	s.waitPoolUpdated()
	s.waitRestored(selectorOf(app), 1)
	s.assertAvailable()
}
