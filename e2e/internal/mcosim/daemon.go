package mcosim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	mcfgclientset "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	opclientset "github.com/openshift/client-go/operator/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
	// daemonPlan: decide the update (drain? reboot?) from the rendered
	// MachineConfigs and the node disruption policies.
	daemonPlan
	// daemonWaitDrain: the drain was requested and is not done yet.
	daemonWaitDrain
	// daemonWaitUncordon: the uncordon was requested and is not done yet.
	daemonWaitUncordon
	// daemonStartReboot: write the update and reboot into the new config.
	daemonStartReboot
	// daemonRebooting: the reboot has not finished yet.
	daemonRebooting
	// daemonStartApply: write the update in place, no reboot (the plan's
	// None, Reload, Restart, DaemonReload or Drain actions).
	daemonStartApply
	// daemonApplying: the in-place update has not finished yet.
	daemonApplying
)

// rebootProgress is the state of the simulated reboot into the node's
// desiredConfig, or of the in-place update when the plan needs no reboot. A
// real reboot leaves no trace in the API until the daemon comes back, so this
// lives in the simulator's memory.
type rebootProgress int

const (
	rebootNotStarted rebootProgress = iota
	rebootInProgress
	rebootFinished
)

// daemonInputs is what decideDaemon decides from besides the node.
type daemonInputs struct {
	// plan is the update decision for the node's desiredConfig; nil (or a
	// plan for another config) until the daemon has made it.
	plan *updatePlan
	// progress is the reboot, or the in-place update, into desiredConfig.
	progress rebootProgress
	// drainWaitExpired: the daemon has waited for the drain longer than its
	// timeout.
	drainWaitExpired bool
}

// daemonDecision is the outcome of decideDaemon.
type daemonDecision struct {
	phase daemonPhase
	// patch holds the annotations to write when phase is daemonPatch.
	patch map[string]string
	// mcn are the MachineConfigNode conditions to write after the patch, or
	// when the reboot or the in-place update starts.
	mcn []mcnUpdate
	// message describes the step for the log.
	message string
}

// drainTimeoutReason is the daemon's reason when the drain did not complete
// in time, worded as the machine-config-daemon words it.
func drainTimeoutReason(node string) string {
	return fmt.Sprintf("failed to drain node: %s after 1 hour. Please see machine-config-controller logs for more information", node)
}

// decideDaemon is the machine-config-daemon's update sequence as a function
// of the node's annotations and the daemon's memory (in):
//
//	Done, desired != current   -> state=Working
//	Working, no plan           -> decide the update (update() in pkg/daemon/update.go)
//	plan drains                -> desiredDrain=drain-<desired>, wait for lastAppliedDrain
//	(drained or no drain)      -> reboot (Reboot action; the node stays cordoned)
//	                              or update in place (every other action)
//	rebooted / updated         -> desiredDrain=uncordon-<desired>, wait for lastAppliedDrain
//	uncordoned                 -> currentConfig=desired, state=Done, reason=""
//
// Without a drain the daemon never asks for one, so the node is never
// cordoned, but it still asks for uncordon-<desired> and waits for it, as
// the MCD's updateConfigAndState (completeUpdate, pkg/daemon/daemon.go) does
// after every update.
//
// A drain that takes longer than the daemon's timeout marks the node Degraded
// with a reason; the daemon keeps waiting and returns to Working when the
// drain completes. An uncordon request already written for the desired config
// means the reboot or update happened, so a restarted simulator never drains
// twice.
func decideDaemon(node *corev1.Node, in daemonInputs) daemonDecision {
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
			mcn:     []mcnUpdate{mcnNeedsUpdate(node.Name)},
			message: fmt.Sprintf("starting update from %s to %s", current, desired),
		}
	}

	plan := in.plan
	if plan != nil && plan.config != desired {
		plan = nil
	}
	progress := in.progress
	if plan == nil {
		progress = rebootNotStarted
	}

	uncordon := UncordonRequest(desired)
	if current == desired || desiredDrain == uncordon || progress == rebootFinished {
		switch {
		case desiredDrain != uncordon:
			var mcn []mcnUpdate
			switch {
			case plan != nil && progress == rebootFinished && plan.reboot:
				mcn = []mcnUpdate{mcnRebooted()}
			case plan != nil && progress == rebootFinished:
				mcn = append([]mcnUpdate{mcnFilesAndOS(*plan, true)}, mcnPostActions(*plan)...)
			}
			return daemonDecision{
				phase:   daemonPatch,
				patch:   map[string]string{DesiredDrainAnnotation: uncordon},
				mcn:     append(mcn, mcnResumed(desired)),
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
				mcn:     []mcnUpdate{mcnUpdated(node.Name)},
				message: "update complete: node runs " + desired,
			}
		}
	}

	if plan == nil {
		return daemonDecision{phase: daemonPlan}
	}

	if plan.drain {
		drain := DrainRequest(desired)
		switch {
		case desiredDrain != drain:
			return daemonDecision{
				phase:   daemonPatch,
				patch:   map[string]string{DesiredDrainAnnotation: drain},
				message: "requesting drain " + drain,
			}
		case lastApplied != desiredDrain:
			if in.drainWaitExpired && state != StateDegraded {
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
		}
	}

	switch {
	case plan.reboot && progress == rebootInProgress:
		return daemonDecision{phase: daemonRebooting}
	case plan.reboot:
		return daemonDecision{
			phase:   daemonStartReboot,
			mcn:     append([]mcnUpdate{mcnFilesAndOS(*plan, false), mcnFilesAndOS(*plan, true)}, mcnPostActions(*plan)...),
			message: "node drained; rebooting into " + desired,
		}
	case progress == rebootInProgress:
		return daemonDecision{phase: daemonApplying}
	default:
		message := "no drain required; updating in place to " + desired
		if plan.drain {
			message = "node drained; updating in place to " + desired
		}
		return daemonDecision{
			phase:   daemonStartApply,
			mcn:     []mcnUpdate{mcnFilesAndOS(*plan, false)},
			message: message,
		}
	}
}

