package gpuopsim

import (
	"context"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/drain-guardian/drain-guardian/e2e/internal/simfake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// testScale runs the simulator 100 times faster than real: resync 1.2 s,
// driver restart 0.6 s, the default pod deletion timeout 3 s.
const testScale = 0.01

type fakeGPUCluster struct {
	*simfake.Cluster
	dyn *dynamicfake.FakeDynamicClient
}

// clusterPolicy is a ClusterPolicy with the Helm chart's upgrade policy,
// overridden by policy.
func clusterPolicy(version string, policy map[string]any) *unstructured.Unstructured {
	up := map[string]any{
		"autoUpgrade": true, "maxParallelUpgrades": int64(1), "maxUnavailable": "25%",
		"podDeletion": map[string]any{"force": false, "timeoutSeconds": int64(300), "deleteEmptyDir": false},
		"drain":       map[string]any{"enable": false, "timeoutSeconds": int64(300)},
	}
	for k, v := range policy {
		up[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
		"metadata": map[string]any{"name": "cluster-policy", "generation": int64(1)},
		"spec":     map[string]any{"driver": map[string]any{"version": version, "upgradePolicy": up}},
	}}
}

func newFakeGPUCluster(t *testing.T, refuse func(int) error, policy *unstructured.Unstructured, objects ...runtime.Object) *fakeGPUCluster {
	t.Helper()
	var dynObjects []runtime.Object
	if policy != nil {
		dynObjects = append(dynObjects, policy)
	}
	return &fakeGPUCluster{
		Cluster: simfake.New(refuse, objects...),
		dyn: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{ClusterPolicyGVR: "ClusterPolicyList"}, dynObjects...),
	}
}

