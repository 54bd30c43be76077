package mcosim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	mcfgclientset "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubectl/pkg/drain"
)

// Reasons of the Events the drain controller records on nodes.
const (
	EventDrainThresholdExceeded = "DrainThresholdExceeded"
	EventDrainFailed            = "DrainFailed"
)

// drainController plays machine-config-controller's drain controller: it
// carries out the daemons' desiredDrain requests and reports completion in
// lastAppliedDrain.
type drainController struct {
	kube     kubernetes.Interface
	mcn      machineConfigNodeWriter
	nodes    corelisters.NodeLister
	pools    mcfglisters.MachineConfigPoolLister
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	timing   Timings
	log      logr.Logger

	mu sync.Mutex
	// ongoing holds the drains in progress by node: when the controller
	// cordoned the node, and how many attempts it made since.
	ongoing map[string]*ongoingDrain
}

type ongoingDrain struct {
	since    time.Time
	attempts int
}

func newDrainController(kube kubernetes.Interface, mcfg mcfgclientset.Interface, nodes corelisters.NodeLister,
	pools mcfglisters.MachineConfigPoolLister, recorder record.EventRecorder, timing Timings, log logr.Logger) *drainController {
	return &drainController{
		kube:     kube,
		mcn:      machineConfigNodeWriter{mcfg: mcfg},
		nodes:    nodes,
		pools:    pools,
		recorder: recorder,
		timing:   timing,
		log:      log,
		ongoing:  map[string]*ongoingDrain{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "mcosim-drain"}),
	}
}

// onNodeAdd enqueues every node once, after the MCO's update delay.
func (c *drainController) onNodeAdd(obj interface{}) {
	if node, ok := obj.(*corev1.Node); ok {
		c.queue.AddAfter(node.Name, c.timing.UpdateDelay)
	}
}

// onNodeUpdate enqueues a node, after the MCO's update delay, when its
// desiredDrain changes or when it is cordoned or uncordoned (someone
// uncordoning a node during a drain makes the controller cordon it again).
func (c *drainController) onNodeUpdate(oldObj, newObj interface{}) {
	oldNode, ok1 := oldObj.(*corev1.Node)
	newNode, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	if oldNode.Annotations[DesiredDrainAnnotation] == newNode.Annotations[DesiredDrainAnnotation] &&
		oldNode.Spec.Unschedulable == newNode.Spec.Unschedulable {
		return
	}
	c.queue.AddAfter(newNode.Name, c.timing.UpdateDelay)
}

// onNodeDelete forgets a deleted node.
func (c *drainController) onNodeDelete(obj interface{}) {
	name, err := deletedNodeName(obj)
	if err != nil {
		return
	}
	c.mu.Lock()
	delete(c.ongoing, name)
	c.mu.Unlock()
}

func (c *drainController) sync(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	desired := node.Annotations[DesiredDrainAnnotation]
	// lastAppliedDrain is written only on success: equal means done.
	if desired == node.Annotations[LastAppliedDrainAnnotation] {
		return nil
	}
	log := c.log.WithValues("node", name, "request", desired)
	helper := c.newHelper(ctx, log)

	switch verb, _, _ := strings.Cut(desired, "-"); verb {
	case uncordonVerb:
		log.Info("drain controller: uncordoning")
		if err := c.cordonOrUncordon(ctx, log, false, node, helper); err != nil {
			return err
		}
		c.writeMCN(ctx, log, node, mcnUncordoned())
	case drainVerb:
		if err := c.drainNode(ctx, log, node, helper); err != nil {
			// The failed attempt has requeued the node on the MCO's
			// drain timers; an error here would add a rate-limited retry.
			return nil
		}
		// A node uncordoned during the drain may have received new pods:
		// completion would be a lie. The uncordon has requeued the node.
		// (The MCO reads its informer cache here; a fresh read avoids
		// mistaking the cache's lag behind our own cordon for an uncordon
		// when a drain finishes within milliseconds, as on fake nodes.)
		node, err = c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !node.Spec.Unschedulable {
			log.Info("drain controller: node was uncordoned during the drain; not reporting completion")
			return nil
		}
	default:
		return fmt.Errorf("node %s: unrecognized drain verb in %q", name, desired)
	}

	log.Info("drain controller: operation successful; applying completion annotation")
	if err := patchNodeAnnotations(ctx, c.kube, name, map[string]string{LastAppliedDrainAnnotation: desired}); err != nil {
		return err
	}
	if strings.HasPrefix(desired, drainVerb+"-") {
		c.writeMCN(ctx, log, node, mcnDrained(desired))
	}
	return nil
}

// writeMCN writes the drain controller's MachineConfigNode conditions
// (pkg/controller/drain/drain_controller.go); a failure is logged only.
func (c *drainController) writeMCN(ctx context.Context, log logr.Logger, node *corev1.Node, updates ...mcnUpdate) {
	pool := primaryPoolName(node, c.pools)
	if pool == "" {
		return
	}
	if err := c.mcn.apply(ctx, node, pool, updates...); err != nil {
		log.Error(err, "drain controller: cannot write MachineConfigNode conditions")
	}
}

