package scenarios

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"

	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

const (
	// scenarioTimeout bounds one scenario, clean-up excluded.
	scenarioTimeout = 6 * time.Minute
	// rolloutTimeout bounds a whole pool update with the guardian's help.
	rolloutTimeout = 150 * time.Second
	// pollInterval paces every wait of the scenarios.
	pollInterval  = 200 * time.Millisecond
	initialConfig = "rendered-1"
	nextConfig    = "rendered-2"
)

// scenario is one end-to-end case: a namespace and a pool of its own, an observer recording the
// timeline, and the guardians it started.
type scenario struct {
	t     *testing.T
	ctx   context.Context
	kube  kubernetes.Interface
	name  string
	ns    string
	pool  string
	nodes []string
	obs   *testbed.Observer

	guardians []*testbed.Guardian
	logs      []string
}

// newScenario creates the namespace, the pool with nodes (named <pool>-<i>) and starts observing;
// podSelector selects the model's pods (or, with models, the pod selector of each of several models,
// all of which must stay available). Everything is removed when the test ends; on failure the
// timeline, the guardian logs and the MCO simulator's lines about the pool's nodes are logged first.
func newScenario(t *testing.T, name string, nodes []testbed.NodeSpec, podSelector string, models ...string) *scenario {
	t.Helper()
	return newScenarioWithin(t, scenarioTimeout, name, nodes, podSelector, models...)
}

// newScenarioWithin is newScenario for a scenario that may take up to timeout.
func newScenarioWithin(t *testing.T, timeout time.Duration, name string, nodes []testbed.NodeSpec, podSelector string, models ...string) *scenario {
	t.Helper()
	return newScenarioOn(t, timeout, initialConfig, name, nodes, podSelector, models...)
}