// daemonMemory is what a daemon keeps between syncs of one node.
type daemonMemory struct {
	// targetConfig and targetSeen record when the daemon first saw the
	// node targeted at a config: the plan is made PrepareUpdate later.
	targetConfig string
	targetSeen   time.Time
	// plan is the update decision for targetConfig.
	plan *updatePlan
	// progressConfig and progressUntil describe the simulated reboot or
	// in-place update.
	progressConfig string
	progressUntil  time.Time
	// drainRequest and drainSince record when the daemon started waiting
	// for a drain, for its drain timeout.
	drainRequest string
	drainSince   time.Time
}

// daemonSet plays the machine-config-daemon of every node.
type daemonSet struct {
	kube   kubernetes.Interface
	mcfg   mcfgclientset.Interface
	op     opclientset.Interface
	nodes  corelisters.NodeLister
	pools  mcfglisters.MachineConfigPoolLister
	mcn    machineConfigNodeWriter
	queue  workqueue.TypedRateLimitingInterface[string]
	timing Timings
	log    logr.Logger

	mu     sync.Mutex
	memory map[string]*daemonMemory
}

func newDaemonSet(kube kubernetes.Interface, mcfg mcfgclientset.Interface, op opclientset.Interface, nodes corelisters.NodeLister,
	pools mcfglisters.MachineConfigPoolLister, timing Timings, log logr.Logger) *daemonSet {
	return &daemonSet{
		kube:   kube,
		mcfg:   mcfg,
		op:     op,
		nodes:  nodes,
		pools:  pools,
		mcn:    machineConfigNodeWriter{mcfg: mcfg},
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
	current := node.Annotations[CurrentConfigAnnotation]
	desired := node.Annotations[DesiredConfigAnnotation]
	desiredDrain := node.Annotations[DesiredDrainAnnotation]

	d.mu.Lock()
	mem := d.memory[name]
	if mem == nil {
		mem = &daemonMemory{}
		d.memory[name] = mem
	}
	if mem.targetConfig != desired {
		mem.targetConfig, mem.targetSeen, mem.plan = desired, now, nil
	}
	in := daemonInputs{plan: mem.plan}
	if mem.progressConfig == desired && !mem.progressUntil.IsZero() {
		in.progress = rebootFinished
		if now.Before(mem.progressUntil) {
			in.progress = rebootInProgress
		}
	}
	if mem.drainRequest != desiredDrain {
		// Start the drain timeout when the daemon first sees its request
		// (also after a simulator restart).
		mem.drainRequest, mem.drainSince = desiredDrain, now
	}
	drainWaited := now.Sub(mem.drainSince)
	in.drainWaitExpired = drainWaited > d.timing.DaemonDrainTimeout
	progressLeft := mem.progressUntil.Sub(now)
	prepareLeft := mem.targetSeen.Add(d.timing.PrepareUpdate).Sub(now)
	d.mu.Unlock()

	decision := decideDaemon(node, in)
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
		patched := node.DeepCopy()
		for k, v := range decision.patch {
			patched.Annotations[k] = v
		}
		d.writeMCN(ctx, log, patched, decision.mcn...)
	case daemonPlan:
		if prepareLeft > 0 {
			d.queue.AddAfter(name, prepareLeft)
			return nil
		}
		plan, err := planUpdate(ctx, d.mcfg, d.op, current, desired)
		if err != nil {
			return fmt.Errorf("node %s: deciding the update to %s: %w", name, desired, err)
		}
		log.Info("daemon: update prepared", "from", current, "to", desired, "drainRequired", plan.drain,
			"reboot", plan.reboot, "actions", actionTypes(plan.actions), "why", plan.reason)
		updates := []mcnUpdate{mcnPrepared(plan.drain)}
		if !plan.drain {
			updates = append(updates, mcnDrainNotRequired())
		}
		d.writeMCN(ctx, log, node, updates...)
		d.mu.Lock()
		if mem.targetConfig == desired {
			mem.plan = &plan
		}
		d.mu.Unlock()
		d.queue.Add(name)
	case daemonWaitDrain:
		// Wake up when the drain timeout runs out; lastAppliedDrain
		// changes wake the daemon through the informer.
		if left := d.timing.DaemonDrainTimeout - drainWaited; left >= 0 {
			d.queue.AddAfter(name, left+minDelay)
		}
	case daemonWaitUncordon:
	case daemonStartReboot, daemonStartApply:
		duration := d.timing.Reboot
		if decision.phase == daemonStartApply {
			duration = d.timing.ApplyInPlace
		}
		log.Info("daemon: "+decision.message, "duration", duration.String())
		d.writeMCN(ctx, log, node, decision.mcn...)
		d.mu.Lock()
		mem.progressConfig, mem.progressUntil = desired, now.Add(duration)
		d.mu.Unlock()
		d.queue.AddAfter(name, duration)
	case daemonRebooting, daemonApplying:
		d.queue.AddAfter(name, progressLeft)
	}
	return nil
}

