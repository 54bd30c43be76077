package mcosim

import (
	"context"
	"fmt"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	mcfgapply "github.com/openshift/client-go/machineconfiguration/applyconfigurations/machineconfiguration/v1"
	mcfgclientset "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metaapply "k8s.io/client-go/applyconfigurations/meta/v1"
)

// mcnFieldManager is the field manager of the MCO's server-side applies of
// MachineConfigNodes (pkg/upgrademonitor/upgrade_monitor.go).
const mcnFieldManager = "machine-config-operator"

// mcnNotYetSet is upgrademonitor.NotYetSet, the desired config of a
// MachineConfigNode before an update was found compatible.
const mcnNotYetSet = "not-yet-set"

// mcnCondition is one condition the MCO writes on a MachineConfigNode
// (upgrademonitor.Condition with its status).
type mcnCondition struct {
	state   mcfgv1.StateProgress
	status  metav1.ConditionStatus
	reason  string
	message string
}

// mcnUpdate is one call of upgrademonitor.GenerateAndApplyMachineConfigNodes:
// a parent condition and an optional child.
type mcnUpdate struct {
	parent mcnCondition
	child  *mcnCondition
}

// mcnConditionTypes are the conditions a MachineConfigNode gets when it is
// first written, without the ImageModeStatusReporting feature gate
// (generateAndApplyMachineConfigNodes' allConditionTypes and
// singletonConditionTypes).
var mcnConditionTypes = []mcfgv1.StateProgress{
	mcfgv1.MachineConfigNodeUpdatePrepared,
	mcfgv1.MachineConfigNodeUpdateExecuted,
	mcfgv1.MachineConfigNodeUpdatePostActionComplete,
	mcfgv1.MachineConfigNodeUpdateComplete,
	mcfgv1.MachineConfigNodeResumed,
	mcfgv1.MachineConfigNodeUpdateDrained,
	mcfgv1.MachineConfigNodeUpdateFilesAndOS,
	mcfgv1.MachineConfigNodeUpdateCordoned,
	mcfgv1.MachineConfigNodeUpdateRebooted,
	mcfgv1.MachineConfigNodeUpdated,
	mcfgv1.MachineConfigNodeUpdateUncordoned,
	mcfgv1.MachineConfigNodeNodeDegraded,
	mcfgv1.MachineConfigNodePinnedImageSetsDegraded,
	mcfgv1.MachineConfigNodePinnedImageSetsProgressing,
}

