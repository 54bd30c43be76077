package scenarios

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// checkReport is the part of `drain-guardian check -o json` the scenario reads.
type checkReport struct {
	Pools []struct {
		Name  string `json:"name"`
		Drain string `json:"drain"`
		Nodes []struct {
			Name   string `json:"name"`
			Blocks []struct {
				Namespace string `json:"namespace"`
				Pod       string `json:"pod"`
				Workload  string `json:"workload"`
				Verdict   string `json:"verdict"`
				Detail    string `json:"detail"`
			} `json:"blocks"`
		} `json:"nodes"`
		Plan struct {
			Resources []struct {
				Name string `json:"name"`
				Peak int64  `json:"peak"`
				Free int64  `json:"free"`
			} `json:"resources"`
		} `json:"plan"`
	} `json:"pools"`
}

// verdicts maps each workload of the scenario's namespace to its verdict, and counts the verdicts.
func (r checkReport) verdicts(ns string) (map[string]string, map[string]int) {
	byWorkload, counts := map[string]string{}, map[string]int{}
	for _, p := range r.Pools {
		for _, n := range p.Nodes {
			for _, b := range n.Blocks {
				if b.Namespace == ns {
					byWorkload[b.Workload] = b.Verdict
					counts[b.Verdict]++
				}
			}
		}
	}
	return byWorkload, counts
}

