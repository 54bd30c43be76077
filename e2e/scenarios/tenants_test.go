package scenarios

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

const (
	// tenantsTimeout bounds TestTenants: two rollouts of tenant B's pool and tenant A's four stalls,
	// two at a time, each ending within --evict-timeout or --ready-timeout.
	tenantsTimeout = 5 * time.Minute
	// tenantsEvictTimeout and tenantsReadyTimeout are the guardian's --evict-timeout and
	// --ready-timeout in TestTenants: short, so that tenant A's stalls end within the test.
	tenantsEvictTimeout = 20 * time.Second
	tenantsReadyTimeout = 30 * time.Second
	// pinnedReadyDelay is how long a replacement of tenant A's pinned models takes to turn Ready: the
	// time the test has to pin the original pod once the Surge exists, before anyone may evict it.
	pinnedReadyDelay = "8s"
	// hugeReplicas is the count of tenant A's fourth workload, held at one pod by a ResourceQuota.
	hugeReplicas = 2_000_000_000
	// maxGuardianRSS bounds the guardian's resident memory for the whole test. One in-memory pod per
	// replica of the huge workload would need terabytes; the guardian idles at a few tens of MiB.
	maxGuardianRSS = 300 << 10 // KiB
)

// pinnedModels are tenant A's workloads whose original pods the tenant pins once they are surged.
var pinnedModels = []string{"pinned-1", "pinned-2", "pinned-3"}

