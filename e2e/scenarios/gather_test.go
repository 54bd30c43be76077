package scenarios

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// gatherMarker is put where gather must never look or copy from: a Secret and a model's env value.
const gatherMarker = "gather-must-not-copy-this-7f3a"

// TestGatherMidSurge runs `drain-guardian gather` while an LLMInferenceService is surged and
// checks the directory holds what support asks for first: the Surge, the guardian's Events, the
// pool, the nodes' MCO annotations and the summary, and nothing of the Secret or the env value.
// The test bed runs the guardian as a process (with leader election, so it holds a real Lease);
// a stand-in Deployment in the guardian's namespace, whose pod kwok runs without containers, gives
// gather a Deployment and flags to copy. kwok serves no container logs: gather must say so in
// problems.txt rather than fail (log collection itself is covered by internal/gather's tests).
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
	leaseID := "e2e-" + s.name
	g := s.spawnGuardian(semantics, "--leader-elect=true", "--leader-election-namespace="+controlplane.GuardianNamespace,
		"--leader-election-id="+leaseID)
	if err := g.WaitLeader(s.ctx, time.Minute); err != nil {
		s.fatalf("%v", err)
	}
	standIn := s.createGuardianStandIn(leaseID)
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
		"--kubeconfig", testBed.CP.AdminKubeconfig(), "--timeout=2m", "--guardian-deployment="+standIn)
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
		"check.json":               {`"pools"`},
		"guardian/deployment.yaml": {"name: " + standIn, "--leader-election-id=" + leaseID, "value: " + "<redacted>"},
		"guardian/flags.txt":       {"--leader-election-id=" + leaseID, "DRAIN_GUARDIAN_READY_TIMEOUT=30m", "PROXY_PASSWORD=<redacted>"},
		"guardian/lease.yaml":      {"name: " + leaseID, "holderIdentity:"},
		"summary.txt":              {"Surges: 1", "LLMInferenceService " + s.ns + "/" + name, "Leader: ", "Guardian pods: 1"},
		"problems.txt":             {"log of " + controlplane.GuardianNamespace + "/" + standIn},
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

	if strings.Contains(files["summary.txt"], "Leader: -") {
		t.Errorf("summary names no leader although the guardian holds Lease %s", leaseID)
	}

	s.waitPoolUpdated()
	s.waitRestored(selectorOf(app), 1)
	s.assertAvailable()
}

// createGuardianStandIn creates, in the guardian's namespace, a one-replica Deployment shaped like
// manifests/base's (leader-election flag, a DRAIN_GUARDIAN_* variable) plus an env value gather must
// redact, waits until kwok runs its pod, and removes it when the test ends. Its pod is pinned to the
// scenario's nodes, which go with the scenario.
func (s *scenario) createGuardianStandIn(leaseID string) string {
	s.t.Helper()
	name := "e2e-" + s.name + "-guardian"
	labels := map[string]string{"app.kubernetes.io/name": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: controlplane.GuardianNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:    map[string]string{testbed.PoolLabel: s.pool},
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name:  "drain-guardian",
						Image: "quay.io/drain-guardian/drain-guardian:e2e",
						Args:  []string{"run", "--leader-elect=true", "--leader-election-id=" + leaseID},
						Env: []corev1.EnvVar{
							{Name: "DRAIN_GUARDIAN_READY_TIMEOUT", Value: "30m"},
							{Name: "PROXY_PASSWORD", Value: gatherMarker},
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
	if _, err := s.kube.AppsV1().Deployments(d.Namespace).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating the guardian stand-in: %v", err)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.t.Context()), 30*time.Second)
		defer cancel()
		_ = s.kube.AppsV1().Deployments(d.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	})
	s.eventually(time.Minute, "the stand-in's pod to run", func() (bool, error) {
		pods, err := s.kube.CoreV1().Pods(d.Namespace).List(s.ctx, metav1.ListOptions{LabelSelector: selectorOf(labels)})
		return err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning, err
	})
	return name
}