// drainNode cordons the node unless a drain is already going on, then runs
// one drain attempt. On failure it requeues the node on the MCO's timers and
// records the MCO's Events.
func (c *drainController) drainNode(ctx context.Context, log logr.Logger, node *corev1.Node, helper *drain.Helper) error {
	c.mu.Lock()
	state, isOngoing := c.ongoing[node.Name]
	var failingFor time.Duration
	if isOngoing {
		failingFor = time.Since(state.since)
	}
	c.mu.Unlock()

	if isOngoing && drainTimedOut(failingFor, c.timing) {
		msg := fmt.Sprintf("node %s: drain exceeded timeout: %v. Will continue to retry.", node.Name, c.timing.DrainTimeout)
		log.Info("drain controller: " + msg)
		c.recorder.Event(eventRef(node), corev1.EventTypeWarning, EventDrainFailed, msg)
	}
	if isOngoing && !node.Spec.Unschedulable {
		log.Info("drain controller: node was unexpectedly uncordoned; cordoning again")
	}
	if !isOngoing || !node.Spec.Unschedulable {
		log.Info("drain controller: cordoning")
		if err := c.cordonOrUncordon(ctx, log, true, node, helper); err != nil {
			return err
		}
		c.writeMCN(ctx, log, node, mcnCordoned())
		c.mu.Lock()
		state = &ongoingDrain{since: time.Now()}
		c.ongoing[node.Name] = state
		c.mu.Unlock()
		failingFor = 0
	}

	c.mu.Lock()
	state.attempts++
	attempt := state.attempts
	c.mu.Unlock()
	log = log.WithValues("attempt", attempt)
	log.Info("drain controller: drain attempt started", "timeout", c.timing.DrainHelperTimeout.String())
	desired, lastApplied := node.Annotations[DesiredDrainAnnotation], node.Annotations[LastAppliedDrainAnnotation]
	c.writeMCN(ctx, log, node, mcnDraining(desired, lastApplied))
	start := time.Now()
	if err := drain.RunNodeDrain(helper, node.Name); err != nil {
		c.writeMCN(ctx, log, node, mcnDrainFailed(err, desired, lastApplied))
		retry := nextDrainRetry(failingFor, c.timing)
		log.Info("drain controller: drain attempt failed", "duration", time.Since(start).String(),
			"retryAfter", retry.after.String(), "error", err.Error())
		if retry.thresholdExceeded {
			msg := fmt.Sprintf("Drain failed. Drain has been failing for more than %v. Waiting %v then retrying. Error message from drain: %v",
				c.timing.DrainRequeueFailingThreshold, c.timing.DrainRequeueFailingDelay, err)
			c.recorder.Event(eventRef(node), corev1.EventTypeWarning, EventDrainThresholdExceeded, msg)
		}
		c.queue.AddAfter(node.Name, retry.after)
		return err
	}
	log.Info("drain controller: drain attempt succeeded", "duration", time.Since(start).String())
	c.mu.Lock()
	delete(c.ongoing, node.Name)
	c.mu.Unlock()
	return nil
}

// newHelper configures kubectl's drain helper as the MCO does: evict (never
// delete) everything but DaemonSet pods, including pods with emptyDir data and
// pods without a controller, honouring each pod's own grace period, within
// one attempt's timeout.
func (c *drainController) newHelper(ctx context.Context, log logr.Logger) *drain.Helper {
	return &drain.Helper{
		Ctx:                 ctx,
		Client:              c.kube,
		Force:               true,
		IgnoreAllDaemonSets: true,
		DeleteEmptyDirData:  true,
		GracePeriodSeconds:  -1,
		Timeout:             c.timing.DrainHelperTimeout,
		OnPodDeletedOrEvicted: func(pod *corev1.Pod, usingEviction bool) {
			verb := "deleted"
			if usingEviction {
				verb = "evicted"
			}
			log.Info("drain controller: pod "+verb, "pod", pod.Namespace+"/"+pod.Name)
		},
		Out:    logWriter{log: log},
		ErrOut: logWriter{log: log},
	}
}

// cordonOrUncordon sets spec.unschedulable and re-reads the node until the
// API server shows it, retrying on the MCO's backoff.
func (c *drainController) cordonOrUncordon(ctx context.Context, log logr.Logger, cordon bool, node *corev1.Node, helper *drain.Helper) error {
	verb := "cordon"
	if !cordon {
		verb = "uncordon"
	}
	current := node.DeepCopy()
	var lastErr error
	err := wait.ExponentialBackoffWithContext(ctx, c.timing.CordonBackoff, func(ctx context.Context) (bool, error) {
		if err := drain.RunCordonOrUncordon(helper, current, cordon); err != nil {
			lastErr = err
			log.Info("drain controller: "+verb+" failed; retrying", "error", err.Error())
			return false, nil
		}
		fresh, err := c.kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			lastErr = err
			return false, nil
		}
		current = fresh
		if current.Spec.Unschedulable != cordon {
			return false, nil
		}
		log.Info("drain controller: " + verb + " succeeded")
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("node %s: failed to %s: %w", node.Name, verb, utilerrors.NewAggregate([]error{err, lastErr}))
	}
	return nil
}

// logWriter turns the drain helper's text output into log lines.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			w.log.Info("drain controller: " + line)
		}
	}
	return len(p), nil
}