// TestCheckPredictsMixedPool runs `drain-guardian check` as a user bound only to the read-only
// ClusterRole drain-guardian-check, on a pool of three one-GPU nodes carrying two GPU models (one GPU
// free), a CPU workload whose PDB no surge can satisfy and an opted-out one. check must name every
// verdict and exit 2; once the two stalls are fixed, exit 1; with --restore=pool, where every surge
// holds its GPU until the pool is done, the second model has no capacity. The daemon's gauges must
// agree with check, and the alert rule, fed the daemon's own series, must fire exactly for the stalls.
func TestCheckPredictsMixedPool(t *testing.T) {
	models := []model{{name: "granite", kind: "InferenceService"}, {name: "llama", kind: "Deployment"}}
	s := newScenario(t, "check", gpuNodes(3, 1), "", selectors(models)...)
	for _, m := range models {
		s.createModel(m)
	}
	unsatisfiable := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "strict", Namespace: s.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "strict"}},
		},
	}
	s.createCPUWorkload("strict", nil, unsatisfiable)
	s.createCPUWorkload("pinned", map[string]string{"drain-guardian.io/ignore": "true"},
		testbed.MinAvailablePDB(s.ns, "pinned", map[string]string{"app": "pinned"}))
	kubeconfig := s.readOnlyKubeconfig()

	_, table, code := s.check(kubeconfig, "-o", "table", "--ready-estimate=2m")
	t.Logf("drain-guardian check:\n%s", table)
	if code != 2 {
		t.Errorf("check exited %d, want 2 (something will stall)", code)
	}
	report, _, code := s.check(kubeconfig, "-o", "json")
	got, counts := report.verdicts(s.ns)
	want := map[string]string{
		"InferenceService granite": "resolvable-with-capacity",
		"Deployment llama":         "resolvable-with-capacity",
		"Deployment strict":        "unsatisfiable-pdb",
		"Deployment pinned":        "opted-out",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || code != 2 {
		t.Errorf("check -o json exited %d with verdicts %v, want 2 with %v", code, got, want)
	}
	for _, p := range report.Pools {
		if p.Name == s.pool && (len(p.Plan.Resources) != 1 || p.Plan.Resources[0].Name != "nvidia.com/gpu" || p.Plan.Resources[0].Peak != 1 || p.Plan.Resources[0].Free != 1) {
			t.Errorf("pool plan resources %+v, want a peak of 1 nvidia.com/gpu of 1 free", p.Plan.Resources)
		}
	}

	// The daemon exports the same prediction, and the alert fires for exactly its stalls.
	g := s.startGuardian()
	var metrics string
	s.eventually(time.Minute, "the predicted gauges of the pool", func() (bool, error) {
		body, err := g.Metrics(s.ctx)
		metrics = body
		return err == nil && strings.Contains(body, `drain_guardian_predicted_blocks{pool="`+s.pool+`",verdict="opted-out"} 1`), nil
	})
	series := predictedSeries(metrics, s.pool)
	for _, verdict := range []string{"resolvable-with-capacity", "unsatisfiable-pdb", "opted-out", "no-capacity", "resolvable"} {
		if series[verdict] != counts[verdict] {
			t.Errorf("drain_guardian_predicted_blocks{verdict=%q} = %d, check counts %d", verdict, series[verdict], counts[verdict])
		}
	}
	s.alertAgrees(series, counts)
	e := s.waitEvent(time.Minute, "UpdateWillStall", corev1.EventTypeWarning)
	if e.InvolvedObject.Name != "strict" || !strings.Contains(e.Message, "unsatisfiable-pdb") {
		t.Errorf("UpdateWillStall Event on %s %s: %q, want it on Deployment strict naming unsatisfiable-pdb", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
	}
	if n := len(s.events()["UpdateWillStall"]); n != 1 {
		t.Errorf("%d UpdateWillStall Events, want 1 (none for the opted-out workload)", n)
	}

	// Holding every surge until the pool is done needs two spare GPUs.
	report, _, code = s.check(kubeconfig, "-o", "json", "--restore=pool")
	if got, _ := report.verdicts(s.ns); code != 2 || got["Deployment llama"] != "no-capacity" && got["InferenceService granite"] != "no-capacity" {
		t.Errorf("check --restore=pool exited %d with %v, want 2 with one model no-capacity", code, got)
	}

	// Fix both stalls: only resolvable pods are left.
	for _, pdb := range []string{"strict", "pinned"} {
		if err := s.kube.PolicyV1().PodDisruptionBudgets(s.ns).Delete(s.ctx, pdb, metav1.DeleteOptions{}); err != nil {
			s.fatalf("deleting PDB %s: %v", pdb, err)
		}
	}
	if _, table, code = s.check(kubeconfig, "-o", "table"); code != 1 {
		t.Errorf("after the fixes check exited %d, want 1 (everything blocking is resolvable):\n%s", code, table)
	}
}

// createCPUWorkload creates a one-replica Deployment that requests no GPU, with the given
// annotations and PDB, and waits until the PDB allows no disruption.
func (s *scenario) createCPUWorkload(name string, annotations map[string]string, pdb *policyv1.PodDisruptionBudget) {
	s.t.Helper()
	labels := map[string]string{"app": name}
	spec := testbed.ModelPodSpec(s.pool, labels)
	spec.Containers[0].Resources = corev1.ResourceRequirements{}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{controlplane.ReadyDelayAnnotation: loadingDelay}},
				Spec:       spec,
			},
		},
	}
	if _, err := s.kube.AppsV1().Deployments(s.ns).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating deployment %s: %v", name, err)
	}
	s.waitModelReady(selectorOf(labels), 1)
	s.createModelPDB(pdb)
}

// readOnlyKubeconfig returns a kubeconfig for a ServiceAccount bound to nothing but the shipped
// ClusterRole drain-guardian-check.
func (s *scenario) readOnlyKubeconfig() string {
	s.t.Helper()
	token := s.serviceAccountToken(s.ns, "planner")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + s.name + "-planner"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "drain-guardian-check"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "planner", Namespace: s.ns}},
	}
	if _, err := s.kube.RbacV1().ClusterRoleBindings().Create(s.ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		s.fatalf("binding drain-guardian-check: %v", err)
	}
	s.t.Cleanup(func() {
		_ = s.kube.RbacV1().ClusterRoleBindings().Delete(s.t.Context(), binding.Name, metav1.DeleteOptions{})
	})
	cfg, err := clientcmd.LoadFromFile(testBed.CP.AdminKubeconfig())
	if err != nil {
		s.fatalf("%v", err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.ClientCertificate, auth.ClientKey, auth.ClientCertificateData, auth.ClientKeyData = "", "", nil, nil
		auth.Token, auth.TokenFile = token, ""
	}
	path := filepath.Join(s.t.TempDir(), "planner.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		s.fatalf("%v", err)
	}
	return path
}

