package scenarios

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/kservesim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// The labels lws puts on the pods of a LeaderWorkerSet (kubernetes-sigs/lws v0.8.0,
// pkg/webhooks/pod_webhook.go and the StatefulSets of pkg/controllers).
const (
	lwsNameLabel  = "leaderworkerset.sigs.k8s.io/name"
	lwsGroupLabel = "leaderworkerset.sigs.k8s.io/group-index"
	// lwsExclusiveAnnotation on a set makes lws's pod webhook keep each group in one domain of the
	// named node label, alone.
	lwsExclusiveAnnotation = "leaderworkerset.sigs.k8s.io/exclusive-topology"
)

// multiNode is a multi-node model: a LeaderWorkerSet of one group of size pods, each taking all
// gpus of a node, under a PDB minAvailable over its pods (size when 0).
type multiNode struct {
	name         string
	size         int
	gpus         int
	minAvailable int32
	// exclusive is the set's exclusive topology (lws's exclusive-topology annotation): every group
	// in a domain of this node label of its own.
	exclusive string
}

func (m multiNode) selector() string { return selectorOf(map[string]string{lwsNameLabel: m.name}) }

// startLWS runs the real LeaderWorkerSet controllers for the scenario.
func (s *scenario) startLWS() {
	s.t.Helper()
	stop, err := testBed.StartLWS(s.ctx)
	if err != nil {
		s.fatalf("starting the LeaderWorkerSet controllers: %v", err)
	}
	s.t.Cleanup(stop)
	s.logs = append(s.logs, testBed.LogPath("lws"))
}

// createMultiNode creates the LeaderWorkerSet (lws defaults its restart policy to
// RecreateGroupOnPodRestart) and its PDB, and waits until the group runs Ready and the PDB allows no
// disruption.
func (s *scenario) createMultiNode(m multiNode) {
	s.t.Helper()
	podSpec := s.groupPodSpec(m, map[string]string{"app": m.name})
	template := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"app": m.name}, "annotations": map[string]any{controlplane.ReadyDelayAnnotation: loadingDelay}},
		"spec":     podSpec,
	}
	lws := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": testbed.LeaderWorkerSets.GroupVersion().String(), "kind": "LeaderWorkerSet",
		"metadata": map[string]any{"name": m.name, "namespace": s.ns},
		"spec": map[string]any{
			"replicas":             int64(1),
			"leaderWorkerTemplate": map[string]any{"size": int64(m.size), "workerTemplate": template},
		},
	}}
	if m.exclusive != "" {
		lws.SetAnnotations(map[string]string{lwsExclusiveAnnotation: m.exclusive})
	}
	if _, err := testBed.CP.Dynamic().Resource(testbed.LeaderWorkerSets).Namespace(s.ns).Create(s.ctx, lws, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating LeaderWorkerSet %s: %v", m.name, err)
	}
	s.waitModelReady(m.selector(), m.size)
	minAvailable := m.minAvailable
	if minAvailable == 0 {
		minAvailable = int32(m.size)
	}
	s.createPDBAllowing(&policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: m.name, Namespace: s.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(minAvailable)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{lwsNameLabel: m.name}}},
	}, 0)
}

// groupPodSpec is the pod spec of one pod of a group of m, as the map a template holds: the model's
// pod on the scenario's pool (anti-affine on the hostname to pods of those labels), taking all
// m.gpus GPUs of a node.
func (s *scenario) groupPodSpec(m multiNode, labels map[string]string) map[string]any {
	s.t.Helper()
	spec := testbed.ModelPodSpec(s.pool, labels)
	gpus := corev1.ResourceList{controlplane.GPUResource: *resource.NewQuantity(int64(m.gpus), resource.DecimalSI)}
	spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: gpus, Limits: gpus}
	podSpec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		s.fatalf("%v", err)
	}
	return podSpec
}

// groups returns the LeaderWorkerSet's spec.replicas.
func (s *scenario) groups(name string) int64 {
	n, _, _ := unstructured.NestedInt64(s.getUnstructured(testbed.LeaderWorkerSets, name).Object, "spec", "replicas")
	return n
}

