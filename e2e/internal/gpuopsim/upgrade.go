package gpuopsim

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubectl/pkg/drain"
)

// syncKey is the upgrade controller's only work item: it reconciles the
// whole cluster at once (upgradeControllerSingletonName).
const syncKey = "driver-upgrade"

// controller plays the upgrade controller.
type controller struct {
	kube     kubernetes.Interface
	nodes    corelisters.NodeLister
	policies cache.GenericLister
	recorder record.EventRecorder
	timing   Timings
	log      logr.Logger
	queue    workqueue.TypedRateLimitingInterface[string]
	// shuffle orders the nodes waiting in upgrade-required before the
	// controller walks them: the real one meets them in its cache's order.
	shuffle func([]*corev1.Node)

	mu sync.Mutex
	// installed is the driver version each node runs.
	installed map[string]string
	// restartDone and validationDone are when a node's driver restart and
	// validation finish.
	restartDone    map[string]time.Time
	validationDone map[string]time.Time
	// busy holds the nodes whose pod deletion or drain is running.
	busy map[string]bool
	// background counts the running pod deletions and drains.
	background sync.WaitGroup
}

func newController(kube kubernetes.Interface, nodes corelisters.NodeLister, policies cache.GenericLister,
	recorder record.EventRecorder, timing Timings, log logr.Logger) *controller {
	return &controller{
		kube:     kube,
		nodes:    nodes,
		policies: policies,
		recorder: recorder,
		timing:   timing,
		log:      log,
		shuffle: func(nodes []*corev1.Node) {
			rand.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 3*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "gpuopsim"}),
		installed:      map[string]string{},
		restartDone:    map[string]time.Time{},
		validationDone: map[string]time.Time{},
		busy:           map[string]bool{},
	}
}

func (c *controller) enqueue() { c.queue.Add(syncKey) }

// onNodeUpdate enqueues a reconcile when the state or skip label changes, as
// the real controller's node predicate does; a cordon alone does not.
func (c *controller) onNodeUpdate(oldObj, newObj any) {
	o, ok1 := oldObj.(*corev1.Node)
	n, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	if o.Labels[StateLabel] != n.Labels[StateLabel] || o.Labels[SkipLabel] != n.Labels[SkipLabel] {
		c.enqueue()
	}
}

// onPolicyUpdate enqueues a reconcile when the ClusterPolicy's generation
// changes.
func (c *controller) onPolicyUpdate(oldObj, newObj any) {
	o, ok1 := oldObj.(*unstructured.Unstructured)
	n, ok2 := newObj.(*unstructured.Unstructured)
	if !ok1 || !ok2 || o.GetGeneration() != n.GetGeneration() {
		c.enqueue()
	}
}

// clusterState groups the GPU nodes by upgrade state, as BuildState does.
type clusterState map[string][]*corev1.Node

