package mcosim

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/go-logr/logr"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclientset "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// Reasons of the Events the node controller records on pools.
const (
	EventSetDesiredConfig = "SetDesiredConfig"
	EventCompleted        = "Completed"
	EventSelectingAll     = "SelectingAll"
)

// nodeController plays machine-config-controller's node controller: per pool
// it targets nodes (desiredConfig), keeps the UpdateInProgress taint and
// writes the pool status.
type nodeController struct {
	kube     kubernetes.Interface
	mcfg     mcfgclientset.Interface
	nodes    corelisters.NodeLister
	pools    mcfglisters.MachineConfigPoolLister
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	timing   Timings
	log      logr.Logger
}

func newNodeController(kube kubernetes.Interface, mcfg mcfgclientset.Interface, nodes corelisters.NodeLister,
	pools mcfglisters.MachineConfigPoolLister, recorder record.EventRecorder, timing Timings, log logr.Logger) *nodeController {
	return &nodeController{
		kube:     kube,
		mcfg:     mcfg,
		nodes:    nodes,
		pools:    pools,
		recorder: recorder,
		timing:   timing,
		log:      log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "mcosim-node"}),
	}
}

// enqueuePool syncs a pool after the MCO's update delay, which absorbs bursts
// of changes.
func (c *nodeController) enqueuePool(name string) {
	c.queue.AddAfter(name, c.timing.UpdateDelay)
}

func (c *nodeController) onPool(obj interface{}) {
	if pool, ok := obj.(*mcfgv1.MachineConfigPool); ok {
		c.enqueuePool(pool.Name)
	}
}

func (c *nodeController) onPoolUpdate(_, newObj interface{}) { c.onPool(newObj) }

// enqueuePoolsOf enqueues the pools node belongs to.
func (c *nodeController) enqueuePoolsOf(node *corev1.Node) {
	pools, err := c.pools.List(labels.Everything())
	if err != nil {
		return
	}
	members, err := PoolsForNode(node, pools)
	if err != nil {
		c.log.Info("node controller: cannot find the pool of a node", "node", node.Name, "error", err.Error())
		return
	}
	for _, p := range members {
		c.enqueuePool(p.Name)
	}
}

func (c *nodeController) onNodeAdd(obj interface{}) {
	if node, ok := obj.(*corev1.Node); ok {
		c.enqueuePoolsOf(node)
	}
}

// onNodeUpdate enqueues the node's old and new pools when something the node
// controller looks at changed: MCO annotations, labels, taints, readiness.
func (c *nodeController) onNodeUpdate(oldObj, newObj interface{}) {
	oldNode, ok1 := oldObj.(*corev1.Node)
	newNode, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 || !nodeChangeMatters(oldNode, newNode) {
		return
	}
	c.enqueuePoolsOf(oldNode)
	c.enqueuePoolsOf(newNode)
}

func (c *nodeController) onNodeDelete(obj interface{}) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if node, ok = tombstone.Obj.(*corev1.Node); !ok {
			return
		}
	}
	c.enqueuePoolsOf(node)
}

// nodeChangeMatters reports whether a node update can change a pool decision.
func nodeChangeMatters(oldNode, newNode *corev1.Node) bool {
	for _, key := range []string{CurrentConfigAnnotation, DesiredConfigAnnotation, StateAnnotation, ReasonAnnotation} {
		if oldNode.Annotations[key] != newNode.Annotations[key] {
			return true
		}
	}
	if !reflect.DeepEqual(oldNode.Labels, newNode.Labels) || !reflect.DeepEqual(oldNode.Spec.Taints, newNode.Spec.Taints) {
		return true
	}
	oldErr, newErr := checkNodeReady(oldNode), checkNodeReady(newNode)
	return (oldErr == nil) != (newErr == nil) || (oldErr != nil && oldErr.Error() != newErr.Error())
}

