package mcosim

import (
	"strings"
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func mcnCond(conds []metav1.Condition, t mcfgv1.StateProgress) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == string(t) {
			return &conds[i]
		}
	}
	return nil
}

// TestNextMCNStatus follows generateAndApplyMachineConfigNodes
// (pkg/upgrademonitor/upgrade_monitor.go) through the start of an update
// that needs no drain and its end.
func TestNextMCNStatus(t *testing.T) {
	now := metav1.Now()
	node := testNode("a", at("rendered-1", "rendered-2", StateWorking))
	mcn := &mcfgv1.MachineConfigNode{}
	mcn.Spec.ConfigVersion.Desired = "rendered-2"

	// First write: every condition, the others False NotYetOccurred.
	status, changed := nextMCNStatus(mcn, node, mcnNeedsUpdate("a"), now)
	if !changed || len(status.Conditions) != len(mcnConditionTypes) {
		t.Fatalf("first write: changed %v, %d conditions", changed, len(status.Conditions))
	}
	if c := mcnCond(status.Conditions, mcfgv1.MachineConfigNodeUpdatePrepared); c.Reason != "NotYetOccurred" || c.Status != metav1.ConditionFalse {
		t.Errorf("UpdatePrepared before the update = %+v", c)
	}
	mcn.Status = status
	mcn.Status.ObservedGeneration = mcn.Generation + 1

	// The same parent again: nothing to write.
	if _, changed := nextMCNStatus(mcn, node, mcnNeedsUpdate("a"), now); changed {
		t.Error("writing the same condition twice")
	}

	for _, u := range []mcnUpdate{mcnPrepared(false), mcnDrainNotRequired()} {
		mcn.Status, _ = nextMCNStatus(mcn, node, u, now)
	}
	prepared := mcnCond(mcn.Status.Conditions, mcfgv1.MachineConfigNodeUpdatePrepared)
	if prepared.Status != metav1.ConditionTrue || prepared.Reason != "UpdatePrepared" ||
		prepared.Message != "Update Compatible. Post Cfg Actions: [] Drain Required: false" {
		t.Errorf("UpdatePrepared = %+v", prepared)
	}
	if mcn.Status.ConfigVersion.Desired != "rendered-2" || mcn.Status.ConfigVersion.Current != "rendered-1" {
		t.Errorf("configVersion = %+v", mcn.Status.ConfigVersion)
	}
	executed := mcnCond(mcn.Status.Conditions, mcfgv1.MachineConfigNodeUpdateExecuted)
	drained := mcnCond(mcn.Status.Conditions, mcfgv1.MachineConfigNodeUpdateDrained)
	if executed.Status != metav1.ConditionUnknown || executed.Reason != "Drained" || executed.Message != mcnDrainNotRequiredMessage ||
		drained.Status != metav1.ConditionFalse || drained.Reason != "UpdateExecutedDrained" || drained.Message != mcnDrainNotRequiredMessage {
		t.Errorf("UpdateExecuted = %+v, Drained = %+v", executed, drained)
	}

	// Updated=True resets every other condition that is not False.
	node.Annotations[CurrentConfigAnnotation] = "rendered-2"
	mcn.Status, _ = nextMCNStatus(mcn, node, mcnUpdated("a"), now)
	prepared = mcnCond(mcn.Status.Conditions, mcfgv1.MachineConfigNodeUpdatePrepared)
	if prepared.Status != metav1.ConditionFalse ||
		prepared.Message != "Action during update to rendered-2: Update Compatible. Post Cfg Actions: [] Drain Required: false" {
		t.Errorf("UpdatePrepared after the update = %+v", prepared)
	}
	if drained := mcnCond(mcn.Status.Conditions, mcfgv1.MachineConfigNodeUpdateDrained); strings.HasPrefix(drained.Message, "Action") {
		t.Errorf("a False condition was reworded: %+v", drained)
	}
	if c := mcnCond(mcn.Status.Conditions, mcfgv1.MachineConfigNodeUpdated); c.Status != metav1.ConditionTrue {
		t.Errorf("Updated = %+v", c)
	}
	if mcn.Status.ConfigVersion.Current != "rendered-2" {
		t.Errorf("current = %q", mcn.Status.ConfigVersion.Current)
	}
}
