package guardian

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// groupPod is a Ready pod of group 0 of the LeaderWorkerSet "big" on node, requesting 8 GPUs, whose
// controller is the StatefulSet ss.
func groupPod(name, node, ss string) *podinfo.Pod {
	return podinfo.From(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "models", UID: types.UID(name),
			Labels:          map[string]string{workload.LWSSetNameLabel: "big", workload.LWSGroupIndexLabel: "0", workload.LWSGroupKeyLabel: "k0"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: ss, UID: types.UID(ss), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{gpu: resource.MustParse("8")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	})
}

// groupCluster is four 8-GPU nodes; one LeaderWorkerSet of one group of two pods (leader on w1,
// worker on w2) under a PDB minAvailable 2, and the extra pods given.
type groupCluster struct {
	leader, worker *podinfo.Pod
	owner          Owner
	pdb            *policyv1.PodDisruptionBudget
	ledger         *Ledger
	ns             *corev1.Namespace
}

func newGroupCluster(extra ...*podinfo.Pod) *groupCluster {
	c := &groupCluster{leader: groupPod("big-0", "w1", "big"), worker: groupPod("big-0-1", "w2", "big-0"),
		ns: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "models"}}}
	set := workload.Ref{Kind: workload.KindLeaderWorkerSet, Namespace: "models", Name: "big", UID: "lws-uid"}
	c.owner = Owner{
		Target: &workload.Target{Ref: set, PodOwner: set},
		Object: &workload.Object{Ref: set, Meta: &metav1.ObjectMeta{Name: "big", ResourceVersion: "3"}, Content: map[string]any{"spec": map[string]any{"replicas": int64(1)}}},
		PodOwner: &workload.PodOwnerState{UID: "lws-uid", Selector: labels.SelectorFromSet(labels.Set{workload.LWSSetNameLabel: "big"}),
			Replicas: 1, StatusReplicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, GroupSize: 2},
	}
	c.pdb = &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "models"},
		Spec:   policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2))},
		Status: policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2}}
	pods := append([]*podinfo.Pod{c.leader, c.worker}, extra...)
	var cands []capacity.Candidate
	for _, name := range []string{"w1", "w2", "w3", "w4"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), gpu: resource.MustParse("8")}}}
		var on []*podinfo.Pod
		for _, p := range pods {
			if p.Spec.NodeName == name {
				on = append(on, p)
			}
		}
		cands = append(cands, capacity.Candidate{Node: n, Pods: on})
	}
	c.ledger = NewLedger(capacity.New(cands, capacity.Standard(nil)...), nil)
	return c
}

func (c *groupCluster) stall(p *podinfo.Pod) Stall {
	st := Stall{Blocked: blocking.Blocked{Pod: p, PDB: c.pdb}, Namespace: c.ns, Owner: c.owner}
	st.Group = GroupOf(c.owner, p, []*podinfo.Pod{c.leader, c.worker})
	return st
}

func (c *groupCluster) wave(stalls ...Stall) Wave {
	return Wave{Node: "w1", Drain: NodeDrain{Trigger: TriggerMCODrain, Drain: "rendered-2"}, PoolSelected: true, Stalls: stalls, Ledger: c.ledger}
}

// A LeaderWorkerSet of one group is surged by one group, through spec.replicas, only when a whole
// spare group fits; the group is booked so that no other stall counts on its nodes.
func TestDecideStallsGroupFits(t *testing.T) {
	c := newGroupCluster()
	d := DecideStalls(StallConfig{}, c.wave(c.stall(c.leader)))[0]
	if d.Outcome != OutcomeSurge || d.Delta != 1 || len(d.Fields) != 1 || d.Fields[0].Path != "/spec/replicas" || d.Fields[0].Set != 2 {
		t.Fatalf("decision = %v %s (%s), delta %d, fields %+v; want a surge of spec.replicas 1 -> 2", d.Outcome, d.Reason, d.Detail, d.Delta, d.Fields)
	}
	if n := len(c.ledger.Booked()); n != 2 {
		t.Errorf("booked %d replacement pods, want the group's 2", n)
	}
	if placed, _ := c.ledger.Fit(c.leader, 1); placed != 0 {
		t.Error("an 8-GPU pod still fits after the group was booked: the group's nodes were not taken")
	}
}