// start runs the simulator until the test ends; the waiting nodes are met
// in name order unless shuffle is given.
func (c *fakeGPUCluster) start(t *testing.T, shuffle func([]*corev1.Node)) {
	t.Helper()
	timing, err := ScaledTimings(testScale)
	if err != nil {
		t.Fatal(err)
	}
	if shuffle == nil {
		shuffle = func(nodes []*corev1.Node) {
			sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, c.Kube, c.dyn, timing, shuffle) }()
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

// setVersion starts a driver upgrade.
func (c *fakeGPUCluster) setVersion(t *testing.T, version string) {
	t.Helper()
	patch := []byte(`{"metadata":{"generation":2},"spec":{"driver":{"version":"` + version + `"}}}`)
	if _, err := c.dyn.Resource(ClusterPolicyGVR).Patch(context.Background(), "cluster-policy", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *fakeGPUCluster) state(t *testing.T, node string) string {
	return c.Node(t, node).Labels[StateLabel]
}

// history records, from a node informer, every upgrade state each node went
// through and the most nodes past upgrade-required at once.
type history struct {
	mu         sync.Mutex
	states     map[string][]string
	current    map[string]string
	maxBusy    int
	cordonedIn map[string][]string // states seen while the node was cordoned
}

func watch(t *testing.T, c *fakeGPUCluster) *history {
	t.Helper()
	h := &history{states: map[string][]string{}, current: map[string]string{}, cordonedIn: map[string][]string{}}
	factory := informers.NewSharedInformerFactory(c.Kube, 0)
	informer := factory.Core().V1().Nodes().Informer()
	observe := func(obj any) {
		n := obj.(*corev1.Node)
		s := n.Labels[StateLabel]
		h.mu.Lock()
		defer h.mu.Unlock()
		if seq := h.states[n.Name]; len(seq) == 0 || seq[len(seq)-1] != s {
			h.states[n.Name] = append(seq, s)
		}
		if n.Spec.Unschedulable {
			h.cordonedIn[n.Name] = append(h.cordonedIn[n.Name], s)
		}
		h.current[n.Name] = s
		busy := 0
		for _, st := range h.current {
			if st != "" && st != StateDone && st != StateUpgradeRequired {
				busy++
			}
		}
		h.maxBusy = max(h.maxBusy, busy)
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: observe, UpdateFunc: func(_, n any) { observe(n) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced) {
		t.Fatal("node informer did not sync")
	}
	return h
}

func (h *history) of(node string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string{}, h.states[node]...)
}

// reached reports whether the node's history has at least n states and ends
// in state: the informer may lag behind a read from the API.
func (h *history) reached(node string, n int, state string) bool {
	seq := h.of(node)
	return len(seq) >= n && seq[len(seq)-1] == state
}

// TestUpgradeWalksEveryStateInOrder: a GPU node goes through the in-place
// upgrade in the real order, cordoned from cordon-required to
// uncordon-required; its GPU pod is evicted, its other pod stays; a node
// without a GPU is never labelled.
func TestUpgradeWalksEveryStateInOrder(t *testing.T) {
	c := newFakeGPUCluster(t, simfake.AllowAll, clusterPolicy("550.1", nil),
		simfake.Node("gpu-1", 1), simfake.Node("cpu-1", 0),
		simfake.Pod("models", "model", "gpu-1", 1), simfake.Pod("infra", "exporter", "gpu-1", 0))
	h := watch(t, c)
	c.start(t, nil)
	simfake.Eventually(t, 10*time.Second, "gpu-1 to be upgrade-done", func() bool { return h.reached("gpu-1", 2, StateDone) })
	if got := h.of("gpu-1"); !slices.Equal(got, []string{"", StateDone}) {
		t.Errorf("first sight: states %v, want unlabelled then upgrade-done", got)
	}

	c.setVersion(t, "560.2")
	simfake.Eventually(t, 30*time.Second, "the upgrade to finish", func() bool { return h.reached("gpu-1", 3, StateDone) })
	want := []string{"", StateDone, StateUpgradeRequired, StateCordonRequired, StateWaitForJobsRequired, StatePodDeletionRequired,
		StatePodRestartRequired, StateValidationRequired, StateUncordonRequired, StateDone}
	if got := h.of("gpu-1"); !slices.Equal(got, want) {
		t.Errorf("states %v, want %v", got, want)
	}
	h.mu.Lock()
	cordonedIn := slices.Compact(append([]string{}, h.cordonedIn["gpu-1"]...))
	h.mu.Unlock()
	if want := []string{StateCordonRequired, StateWaitForJobsRequired, StatePodDeletionRequired, StatePodRestartRequired,
		StateValidationRequired, StateUncordonRequired}; !slices.Equal(cordonedIn, want) {
		t.Errorf("cordoned in states %v, want %v", cordonedIn, want)
	}
	if c.Node(t, "gpu-1").Spec.Unschedulable {
		t.Error("gpu-1 still cordoned after the upgrade")
	}
	if _, labelled := c.Node(t, "cpu-1").Labels[StateLabel]; labelled {
		t.Error("node without a GPU got an upgrade state")
	}
	_, evicted, deletes := c.Evictions()
	if !slices.Equal(evicted, []string{"models/model"}) || deletes != 0 {
		t.Errorf("evicted %v with %d plain deletions, want models/model evicted and no deletion", evicted, deletes)
	}
	if !c.Pod("infra", "exporter") {
		t.Error("the pod without a GPU was removed")
	}
}

// TestRefusedEvictionFailsTheUpgrade is the control case: a single-replica
// model behind a minAvailable: 1 PDB (every eviction refused) makes its
// node's upgrade fail at the pod deletion timeout; the node stays in
// upgrade-failed and cordoned, and holds the only upgrade slot, so the
// other node never starts.
func TestRefusedEvictionFailsTheUpgrade(t *testing.T) {
	c := newFakeGPUCluster(t, simfake.RefuseAll, clusterPolicy("550.1", map[string]any{"maxUnavailable": "100%"}),
		simfake.Node("gpu-1", 1), simfake.Node("gpu-2", 1), simfake.Pod("models", "model", "gpu-1", 1))
	h := watch(t, c)
	c.start(t, nil)
	simfake.Eventually(t, 10*time.Second, "both nodes upgrade-done", func() bool {
		return c.state(t, "gpu-1") == StateDone && c.state(t, "gpu-2") == StateDone
	})

	start := time.Now()
	c.setVersion(t, "560.2")
	simfake.Eventually(t, 30*time.Second, "gpu-1 to fail", func() bool { return h.reached("gpu-1", 1, StateFailed) })
	// The default 300 s timeout at this scale is 3 s; kubectl's unscaled 5 s
	// retry makes the failure come after the first retry wait.
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("failed after %v, before the pod deletion timeout", took)
	}
	// Several resyncs later, nothing has moved.
	time.Sleep(3 * time.Second)
	if s := c.state(t, "gpu-1"); s != StateFailed || !c.Node(t, "gpu-1").Spec.Unschedulable {
		t.Errorf("gpu-1: state %q cordoned %v, want upgrade-failed and cordoned", s, c.Node(t, "gpu-1").Spec.Unschedulable)
	}
	if s := c.state(t, "gpu-2"); s != StateUpgradeRequired {
		t.Errorf("gpu-2: state %q, want upgrade-required behind the failed node", s)
	}
	attempts, evicted, deletes := c.Evictions()
	if attempts == 0 || len(evicted) != 0 || deletes != 0 || !c.Pod("models", "model") {
		t.Errorf("%d eviction attempts, evicted %v, %d plain deletions; want refused evictions only", attempts, evicted, deletes)
	}
	if got := h.of("gpu-1"); !slices.Contains(got, StatePodDeletionRequired) || slices.Contains(got, StatePodRestartRequired) {
		t.Errorf("gpu-1 states %v", got)
	}
}

// TestFailedPodDeletionFallsBackToDrainWhenEnabled: with drain enabled, the
// node goes to drain-required, and to upgrade-failed when the drain fails
// too.
func TestFailedPodDeletionFallsBackToDrainWhenEnabled(t *testing.T) {
	policy := clusterPolicy("550.1", map[string]any{
		"podDeletion": map[string]any{"timeoutSeconds": int64(100)},
		"drain":       map[string]any{"enable": true, "timeoutSeconds": int64(100)},
	})
	c := newFakeGPUCluster(t, simfake.RefuseAll, policy, simfake.Node("gpu-1", 1), simfake.Pod("models", "model", "gpu-1", 1))
	h := watch(t, c)
	c.start(t, nil)
	simfake.Eventually(t, 10*time.Second, "upgrade-done", func() bool { return c.state(t, "gpu-1") == StateDone })
	c.setVersion(t, "560.2")
	simfake.Eventually(t, 40*time.Second, "gpu-1 to fail", func() bool { return h.reached("gpu-1", 1, StateFailed) })
	got := h.of("gpu-1")
	i, j := slices.Index(got, StatePodDeletionRequired), slices.Index(got, StateDrainRequired)
	if i < 0 || j != i+1 || got[len(got)-1] != StateFailed {
		t.Errorf("states %v, want pod-deletion-required, drain-required, upgrade-failed", got)
	}
}

// TestParallelismAndSkip: one upgrade at a time by default; a node with the
// skip label stays in upgrade-required; every other node ends upgrade-done
// and schedulable, whatever order the controller meets them in.
func TestParallelismAndSkip(t *testing.T) {
	skipped := simfake.Node("gpu-4", 1)
	skipped.Labels[SkipLabel] = "true"
	c := newFakeGPUCluster(t, simfake.AllowAll, clusterPolicy("550.1", map[string]any{"maxUnavailable": "100%"}),
		simfake.Node("gpu-1", 1), simfake.Node("gpu-2", 1), simfake.Node("gpu-3", 1), skipped)
	c.start(t, func(nodes []*corev1.Node) { slices.Reverse(nodes) })
	simfake.Eventually(t, 10*time.Second, "all upgrade-done", func() bool { return c.state(t, "gpu-3") == StateDone })
	h := watch(t, c)
	c.setVersion(t, "560.2")
	simfake.Eventually(t, 60*time.Second, "the rollout", func() bool {
		for _, n := range []string{"gpu-1", "gpu-2", "gpu-3"} {
			if !h.reached(n, 2, StateDone) {
				return false
			}
		}
		return true
	})
	h.mu.Lock()
	maxBusy := h.maxBusy
	h.mu.Unlock()
	if maxBusy != 1 {
		t.Errorf("at most %d nodes upgraded at once, want 1 (maxParallelUpgrades 1)", maxBusy)
	}
	if s := c.state(t, "gpu-4"); s != StateUpgradeRequired {
		t.Errorf("skipped node in state %q, want upgrade-required", s)
	}
	for _, n := range []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4"} {
		if c.Node(t, n).Spec.Unschedulable {
			t.Errorf("%s left cordoned", n)
		}
	}
}