// groupSampler lists the set's pods every 100 ms and records how many groups run complete: every
// pod of the group bound, Ready and not being deleted.
type groupSampler struct {
	mu              sync.Mutex
	samples, failed int
	minComplete     int
	maxGap          time.Duration
	firstFailure    string
	stop            context.CancelFunc
	done            chan struct{}
}

func (s *scenario) sampleGroups(m multiNode) *groupSampler {
	ctx, cancel := context.WithCancel(s.ctx)
	g := &groupSampler{minComplete: 1 << 30, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			list, err := s.kube.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: m.selector()})
			if err != nil {
				continue
			}
			ready := map[string]int{}
			for i := range list.Items {
				p := &list.Items[i]
				if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && testbed.PodReady(p) {
					ready[p.Labels[lwsGroupLabel]]++
				}
			}
			complete := 0
			for _, n := range ready {
				if n >= m.size {
					complete++
				}
			}
			now := time.Now()
			g.mu.Lock()
			g.samples++
			g.minComplete = min(g.minComplete, complete)
			g.maxGap = max(g.maxGap, now.Sub(last))
			if complete == 0 {
				g.failed++
				if g.firstFailure == "" {
					g.firstFailure = fmt.Sprintf("at +%.1fs: Ready pods by group %v", s.obs.Elapsed().Seconds(), ready)
				}
			}
			g.mu.Unlock()
			last = now
		}
	}()
	return g
}

// assertGroupAvailable stops the sampler and fails unless every observation saw a complete group.
func (s *scenario) assertGroupAvailable(g *groupSampler) {
	s.t.Helper()
	g.stop()
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	s.t.Logf("group availability: %d samples, %d without a complete group, at least %d complete, worst gap %v",
		g.samples, g.failed, g.minComplete, g.maxGap)
	if g.samples < 10 {
		s.fatalf("only %d samples: the observation did not run", g.samples)
	}
	if g.failed > 0 {
		s.fatalf("the model had no complete Ready group in %d of %d observations, first %s", g.failed, g.samples, g.firstFailure)
	}
	if g.maxGap > 250*time.Millisecond {
		s.t.Errorf("observations were %v apart at worst, want at most 250ms", g.maxGap)
	}
}

// TestMultiNodeModelPoolUpdate runs a pool update over a multi-node model with the real
// LeaderWorkerSet controllers and the guardian's default flags: four nodes of eight GPUs, one group
// of two pods of eight GPUs each (two nodes spare), a PDB that lets an eviction through only while
// both groups are whole (minAvailable 3: every pod of two groups but one). The pool must finish, a
// complete group must serve at every observation, and the set must end at one group with no Surge.
func TestMultiNodeModelPoolUpdate(t *testing.T) {
	m := multiNode{name: "big", size: 2, gpus: 8, minAvailable: 3}
	s := newScenario(t, "multinode", gpuNodes(4, 8), m.selector())
	g := s.updateMultiNode(m, "SurgeStarted", "ReplacementReady", "StallResolved", "SurgeRestored")
	s.assertGroupAvailable(g)
}

// TestMultiNodeModelExclusiveZones is TestMultiNodeModelPoolUpdate with the set's groups each in a
// zone of its own (lws's exclusive topology, enforced by the scheduler through the pod affinities
// lws's webhook adds): the four nodes are two per zone, so the surged group fits only in the zone the
// old group does not run in, and the guardian must count it so.
func TestMultiNodeModelExclusiveZones(t *testing.T) {
	m := multiNode{name: "big", size: 2, gpus: 8, minAvailable: 3, exclusive: corev1.LabelTopologyZone}
	s := newScenario(t, "multinode-zones", gpuNodes(4, 8), m.selector())
	g := s.updateMultiNode(m, "SurgeStarted", "ReplacementReady", "StallResolved", "SurgeRestored")
	s.assertGroupAvailable(g)
}

