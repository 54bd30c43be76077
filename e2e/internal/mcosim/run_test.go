package mcosim

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	mcfgfake "github.com/openshift/client-go/machineconfiguration/clientset/versioned/fake"
	opfake "github.com/openshift/client-go/operator/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/e2e/internal/simfake"
)

// fakeCluster is simfake's fake API server (pod lists filtered by node, the
// Eviction API asking refuse, pod deletions counted) with the MCO's clients.
type fakeCluster struct {
	*simfake.Cluster
	mcfg *mcfgfake.Clientset
	op   *opfake.Clientset
}

func newFakeCluster(t *testing.T, refuse func(n int) error, objects []runtime.Object, pools ...runtime.Object) *fakeCluster {
	t.Helper()
	return &fakeCluster{Cluster: simfake.New(refuse, objects...), mcfg: mcfgfake.NewClientset(pools...), op: opfake.NewClientset()}
}

// start runs the simulator until the test ends.
func (c *fakeCluster) start(t *testing.T, scale float64) {
	t.Helper()
	timing, err := ScaledTimings(scale)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, c.Kube, c.mcfg, c.op, timing) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not return after its context was cancelled")
		}
	})
}

// eventually polls cond every 20ms until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *fakeCluster) workerPool(t *testing.T) *mcfgv1.MachineConfigPool {
	t.Helper()
	p, err := c.mcfg.MachineconfigurationV1().MachineConfigPools().Get(context.Background(), WorkerPool, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (c *fakeCluster) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := c.Kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// nodeTimeline records, from a node informer, the order in which nodes were
// targeted at a config, the largest number of cordoned nodes at once, and
// when each node reported a completed drain.
type nodeTimeline struct {
	config string

	mu           sync.Mutex
	targeted     []string
	cordoned     map[string]bool
	maxCordoned  int
	drainedAt    map[string]time.Time
	everUpdating map[string]bool
	// drainRequested: nodes whose desiredDrain ever asked for a drain.
	drainRequested map[string]bool
}

func watchNodes(t *testing.T, c *fakeCluster, config string) *nodeTimeline {
	t.Helper()
	tl := &nodeTimeline{config: config, cordoned: map[string]bool{}, drainedAt: map[string]time.Time{}, everUpdating: map[string]bool{},
		drainRequested: map[string]bool{}}
	factory := informers.NewSharedInformerFactory(c.Kube, 0)
	informer := factory.Core().V1().Nodes().Informer()
	observe := func(obj interface{}) {
		n := obj.(*corev1.Node)
		tl.mu.Lock()
		defer tl.mu.Unlock()
		if n.Annotations[DesiredConfigAnnotation] == config && !tl.everUpdating[n.Name] &&
			n.Annotations[CurrentConfigAnnotation] != config {
			tl.everUpdating[n.Name] = true
			tl.targeted = append(tl.targeted, n.Name)
		}
		tl.cordoned[n.Name] = n.Spec.Unschedulable
		count := 0
		for _, c := range tl.cordoned {
			if c {
				count++
			}
		}
		tl.maxCordoned = max(tl.maxCordoned, count)
		if DrainInProgress(n) {
			tl.drainRequested[n.Name] = true
		}
		if n.Annotations[LastAppliedDrainAnnotation] == DrainRequest(config) {
			if _, seen := tl.drainedAt[n.Name]; !seen {
				tl.drainedAt[n.Name] = time.Now()
			}
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, n interface{}) { observe(n) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced) {
		t.Fatal("node informer did not sync")
	}
	return tl
}

// modelPod is a running pod of a ReplicaSet on node.
func modelPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "model-predictor-abc", Namespace: "models",
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "model-predictor-5d8", UID: "rs", Controller: ptr.To(true),
			}},
		},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// TestRunRollsOutAPoolThroughABlockedDrain runs the whole simulator against a