func (c *controller) sync(ctx context.Context, _ string) error {
	driver, ok, err := c.activeDriverSpec()
	if err != nil {
		return err
	}
	if !ok || driver.UpgradePolicy == nil || !driver.UpgradePolicy.AutoUpgrade {
		return c.removeStateLabels(ctx)
	}
	policy := *driver.UpgradePolicy
	nodes, err := c.gpuNodes()
	if err != nil {
		return err
	}
	state := clusterState{}
	c.mu.Lock()
	for _, n := range nodes {
		if _, seen := c.installed[n.Name]; !seen {
			c.installed[n.Name] = driver.Version
		}
		state[n.Labels[StateLabel]] = append(state[n.Labels[StateLabel]], n)
	}
	c.mu.Unlock()

	// One pass, in ApplyState's order: each step works on the state read at
	// the start, so a node makes at most one transition per pass.
	steps := []func() error{
		func() error { return c.processDoneOrUnknown(ctx, state[""], "", driver.Version) },
		func() error { return c.processDoneOrUnknown(ctx, state[StateDone], StateDone, driver.Version) },
		func() error { return c.processUpgradeRequired(ctx, state, nodes, policy) },
		func() error { return c.processCordonRequired(ctx, state[StateCordonRequired]) },
		func() error { return c.moveAll(ctx, state[StateWaitForJobsRequired], StatePodDeletionRequired) },
		func() error { return c.processPodDeletion(ctx, state[StatePodDeletionRequired], policy) },
		func() error { return c.processDrain(ctx, state[StateDrainRequired], policy) },
		func() error { return c.processPodRestart(ctx, state[StatePodRestartRequired], driver.Version) },
		func() error { return c.processFailed(ctx, state[StateFailed], driver.Version) },
		func() error { return c.processValidation(ctx, state[StateValidationRequired]) },
		func() error { return c.processUncordon(ctx, state[StateUncordonRequired]) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	c.queue.AddAfter(syncKey, c.nextWake())
	return nil
}

func (c *controller) activeDriverSpec() (driverSpec, bool, error) {
	objs, err := c.policies.List(labels.Everything())
	if err != nil {
		return driverSpec{}, false, err
	}
	var policies []*unstructured.Unstructured
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			policies = append(policies, u)
		}
	}
	return activePolicy(policies)
}