// With one spare node, no half group is started: the stall waits for capacity and says what a whole
// group misses.
func TestDecideStallsGroupNoCapacity(t *testing.T) {
	c := newGroupCluster(groupPodElsewhere("other", "w4"))
	d := DecideStalls(StallConfig{}, c.wave(c.stall(c.leader)))[0]
	if d.Outcome != OutcomeDefer || d.Reason != StallNoCapacity {
		t.Fatalf("decision = %v %s (%s), want deferred NoCapacity", d.Outcome, d.Reason, d.Detail)
	}
	if !strings.Contains(d.Detail, "1 of 1 group(s) of 2 pods") || !strings.Contains(d.Detail, "missing 1 node with 8 nvidia.com/gpu") {
		t.Errorf("detail = %q, want the group and the missing node named", d.Detail)
	}
	if q := d.Missing[gpu]; q.Value() != 8 {
		t.Errorf("missing = %v, want 8 nvidia.com/gpu", d.Missing)
	}
	if n := len(c.ledger.Booked()); n != 0 {
		t.Errorf("booked %d pods for a stall that waits", n)
	}
}

// The leader and a worker of one group blocked in one wave are one stall: one group is surged, not two.
func TestDecideStallsOneGroupPerSet(t *testing.T) {
	c := newGroupCluster()
	ds := DecideStalls(StallConfig{}, c.wave(c.stall(c.leader), c.stall(c.worker)))
	if ds[0].Outcome != OutcomeSurge || ds[1].SameAs != 0 {
		t.Fatalf("decisions = %v/%d, %v/%d; want one surge and the worker's the same", ds[0].Outcome, ds[0].SameAs, ds[1].Outcome, ds[1].SameAs)
	}
	if n := len(c.ledger.Booked()); n != 2 {
		t.Errorf("booked %d pods, want one group's 2", n)
	}
}

// groupPodElsewhere is an unrelated 8-GPU pod on node.
func groupPodElsewhere(name, node string) *podinfo.Pod {
	return podinfo.From(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "other", UID: types.UID(name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{gpu: resource.MustParse("8")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	})
}

// The budget counts pods, and each added group adds all of its pods: a PDB minAvailable 3 over a
// group of two needs one more group, not two.
func TestDecideStallsGroupDeltaInGroups(t *testing.T) {
	c := newGroupCluster()
	c.pdb.Spec.MinAvailable = ptr.To(intstr.FromInt32(3))
	c.pdb.Status.DesiredHealthy = 3
	d := DecideStalls(StallConfig{MaxSurgeReplicas: 2}, c.wave(c.stall(c.leader)))[0]
	if d.Outcome != OutcomeSurge || d.Delta != 1 || d.Fields[0].Set != 2 {
		t.Fatalf("decision = %v %s (%s), delta %d; want one group added", d.Outcome, d.Reason, d.Detail, d.Delta)
	}
	if n := len(c.ledger.Booked()); n != 2 {
		t.Errorf("booked %d pods, want one group's 2", n)
	}
}

// Preparing a pool counts groups as the stall decision does: with one spare node no half group is
// prepared, and the reason names what the group misses.
func TestDecidePrepareGroups(t *testing.T) {
	for _, tt := range []struct {
		name  string
		extra []*podinfo.Pod
		want  Outcome
	}{
		{name: "two spare nodes: one group prepared", want: OutcomeSurge},
		{name: "one spare node: nothing prepared", extra: []*podinfo.Pod{groupPodElsewhere("other", "w4")}, want: OutcomeDefer},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newGroupCluster(tt.extra...)
			p := Prepare{Config: "rendered-2", PoolSelected: true, Ledger: c.ledger,
				Nodes: []PrepareNode{{Node: "w1", Stalls: []Stall{c.stall(c.leader)}}}}
			d := DecidePrepare(StallConfig{}, p)[0].Decisions[0]
			if d.Outcome != tt.want {
				t.Fatalf("decision = %v %s (%s), want %v", d.Outcome, d.Reason, d.Detail, tt.want)
			}
			if tt.want == OutcomeDefer && !strings.Contains(d.Detail, "missing 1 node with 8 nvidia.com/gpu") {
				t.Errorf("detail = %q, want the missing node named", d.Detail)
			}
			if booked := len(c.ledger.Booked()); (tt.want == OutcomeSurge) != (booked == 2) || (tt.want != OutcomeSurge && booked != 0) {
				t.Errorf("booked %d pods", booked)
			}
		})
	}
}