// fake API server: a worker pool of three nodes moves to a new config one node
// at a time in the MCO's order; the first node carries a pod whose first
// eviction is refused (a PDB), so its drain fails once and is retried.
func TestRunRollsOutAPoolThroughABlockedDrain(t *testing.T) {
	const old, next = "rendered-worker-1", "rendered-worker-2"
	nodes := []runtime.Object{
		testNode("w1", done(old), zone("zone-b"), age(0)),
		testNode("w2", done(old), zone("zone-a"), age(5)),
		testNode("w3", done(old), zone("zone-a"), age(1)),
	}
	pod := modelPod("w3")
	pool := testPool(WorkerPool, next)
	refuseFirst := func(n int) error {
		if n == 1 {
			return simfake.PDBRefusal()
		}
		return nil
	}
	c := newFakeCluster(t, refuseFirst, append(nodes, pod), pool)
	timeline := watchNodes(t, c, next)
	c.start(t, 0.01)

	eventually(t, 60*time.Second, "the pool to be Updated", func() bool { return PoolUpdated(c.workerPool(t)) })

	status := c.workerPool(t).Status
	if status.MachineCount != 3 || status.UpdatedMachineCount != 3 || status.ReadyMachineCount != 3 ||
		status.UnavailableMachineCount != 0 || status.DegradedMachineCount != 0 {
		t.Errorf("final pool status counts = %+v", status)
	}
	for _, name := range []string{"w1", "w2", "w3"} {
		n := c.node(t, name)
		if !NodeUpdatedTo(n, next) {
			t.Errorf("%s not updated: %v", name, n.Annotations)
		}
		if n.Spec.Unschedulable {
			t.Errorf("%s still cordoned", name)
		}
		if hasUpdateInProgressTaint(n) {
			t.Errorf("%s still has the UpdateInProgress taint", name)
		}
		if got := n.Annotations[LastAppliedDrainAnnotation]; got != UncordonRequest(next) {
			t.Errorf("%s lastAppliedDrain = %q, want %q", name, got, UncordonRequest(next))
		}
	}

	timeline.mu.Lock()
	targeted, maxCordoned, drainedAt := timeline.targeted, timeline.maxCordoned, timeline.drainedAt["w3"]
	timeline.mu.Unlock()
	if want := []string{"w3", "w2", "w1"}; !slices.Equal(targeted, want) {
		t.Errorf("targeting order = %v, want %v (zone-a oldest first, then zone-b)", targeted, want)
	}
	if maxCordoned != 1 {
		t.Errorf("at most %d nodes were cordoned at once, want 1 (maxUnavailable 1)", maxCordoned)
	}

	attempts, evicted, podDeletes := c.Evictions()
	if attempts < 2 || len(evicted) != 1 || evicted[0] != "models/model-predictor-abc" {
		t.Errorf("evictions: %d attempts, evicted %v; want a refused attempt, then the pod evicted", attempts, evicted)
	}
	if podDeletes != 0 {
		t.Errorf("the drain deleted pods %d times; it must only evict", podDeletes)
	}
	if evictedAt := c.LastEviction(); drainedAt.IsZero() || drainedAt.Before(evictedAt) {
		t.Errorf("w3 reported its drain complete at %v, before its pod was evicted at %v", drainedAt, evictedAt)
	}

	events, err := c.Kube.CoreV1().Events(EventNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	targetEvents := 0
	for _, e := range events.Items {
		if e.Reason == EventSetDesiredConfig && e.InvolvedObject.Kind == "MachineConfigPool" {
			targetEvents++
		}
	}
	if targetEvents == 0 {
		t.Errorf("no %s Event in %s; events: %v", EventSetDesiredConfig, EventNamespace, events.Items)
	}
}

// TestRunPausedPool checks that a paused pool targets no node and reports
// Updating=False, while a new node still gets its initial annotations.
func TestRunPausedPool(t *testing.T) {
	const old, next = "rendered-worker-1", "rendered-worker-2"
	pool := testPool(WorkerPool, next, paused)
	pool.Status.Configuration.Name = old
	c := newFakeCluster(t, func(int) error { return nil }, []runtime.Object{testNode("w1", done(old)), testNode("fresh")}, pool)
	c.start(t, 0.01)

	eventually(t, 30*time.Second, "the paused pool's status", func() bool {
		s := c.workerPool(t).Status
		return s.ObservedGeneration == pool.Generation && s.MachineCount == 2 && s.UpdatedMachineCount == 1
	})
	p := c.workerPool(t)
	if cond := condition(p.Status, mcfgv1.MachineConfigPoolUpdating); cond == nil || cond.Status != corev1.ConditionFalse {
		t.Errorf("Updating = %+v, want False on a paused pool", cond)
	}
	if PoolUpdated(p) {
		t.Error("a paused pool with an old node is PoolUpdated")
	}
	if got := c.node(t, "w1").Annotations[DesiredConfigAnnotation]; got != old {
		t.Errorf("paused pool targeted w1 at %q", got)
	}
	if !NodeUpdatedTo(c.node(t, "fresh"), next) {
		t.Errorf("a node joining the pool did not get the pool's config: %v", c.node(t, "fresh").Annotations)
	}
}

// TestRunBlockedDrainEscalatesAndRecovers blocks a drain long enough for the
// MCO's escalation (at a small time scale): DrainThresholdExceeded and
// DrainFailed Events, the node Degraded with the daemon's reason and the pool
// Degraded. Someone uncordoning the node meanwhile is undone. Once evictions
// pass, the update completes and the degradation clears.
func TestRunBlockedDrainEscalatesAndRecovers(t *testing.T) {
	const old, next = "rendered-worker-1", "rendered-worker-2"
	var blocked atomic.Bool
	blocked.Store(true)
	// A refusal other than 429 ends an attempt at once (kubectl retries a
	// 429 only after a fixed 5 s), which keeps this test short; the
	// controller handles every failed attempt alike.
	refuse := func(int) error {
		if blocked.Load() {
			return apierrors.NewServiceUnavailable("eviction refused by the test")
		}
		return nil
	}
	c := newFakeCluster(t, refuse, []runtime.Object{testNode("w1", done(old)), modelPod("w1")}, testPool(WorkerPool, next))
	c.start(t, 0.001) // threshold 600ms, drain and daemon timeouts 3.6s

	eventually(t, 30*time.Second, "the node and the pool to be Degraded", func() bool {
		n := c.node(t, "w1")
		pool := c.workerPool(t)
		return n.Annotations[StateAnnotation] == StateDegraded &&
			poolConditionTrue(pool.Status.Conditions, mcfgv1.MachineConfigPoolDegraded)
	})
	n := c.node(t, "w1")
	if want := drainTimeoutReason("w1"); n.Annotations[ReasonAnnotation] != want {
		t.Errorf("reason = %q, want %q", n.Annotations[ReasonAnnotation], want)
	}
	if !DrainInProgress(n) || !n.Spec.Unschedulable {
		t.Errorf("degraded node: drain in progress %v, cordoned %v; want both", DrainInProgress(n), n.Spec.Unschedulable)
	}
	if s := c.workerPool(t).Status; s.DegradedMachineCount != 1 {
		t.Errorf("degradedMachineCount = %d, want 1", s.DegradedMachineCount)
	}
	eventually(t, 30*time.Second, "DrainThresholdExceeded and DrainFailed Events on the node", func() bool {
		events, err := c.Kube.CoreV1().Events(EventNamespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == "w1" && e.Type == corev1.EventTypeWarning {
				seen[e.Reason] = true
			}
		}
		return seen[EventDrainThresholdExceeded] && seen[EventDrainFailed]
	})

	uncordon := []byte(`{"spec":{"unschedulable":false}}`)
	if _, err := c.Kube.CoreV1().Nodes().Patch(context.Background(), "w1", types.MergePatchType, uncordon, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the drain controller to cordon the node again", func() bool {
		return c.node(t, "w1").Spec.Unschedulable
	})

	blocked.Store(false)
	eventually(t, 30*time.Second, "the pool to be Updated", func() bool { return PoolUpdated(c.workerPool(t)) })
	n = c.node(t, "w1")
	if !NodeUpdatedTo(n, next) || n.Annotations[ReasonAnnotation] != "" || n.Spec.Unschedulable {
		t.Errorf("after recovery: annotations %v, cordoned %v", n.Annotations, n.Spec.Unschedulable)
	}
	if poolConditionTrue(c.workerPool(t).Status.Conditions, mcfgv1.MachineConfigPoolDegraded) {
		t.Error("pool still Degraded after the node updated")
	}
	if _, evicted, podDeletes := c.Evictions(); podDeletes != 0 || len(evicted) != 1 {
		t.Errorf("pod deletes %d, evictions %v; want the pod evicted once and never deleted", podDeletes, evicted)
	}
}

