package mco

import (
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// answerNode is a node of the update rendered-a → rendered-b at some step of the daemon's sequence.
func answerNode(name, desiredDrain, lastApplied string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		CurrentConfigAnnotation: "rendered-a", DesiredConfigAnnotation: "rendered-b", StateAnnotation: "Working",
		DesiredDrainAnnotation: desiredDrain, LastAppliedDrainAnnotation: lastApplied,
	}}}
}

// machineConfigNode is the node's MachineConfigNode with status.configVersion.desired and the
// given conditions, as the daemon's upgrade monitor writes them.
func machineConfigNode(name, desired string, conds ...metav1.Condition) *mcfgv1.MachineConfigNode {
	return &mcfgv1.MachineConfigNode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: mcfgv1.MachineConfigNodeStatus{
			ConfigVersion: &mcfgv1.MachineConfigNodeStatusMachineConfigVersion{Current: "rendered-a", Desired: desired},
			Conditions:    conds,
		},
	}
}

func prepared(status metav1.ConditionStatus, msg string) metav1.Condition {
	return metav1.Condition{Type: string(mcfgv1.MachineConfigNodeUpdatePrepared), Status: status, Reason: "UpdatePrepared", Message: msg}
}

// The daemon's answer decides whether a targeted node is surged before its drain: a wrong
// "no-drain" leaves the drain to stall, a wrong "drain" raises a GPU model for nothing.
func TestNodeAnswer(t *testing.T) {
	const (
		noDrain  = "Update Compatible. Post Cfg Actions: [] Drain Required: false"
		drain    = "Update Compatible. Post Cfg Actions: [] Drain Required: true"
		notReq   = "Node Drain Not required for this update."
		fresh    = "uncordon-rendered-a"
		drainB   = "drain-rendered-b"
		uncordon = "uncordon-rendered-b"
	)
	tests := []struct {
		name string
		node *corev1.Node
		mcn  *mcfgv1.MachineConfigNode
		want Need
	}{
		{"targeted, nothing said yet", answerNode("n", fresh, fresh), nil, NeedUnknown},
		{"MachineConfigNode: Drain Required false", answerNode("n", fresh, fresh),
			machineConfigNode("n", "rendered-b", prepared(metav1.ConditionTrue, noDrain)), NeedNoDrain},
		{"MachineConfigNode: Drain Required true", answerNode("n", fresh, fresh),
			machineConfigNode("n", "rendered-b", prepared(metav1.ConditionTrue, drain)), NeedDrain},
		{"MachineConfigNode: Drained says not required", answerNode("n", fresh, fresh),
			machineConfigNode("n", "rendered-b", metav1.Condition{Type: string(mcfgv1.MachineConfigNodeUpdateDrained), Status: metav1.ConditionFalse, Message: notReq}), NeedNoDrain},
		// The answer of the previous update: reset to False with a prefix when it finished, and its
		// configVersion names the older config.
		{"MachineConfigNode: an earlier update's answer", answerNode("n", fresh, fresh),
			machineConfigNode("n", "rendered-a", prepared(metav1.ConditionTrue, noDrain)), NeedUnknown},
		{"MachineConfigNode: reset after the earlier update", answerNode("n", fresh, fresh),
			machineConfigNode("n", "rendered-b", prepared(metav1.ConditionFalse, "Action during update to rendered-b: "+noDrain)), NeedUnknown},
		{"MachineConfigNode: update incompatible", answerNode("n", fresh, fresh),
			machineConfigNode("n", "not-yet-set", prepared(metav1.ConditionUnknown, "Update Failed compatibility validation.")), NeedUnknown},
		{"annotations: drain requested", answerNode("n", drainB, fresh), nil, NeedDrain},
		{"annotations: drained, rebooting", answerNode("n", uncordon, drainB), nil, NeedDrain},
		{"annotations: uncordon without a drain", answerNode("n", uncordon, fresh), nil, NeedNoDrain},
		// Both read uncordon-rendered-b: the drained node after its uncordon looks the same as the
		// undrained one; nothing is claimed.
		{"annotations: uncordon applied", answerNode("n", uncordon, uncordon), nil, NeedUnknown},
		{"the drain request wins over a stale MachineConfigNode", answerNode("n", drainB, fresh),
			machineConfigNode("n", "rendered-a", prepared(metav1.ConditionTrue, noDrain)), NeedDrain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NodeAnswer(tt.node, tt.mcn); got.Need != tt.want {
				t.Errorf("NodeAnswer() = %+v, want %v", got, tt.want)
			}
		})
	}
	done := answerNode("n", fresh, fresh)
	done.Annotations[DesiredConfigAnnotation] = "rendered-a"
	if got := NodeAnswer(done, machineConfigNode("n", "rendered-a", prepared(metav1.ConditionTrue, drain))); got.Known() {
		t.Errorf("a node not targeted: NodeAnswer() = %+v, want unknown", got)
	}
}

// The first node's answer stands for every node of the same update, and only for those: the
// look-ahead surges the next node on it.
func TestCollectAnswers(t *testing.T) {
	pool := &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: "worker"}}
	pool.Spec.Configuration.Name = "rendered-b"
	first := answerNode("first", "uncordon-rendered-a", "uncordon-rendered-a")
	next := answerNode("next", "uncordon-rendered-a", "uncordon-rendered-a")
	next.Annotations[DesiredConfigAnnotation] = "rendered-a"
	other := answerNode("other", "uncordon-rendered-z", "uncordon-rendered-z")
	other.Annotations[CurrentConfigAnnotation], other.Annotations[DesiredConfigAnnotation] = "rendered-z", "rendered-z"
	mcns := map[string]*mcfgv1.MachineConfigNode{
		"first": machineConfigNode("first", "rendered-b", prepared(metav1.ConditionTrue, "Update Compatible. Post Cfg Actions: [] Drain Required: false")),
	}
	answers := CollectAnswers([]*corev1.Node{first, next, other}, func(n string) *mcfgv1.MachineConfigNode { return mcns[n] })
	u, ok := UpdateOf(next, pool)
	if !ok || u != (Update{From: "rendered-a", To: "rendered-b"}) {
		t.Fatalf("UpdateOf(next) = %+v, %v", u, ok)
	}
	if got := answers.For(u); got.Need != NeedNoDrain || got.Source != "MachineConfigNode first" {
		t.Errorf("answer for the next node = %+v, want first's no-drain", got)
	}
	u, _ = UpdateOf(other, pool)
	if got := answers.For(u); got.Known() {
		t.Errorf("answer for a node on another config = %+v, want unknown", got)
	}
	// A drain answer for the same update wins.
	draining := answerNode("draining", "drain-rendered-b", "uncordon-rendered-a")
	answers = CollectAnswers([]*corev1.Node{first, draining}, func(n string) *mcfgv1.MachineConfigNode { return mcns[n] })
	if got := answers.For(Update{From: "rendered-a", To: "rendered-b"}); got.Need != NeedDrain {
		t.Errorf("answers disagreeing = %+v, want drain", got)
	}
}