func (c *nodeController) sync(ctx context.Context, name string) error {
	cached, err := c.pools.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	pool := cached.DeepCopy()
	log := c.log.WithValues("pool", name)
	target := pool.Spec.Configuration.Name
	if target == "" {
		log.Info("node controller: pool has no target config yet")
		return nil
	}
	if pool.Spec.NodeSelector != nil && reflect.DeepEqual(*pool.Spec.NodeSelector, metav1.LabelSelector{}) {
		c.recorder.Event(eventRef(pool), corev1.EventTypeWarning, EventSelectingAll,
			"This machineconfigpool is selecting all nodes. A non-empty selector is required.")
		return nil
	}

	allPools, err := c.pools.List(labels.Everything())
	if err != nil {
		return err
	}
	allNodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	members := NodesForPool(pool, allPools, allNodes)
	if pool.DeletionTimestamp != nil {
		return c.syncStatus(ctx, log, pool, members)
	}

	// Nodes that never ran a daemon get the annotations of the config they
	// would have booted with. The informer brings the change back and
	// requeues the pool; until then such a node counts as unavailable.
	for _, n := range members {
		if annotations := initialAnnotations(n, pool); annotations != nil {
			log.Info("node controller: node joined the pool", "node", n.Name, "config", target)
			if err := patchNodeAnnotations(ctx, c.kube, n.Name, annotations); err != nil {
				return err
			}
		}
	}

	if pool.Spec.Paused {
		return c.syncStatus(ctx, log, pool, members)
	}

	for _, n := range members {
		need, has := needsUpdateInProgressTaint(n, pool), hasUpdateInProgressTaint(n)
		if need != has {
			if err := c.setUpdateInProgressTaint(ctx, n.Name, need); err != nil {
				// As in the MCO, a taint failure does not stop the rollout.
				log.Error(err, "node controller: cannot update the UpdateInProgress taint", "node", n.Name)
			}
		}
	}

	targets, err := NodesToTarget(pool, members)
	if err != nil {
		if statusErr := c.syncStatus(ctx, log, pool, members); statusErr != nil {
			return fmt.Errorf("%w (and status: %v)", err, statusErr)
		}
		return err
	}
	for _, n := range targets {
		log.Info("node controller: setting node target", "node", n.Name, "zone", n.Labels[ZoneLabel], "config", target)
		if err := patchNodeAnnotations(ctx, c.kube, n.Name, map[string]string{DesiredConfigAnnotation: target}); err != nil {
			return err
		}
	}
	if err := c.waitForTargetsInCache(ctx, targets, target); err != nil {
		return err
	}
	switch len(targets) {
	case 0:
	case 1:
		c.recorder.Eventf(eventRef(pool), corev1.EventTypeNormal, EventSetDesiredConfig,
			"Targeted node %s to MachineConfig %s", targets[0].Name, target)
	default:
		c.recorder.Eventf(eventRef(pool), corev1.EventTypeNormal, EventSetDesiredConfig,
			"Set target for %d nodes to MachineConfig %s", len(targets), target)
	}
	return c.syncStatus(ctx, log, pool, members)
}

// waitForTargetsInCache waits until the node cache shows the targets' new
// desiredConfig. Until it does, a following sync would count those nodes as
// available and could target more nodes than maxUnavailable allows; the MCO's
// 5 s update delay hides this race, a small time scale does not.
func (c *nodeController) waitForTargetsInCache(ctx context.Context, targets []*corev1.Node, config string) error {
	if len(targets) == 0 {
		return nil
	}
	return wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, cacheWaitTimeout, true, func(context.Context) (bool, error) {
		for _, t := range targets {
			n, err := c.nodes.Get(t.Name)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil || n.Annotations[DesiredConfigAnnotation] != config {
				return false, nil
			}
		}
		return true, nil
	})
}

// cacheWaitTimeout bounds waitForTargetsInCache; on timeout the sync fails and
// is retried.
const cacheWaitTimeout = 30 * time.Second

// syncStatus writes the pool status computed from members when it changed.
func (c *nodeController) syncStatus(ctx context.Context, log logr.Logger, pool *mcfgv1.MachineConfigPool, members []*corev1.Node) error {
	status := CalculatePoolStatus(pool, members, metav1.Now())
	if equality.Semantic.DeepEqual(pool.Status, status) {
		return nil
	}
	previous := pool.Status.Configuration.Name
	updated := pool.DeepCopy()
	updated.Status = status
	if _, err := c.mcfg.MachineconfigurationV1().MachineConfigPools().UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pool %s: updating status: %w", pool.Name, err)
	}
	log.Info("node controller: pool status",
		"machines", status.MachineCount, "updated", status.UpdatedMachineCount, "ready", status.ReadyMachineCount,
		"unavailable", status.UnavailableMachineCount, "degraded", status.DegradedMachineCount,
		"configuration", status.Configuration.Name, "updatedCondition", poolConditionTrue(status.Conditions, mcfgv1.MachineConfigPoolUpdated))
	if previous != status.Configuration.Name {
		c.recorder.Eventf(eventRef(pool), corev1.EventTypeNormal, EventCompleted,
			"Pool %s has completed update to MachineConfig %s", pool.Name, status.Configuration.Name)
	}
	return nil
}

// setUpdateInProgressTaint adds or removes the UpdateInProgress taint.
func (c *nodeController) setUpdateInProgressTaint(ctx context.Context, name string, present bool) error {
	taint := UpdateInProgressTaint()
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var taints []corev1.Taint
		found := false
		for _, t := range node.Spec.Taints {
			if t.MatchTaint(&taint) {
				found = true
				if !present {
					continue
				}
			}
			taints = append(taints, t)
		}
		if found == present {
			return nil
		}
		if present {
			taints = append(taints, taint)
		}
		node.Spec.Taints = taints
		_, err = c.kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}