// TestTenants: tenant A makes every surge the guardian gives it useless (it pins the original pods of
// three workloads with a second PDB once they are surged, so their evictions fail for good, and a
// fourth workload asks for two billion replicas held at one pod by a quota, so a replacement would
// never come). Tenant B's single-replica model, in another pool updated at the same time, is surged
// and its pool updates as fast as it does with nobody else around: A never holds the slot B needs.
// The guardian never restarts and its memory stays flat, and each of A's stalls ends with its reason:
// the pinned ones restored as MultiplePDBs (Event MultiplePDBs) as soon as their eviction is asked
// for, the huge one never surged (Event NotSteady: it does not run what it asks for).
func TestTenants(t *testing.T) {
	a := newScenarioWithin(t, tenantsTimeout, "tenants-a", []testbed.NodeSpec{{Zone: "zone-a", GPUs: 4}, {Zone: "zone-b", GPUs: 4}}, "")
	b := newScenarioWithin(t, tenantsTimeout, "tenants-b", gpuNodes(2, 1), selectorOf(modelLabels))

	// Tenant A's four workloads share one node, so that its drain stalls on all four at once.
	a.setUnschedulable(a.nodes[1], true)
	a.createPinnableModels()
	a.createHugeModel()
	a.setUnschedulable(a.nodes[1], false)
	b.createDeployment(loadingDelay)

	g := a.startGuardian(
		fmt.Sprintf("--pool-selector=%s in (%s,%s)", testbed.PoolLabel, a.pool, b.pool),
		fmt.Sprintf("--namespace-selector=kubernetes.io/metadata.name in (%s,%s)", a.ns, b.ns),
		"--evict-timeout="+tenantsEvictTimeout.String(),
		"--ready-timeout="+tenantsReadyTimeout.String(),
	)
	pid := g.Pid()
	rss := watchRSS(a.ctx, pid)
	b.obs.StartSampling()

	// Tenant B alone: the reference.
	b.updatePool()
	alone := b.waitPoolConfig(nextConfig)
	b.waitRestored(selectorOf(modelLabels), 1)
	t.Logf("tenant B's pool update alone took %v", alone.Round(100*time.Millisecond))

	// Tenant A stalls; once it holds every slot a namespace may hold, tenant B's pool updates again.
	pins := a.pinSurgedPods()
	a.updatePool()
	a.eventually(2*time.Minute, "tenant A to hold 2 surges (--max-concurrent-surges-per-namespace) with a stall deferred", func() (bool, error) {
		return len(a.activeSurges()) == 2 && len(a.events()[eventSurgeDeferred]) > 0, nil
	})
	const thirdConfig = "rendered-3"
	b.note("pool update to %s", thirdConfig)
	if err := testBed.UpdatePool(b.ctx, b.pool, thirdConfig); err != nil {
		b.fatalf("updating pool: %v", err)
	}
	var heldByA []string
	b.eventually(time.Minute, "tenant B's surge", func() (bool, error) {
		if !b.hasSurge() {
			return false, nil
		}
		heldByA = a.activeSurges()
		return true, nil
	})
	contended := b.waitPoolConfig(thirdConfig)
	b.waitRestored(selectorOf(modelLabels), 1)
	t.Logf("tenant B's pool update with tenant A stalled took %v (alone %v); A's surges in flight at B's surge: %v",
		contended.Round(100*time.Millisecond), alone.Round(100*time.Millisecond), heldByA)
	if len(heldByA) == 0 {
		t.Errorf("tenant A held no surge when B's surge started: the test did not contend")
	}
	// Had A held B's slot, B would have waited at least until one of A's surges ended, which takes
	// --evict-timeout after its replacement is Ready.
	if bound := alone + tenantsEvictTimeout/2; contended > bound {
		t.Errorf("tenant B's pool update took %v with tenant A stalled, want at most %v (alone: %v)", contended, bound, alone)
	}
	b.forbidEvents(eventSurgeDeferred, "SurgeFailed", "EvictionRefused")
	b.requireEvents("SurgeStarted", "SurgeRestored")
	b.assertAvailable()

	// Every stall of tenant A ends, restored, with its reason. The Events are what stays: a Failed
	// Surge is deleted once its drain is over, and the ReplicaSet's scale-down after a restore removes
	// the pinned pod from the node being drained.
	a.eventually(3*time.Minute, "an Event for the end of each of tenant A's four stalls", func() (bool, error) {
		return len(a.surgeEndings()) == len(pinnedModels)+1, nil
	})
	pins.stop()
	want := map[string]string{"huge": "NotSteady"}
	for _, m := range pinnedModels {
		want[m] = "MultiplePDBs"
	}
	if got := a.surgeEndings(); !maps.Equal(got, want) {
		t.Errorf("tenant A's surges ended with %v, want %v", got, want)
	}
	for _, m := range pinnedModels {
		if d := a.deployment(m); *d.Spec.Replicas != 1 {
			t.Errorf("%s has %d replicas after its surge ended, want 1", m, *d.Spec.Replicas)
		}
	}
	if d := a.deployment("huge"); *d.Spec.Replicas != hugeReplicas {
		t.Errorf("huge has %d replicas after its surge ended, want %d", *d.Spec.Replicas, hugeReplicas)
	}

	if gone, err := g.Exited(); gone {
		t.Fatalf("the guardian (pid %d) exited: %v", pid, err)
	}
	base, peak, samples, err := rss.stop()
	t.Logf("guardian RSS: %d KiB when started, %d KiB at most over %d samples", base, peak, samples)
	switch {
	case err != nil:
		t.Errorf("reading the guardian's RSS: %v", err)
	case samples < 10:
		t.Errorf("only %d RSS samples", samples)
	case peak > maxGuardianRSS:
		t.Errorf("guardian RSS reached %d KiB, want at most %d KiB", peak, maxGuardianRSS)
	}
}

// eventSurgeDeferred is the reason of the Event of a stall waiting for a surge slot.
const eventSurgeDeferred = "SurgeDeferred"

// setUnschedulable cordons or uncordons a node, as an administrator would.
func (s *scenario) setUnschedulable(node string, on bool) {
	s.t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
	if _, err := s.kube.CoreV1().Nodes().Patch(s.ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		s.fatalf("cordoning %s (%t): %v", node, on, err)
	}
}

// createPinnableModels creates tenant A's pinned models, all at once, each a single-replica
// Deployment whose pods take pinnedReadyDelay to turn Ready, under a minAvailable 1 PDB.
func (s *scenario) createPinnableModels() {
	s.t.Helper()
	for _, name := range pinnedModels {
		s.createModelDeployment(name, 1, pinnedReadyDelay, "", appsv1.RollingUpdateDeploymentStrategyType)
	}
	for _, name := range pinnedModels {
		s.waitModelReady(selectorOf(map[string]string{"app": name}), 1)
	}
	for _, name := range pinnedModels {
		s.createModelPDB(testbed.MinAvailablePDB(s.ns, name, map[string]string{"app": name}))
	}
}

