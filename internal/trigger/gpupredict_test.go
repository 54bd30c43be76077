package trigger

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func nodeNames(nodes []*corev1.Node) []string {
	out := []string{}
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

func policy(maxParallel int, maxUnavailable string) UpgradePolicy {
	p := DefaultUpgradePolicy()
	p.MaxParallelUpgrades = maxParallel
	if maxUnavailable == "" {
		p.MaxUnavailable = nil
	} else {
		v := intstr.Parse(maxUnavailable)
		p.MaxUnavailable = &v
	}
	return p
}

func TestPredictGPUUpgrades(t *testing.T) {
	tests := []struct {
		name           string
		policy         UpgradePolicy
		nodes          []*corev1.Node
		wantUpgrading  []string
		wantNext       []string
		wantCandidates []string
		wantSlots      int
		wantSkipped    []string
	}{
		{
			name:   "upgrades off",
			policy: UpgradePolicy{},
			nodes:  []*corev1.Node{gpuNode("a", GPUStateUpgradeRequired)},
		},
		{
			name:   "one at a time: nothing moves while a node upgrades",
			policy: policy(1, ""),
			nodes: []*corev1.Node{
				gpuNode("a", GPUStatePodDeletionRequired, cordoned),
				gpuNode("b", GPUStateUpgradeRequired),
				gpuNode("c", GPUStateUpgradeRequired),
			},
			wantUpgrading:  []string{"a"},
			wantCandidates: []string{"b", "c"},
		},
		{
			name:   "one at a time: one of the waiting nodes, the controller's choice",
			policy: policy(1, ""),
			nodes: []*corev1.Node{
				gpuNode("a", GPUStateDone),
				gpuNode("c", GPUStateUpgradeRequired),
				gpuNode("b", GPUStateUpgradeRequired),
			},
			wantCandidates: []string{"b", "c"},
			wantSlots:      1,
		},
		{
			name:   "slots for every waiting node",
			policy: policy(3, ""),
			nodes: []*corev1.Node{
				gpuNode("a", GPUStateCordonRequired),
				gpuNode("b", GPUStateUpgradeRequired),
				gpuNode("c", GPUStateUpgradeRequired),
			},
			wantUpgrading: []string{"a"},
			wantNext:      []string{"b", "c"},
		},
		{
			name:   "no limit on parallel upgrades",
			policy: policy(0, ""),
			nodes: []*corev1.Node{
				gpuNode("a", GPUStateUpgradeRequired),
				gpuNode("b", GPUStateUpgradeRequired),
				gpuNode("c", GPUStateUpgradeRequired, skipped),
			},
			wantNext:    []string{"a", "b"},
			wantSkipped: []string{"c"},
		},
		{
			name: "a failed upgrade holds its slot",
			// upgrade-failed counts as in progress: with one parallel upgrade, nothing else moves.
			policy: policy(1, ""),
			nodes: []*corev1.Node{
				gpuNode("a", GPUStateFailed, cordoned),
				gpuNode("b", GPUStateUpgradeRequired),
			},
			wantUpgrading:  []string{"a"},
			wantCandidates: []string{"b"},
		},
		{
			name: "maxUnavailable counts cordoned and NotReady nodes",
			// 25% of 4 nodes rounds up to 1: a NotReady node leaves no room.
			policy: policy(2, "25%"),
			nodes: []*corev1.Node{
				gpuNode("a", GPUStateDone, notReady),
				gpuNode("b", GPUStateUpgradeRequired),
				gpuNode("c", GPUStateUpgradeRequired),
				gpuNode("d", GPUStateDone),
			},
			wantCandidates: []string{"b", "c"},
		},
		{
			name: "maxUnavailable counts a cordon-required node before its cordon",
			// maxUnavailable 2, one node about to be cordoned: one more slot of the two parallel ones.
			policy: policy(3, "2"),
			nodes: []*corev1.Node{
				gpuNode("a", GPUStateCordonRequired),
				gpuNode("b", GPUStateUpgradeRequired),
				gpuNode("c", GPUStateUpgradeRequired),
				gpuNode("d", GPUStateUpgradeRequired),
				gpuNode("e", GPUStateDone),
			},
			wantUpgrading:  []string{"a"},
			wantCandidates: []string{"b", "c", "d"},
			wantSlots:      1,
		},
		{
			name:   "a node someone cordoned is picked without a slot",
			policy: policy(1, ""),
			nodes: []*corev1.Node{
				gpuNode("a", GPUStateDrainRequired, cordoned),
				gpuNode("b", GPUStateUpgradeRequired, cordoned),
				gpuNode("c", GPUStateUpgradeRequired),
			},
			wantUpgrading:  []string{"a"},
			wantNext:       []string{"b"},
			wantCandidates: []string{"c"},
		},
		{
			name: "requestor-mode states and unknown states stay out of the totals",
			// Total 2 (a, b): one parallel upgrade, b waits; the node in maintenance takes no slot.
			policy: policy(1, ""),
			nodes: []*corev1.Node{
				gpuNode("m", GPUStateNodeMaintenanceRequired),
				gpuNode("x", "from-the-future"),
				gpuNode("a", GPUStateDone),
				gpuNode("b", GPUStateUpgradeRequired),
				gpuNode("plain", ""),
			},
			wantUpgrading: []string{"m"},
			wantNext:      []string{"b"},
		},
	}
	for _, tt := range tests {
		plan := PredictGPUUpgrades(tt.nodes, tt.policy)
		check := func(what string, got []*corev1.Node, want []string) {
			if want == nil {
				want = []string{}
			}
			if g := nodeNames(got); !slices.Equal(g, want) {
				t.Errorf("%s: %s = %v, want %v", tt.name, what, g, want)
			}
		}
		check("Upgrading", plan.Upgrading, tt.wantUpgrading)
		check("Next", plan.Next, tt.wantNext)
		check("Candidates", plan.Candidates, tt.wantCandidates)
		check("Skipped", plan.Skipped, tt.wantSkipped)
		if plan.Slots != tt.wantSlots {
			t.Errorf("%s: Slots = %d, want %d", tt.name, plan.Slots, tt.wantSlots)
		}
	}
}

func TestUpgradePlanPredicted(t *testing.T) {
	plan := UpgradePlan{
		Next:       []*corev1.Node{gpuNode("n1", ""), gpuNode("n2", "")},
		Candidates: []*corev1.Node{gpuNode("c1", ""), gpuNode("c2", "")},
		Slots:      1,
	}
	tests := []struct {
		n    int
		want []string
	}{
		{0, []string{}},
		{1, []string{"n1"}},
		// Not every candidate fits: surging one would bet on the controller's order.
		{3, []string{"n1", "n2"}},
		{4, []string{"n1", "n2", "c1", "c2"}},
		{10, []string{"n1", "n2", "c1", "c2"}},
	}
	for _, tt := range tests {
		if got := nodeNames(plan.Predicted(tt.n)); !slices.Equal(got, tt.want) {
			t.Errorf("Predicted(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}