// gpuNodes returns the nodes with a GPU, by name: the nodes the driver
// DaemonSet runs on.
func (c *controller) gpuNodes() ([]*corev1.Node, error) {
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*corev1.Node
	for _, n := range all {
		if q, ok := n.Status.Capacity[GPUResource]; ok && q.Cmp(resource.MustParse("0")) > 0 {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// nextWake is the next planned reconcile: the resync, or sooner a restart or
// validation that finishes.
func (c *controller) nextWake() time.Duration {
	next := c.timing.Resync
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range []map[string]time.Time{c.restartDone, c.validationDone} {
		for _, at := range m {
			next = min(next, max(at.Sub(now), minDelay))
		}
	}
	return next
}

// processDoneOrUnknown moves a node whose driver is not the target to
// upgrade-required, noting a cordon that predates the upgrade, and an
// unlabelled node that is in sync to upgrade-done.
func (c *controller) processDoneOrUnknown(ctx context.Context, nodes []*corev1.Node, state, target string) error {
	for _, n := range nodes {
		c.mu.Lock()
		inSync := c.installed[n.Name] == target
		c.mu.Unlock()
		switch {
		case !inSync:
			if n.Spec.Unschedulable {
				if err := c.patchNode(ctx, n.Name, map[string]any{"annotations": map[string]any{InitialStateAnnotation: "true"}}); err != nil {
					return err
				}
			}
			if err := c.setState(ctx, n, StateUpgradeRequired); err != nil {
				return err
			}
		case state == "":
			if err := c.setState(ctx, n, StateDone); err != nil {
				return err
			}
		}
	}
	return nil
}

// processUpgradeRequired starts the upgrade of as many waiting nodes as the
// policy allows, and of every waiting node someone else cordoned.
func (c *controller) processUpgradeRequired(ctx context.Context, state clusterState, nodes []*corev1.Node, policy upgradePolicy) error {
	total := 0
	for _, s := range []string{"", StateDone, StateUpgradeRequired, StateCordonRequired, StateWaitForJobsRequired,
		StatePodDeletionRequired, StateFailed, StateDrainRequired, StatePodRestartRequired, StateUncordonRequired,
		StateValidationRequired} {
		total += len(state[s])
	}
	inProgress := total - len(state[""]) - len(state[StateDone]) - len(state[StateUpgradeRequired])
	unavailable := 0
	for _, n := range nodes {
		if n.Spec.Unschedulable || !nodeReady(n) {
			unavailable++
		}
	}
	maxUnavailable := total
	if policy.MaxUnavailable != nil {
		var err error
		if maxUnavailable, err = intstr.GetScaledValueFromIntOrPercent(policy.MaxUnavailable, total, true); err != nil {
			return err
		}
	}
	available := policy.MaxParallelUpgrades - inProgress
	if policy.MaxParallelUpgrades == 0 {
		available = len(state[StateUpgradeRequired])
	}
	available = min(available, maxUnavailable)
	unavailable += len(state[StateCordonRequired])
	if unavailable >= maxUnavailable {
		available = 0
	} else if maxUnavailable < total && unavailable+available > maxUnavailable {
		available = maxUnavailable - unavailable
	}

	waiting := append([]*corev1.Node{}, state[StateUpgradeRequired]...)
	c.shuffle(waiting)
	for _, n := range waiting {
		if n.Labels[SkipLabel] == "true" {
			continue
		}
		if available <= 0 && !n.Spec.Unschedulable {
			continue
		}
		if err := c.setState(ctx, n, StateCordonRequired); err != nil {
			return err
		}
		available--
	}
	return nil
}

func (c *controller) processCordonRequired(ctx context.Context, nodes []*corev1.Node) error {
	for _, n := range nodes {
		if err := drain.RunCordonOrUncordon(&drain.Helper{Ctx: ctx, Client: c.kube}, n, true); err != nil {
			return err
		}
		if err := c.setState(ctx, n, StateWaitForJobsRequired); err != nil {
			return err
		}
	}
	return nil
}

func (c *controller) moveAll(ctx context.Context, nodes []*corev1.Node, to string) error {
	for _, n := range nodes {
		if err := c.setState(ctx, n, to); err != nil {
			return err
		}
	}
	return nil
}

// processPodDeletion starts the pod deletion of each node that has none
// running (pod_manager.go SchedulePodEviction).
func (c *controller) processPodDeletion(ctx context.Context, nodes []*corev1.Node, policy upgradePolicy) error {
	if len(nodes) == 0 {
		return nil
	}
	if policy.PodDeletion == nil {
		return fmt.Errorf("pod deletion spec should not be empty")
	}
	drainEnabled := policy.Drain != nil && policy.Drain.Enable
	for _, n := range nodes {
		c.startBackground(ctx, n, func(ctx context.Context, node *corev1.Node) {
			c.deleteGPUPods(ctx, node, *policy.PodDeletion, drainEnabled)
		})
	}
	return nil
}

// processDrain drains the nodes if the policy enables it, else moves them on
// (common_manager.go ProcessDrainNodes, drain_manager.go).
func (c *controller) processDrain(ctx context.Context, nodes []*corev1.Node, policy upgradePolicy) error {
	if policy.Drain == nil || !policy.Drain.Enable {
		return c.moveAll(ctx, nodes, StatePodRestartRequired)
	}
	for _, n := range nodes {
		c.startBackground(ctx, n, func(ctx context.Context, node *corev1.Node) {
			c.drainNode(ctx, node, *policy.Drain)
		})
	}
	return nil
}

// startBackground runs op for node unless one is running already.
func (c *controller) startBackground(ctx context.Context, node *corev1.Node, op func(context.Context, *corev1.Node)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy[node.Name] {
		return
	}
	c.busy[node.Name] = true
	c.background.Add(1)
	node = node.DeepCopy()
	go func() {
		defer c.background.Done()
		defer func() {
			c.mu.Lock()
			delete(c.busy, node.Name)
			c.mu.Unlock()
		}()
		op(ctx, node)
	}()
}

// processPodRestart restarts the driver of a node not in sync, and moves a
// node whose new driver is Ready to validation-required.
func (c *controller) processPodRestart(ctx context.Context, nodes []*corev1.Node, target string) error {
	for _, n := range nodes {
		if c.driverInSync(n.Name, target) {
			if err := c.setState(ctx, n, StateValidationRequired); err != nil {
				return err
			}
			continue
		}
		c.mu.Lock()
		if _, restarting := c.restartDone[n.Name]; !restarting {
			c.log.Info("restarting the driver", "node", n.Name, "version", target)
			c.restartDone[n.Name] = time.Now().Add(c.timing.DriverRestart)
		}
		c.mu.Unlock()
	}
	return nil
}

// driverInSync reports whether the node runs the target driver, finishing a
// restart whose time has come.
func (c *controller) driverInSync(node, target string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, restarting := c.restartDone[node]; restarting && !time.Now().Before(at) {
		c.installed[node] = target
		delete(c.restartDone, node)
	}
	return c.installed[node] == target
}

// processFailed moves a failed node on once its driver is in sync, which
// only a restart in pod-restart-required brings: a node that failed its pod
// deletion stays failed and cordoned.
func (c *controller) processFailed(ctx context.Context, nodes []*corev1.Node, target string) error {
	for _, n := range nodes {
		if !c.driverInSync(n.Name, target) {
			continue
		}
		if err := c.uncordonOrDone(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (c *controller) processValidation(ctx context.Context, nodes []*corev1.Node) error {
	for _, n := range nodes {
		c.mu.Lock()
		at, validating := c.validationDone[n.Name]
		if !validating {
			c.validationDone[n.Name] = time.Now().Add(c.timing.Validation)
		}
		done := validating && !time.Now().Before(at)
		if done {
			delete(c.validationDone, n.Name)
		}
		c.mu.Unlock()
		if done {
			if err := c.uncordonOrDone(ctx, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// uncordonOrDone skips the uncordon of a node that was cordoned before its
// upgrade (updateNodeToUncordonOrDoneState).
func (c *controller) uncordonOrDone(ctx context.Context, n *corev1.Node) error {
	if _, initiallyCordoned := n.Annotations[InitialStateAnnotation]; !initiallyCordoned {
		return c.setState(ctx, n, StateUncordonRequired)
	}
	if err := c.setState(ctx, n, StateDone); err != nil {
		return err
	}
	return c.patchNode(ctx, n.Name, map[string]any{"annotations": map[string]any{InitialStateAnnotation: nil}})
}

func (c *controller) processUncordon(ctx context.Context, nodes []*corev1.Node) error {
	for _, n := range nodes {
		if err := drain.RunCordonOrUncordon(&drain.Helper{Ctx: ctx, Client: c.kube}, n, false); err != nil {
			return err
		}
		if err := c.setState(ctx, n, StateDone); err != nil {
			return err
		}
	}
	return nil
}

// removeStateLabels is what the controller does when upgrades are off.
func (c *controller) removeStateLabels(ctx context.Context) error {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if _, ok := n.Labels[StateLabel]; ok {
			if err := c.patchNode(ctx, n.Name, map[string]any{"labels": map[string]any{StateLabel: nil}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// setState writes the state label, waits until the cache shows it (so the
// next pass counts the node in its new state, as ChangeNodeUpgradeState
// does) and records the controller's Event.
func (c *controller) setState(ctx context.Context, node *corev1.Node, state string) error {
	if err := c.patchNode(ctx, node.Name, map[string]any{"labels": map[string]any{StateLabel: state}}); err != nil {
		c.recorder.Eventf(node, corev1.EventTypeWarning, EventReason, "Failed to update node state label to %s, %s", state, err.Error())
		return err
	}
	c.log.Info("node upgrade state changed", "node", node.Name, "from", node.Labels[StateLabel], "to", state)
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		n, err := c.nodes.Get(node.Name)
		return err == nil && n.Labels[StateLabel] == state, nil
	})
	if err != nil {
		c.recorder.Eventf(node, corev1.EventTypeWarning, EventReason, "Failed to update node state label to %s, %s", state, err.Error())
		return err
	}
	c.recorder.Eventf(node, corev1.EventTypeNormal, EventReason, "Successfully updated node state label to %s", state)
	return nil
}

// patchNode merges metadata (labels or annotations; nil removes a key).
func (c *controller) patchNode(ctx context.Context, name string, metadata map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": metadata})
	if err != nil {
		return err
	}
	if _, err := c.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patching node %s: %w", name, err)
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return false
		}
	}
	return true
}