// nextMCNStatus follows generateAndApplyMachineConfigNodes
// (pkg/upgrademonitor/upgrade_monitor.go, without the feature-gated image
// fields): it returns the status the MCO would apply over old for u on node,
// and false when it would write nothing (the parent condition already has
// this status and message, or nothing changed at all).
//
//   - A MachineConfigNode without conditions gets the parent, the child and
//     every other condition False, reason NotYetOccurred.
//   - Otherwise the child and the parent replace their types. When the parent
//     is Updated, every other condition that is not False becomes False with
//     its message prefixed "Action during update to <spec desired>: "; an
//     Updated=True left over from an earlier update becomes False.
//   - status.configVersion.desired is the node's desiredConfig once the
//     parent is UpdatePrepared=True or any other condition, "not-yet-set"
//     while UpdatePrepared is not True; .current is the node's currentConfig.
func nextMCNStatus(old *mcfgv1.MachineConfigNode, node *corev1.Node, u mcnUpdate, now metav1.Time) (mcfgv1.MachineConfigNodeStatus, bool) {
	status := *old.Status.DeepCopy()
	parent := metav1.Condition{Type: string(u.parent.state), Status: u.parent.status, Reason: u.parent.reason, Message: u.parent.message, LastTransitionTime: now}
	var child *metav1.Condition
	if u.child != nil {
		child = &metav1.Condition{Type: string(u.child.state), Status: u.child.status, Reason: u.child.reason, Message: u.child.message, LastTransitionTime: now}
	}
	reset := u.parent.state == mcfgv1.MachineConfigNodeUpdated

	if status.Conditions == nil {
		status.Conditions = []metav1.Condition{parent}
		if child != nil {
			status.Conditions = append(status.Conditions, *child)
		}
		for _, t := range mcnConditionTypes {
			if t == u.parent.state || (u.child != nil && t == u.child.state) {
				continue
			}
			status.Conditions = append(status.Conditions, metav1.Condition{
				Type:               string(t),
				Status:             metav1.ConditionFalse,
				Reason:             "NotYetOccurred",
				Message:            fmt.Sprintf("This node has not yet entered the %s phase", t),
				LastTransitionTime: now,
			})
		}
	} else {
		foundParent, foundChild := false, false
		for i, c := range status.Conditions {
			switch {
			case c.Type == string(mcfgv1.MachineConfigNodeUpdated) && c.Status == metav1.ConditionTrue && c.Type != parent.Type:
				c = metav1.Condition{
					Type:               string(mcfgv1.MachineConfigNodeUpdated),
					Status:             metav1.ConditionFalse,
					Reason:             string(mcfgv1.MachineConfigNodeUpdated),
					Message:            "This node is not updated, sensed disruption via a manual update.",
					LastTransitionTime: now,
				}
			case child != nil && c.Type == child.Type:
				foundChild = true
				c = *child
			case c.Type == parent.Type:
				foundParent = true
				if c.Status == parent.Status && c.Message == parent.Message {
					return old.Status, false
				}
				c = parent
			case c.Status != metav1.ConditionFalse && reset:
				c.Status = metav1.ConditionFalse
				c.LastTransitionTime = now
				c.Message = fmt.Sprintf("Action during update to %s: %s", old.Spec.ConfigVersion.Desired, c.Message)
			}
			status.Conditions[i] = c
		}
		if !foundChild && child != nil {
			status.Conditions = append(status.Conditions, *child)
		}
		if !foundParent {
			status.Conditions = append(status.Conditions, parent)
		}
	}

	desired := mcnNotYetSet
	nodeDesired := node.Annotations[DesiredConfigAnnotation]
	if (u.parent.state == mcfgv1.MachineConfigNodeUpdatePrepared && u.parent.status == metav1.ConditionTrue) ||
		(u.parent.state != mcfgv1.MachineConfigNodeUpdatePrepared && nodeDesired != "") {
		desired = nodeDesired
	}
	if status.ConfigVersion == nil {
		status.ConfigVersion = &mcfgv1.MachineConfigNodeStatusMachineConfigVersion{}
	}
	status.ConfigVersion.Desired = desired
	if current := node.Annotations[CurrentConfigAnnotation]; current != "" {
		status.ConfigVersion.Current = current
	}
	return status, !mcnStatusUnchanged(old, status)
}

// mcnStatusUnchanged is upgrademonitor's no-diff guard: conditions compared
// by type, status, reason and message; the config versions compared whole.
func mcnStatusUnchanged(old *mcfgv1.MachineConfigNode, status mcfgv1.MachineConfigNodeStatus) bool {
	if old.Generation+1 != old.Status.ObservedGeneration || len(old.Status.Conditions) != len(status.Conditions) {
		return false
	}
	byType := map[string]metav1.Condition{}
	for _, c := range old.Status.Conditions {
		byType[c.Type] = c
	}
	for _, c := range status.Conditions {
		o, ok := byType[c.Type]
		if !ok || o.Status != c.Status || o.Reason != c.Reason || o.Message != c.Message {
			return false
		}
	}
	o, n := old.Status.ConfigVersion, status.ConfigVersion
	return (o == nil) == (n == nil) && (o == nil || *o == *n)
}

// machineConfigNodeWriter writes MachineConfigNodes as the MCD and the
// drain controller do through pkg/upgrademonitor.
type machineConfigNodeWriter struct {
	mcfg mcfgclientset.Interface
}