// TestMaxUnavailableBoundsParallelUpgrades: two parallel upgrades allowed,
// but 25% of four nodes is one node unavailable at a time.
func TestMaxUnavailableBoundsParallelUpgrades(t *testing.T) {
	c := newFakeGPUCluster(t, simfake.AllowAll, clusterPolicy("550.1", map[string]any{"maxParallelUpgrades": int64(2)}),
		simfake.Node("gpu-1", 1), simfake.Node("gpu-2", 1), simfake.Node("gpu-3", 1), simfake.Node("gpu-4", 1))
	c.start(t, nil)
	simfake.Eventually(t, 10*time.Second, "all upgrade-done", func() bool { return c.state(t, "gpu-4") == StateDone })
	h := watch(t, c)
	c.setVersion(t, "560.2")
	simfake.Eventually(t, 60*time.Second, "the rollout", func() bool {
		for _, n := range []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4"} {
			if !h.reached(n, 2, StateDone) {
				return false
			}
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.maxBusy != 1 {
		t.Errorf("at most %d nodes upgraded at once, want 1 (maxUnavailable 25%% of 4)", h.maxBusy)
	}
}

// TestInitiallyCordonedNodeStaysCordoned: a node cordoned before its
// upgrade is picked without a slot and left cordoned at upgrade-done.
func TestInitiallyCordonedNodeStaysCordoned(t *testing.T) {
	c := newFakeGPUCluster(t, simfake.AllowAll, clusterPolicy("550.1", nil), simfake.Node("gpu-1", 1))
	c.start(t, nil)
	simfake.Eventually(t, 10*time.Second, "upgrade-done", func() bool { return c.state(t, "gpu-1") == StateDone })
	if _, err := c.Kube.CoreV1().Nodes().Patch(context.Background(), "gpu-1", types.MergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h := watch(t, c)
	c.setVersion(t, "560.2")
	simfake.Eventually(t, 30*time.Second, "the upgrade and the removal of the initial-state annotation", func() bool {
		n := c.Node(t, "gpu-1")
		_, annotated := n.Annotations[InitialStateAnnotation]
		return h.reached("gpu-1", 2, StateDone) && !annotated
	})
	n := c.Node(t, "gpu-1")
	if !n.Spec.Unschedulable {
		t.Error("node cordoned before its upgrade was uncordoned")
	}
	if got := h.of("gpu-1"); slices.Contains(got, StateUncordonRequired) {
		t.Errorf("states %v went through uncordon-required", got)
	}
}

// TestAutoUpgradeOffRemovesStateLabels.
func TestAutoUpgradeOffRemovesStateLabels(t *testing.T) {
	c := newFakeGPUCluster(t, simfake.AllowAll, clusterPolicy("550.1", nil), simfake.Node("gpu-1", 1))
	c.start(t, nil)
	simfake.Eventually(t, 10*time.Second, "upgrade-done", func() bool { return c.state(t, "gpu-1") == StateDone })
	patch := []byte(`{"metadata":{"generation":3},"spec":{"driver":{"upgradePolicy":{"autoUpgrade":false}}}}`)
	if _, err := c.dyn.Resource(ClusterPolicyGVR).Patch(context.Background(), "cluster-policy", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	simfake.Eventually(t, 10*time.Second, "the state label to go", func() bool {
		_, labelled := c.Node(t, "gpu-1").Labels[StateLabel]
		return !labelled
	})
}

// TestPodThatCannotBeEvictedFailsAtOnce: a GPU pod with emptyDir data, which
// the policy does not allow to delete, fails the upgrade without waiting for
// the timeout and without evicting anything.
func TestPodThatCannotBeEvictedFailsAtOnce(t *testing.T) {
	pod := simfake.Pod("models", "model", "gpu-1", 1)
	pod.Spec.Volumes = []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	c := newFakeGPUCluster(t, simfake.AllowAll, clusterPolicy("550.1", nil), simfake.Node("gpu-1", 1), pod)
	c.start(t, nil)
	simfake.Eventually(t, 10*time.Second, "upgrade-done", func() bool { return c.state(t, "gpu-1") == StateDone })
	start := time.Now()
	c.setVersion(t, "560.2")
	simfake.Eventually(t, 10*time.Second, "upgrade-failed", func() bool { return c.state(t, "gpu-1") == StateFailed })
	if took := time.Since(start); took >= 3*time.Second {
		t.Errorf("failed after %v, want before the 3 s pod deletion timeout", took)
	}
	if attempts, _, deletes := c.Evictions(); attempts != 0 || deletes != 0 || !c.Pod("models", "model") {
		t.Errorf("%d eviction attempts and %d deletions, want none", attempts, deletes)
	}
}