// newScenarioOn is newScenarioWithin with the pool's nodes on the rendered config initial.
func newScenarioOn(t *testing.T, timeout time.Duration, initial, name string, nodes []testbed.NodeSpec, podSelector string, models ...string) *scenario {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	s := &scenario{t: t, ctx: ctx, kube: testBed.CP.Client(), name: name, ns: "e2e-" + name, pool: "e2e-" + name}
	for i := range nodes {
		if nodes[i].Name == "" {
			nodes[i].Name = fmt.Sprintf("%s-%d", s.pool, i+1)
		}
		s.nodes = append(s.nodes, nodes[i].Name)
	}
	start := time.Now()
	t.Cleanup(func() {
		cancel()
		for _, g := range s.guardians {
			g.Stop()
		}
		if t.Failed() {
			s.dumpDiagnostics()
		} else if os.Getenv("E2E_TIMELINE") != "" {
			t.Logf("timeline of scenario %s:\n%s", s.name, s.obs.FormatTimeline())
		}
		// A fresh context: the scenario's own may be done. Deleting the namespace first lets the
		// garbage collector remove the pods before their nodes go.
		cleanup, done := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
		defer done()
		_ = s.kube.CoreV1().Namespaces().Delete(cleanup, s.ns, metav1.DeleteOptions{})
		testBed.DeletePool(cleanup, s.pool)
		t.Logf("scenario %s took %v", name, time.Since(start).Round(100*time.Millisecond))
	})
	if err := testBed.CreateNamespace(ctx, s.ns); err != nil {
		t.Fatalf("creating namespace %s: %v", s.ns, err)
	}
	obs, err := testbed.Observe(ctx, s.kube, testBed.CP.Dynamic(), testBed.MCFG, testbed.Scope{
		Namespace:      s.ns,
		Pool:           s.pool,
		NodeSelector:   testbed.PoolLabel + "=" + s.pool,
		PodSelector:    podSelector,
		ModelSelectors: models,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.obs = obs
	if err := testBed.CreatePool(ctx, s.pool, initial, nodes); err != nil {
		s.fatalf("creating pool: %v", err)
	}
	return s
}

// gpuNodes returns n node specs with gpus each, alternating between two zones.
func gpuNodes(n, gpus int) []testbed.NodeSpec {
	out := make([]testbed.NodeSpec, n)
	for i := range out {
		out[i] = testbed.NodeSpec{Zone: []string{"zone-a", "zone-b"}[i%2], GPUs: gpus}
	}
	return out
}

func (s *scenario) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("%s (at +%.1fs)", fmt.Sprintf(format, args...), s.obs.Elapsed().Seconds())
}

// note adds a step of the scenario to the timeline.
func (s *scenario) note(format string, args ...any) { s.obs.Note("SCENARIO: "+format, args...) }

// guardianFlags are the flags every guardian of the scenario runs with.
func (s *scenario) guardianFlags() []string {
	return []string{
		"--kubeconfig=" + testBed.CP.GuardianKubeconfig(),
		"--pool-selector=" + testbed.PoolLabel + "=" + s.pool,
		"--namespace-selector=kubernetes.io/metadata.name=" + s.ns,
		"--schedule-timeout=30s",
		"--log-level=debug",
	}
}

// startGuardian runs a guardian without leader election (flags may override any default) and
// waits until it is ready.
func (s *scenario) startGuardian(flags ...string) *testbed.Guardian {
	s.t.Helper()
	g := s.spawnGuardian(append([]string{"--leader-elect=false"}, flags...)...)
	if err := g.WaitReady(s.ctx, 30*time.Second); err != nil {
		s.fatalf("%v", err)
	}
	s.note("guardian %d ready (pid %d)", len(s.guardians), g.Pid())
	return g
}

// spawnGuardian starts a guardian process without waiting for it.
func (s *scenario) spawnGuardian(flags ...string) *testbed.Guardian {
	s.t.Helper()
	logPath := filepath.Join(testBed.CP.LogDir(), fmt.Sprintf("guardian-%s-%d.log", s.name, len(s.guardians)+1))
	g, err := testbed.StartGuardian(testBed.GuardianBinary, logPath, append(s.guardianFlags(), flags...)...)
	if err != nil {
		s.fatalf("%v", err)
	}
	s.guardians = append(s.guardians, g)
	if !slices.Contains(s.logs, logPath) {
		s.logs = append(s.logs, logPath)
	}
	return g
}

func (s *scenario) dumpDiagnostics() {
	s.t.Logf("timeline of scenario %s:\n%s", s.name, s.obs.FormatTimeline())
	for _, p := range s.logs {
		s.t.Logf("last lines of %s:\n%s", filepath.Base(p), tail(p, 60, nil))
	}
	s.t.Logf("MCO simulator lines about the pool's nodes:\n%s", tail(testBed.LogPath("mcosim"), 40, func(line string) bool {
		for _, n := range s.nodes {
			if strings.Contains(line, n) {
				return true
			}
		}
		return strings.Contains(line, s.pool)
	}))
}

// tail returns the last n lines of a file that keep accepts (all when keep is nil).
func tail(path string, n int, keep func(string) bool) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if keep != nil && !keep(sc.Text()) {
			continue
		}
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// eventually polls cond until it holds or timeout passes; cond returns an error only for a failure
// waiting cannot fix.
func (s *scenario) eventually(timeout time.Duration, what string, cond func() (bool, error)) {
	s.t.Helper()
	s.note("waiting for %s", what)
	err := wait.PollUntilContextTimeout(s.ctx, pollInterval, timeout, true, func(context.Context) (bool, error) {
		return cond()
	})
	if err != nil {
		s.fatalf("waiting for %s: %v", what, err)
	}
	s.note("done: %s", what)
}

// holds checks cond continuously for d and fails at the first observation where it does not hold.
func (s *scenario) holds(d time.Duration, what string, cond func() error) {
	s.t.Helper()
	s.note("checking for %v that %s", d, what)
	var failure error
	err := wait.PollUntilContextTimeout(s.ctx, pollInterval, d, true, func(context.Context) (bool, error) {
		failure = cond()
		return failure != nil, nil
	})
	if failure != nil {
		s.fatalf("expected %s: %v", what, failure)
	}
	if !wait.Interrupted(err) || s.ctx.Err() != nil {
		s.fatalf("checking %s: %v (scenario context: %v)", what, err, s.ctx.Err())
	}
}

// createModelPDB creates a minAvailable 1 PDB over matchLabels and waits until the disruption
// controller has counted one healthy pod and allows no disruption.
func (s *scenario) createModelPDB(pdb *policyv1.PodDisruptionBudget) {
	s.t.Helper()
	s.createPDBAllowing(pdb, 0)
}

// createPDBAllowing creates the PDB and waits until its status allows exactly allowed disruptions.
func (s *scenario) createPDBAllowing(pdb *policyv1.PodDisruptionBudget, allowed int32) {
	s.t.Helper()
	if _, err := s.kube.PolicyV1().PodDisruptionBudgets(s.ns).Create(s.ctx, pdb, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating PDB: %v", err)
	}
	s.eventually(time.Minute, fmt.Sprintf("PDB %s to allow %d disruption(s)", pdb.Name, allowed), func() (bool, error) {
		p, err := s.kube.PolicyV1().PodDisruptionBudgets(s.ns).Get(s.ctx, pdb.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy >= 1 && p.Status.DisruptionsAllowed == allowed, nil
	})
}

// waitModelReady waits until exactly n of the model's pods exist and are Ready and returns them.
func (s *scenario) waitModelReady(selector string, n int) []corev1.Pod {
	s.t.Helper()
	var pods []corev1.Pod
	s.eventually(time.Minute, fmt.Sprintf("%d Ready pod(s) of the model", n), func() (bool, error) {
		list, err := s.kube.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		ready := 0
		for i := range list.Items {
			if testbed.PodReady(&list.Items[i]) && list.Items[i].DeletionTimestamp == nil {
				ready++
			}
		}
		pods = list.Items
		return len(list.Items) == n && ready == n, nil
	})
	return pods
}

func (s *scenario) getPool() *mcfgv1.MachineConfigPool {
	p, err := testBed.Pool(s.ctx, s.pool)
	if err != nil {
		s.fatalf("getting pool: %v", err)
	}
	return p
}

func (s *scenario) getNode(name string) *corev1.Node {
	n, err := s.kube.CoreV1().Nodes().Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.fatalf("getting node %s: %v", name, err)
	}
	return n
}

// updatePool starts the rollout of nextConfig.
func (s *scenario) updatePool() {
	s.t.Helper()
	s.note("pool update to %s", nextConfig)
	if err := testBed.UpdatePool(s.ctx, s.pool, nextConfig); err != nil {
		s.fatalf("updating pool: %v", err)
	}
}

// waitPoolUpdated waits until the pool has rolled nextConfig out to every node.
func (s *scenario) waitPoolUpdated() time.Duration {
	s.t.Helper()
	return s.waitPoolUpdatedTo(nextConfig)
}

// waitPoolUpdatedTo waits until the pool has rolled config out to every node.
func (s *scenario) waitPoolUpdatedTo(config string) time.Duration {
	s.t.Helper()
	start := time.Now()
	s.eventually(rolloutTimeout, "pool "+s.pool+" to be Updated to "+config, func() (bool, error) {
		p, err := testBed.Pool(s.ctx, s.pool)
		if err != nil {
			return false, nil
		}
		return mcosim.PoolUpdated(p) && p.Spec.Configuration.Name == config &&
			int(p.Status.UpdatedMachineCount) == len(s.nodes), nil
	})
	return time.Since(start)
}

// assertAvailable stops sampling and checks that the model always had a Ready replica.
func (s *scenario) assertAvailable() testbed.Availability {
	s.t.Helper()
	a := s.obs.StopSampling()
	s.t.Logf("availability: %v", a)
	if a.Samples < 10 {
		s.fatalf("only %d availability samples: the observation did not run", a.Samples)
	}
	if a.MinReady < 1 || a.Available != a.Samples {
		s.fatalf("the model was unavailable: %v", a)
	}
	// Sampling every 100 ms; a gap over 250 ms means the observations missed their contract.
	if a.MaxGap > 250*time.Millisecond {
		s.t.Errorf("observations were %v apart at worst, want at most 250ms", a.MaxGap)
	}
	return a
}

// events returns the reasons of the Events in the scenario's namespace, with how often each
// occurred.
func (s *scenario) events() map[string][]corev1.Event {
	list, err := s.kube.CoreV1().Events(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.fatalf("listing events: %v", err)
	}
	out := map[string][]corev1.Event{}
	for _, e := range list.Items {
		out[e.Reason] = append(out[e.Reason], e)
	}
	return out
}

// logEventReasons logs how many Events of each reason the namespace holds, so that a run's story
// can be told from its output whether it passes or fails.
func (s *scenario) logEventReasons() {
	s.t.Helper()
	ev := s.events()
	reasons := make([]string, 0, len(ev))
	for r, list := range ev {
		reasons = append(reasons, fmt.Sprintf("%s×%d", r, len(list)))
	}
	sort.Strings(reasons)
	s.t.Logf("Events by reason: %s", strings.Join(reasons, " "))
}

// waitEvent waits for an Event with reason (and type when not empty) in the namespace.
func (s *scenario) waitEvent(timeout time.Duration, reason, eventType string) corev1.Event {
	s.t.Helper()
	var found corev1.Event
	s.eventually(timeout, "Event "+reason, func() (bool, error) {
		for _, e := range s.events()[reason] {
			if eventType == "" || e.Type == eventType {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// requireEvents fails unless every reason has at least one Event.
//
// Scenarios require StallResolved (the blocked pod left its node while its replacement was Ready),
// not PodEvicted: who evicts the pod is a race the user does not rely on. A look-ahead surge Ready
// before the drain comes lets the drain's own eviction through at once, and once a replacement turns
// Ready the guardian's eviction and the drainer's next retry go for the same pod.
func (s *scenario) requireEvents(reasons ...string) {
	s.t.Helper()
	ev := s.events()
	for _, r := range reasons {
		if len(ev[r]) == 0 {
			s.t.Errorf("no Event %s in namespace %s", r, s.ns)
		}
	}
}

// forbidEvents fails if any of the reasons was recorded.
func (s *scenario) forbidEvents(reasons ...string) {
	s.t.Helper()
	ev := s.events()
	for _, r := range reasons {
		for _, e := range ev[r] {
			s.t.Errorf("unexpected Event %s on %s: %s", r, e.InvolvedObject.Name, e.Message)
		}
	}
}

func (s *scenario) deployment(name string) *appsv1.Deployment {
	d, err := s.kube.AppsV1().Deployments(s.ns).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.fatalf("getting deployment %s: %v", name, err)
	}
	return d
}

// waitRestored waits until the namespace has no Surge and the pods of the model are back to want,
// all Ready.
func (s *scenario) waitRestored(selector string, want int) {
	s.t.Helper()
	s.eventually(time.Minute, fmt.Sprintf("the Surge to be gone and the model back to %d replica(s)", want), func() (bool, error) {
		if s.hasSurge() {
			return false, nil
		}
		pods, err := s.kube.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		ready := 0
		for i := range pods.Items {
			if testbed.PodReady(&pods.Items[i]) {
				ready++
			}
		}
		return len(pods.Items) == want && ready == want, nil
	})
}

// dyn returns the dynamic client for a KServe resource in the namespace.
func (s *scenario) getUnstructured(gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	u, err := testBed.CP.Dynamic().Resource(gvr).Namespace(s.ns).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.fatalf("getting %s %s: %v", gvr.Resource, name, err)
	}
	return u
}

// specJSON is the object's spec as JSON (map keys sorted), for a byte-for-byte comparison.
func specJSON(u *unstructured.Unstructured) string {
	b, err := json.Marshal(u.Object["spec"])
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// hasSurge reports whether the scenario's namespace holds an active Surge: one in any phase but
// Failed (a failed surge is already restored; its Surge is kept as the memory of the failure).
func (s *scenario) hasSurge() bool {
	s.t.Helper()
	for _, sg := range s.surges() {
		if phase, _, _ := unstructured.NestedString(sg.Object, "status", "phase"); phase != "Failed" {
			return true
		}
	}
	return false
}

// surges lists the Surges of the scenario's namespace.
func (s *scenario) surges() []unstructured.Unstructured {
	s.t.Helper()
	list, err := testBed.CP.Dynamic().Resource(testbed.Surges).Namespace(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.fatalf("listing Surges: %v", err)
	}
	return list.Items
}

// evict asks the Eviction API to evict the pod.
func evict(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) error {
	return kube.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
	})
}

func selectorOf(m map[string]string) string { return labels.SelectorFromSet(m).String() }

func isTooManyRequests(err error) bool { return apierrors.IsTooManyRequests(err) }