// TestRunFailsWithoutThePoolAPI checks that Run reports a cluster without the
// MachineConfigPool CRD instead of waiting forever, and rejects a bad scale.
func TestRunFailsWithoutThePoolAPI(t *testing.T) {
	c := newFakeCluster(t, func(int) error { return nil }, nil)
	c.mcfg.PrependReactor("list", "machineconfigpools", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(mcfgv1.Resource("machineconfigpools"), "")
	})
	timing, err := ScaledTimings(0.01)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, c.Kube, c.mcfg, c.op, timing); err == nil || ctx.Err() != nil {
		t.Errorf("run without the pool API = %v (context: %v), want an immediate error", err, ctx.Err())
	}
	if err := Run(ctx, &rest.Config{Host: "https://127.0.0.1:1"}, 0); err == nil {
		t.Error("Run accepted a time scale of 0")
	}
}

// TestRunSSHKeyUpdateDoesNotDrain rolls out an SSH-key-only update with real
// rendered MachineConfigs and the MCO's default policies: no node is ever
// cordoned or asked to drain, the model pod is never evicted, every node
// still asks for and gets uncordon-<config>, and each MachineConfigNode says
// the update needs no drain.
func TestRunSSHKeyUpdateDoesNotDrain(t *testing.T) {
	const old, next = "rendered-worker-1", "rendered-worker-2"
	base := BaseRenderedConfig()
	mcs := []runtime.Object{base.MachineConfig(old), base.With(SSHKeyChange("ssh-ed25519 AAAA new@example")).MachineConfig(next)}
	c := newFakeCluster(t, func(int) error { return nil },
		[]runtime.Object{testNode("w1", done(old), zone("zone-a")), testNode("w2", done(old), zone("zone-b")), modelPod("w1")},
		append(mcs, testPool(WorkerPool, next))...)
	if err := ApplyNodeDisruptionPolicies(context.Background(), c.op, opv1.NodeDisruptionPolicyConfig{}); err != nil {
		t.Fatal(err)
	}
	timeline := watchNodes(t, c, next)
	c.start(t, 0.01)

	eventually(t, 60*time.Second, "the pool to be Updated", func() bool { return PoolUpdated(c.workerPool(t)) })
	for _, name := range []string{"w1", "w2"} {
		n := c.node(t, name)
		if !NodeUpdatedTo(n, next) || n.Annotations[LastAppliedDrainAnnotation] != UncordonRequest(next) {
			t.Errorf("%s: %v", name, n.Annotations)
		}
		mcn, err := c.mcfg.MachineconfigurationV1().MachineConfigNodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("MachineConfigNode %s: %v", name, err)
		}
		prepared := mcnCond(mcn.Status.Conditions, mcfgv1.MachineConfigNodeUpdatePrepared)
		if prepared == nil || !strings.HasSuffix(prepared.Message, "Drain Required: false") {
			t.Errorf("%s UpdatePrepared = %+v", name, prepared)
		}
		if mcn.Spec.Pool.Name != WorkerPool || mcn.Spec.ConfigVersion.Desired != next || mcn.Status.ConfigVersion == nil ||
			mcn.Status.ConfigVersion.Current != next {
			t.Errorf("%s MachineConfigNode spec %+v status %+v", name, mcn.Spec, mcn.Status.ConfigVersion)
		}
	}
	timeline.mu.Lock()
	defer timeline.mu.Unlock()
	if timeline.maxCordoned != 0 || len(timeline.drainRequested) != 0 {
		t.Errorf("cordoned at most %d nodes at once, drains requested on %v; want none", timeline.maxCordoned, timeline.drainRequested)
	}
	if attempts, evicted, deletes := c.Evictions(); attempts != 0 || len(evicted) != 0 || deletes != 0 {
		t.Errorf("evictions %d %v, deletes %d; want none", attempts, evicted, deletes)
	}
}