// TestMultiNodeModelPodBudget is the same update under a PDB minAvailable 2, as many multi-node
// models are shipped: without the guardian it blocks the first drain for good. The pool must finish
// and the set end at one group. The budget counts pods, not groups: it lets the MCO evict a pod of
// the surged group while the old group re-forms with one Ready pod of two, which lws answers by
// recreating the surged group too, so a complete group at every observation is not something this
// budget can promise (see README, Multi-node models); the observations are logged, not asserted.
// For the same reason the surge may never see both groups whole at once before the pool finishes:
// it is then restored with the pool (SurgeRestored) without passing through ReplacementReady and
// StallResolved, which are required only where the budget counts whole groups.
func TestMultiNodeModelPodBudget(t *testing.T) {
	m := multiNode{name: "big", size: 2, gpus: 8}
	s := newScenario(t, "multinode-pods", gpuNodes(4, 8), m.selector())
	g := s.updateMultiNode(m, "SurgeStarted", "SurgeRestored")
	g.stop()
	<-g.done
	t.Logf("group availability under a pod budget: %d samples, %d without a complete group", g.samples, g.failed)
}

// updateMultiNode creates the model, runs the pool update with the guardian's default flags and
// checks that the pool finished and the surge was made and undone by whole groups, with the Events
// of the surge's story that the model's budget promises (want).
func (s *scenario) updateMultiNode(m multiNode, want ...string) *groupSampler {
	s.t.Helper()
	return s.runMultiNodeUpdate(m, func() { s.createMultiNode(m) }, func() bool { return s.groups(m.name) == 1 }, want...)
}

// runMultiNodeUpdate starts the lws controllers, creates the model (create), starts the guardian and
// the group sampler, runs the pool update and waits until the model is back to its one group
// (restored) with no Surge left; then it checks the Events (want required, failures and NoCapacity
// forbidden). The sampler is returned running.
func (s *scenario) runMultiNodeUpdate(m multiNode, create func(), restored func() bool, want ...string) *groupSampler {
	s.t.Helper()
	s.startLWS()
	create()
	s.startGuardian()
	g := s.sampleGroups(m)
	s.updatePool()
	took := s.waitPoolUpdated()
	s.t.Logf("pool update of a multi-node model took %v", took.Round(100*time.Millisecond))
	s.eventually(time.Minute, "the model back to one group and no Surge", func() (bool, error) {
		return restored() && len(s.surges()) == 0, nil
	})
	s.logEventReasons()
	s.requireEvents(want...)
	s.forbidEvents("SurgeFailed", "NoCapacity")
	return g
}

// TestMultiNodeModelNoSpareGroup: with one spare node a group of two cannot be placed. `check` says so
// before the update, and during it the stall is deferred as NoCapacity: no group is started, half or
// whole, and the set keeps its one group.
func TestMultiNodeModelNoSpareGroup(t *testing.T) {
	m := multiNode{name: "big", size: 2, gpus: 8}
	s := newScenario(t, "multinode-full", gpuNodes(3, 8), m.selector())
	s.startLWS()
	s.createMultiNode(m)

	r, out, code := s.check(testBed.CP.AdminKubeconfig(), "-o", "json")
	if code != 2 {
		s.fatalf("check exited %d, want 2 (a stall is predicted):\n%s", code, out)
	}
	found := false
	for _, p := range r.Pools {
		for _, n := range p.Nodes {
			for _, b := range n.Blocks {
				if b.Namespace != s.ns {
					continue
				}
				if b.Workload != "LeaderWorkerSet big" || b.Verdict != "no-capacity" {
					s.fatalf("check: pod %s of %s: %s (%s), want no-capacity for the LeaderWorkerSet", b.Pod, b.Workload, b.Verdict, b.Detail)
				}
				if strings.Contains(b.Detail, "missing 1 node with 8 nvidia.com/gpu") {
					found = true
				}
			}
		}
	}
	if !found {
		s.fatalf("check names no group missing a node with 8 GPUs:\n%s", out)
	}

	s.startGuardian()
	s.updatePool()
	ev := s.waitEvent(time.Minute, "NoCapacity", "")
	if !strings.Contains(ev.Message, "missing 1 node with 8 nvidia.com/gpu") {
		s.t.Errorf("NoCapacity says %q, want the missing node named", ev.Message)
	}
	s.holds(5*time.Second, "the set keeps one group and no pod of a second group exists", func() error {
		if n := s.groups(m.name); n != 1 {
			return fmt.Errorf("the set asks for %d groups", n)
		}
		if sg := s.surges(); len(sg) != 0 {
			return fmt.Errorf("%d Surge(s) exist", len(sg))
		}
		list, err := s.kube.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: m.selector()})
		if err != nil {
			return nil
		}
		for _, p := range list.Items {
			if i, _ := strconv.Atoi(p.Labels[lwsGroupLabel]); i > 0 {
				return fmt.Errorf("pod %s of group %d exists", p.Name, i)
			}
		}
		return nil
	})
}