// createHugeModel creates the Deployment "huge" of hugeReplicas replicas, held at one pod by a
// ResourceQuota scoped to a PriorityClass only its pods use (so that the namespace's other pods are
// not held), under a minAvailable 1 PDB.
func (s *scenario) createHugeModel() {
	s.t.Helper()
	class := s.ns + "-huge"
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Value: 0}
	if _, err := s.kube.SchedulingV1().PriorityClasses().Create(s.ctx, pc, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating PriorityClass: %v", err)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.t.Context()), 10*time.Second)
		defer cancel()
		_ = s.kube.SchedulingV1().PriorityClasses().Delete(ctx, class, metav1.DeleteOptions{})
	})
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: s.ns},
		Spec: corev1.ResourceQuotaSpec{
			Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")},
			ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
				ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{class},
			}}},
		},
	}
	if _, err := s.kube.CoreV1().ResourceQuotas(s.ns).Create(s.ctx, quota, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating ResourceQuota: %v", err)
	}
	// The quota admission enforces a quota only once its controller has computed the status.
	s.eventually(time.Minute, "the quota's status", func() (bool, error) {
		q, err := s.kube.CoreV1().ResourceQuotas(s.ns).Get(s.ctx, quota.Name, metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil, nil
	})
	// The Deployment controller adds a rolling update's maxSurge (25 %) to the count in int32: with two
	// billion replicas that overflows and it creates no pod at all. Recreate has no surge.
	s.createModelDeployment("huge", hugeReplicas, loadingDelay, class, appsv1.RecreateDeploymentStrategyType)
	app := map[string]string{"app": "huge"}
	s.waitModelReady(selectorOf(app), 1)
	s.createModelPDB(testbed.MinAvailablePDB(s.ns, "huge", app))
}

// createModelDeployment creates a model Deployment confined to the scenario's pool.
func (s *scenario) createModelDeployment(name string, replicas int32, readyDelay, priorityClass string, strategy appsv1.DeploymentStrategyType) {
	s.t.Helper()
	labels := map[string]string{"app": name}
	spec := testbed.ModelPodSpec(s.pool, labels)
	spec.PriorityClassName = priorityClass
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: strategy},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{controlplane.ReadyDelayAnnotation: readyDelay}},
				Spec:       spec,
			},
		},
	}
	if _, err := s.kube.AppsV1().Deployments(s.ns).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating deployment %s: %v", name, err)
	}
}

// pinner is tenant A pinning the original pod of each of its pinned models once the guardian has
// surged it: it labels the Surge's blocked pod pin=<model> and adds a second minAvailable 1 PDB
// selecting that label only, so that the Eviction API refuses the pod for good (more than one PDB).
// Before the surge the pod has one PDB, which is what the guardian's stall decision sees.
type pinner struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// pinSurgedPods starts pinning; it stops with stop, or when the test ends.
func (s *scenario) pinSurgedPods() *pinner {
	ctx, cancel := context.WithCancel(s.ctx)
	p := &pinner{cancel: cancel}
	pinned := map[string]bool{}
	p.wg.Go(func() {
		_ = wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
			list, err := testBed.CP.Dynamic().Resource(testbed.Surges).Namespace(s.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, sg := range list.Items {
				target, _, _ := unstructured.NestedString(sg.Object, "spec", "target", "name")
				pod, _, _ := unstructured.NestedString(sg.Object, "spec", "blockedPod")
				if pinned[target] || !slices.Contains(pinnedModels, target) || pod == "" {
					continue
				}
				if err := s.pin(ctx, target, pod); err != nil {
					s.t.Errorf("pinning %s of %s: %v", pod, target, err)
				}
				pinned[target] = true
				s.note("tenant A pinned pod %s of %s with a second PDB", pod, target)
			}
			return len(pinned) == len(pinnedModels), nil
		})
	})
	s.t.Cleanup(p.stop)
	return p
}