// ensureSpec follows GenerateAndApplyMachineConfigNodeSpec: it creates the
// node's MachineConfigNode, or server-side applies its spec (node, pool,
// configVersion.desired = the node's desiredConfig) when that changed. On a
// real cluster the operator creates every node's MachineConfigNode and the
// node controller moves spec.configVersion.desired when it targets the node;
// the simulated daemon does both when an update starts.
func (w machineConfigNodeWriter) ensureSpec(ctx context.Context, node *corev1.Node, pool string) error {
	desired := node.Annotations[DesiredConfigAnnotation]
	if desired == "" {
		desired = mcnNotYetSet
	}
	old, err := w.mcfg.MachineconfigurationV1().MachineConfigNodes().Get(ctx, node.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		mcn := &mcfgv1.MachineConfigNode{
			ObjectMeta: metav1.ObjectMeta{
				Name: node.Name,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			},
			Spec: mcfgv1.MachineConfigNodeSpec{
				Node:          mcfgv1.MCOObjectReference{Name: node.Name},
				Pool:          mcfgv1.MCOObjectReference{Name: pool},
				ConfigVersion: mcfgv1.MachineConfigNodeSpecMachineConfigVersion{Desired: desired},
			},
		}
		_, err = w.mcfg.MachineconfigurationV1().MachineConfigNodes().Create(ctx, mcn, metav1.CreateOptions{FieldManager: mcnFieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if old.Spec.Node.Name == node.Name && old.Spec.Pool.Name == pool && old.Spec.ConfigVersion.Desired == desired {
		return nil
	}
	apply := mcfgapply.MachineConfigNode(node.Name).WithSpec(mcfgapply.MachineConfigNodeSpec().
		WithNode(mcfgapply.MCOObjectReference().WithName(node.Name)).
		WithPool(mcfgapply.MCOObjectReference().WithName(pool)).
		WithConfigVersion(mcfgapply.MachineConfigNodeSpecMachineConfigVersion().WithDesired(desired)))
	_, err = w.mcfg.MachineconfigurationV1().MachineConfigNodes().Apply(ctx, apply, metav1.ApplyOptions{FieldManager: mcnFieldManager, Force: true})
	return err
}

// apply writes u to the node's MachineConfigNode with a server-side apply of
// the status (ApplyStatus, field manager machine-config-operator, forced),
// as generateAndApplyMachineConfigNodes does, creating the object first when
// it is missing. (The MCO creates a missing one with a plain Create, which
// drops the status; the simulator applies it right after.)
func (w machineConfigNodeWriter) apply(ctx context.Context, node *corev1.Node, pool string, updates ...mcnUpdate) error {
	for _, u := range updates {
		old, err := w.mcfg.MachineconfigurationV1().MachineConfigNodes().Get(ctx, node.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if err := w.ensureSpec(ctx, node, pool); err != nil {
				return err
			}
			old, err = w.mcfg.MachineconfigurationV1().MachineConfigNodes().Get(ctx, node.Name, metav1.GetOptions{})
		}
		if err != nil {
			return err
		}
		status, changed := nextMCNStatus(old, node, u, metav1.Now())
		if !changed {
			continue
		}
		version := mcfgapply.MachineConfigNodeStatusMachineConfigVersion().WithDesired(status.ConfigVersion.Desired)
		if status.ConfigVersion.Current != "" {
			version = version.WithCurrent(status.ConfigVersion.Current)
		}
		statusApply := mcfgapply.MachineConfigNodeStatus().
			WithObservedGeneration(old.Generation + 1).
			WithConfigVersion(version)
		for _, c := range status.Conditions {
			statusApply = statusApply.WithConditions(metaapply.Condition().
				WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).WithMessage(c.Message).
				WithLastTransitionTime(c.LastTransitionTime))
		}
		_, err = w.mcfg.MachineconfigurationV1().MachineConfigNodes().ApplyStatus(ctx,
			mcfgapply.MachineConfigNode(node.Name).WithStatus(statusApply),
			metav1.ApplyOptions{FieldManager: mcnFieldManager, Force: true})
		if err != nil {
			return fmt.Errorf("applying the status of MachineConfigNode %s: %w", node.Name, err)
		}
	}
	return nil
}

// The conditions the MCD and the drain controller write during an update,
// worded as in pkg/daemon/daemon.go, pkg/daemon/update.go and
// pkg/controller/drain/drain_controller.go.

// mcnChildReason is the MCO's reason of a child condition: the parent's
// state followed by the child's.
func mcnChildReason(parent, child mcfgv1.StateProgress) string { return string(parent) + string(child) }

// mcnNeedsUpdate: the daemon has found desiredConfig != currentConfig
// (daemon.go, before triggerUpdate).
func mcnNeedsUpdate(node string) mcnUpdate {
	return mcnUpdate{parent: mcnCondition{mcfgv1.MachineConfigNodeUpdated, metav1.ConditionFalse,
		string(mcfgv1.MachineConfigNodeUpdated), fmt.Sprintf("Node %s needs an update", node)}}
}

// mcnPrepared: update() found the configs compatible and decided the drain.
// Post Cfg Actions lists the legacy actions, which are empty outside of the
// first boot, so it always reads "[]".
func mcnPrepared(drain bool) mcnUpdate {
	return mcnUpdate{parent: mcnCondition{mcfgv1.MachineConfigNodeUpdatePrepared, metav1.ConditionTrue,
		string(mcfgv1.MachineConfigNodeUpdatePrepared), fmt.Sprintf("Update Compatible. Post Cfg Actions: %v Drain Required: %t", []string(nil), drain)}}
}

// mcnDrainNotRequiredMessage is what update() writes when it skips the drain.
const mcnDrainNotRequiredMessage = "Node Drain Not required for this update."

// mcnDrainNotRequired: update() skips the drain.
func mcnDrainNotRequired() mcnUpdate {
	return mcnUpdate{
		parent: mcnCondition{mcfgv1.MachineConfigNodeUpdateExecuted, metav1.ConditionUnknown,
			string(mcfgv1.MachineConfigNodeUpdateDrained), mcnDrainNotRequiredMessage},
		child: &mcnCondition{mcfgv1.MachineConfigNodeUpdateDrained, metav1.ConditionFalse,
			mcnChildReason(mcfgv1.MachineConfigNodeUpdateExecuted, mcfgv1.MachineConfigNodeUpdateDrained), mcnDrainNotRequiredMessage},
	}
}

// mcnFilesAndOS: update() writes files and the OS (done false: starting,
// done true: finished), without the ImageModeStatusReporting gate.
func mcnFilesAndOS(p updatePlan, done bool) mcnUpdate {
	os, ssh := "not", "not"
	if p.osChange {
		os = ""
	}
	if p.filesChange {
		ssh = ""
	}
	status := metav1.ConditionUnknown
	parentMsg := "Updating the Files and OS on disk as a part of the in progress phase"
	childMsg := fmt.Sprintf("Applying files and new OS config to node. OS will %s need an update. SSH Keys will %s need an update", os, ssh)
	if done {
		status = metav1.ConditionTrue
		parentMsg = "Updated the Files and OS on disk as a part of the in progress phase"
		childMsg = fmt.Sprintf("Applied files and new OS config to node. OS did %s need an update. SSH Keys did %s need an update", os, ssh)
	}
	return mcnUpdate{
		parent: mcnCondition{mcfgv1.MachineConfigNodeUpdateExecuted, status, string(mcfgv1.MachineConfigNodeUpdateFilesAndOS), parentMsg},
		child: &mcnCondition{mcfgv1.MachineConfigNodeUpdateFilesAndOS, status,
			mcnChildReason(mcfgv1.MachineConfigNodeUpdateExecuted, mcfgv1.MachineConfigNodeUpdateFilesAndOS), childMsg},
	}
}

// mcnPostActions: performPostConfigChangeNodeDisruptionAction's conditions
// for the plan's actions (a Reboot announces the reboot; Restart writes
// none; Special reloads crio).
func mcnPostActions(p updatePlan) []mcnUpdate {
	var out []mcnUpdate
	reloaded := func(service string) mcnUpdate {
		return mcnUpdate{parent: mcnCondition{mcfgv1.MachineConfigNodeUpdatePostActionComplete, metav1.ConditionTrue,
			string(mcfgv1.MachineConfigNodeUpdatePostActionComplete), "Node has reloaded service " + service}}
	}
	for _, a := range p.actions {
		switch a.Type {
		case opv1.RebootStatusAction:
			return append(out, mcnUpdate{parent: mcnCondition{mcfgv1.MachineConfigNodeUpdateRebooted, metav1.ConditionUnknown,
				string(mcfgv1.MachineConfigNodeUpdateRebooted), "Upgrade requires a reboot."}})
		case opv1.NoneStatusAction:
			out = append(out, mcnUpdate{parent: mcnCondition{mcfgv1.MachineConfigNodeUpdatePostActionComplete, metav1.ConditionTrue,
				"None", "Changes do not require a reboot"}})
		case opv1.ReloadStatusAction:
			if a.Reload != nil {
				out = append(out, reloaded(string(a.Reload.ServiceName)))
			}
		case opv1.SpecialStatusAction:
			out = append(out, reloaded("crio"))
		case opv1.DaemonReloadStatusAction:
			out = append(out, reloaded("daemon-reload"))
		}
	}
	return out
}

// mcnRebooted: the daemon is back after the reboot.
func mcnRebooted() mcnUpdate {
	return mcnUpdate{parent: mcnCondition{mcfgv1.MachineConfigNodeUpdateRebooted, metav1.ConditionTrue,
		string(mcfgv1.MachineConfigNodeUpdateRebooted), "Node has rebooted"}}
}

// mcnResumed: updateConfigAndState finds the node in its desired config,
// before it requests the uncordon.
func mcnResumed(config string) mcnUpdate {
	return mcnUpdate{parent: mcnCondition{mcfgv1.MachineConfigNodeResumed, metav1.ConditionTrue,
		string(mcfgv1.MachineConfigNodeResumed), fmt.Sprintf("In desired config %s. Resumed normal operations. Applying proper annotations.", config)}}
}

// mcnUpdated: the daemon finds the node up to date after the update.
func mcnUpdated(node string) mcnUpdate {
	return mcnUpdate{parent: mcnCondition{mcfgv1.MachineConfigNodeUpdated, metav1.ConditionTrue,
		string(mcfgv1.MachineConfigNodeUpdated), fmt.Sprintf("Node %s Updated", node)}}
}

// mcnCordoned, mcnDraining, mcnDrainFailed, mcnDrained and mcnUncordoned are
// the drain controller's.
func mcnCordoned() mcnUpdate {
	return mcnUpdate{
		parent: mcnCondition{mcfgv1.MachineConfigNodeUpdateExecuted, metav1.ConditionUnknown,
			string(mcfgv1.MachineConfigNodeUpdateCordoned), "Cordoned Node as part of update executed phase"},
		child: &mcnCondition{mcfgv1.MachineConfigNodeUpdateCordoned, metav1.ConditionTrue,
			mcnChildReason(mcfgv1.MachineConfigNodeUpdateExecuted, mcfgv1.MachineConfigNodeUpdateCordoned),
			"Cordoned node. The node is reporting Unschedulable = true"},
	}
}

func mcnDraining(desired, lastApplied string) mcnUpdate {
	return mcnUpdate{
		parent: mcnCondition{mcfgv1.MachineConfigNodeUpdateExecuted, metav1.ConditionUnknown,
			string(mcfgv1.MachineConfigNodeUpdateDrained), "Draining Node as part of update executed phase"},
		child: &mcnCondition{mcfgv1.MachineConfigNodeUpdateDrained, metav1.ConditionUnknown,
			mcnChildReason(mcfgv1.MachineConfigNodeUpdateExecuted, mcfgv1.MachineConfigNodeUpdateDrained),
			fmt.Sprintf("Draining node. The drain will not be complete until desired drainer %s matches current drainer %s", desired, lastApplied)},
	}
}

func mcnDrainFailed(err error, desired, lastApplied string) mcnUpdate {
	return mcnUpdate{
		parent: mcnCondition{mcfgv1.MachineConfigNodeUpdateExecuted, metav1.ConditionUnknown,
			string(mcfgv1.MachineConfigNodeUpdateDrained), "Node Drain has not succeeded"},
		child: &mcnCondition{mcfgv1.MachineConfigNodeUpdateDrained, metav1.ConditionUnknown,
			mcnChildReason(mcfgv1.MachineConfigNodeUpdateExecuted, mcfgv1.MachineConfigNodeUpdateDrained),
			fmt.Sprintf("Error: Node Drain has not succeeded. Error is: %s The drain will not be complete until desired drainer %s matches current drainer %s", err, desired, lastApplied)},
	}
}

func mcnDrained(desired string) mcnUpdate {
	return mcnUpdate{
		parent: mcnCondition{mcfgv1.MachineConfigNodeUpdateExecuted, metav1.ConditionUnknown,
			string(mcfgv1.MachineConfigNodeUpdateDrained), "Drained Node as part of update executed phase"},
		child: &mcnCondition{mcfgv1.MachineConfigNodeUpdateDrained, metav1.ConditionTrue,
			mcnChildReason(mcfgv1.MachineConfigNodeUpdateExecuted, mcfgv1.MachineConfigNodeUpdateDrained),
			fmt.Sprintf("Drained node. The drain is complete as the desired drainer matches current drainer: %s", desired)},
	}
}

func mcnUncordoned() mcnUpdate {
	return mcnUpdate{
		parent: mcnCondition{mcfgv1.MachineConfigNodeUpdateComplete, metav1.ConditionTrue,
			string(mcfgv1.MachineConfigNodeUpdateUncordoned), "Uncordoned Node as part of completing upgrade phase"},
		child: &mcnCondition{mcfgv1.MachineConfigNodeUpdateUncordoned, metav1.ConditionTrue,
			mcnChildReason(mcfgv1.MachineConfigNodeUpdateComplete, mcfgv1.MachineConfigNodeUpdateUncordoned),
			"UnCordoned node. The node is reporting Unschedulable = false"},
	}
}