// TestMultiNodeLLMInferenceService is the pool update of TestMultiNodeModelPoolUpdate for a
// multi-node LLMInferenceService: the KServe simulator runs it, as KServe does, as the
// LeaderWorkerSet <name>-kserve-mn (groups of spec.parallelism.pipeline pods: a leader from
// spec.template, workers from spec.worker) with the real lws controllers. KServe puts a direct
// change of that set's count back, so the guardian must surge and restore through the
// LLMInferenceService's spec.replicas and never write the set: the pool must finish, a complete
// group must serve at every observation, and both counts must end at one.
func TestMultiNodeLLMInferenceService(t *testing.T) {
	const name = "deepseek"
	m := multiNode{name: kservesim.MainLeaderWorkerSetName(name), size: 2, gpus: 8}
	s := newScenario(t, "multinode-llm", gpuNodes(4, 8), m.selector())
	g := s.runMultiNodeUpdate(m, func() { s.createMultiNodeLLM(name, m) }, func() bool {
		r, _, _ := unstructured.NestedInt64(s.getUnstructured(testbed.LLMInferenceServices, name).Object, "spec", "replicas")
		return r == 1 && s.groups(m.name) == 1
	}, "SurgeStarted", "ReplacementReady", "StallResolved", "SurgeRestored")
	for _, e := range s.events()["SurgeStarted"] {
		if e.InvolvedObject.Kind != "LLMInferenceService" || e.InvolvedObject.Name != name {
			s.t.Errorf("SurgeStarted on %s %s, want the LLMInferenceService %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, name)
		}
	}
	for _, f := range s.getUnstructured(testbed.LeaderWorkerSets, m.name).GetManagedFields() {
		if f.Manager == "drain-guardian" {
			s.t.Errorf("the guardian wrote the LeaderWorkerSet KServe owns (%s at %v)", f.Operation, f.Time)
		}
	}
	s.assertGroupAvailable(g)
}

// createMultiNodeLLM creates a multi-node LLMInferenceService of one group of m.size pods of m.gpus
// GPUs each (a leader and m.size-1 workers, pipeline parallel) and a PDB minAvailable
// 2*m.size-1 over its pods: an eviction passes only while two groups are whole. It waits until the
// group runs Ready and the PDB allows no disruption.
func (s *scenario) createMultiNodeLLM(name string, m multiNode) {
	s.t.Helper()
	app := map[string]string{"app.kubernetes.io/name": name}
	podSpec := s.groupPodSpec(m, app)
	llm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": testbed.LLMInferenceServices.GroupVersion().String(), "kind": "LLMInferenceService",
		"metadata": map[string]any{"name": name, "namespace": s.ns},
		"spec": map[string]any{
			"model":       map[string]any{"uri": "hf://deepseek-ai/DeepSeek-R1", "name": name},
			"replicas":    int64(1),
			"parallelism": map[string]any{"pipeline": int64(m.size)},
			"annotations": map[string]any{controlplane.ReadyDelayAnnotation: loadingDelay},
			"template":    podSpec,
			"worker":      podSpec,
		},
	}}
	if _, err := testBed.CP.Dynamic().Resource(testbed.LLMInferenceServices).Namespace(s.ns).Create(s.ctx, llm, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating LLMInferenceService %s: %v", name, err)
	}
	s.waitModelReady(m.selector(), m.size)
	s.createPDBAllowing(&policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(int32(2*m.size - 1))),
			Selector: &metav1.LabelSelector{MatchLabels: app}},
	}, 0)
}
