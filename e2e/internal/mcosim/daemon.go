package mcosim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
)

// daemonPhase is what the machine-config-daemon of one node does next.
type daemonPhase int

const (
	// daemonIdle: nothing to do (node up to date, unmanaged or Unreconcilable).
	daemonIdle daemonPhase = iota
	// daemonPatch: write the decision's annotations.
	daemonPatch
	// daemonWaitDrain: the drain was requested and is not done yet.
	daemonWaitDrain
	// daemonWaitUncordon: the uncordon was requested and is not done yet.
	daemonWaitUncordon
	// daemonStartReboot: the node is drained; reboot into the new config.
	daemonStartReboot
	// daemonRebooting: the reboot has not finished yet.
	daemonRebooting
)

// rebootProgress is the state of the simulated reboot into the node's
// desiredConfig. A real reboot leaves no trace in the API until the daemon
// comes back, so this lives in the simulator's memory.
type rebootProgress int

const (
	rebootNotStarted rebootProgress = iota
	rebootInProgress
	rebootFinished
)

// daemonDecision is the outcome of decideDaemon.
type daemonDecision struct {
	phase daemonPhase
	// patch holds the annotations to write when phase is daemonPatch.
	patch map[string]string
	// message describes the step for the log.
	message string
}

// drainTimeoutReason is the daemon's reason when the drain did not complete
// in time, worded as the machine-config-daemon words it.
func drainTimeoutReason(node string) string {
	return fmt.Sprintf("failed to drain node: %s after 1 hour. Please see machine-config-controller logs for more information", node)
}

// decideDaemon is the machine-config-daemon's update sequence as a function
// of the node's annotations, the simulated reboot and whether the daemon has
// waited longer than its drain timeout:
//
//	Done, desired != current   -> state=Working
//	Working                    -> desiredDrain=drain-<desired>, wait for lastAppliedDrain
//	drained                    -> reboot (the node stays cordoned)
//	rebooted                   -> desiredDrain=uncordon-<desired>, wait for lastAppliedDrain
//	uncordoned                 -> currentConfig=desired, state=Done, reason=""
//
// A drain that takes longer than the daemon's timeout marks the node Degraded
// with a reason; the daemon keeps waiting and returns to Working when the
// drain completes. An uncordon request already written for the desired config
// means the reboot happened, so a restarted simulator never drains twice.
func decideDaemon(node *corev1.Node, reboot rebootProgress, drainWaitExpired bool) daemonDecision {
	a := node.Annotations
	current, desired, state := a[CurrentConfigAnnotation], a[DesiredConfigAnnotation], a[StateAnnotation]
	desiredDrain, lastApplied := a[DesiredDrainAnnotation], a[LastAppliedDrainAnnotation]

	if current == "" || desired == "" || state == StateUnreconcilable {
		return daemonDecision{phase: daemonIdle}
	}
	if current == desired && state == StateDone {
		return daemonDecision{phase: daemonIdle}
	}
	if current != desired && state == StateDone {
		return daemonDecision{
			phase:   daemonPatch,
			patch:   map[string]string{StateAnnotation: StateWorking, ReasonAnnotation: ""},
			message: fmt.Sprintf("starting update from %s to %s", current, desired),
		}
	}

	uncordon := UncordonRequest(desired)
	if current == desired || desiredDrain == uncordon || reboot == rebootFinished {
		switch {
		case desiredDrain != uncordon:
			return daemonDecision{
				phase:   daemonPatch,
				patch:   map[string]string{DesiredDrainAnnotation: uncordon},
				message: "requesting uncordon " + uncordon,
			}
		case lastApplied != desiredDrain:
			return daemonDecision{phase: daemonWaitUncordon}
		default:
			return daemonDecision{
				phase: daemonPatch,
				patch: map[string]string{
					CurrentConfigAnnotation: desired,
					StateAnnotation:         StateDone,
					ReasonAnnotation:        "",
				},
				message: "update complete: node runs " + desired,
			}
		}
	}

	drain := DrainRequest(desired)
	switch {
	case desiredDrain != drain:
		return daemonDecision{
			phase:   daemonPatch,
			patch:   map[string]string{DesiredDrainAnnotation: drain},
			message: "requesting drain " + drain,
		}
	case lastApplied != desiredDrain:
		if drainWaitExpired && state != StateDegraded {
			return daemonDecision{
				phase:   daemonPatch,
				patch:   map[string]string{StateAnnotation: StateDegraded, ReasonAnnotation: drainTimeoutReason(node.Name)},
				message: "drain did not complete in time; marking the node Degraded and waiting on",
			}
		}
		return daemonDecision{phase: daemonWaitDrain}
	case state == StateDegraded:
		return daemonDecision{
			phase:   daemonPatch,
			patch:   map[string]string{StateAnnotation: StateWorking, ReasonAnnotation: ""},
			message: "drain completed after the node was marked Degraded; resuming the update",
		}
	case reboot == rebootInProgress:
		return daemonDecision{phase: daemonRebooting}
	default:
		return daemonDecision{phase: daemonStartReboot, message: "node drained; rebooting into " + desired}
	}
}