// writeMCN writes MachineConfigNode conditions for node. As in the MCO, a
// failure is logged and does not stop the update.
func (d *daemonSet) writeMCN(ctx context.Context, log logr.Logger, node *corev1.Node, updates ...mcnUpdate) {
	if len(updates) == 0 {
		return
	}
	pool := primaryPoolName(node, d.pools)
	if pool == "" {
		return
	}
	if updates[0].parent.state == mcfgv1.MachineConfigNodeUpdated && updates[0].parent.status == metav1.ConditionFalse {
		// An update starts: the node controller has moved the spec's
		// desired config, which the reset's messages name.
		if err := d.mcn.ensureSpec(ctx, node, pool); err != nil {
			log.Error(err, "daemon: cannot write the MachineConfigNode spec")
		}
	}
	if err := d.mcn.apply(ctx, node, pool, updates...); err != nil {
		log.Error(err, "daemon: cannot write MachineConfigNode conditions")
	}
	if updates[0].parent.state == mcfgv1.MachineConfigNodeUpdatePrepared {
		// update() applies the spec right after UpdatePrepared.
		if err := d.mcn.ensureSpec(ctx, node, pool); err != nil {
			log.Error(err, "daemon: cannot write the MachineConfigNode spec")
		}
	}
}

// primaryPoolName is the pool the MCO names in a node's MachineConfigNode
// (helpers.GetPrimaryPoolNameForMCN): the node's pool, a custom pool before
// worker. Empty when the node has none.
func primaryPoolName(node *corev1.Node, lister mcfglisters.MachineConfigPoolLister) string {
	pools, err := lister.List(labels.Everything())
	if err != nil {
		return ""
	}
	members, err := PoolsForNode(node, pools)
	if err != nil || len(members) == 0 {
		return ""
	}
	return members[0].Name
}

func actionTypes(actions []opv1.NodeDisruptionPolicyStatusAction) []string {
	out := make([]string, 0, len(actions))
	for _, a := range actions {
		out = append(out, string(a.Type))
	}
	return out
}