// check runs `drain-guardian check` with the scenario's scope and returns its report (for -o json),
// its output and its exit code.
func (s *scenario) check(kubeconfig string, args ...string) (checkReport, string, int) {
	s.t.Helper()
	args = append([]string{"check", "--kubeconfig=" + kubeconfig,
		"--pool-selector=" + testbed.PoolLabel + "=" + s.pool,
		"--namespace-selector=kubernetes.io/metadata.name=" + s.ns,
	}, args...)
	cmd := exec.CommandContext(s.ctx, testBed.GuardianBinary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		s.fatalf("running check: %v", err)
	}
	if code > 2 {
		s.fatalf("check %v exited %d: %s", args[1:], code, stderr.String())
	}
	var r checkReport
	if strings.Contains(strings.Join(args, " "), "-o json") {
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			s.fatalf("check -o json printed no report: %v\n%s", err, stdout.String())
		}
	}
	return r, stdout.String(), code
}

var predictedRE = regexp.MustCompile(`(?m)^drain_guardian_predicted_blocks\{pool="([^"]*)",verdict="([^"]*)"\} (\S+)$`)

// predictedSeries reads drain_guardian_predicted_blocks of pool from a /metrics text, by verdict.
func predictedSeries(metrics, pool string) map[string]int {
	out := map[string]int{}
	for _, m := range predictedRE.FindAllStringSubmatch(metrics, -1) {
		if m[1] == pool {
			v, _ := strconv.ParseFloat(m[3], 64)
			out[m[2]] = int(v)
		}
	}
	return out
}

// alertAgrees runs promtool on the shipped rules with the daemon's series as input: after 16
// minutes, DrainGuardianUpdateWillStall must fire once per verdict check counts as a stall, and for
// nothing else.
func (s *scenario) alertAgrees(series map[string]int, counts map[string]int) {
	s.t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		s.t.Log("promtool not in PATH: the alert rule is not evaluated against the daemon's series")
		return
	}
	rules, err := filepath.Abs("../../manifests/prometheus/drain-guardian.rules.yaml")
	if err != nil {
		s.fatalf("%v", err)
	}
	var input, alerts strings.Builder
	verdicts := make([]string, 0, len(series))
	for v := range series {
		verdicts = append(verdicts, v)
	}
	sort.Strings(verdicts)
	for _, v := range verdicts {
		fmt.Fprintf(&input, "      - series: 'drain_guardian_predicted_blocks{namespace=\"drain-guardian\", pool=%q, verdict=%q}'\n        values: '%dx20'\n", s.pool, v, series[v])
		if counts[v] > 0 && !strings.HasPrefix(v, "resolvable") {
			fmt.Fprintf(&alerts, "          - labels: '{pool=%q, verdict=%q}'\n            value: 1\n", s.pool, v)
		}
	}
	// The firing alerts, one sample per pool and verdict, are read back from ALERTS.
	test := fmt.Sprintf(`rule_files: [%q]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
%s    promql_expr_test:
      - expr: count by (pool, verdict) (ALERTS{alertname="DrainGuardianUpdateWillStall", alertstate="firing"})
        eval_time: 16m
        exp_samples:
%s`, rules, input.String(), alerts.String())
	path := filepath.Join(s.t.TempDir(), "agree_test.yaml")
	if err := os.WriteFile(path, []byte(test), 0o600); err != nil {
		s.fatalf("%v", err)
	}
	out, err := exec.CommandContext(s.ctx, promtool, "test", "rules", path).CombinedOutput()
	if err != nil {
		s.t.Errorf("DrainGuardianUpdateWillStall does not agree with check on the daemon's series: %v\n%s\n%s", err, out, test)
	}
}