func (s *scenario) pin(ctx context.Context, model, pod string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{"pin":%q}}}`, model)
	if _, err := s.kube.CoreV1().Pods(s.ns).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	pdb := testbed.MinAvailablePDB(s.ns, "pin-"+model, map[string]string{"pin": model})
	_, err := s.kube.PolicyV1().PodDisruptionBudgets(s.ns).Create(ctx, pdb, metav1.CreateOptions{})
	return err
}

// stop ends the pinning; it may be called more than once.
func (p *pinner) stop() {
	p.cancel()
	p.wg.Wait()
}

// activeSurges returns the targets of the namespace's Surges in any phase but Failed.
func (s *scenario) activeSurges() []string {
	var out []string
	for _, sg := range s.surges() {
		if phase, _, _ := unstructured.NestedString(sg.Object, "status", "phase"); phase != "Failed" {
			target, _, _ := unstructured.NestedString(sg.Object, "spec", "target", "name")
			out = append(out, target)
		}
	}
	slices.Sort(out)
	return out
}

// surgeEndings returns, by workload, how its stall ended according to the Warning Events:
// EvictTimeout for EvictionRefused, MultiplePDBs and NotSteady for theirs, ReadyTimeout for a
// SurgeFailed saying so, the message otherwise. A surge's ending wins over NotSteady: a workload
// whose surge was just restored is scaling down, and the look-ahead's stall on its next node says so.
func (s *scenario) surgeEndings() map[string]string {
	s.t.Helper()
	out := map[string]string{}
	ev := s.events()
	for _, r := range [][2]string{{"NotSteady", "NotSteady"}, {"EvictionRefused", "EvictTimeout"}, {"MultiplePDBs", "MultiplePDBs"}} {
		for _, e := range ev[r[0]] {
			if e.Type == corev1.EventTypeWarning {
				out[e.InvolvedObject.Name] = r[1]
			}
		}
	}
	for _, e := range ev["SurgeFailed"] {
		switch {
		case e.Type != corev1.EventTypeWarning:
		case strings.Contains(e.Message, "(ReadyTimeout)"):
			out[e.InvolvedObject.Name] = "ReadyTimeout"
		default:
			out[e.InvolvedObject.Name] = e.Message
		}
	}
	return out
}

// waitPoolConfig waits until the pool has rolled config out to every node and returns how long that took.
func (s *scenario) waitPoolConfig(config string) time.Duration {
	s.t.Helper()
	start := time.Now()
	s.eventually(rolloutTimeout, "pool "+s.pool+" to be Updated to "+config, func() (bool, error) {
		p, err := testBed.Pool(s.ctx, s.pool)
		if err != nil {
			return false, nil
		}
		return poolAt(p, config) && int(p.Status.UpdatedMachineCount) == len(s.nodes), nil
	})
	return time.Since(start)
}

func poolAt(p *mcfgv1.MachineConfigPool, config string) bool {
	return mcosim.PoolUpdated(p) && p.Spec.Configuration.Name == config && p.Status.Configuration.Name == config
}

// rssWatch samples a process's VmRSS every 250 ms until stopped.
type rssWatch struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	base    int64
	peak    int64
	samples int
	err     error
}

func watchRSS(ctx context.Context, pid int) *rssWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &rssWatch{cancel: cancel}
	w.wg.Go(func() {
		_ = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(context.Context) (bool, error) {
			v, err := readProcStatusKiB(pid, "VmRSS")
			if err != nil {
				w.err = err
				return true, nil
			}
			if w.samples == 0 {
				w.base = int64(v)
			}
			w.peak = max(w.peak, int64(v))
			w.samples++
			return false, nil
		})
	})
	return w
}

// stop ends the sampling and returns the first and the highest sample, in KiB.
func (w *rssWatch) stop() (base, peak int64, samples int, err error) {
	w.cancel()
	w.wg.Wait()
	return w.base, w.peak, w.samples, w.err
}