// daemonMemory is what a daemon keeps between syncs of one node.
type daemonMemory struct {
	// rebootConfig and rebootUntil describe the simulated reboot.
	rebootConfig string
	rebootUntil  time.Time
	// drainRequest and drainSince record when the daemon started waiting
	// for a drain, for its drain timeout.
	drainRequest string
	drainSince   time.Time
}

// daemonSet plays the machine-config-daemon of every node.
type daemonSet struct {
	kube   kubernetes.Interface
	nodes  corelisters.NodeLister
	queue  workqueue.TypedRateLimitingInterface[string]
	timing Timings
	log    logr.Logger

	mu     sync.Mutex
	memory map[string]*daemonMemory
}

func newDaemonSet(kube kubernetes.Interface, nodes corelisters.NodeLister, timing Timings, log logr.Logger) *daemonSet {
	return &daemonSet{
		kube:   kube,
		nodes:  nodes,
		timing: timing,
		log:    log,
		memory: map[string]*daemonMemory{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "mcosim-daemon"}),
	}
}

// onNode is the node informer's add and update handler.
func (d *daemonSet) onNode(obj interface{}) {
	if node, ok := obj.(*corev1.Node); ok {
		d.queue.Add(node.Name)
	}
}

// onNodeDelete forgets a deleted node.
func (d *daemonSet) onNodeDelete(obj interface{}) {
	name, err := deletedNodeName(obj)
	if err != nil {
		return
	}
	d.mu.Lock()
	delete(d.memory, name)
	d.mu.Unlock()
}

func (d *daemonSet) sync(ctx context.Context, name string) error {
	node, err := d.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	log := d.log.WithValues("node", name)
	now := time.Now()
	desired := node.Annotations[DesiredConfigAnnotation]
	desiredDrain := node.Annotations[DesiredDrainAnnotation]

	d.mu.Lock()
	mem := d.memory[name]
	if mem == nil {
		mem = &daemonMemory{}
		d.memory[name] = mem
	}
	reboot := rebootNotStarted
	if mem.rebootConfig == desired && !mem.rebootUntil.IsZero() {
		reboot = rebootFinished
		if now.Before(mem.rebootUntil) {
			reboot = rebootInProgress
		}
	}
	if mem.drainRequest != desiredDrain {
		// Start the drain timeout when the daemon first sees its request
		// (also after a simulator restart).
		mem.drainRequest, mem.drainSince = desiredDrain, now
	}
	drainWaited := now.Sub(mem.drainSince)
	rebootLeft := mem.rebootUntil.Sub(now)
	d.mu.Unlock()

	decision := decideDaemon(node, reboot, drainWaited > d.timing.DaemonDrainTimeout)
	switch decision.phase {
	case daemonIdle:
		if NodeUpdated(node) {
			d.mu.Lock()
			delete(d.memory, name)
			d.mu.Unlock()
		}
	case daemonPatch:
		log.Info("daemon: "+decision.message, "annotations", decision.patch)
		if err := patchNodeAnnotations(ctx, d.kube, name, decision.patch); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	case daemonWaitDrain:
		// Wake up when the drain timeout runs out; lastAppliedDrain
		// changes wake the daemon through the informer.
		if left := d.timing.DaemonDrainTimeout - drainWaited; left >= 0 {
			d.queue.AddAfter(name, left+minDelay)
		}
	case daemonWaitUncordon:
	case daemonStartReboot:
		log.Info("daemon: "+decision.message, "duration", d.timing.Reboot.String())
		d.mu.Lock()
		mem.rebootConfig, mem.rebootUntil = desired, now.Add(d.timing.Reboot)
		d.mu.Unlock()
		d.queue.AddAfter(name, d.timing.Reboot)
	case daemonRebooting:
		d.queue.AddAfter(name, rebootLeft)
	}
	return nil
}
