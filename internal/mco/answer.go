package mco

import (
	"regexp"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Need says whether the machine-config daemon (MCD) drains a node for one update. Not every update
// drains: the MCD decides per update from the difference between the two rendered MachineConfigs
// and the cluster's node disruption policies (openshift/machine-config-operator pkg/daemon/update.go
// calculatePostConfigChangeNodeDisruptionAction, pkg/daemon/drain.go
// isDrainRequiredForNodeDisruptionActions). SSH keys, the pull secret, the kubelet CA, digest-only
// mirrors and whatever a policy maps to None, Reload, Restart or DaemonReload are applied without
// cordon or drain.
type Need int

// The needs.
const (
	// NeedUnknown: nothing has said yet whether the update drains.
	NeedUnknown Need = iota
	// NeedDrain: the update cordons and drains the node.
	NeedDrain
	// NeedNoDrain: the update is applied without cordon or drain.
	NeedNoDrain
)

var needNames = [...]string{"drain-unknown", "drain", "no-drain"}

// String is the need as check prints it.
func (n Need) String() string {
	if n < 0 || int(n) >= len(needNames) {
		return needNames[NeedUnknown]
	}
	return needNames[n]
}

// Update names one update of a node: from its current rendered config to the one it is to run.
// Every node of a pool that goes from the same config to the same config gets the same drain
// decision from the MCD (the decision reads only the two configs and the cluster's policies), so
// one node's answer stands for all of them.
type Update struct {
	From, To string
}

// Answer is what is known of whether an update drains, and where that comes from.
type Answer struct {
	Need Need
	// Source says who answered: "MachineConfigNode <node>", "node <node>'s annotations", or
	// "rendered MachineConfigs"; empty when nothing did.
	Source string
	// Reason is the answer's own words, for check and Events ("Drain Required: false", "SSH keys
	// only"); for NeedUnknown, why nothing is known.
	Reason string
}

// String is the answer as check and Events print it: who said it, and how.
func (a Answer) String() string {
	if a.Source == "" {
		return a.Reason
	}
	return a.Source + ": " + a.Reason
}

// Known reports whether the answer says drain or no drain.
func (a Answer) Known() bool { return a.Need != NeedUnknown }

// The MCD's words on a MachineConfigNode (pkg/daemon/update.go, the update() step after the
// configs were found reconcilable: "Update Compatible. Post Cfg Actions: %v Drain Required: %t" on
// UpdatePrepared, and "Node Drain Not required for this update." on Drained when it skips the drain).
var drainRequired = regexp.MustCompile(`^Update Compatible\. .*Drain Required: (true|false)$`)

const drainNotRequired = "Node Drain Not required for this update."

// NodeAnswer reads the MCD's own answer for the update the node is targeted for (Targeted), from
// its MachineConfigNode (nil when there is none) and its annotations:
//
//   - the MachineConfigNode, within about a second of desiredConfig: status.configVersion.desired is
//     the node's desiredConfig (the MCD sets it only once the update is found compatible, see
//     pkg/upgrademonitor/upgrade_monitor.go) and UpdatePrepared is True with "Drain Required: …",
//     or Drained says "Node Drain Not required for this update.". A finished update resets every
//     condition to False with an "Action during update to …" prefix, so an older answer never
//     matches.
//   - the annotations: desiredDrain=drain-<desired> (or a drain of <desired> already applied) is a
//     drain; desiredDrain=uncordon-<desired> while the controller's last applied drain is neither
//     drain-<desired> nor uncordon-<desired> is the MCD finishing the update without having drained
//     (pkg/daemon/daemon.go updateConfigAndState requests the uncordon whether or not it drained).
//
// A node that is not targeted gets NeedUnknown.
func NodeAnswer(node *corev1.Node, mcn *mcfgv1.MachineConfigNode) Answer {
	s := ReadNode(node)
	if !s.Targeted() {
		return Answer{Reason: "the node is not being updated"}
	}
	if a := mcnAnswer(mcn, s.DesiredConfig); a.Known() {
		return a
	}
	drain, uncordon := drainPrefix+s.DesiredConfig, uncordonPrefix+s.DesiredConfig
	source := "node " + node.Name + "'s annotations"
	switch {
	case s.DesiredDrain == drain || s.LastAppliedDrain == drain:
		return Answer{Need: NeedDrain, Source: source, Reason: "desiredDrain " + drain}
	case s.DesiredDrain == uncordon && s.LastAppliedDrain != uncordon:
		return Answer{Need: NeedNoDrain, Source: source, Reason: "desiredDrain " + uncordon + " without a drain"}
	}
	return Answer{Reason: "the machine-config daemon has not answered yet"}
}

// mcnAnswer is the MachineConfigNode's answer for the update to desired.
func mcnAnswer(mcn *mcfgv1.MachineConfigNode, desired string) Answer {
	if mcn == nil || mcn.Status.ConfigVersion == nil || mcn.Status.ConfigVersion.Desired != desired {
		return Answer{}
	}
	source := "MachineConfigNode " + mcn.Name
	for _, c := range mcn.Status.Conditions {
		switch {
		case c.Type == string(mcfgv1.MachineConfigNodeUpdatePrepared) && c.Status == metav1.ConditionTrue:
			if m := drainRequired.FindStringSubmatch(c.Message); m != nil {
				need := NeedDrain
				if m[1] == "false" {
					need = NeedNoDrain
				}
				return Answer{Need: need, Source: source, Reason: "Drain Required: " + m[1]}
			}
		case c.Type == string(mcfgv1.MachineConfigNodeUpdateDrained) && c.Message == drainNotRequired:
			return Answer{Need: NeedNoDrain, Source: source, Reason: drainNotRequired}
		}
	}
	return Answer{}
}

// UpdateOf is the update the node is on or will go through next: from its current config to its
// desired config when targeted, else to the pool's target (nil pool: none).
func UpdateOf(node *corev1.Node, pool *mcfgv1.MachineConfigPool) (Update, bool) {
	s := ReadNode(node)
	switch {
	case s.Targeted():
		return Update{From: s.CurrentConfig, To: s.DesiredConfig}, true
	case pool != nil && s.CurrentConfig != "" && pool.Spec.Configuration.Name != "" && s.CurrentConfig != pool.Spec.Configuration.Name:
		return Update{From: s.CurrentConfig, To: pool.Spec.Configuration.Name}, true
	}
	return Update{}, false
}

// Answers collects the MCD's answers of every targeted node by update, so that the answer of the
// first node of a rollout stands for the next ones (the look-ahead, check, prepare). A drain answer
// wins over a no-drain one for the same update: that cannot happen with one MCD decision, and a
// surge too many is the safe side.
type Answers map[Update]Answer

// CollectAnswers reads the answers of the targeted nodes; mcn returns a node's MachineConfigNode or
// nil.
func CollectAnswers(nodes []*corev1.Node, mcn func(node string) *mcfgv1.MachineConfigNode) Answers {
	out := Answers{}
	for _, n := range nodes {
		s := ReadNode(n)
		if !s.Targeted() {
			continue
		}
		a := NodeAnswer(n, mcn(n.Name))
		if !a.Known() {
			continue
		}
		u := Update{From: s.CurrentConfig, To: s.DesiredConfig}
		if prev, ok := out[u]; !ok || prev.Need == NeedNoDrain {
			out[u] = a
		}
	}
	return out
}

// For is the answer for u, NeedUnknown when no node has answered it.
func (as Answers) For(u Update) Answer {
	if a, ok := as[u]; ok {
		return a
	}
	return Answer{Reason: "no node of the update has been answered by its machine-config daemon yet"}
}

// PoolAnswer is whether the pool's pending update drains the nodes still to update (nodes, e.g.
// Plan.Order), from each node's answer (need): one node known to drain makes the update drain; it
// is no-drain only when every node is known not to drain (a node on another current config may
// differ); otherwise unknown.
func PoolAnswer(pool *mcfgv1.MachineConfigPool, nodes []*corev1.Node, need func(*corev1.Node, *mcfgv1.MachineConfigPool) Answer) Answer {
	var noDrain, unknown *Answer
	for _, n := range nodes {
		ans := need(n, pool)
		switch ans.Need {
		case NeedDrain:
			return ans
		case NeedNoDrain:
			noDrain = &ans
		default:
			unknown = &ans
		}
	}
	switch {
	case unknown != nil:
		return *unknown
	case noDrain != nil:
		return *noDrain
	}
	return Answer{Reason: "no node to update"}
}
