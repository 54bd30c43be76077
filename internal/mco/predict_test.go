package mco

import (
	"slices"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// predictNode builds a pool member: cfg is "old" (runs rendered-a, not targeted), "targeted" (desired
// rendered-b, daemon not started), "working", "done" (runs rendered-b) or "degraded" (failing
// rendered-b).
func predictNode(name, zone string, age int, cfg string, mods ...func(*corev1.Node)) *corev1.Node {
	a := map[string]string{CurrentConfigAnnotation: "rendered-a", DesiredConfigAnnotation: "rendered-a", StateAnnotation: StateDone}
	switch cfg {
	case "targeted":
		a[DesiredConfigAnnotation] = "rendered-b"
	case "working":
		a[DesiredConfigAnnotation], a[StateAnnotation] = "rendered-b", "Working"
	case "done":
		a[CurrentConfigAnnotation], a[DesiredConfigAnnotation] = "rendered-b", "rendered-b"
	case "degraded":
		a[DesiredConfigAnnotation], a[StateAnnotation] = "rendered-b", stateDegraded
	}
	l := roles("worker")
	if zone != "" {
		l[ZoneLabel] = zone
	}
	n := node(name, l, a)
	n.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(age) * -time.Hour))
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	for _, m := range mods {
		m(n)
	}
	return n
}

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }
func notReady(n *corev1.Node) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
}

func names(nodes []*corev1.Node) []string {
	out := []string{}
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

// The node controller's choice of the next nodes decides which models look-ahead surges and which
// node `check` reports first: a wrong order surges the wrong models.
func TestPredictTargets(t *testing.T) {
	maxU := func(v intstr.IntOrString) *intstr.IntOrString { return &v }
	tests := []struct {
		name                                          string
		nodes                                         []*corev1.Node
		maxUnavail                                    *intstr.IntOrString
		paused                                        bool
		wantUpdating, wantNow, wantLater, wantSkipped []string
		wantMax                                       int
	}{
		{
			name: "nothing updating: the oldest node is targeted now, the rest follow oldest first",
			nodes: []*corev1.Node{
				predictNode("w1", "", 1, "old"), predictNode("w2", "", 3, "old"), predictNode("w3", "", 2, "old"),
			},
			wantNow: []string{"w2"}, wantLater: []string{"w3", "w1"}, wantMax: 1,
		},
		{
			name: "one node updating takes the only slot: nothing now, the rest later",
			nodes: []*corev1.Node{
				predictNode("w1", "", 3, "working", cordoned), predictNode("w2", "", 2, "old"), predictNode("w3", "", 1, "old"),
			},
			wantUpdating: []string{"w1"}, wantLater: []string{"w2", "w3"}, wantMax: 1,
		},
		{
			name: "zones first in lexical order, nodes without a zone last, each by age",
			nodes: []*corev1.Node{
				predictNode("a-young", "zone-a", 1, "old"), predictNode("none-old", "", 9, "old"),
				predictNode("b-old", "zone-b", 8, "old"), predictNode("a-old", "zone-a", 5, "old"),
			},
			wantNow: []string{"a-old"}, wantLater: []string{"a-young", "b-old", "none-old"}, wantMax: 1,
		},
		{
			name: "maxUnavailable 2 with one updating: one more now",
			nodes: []*corev1.Node{
				predictNode("w1", "", 4, "targeted"), predictNode("w2", "", 3, "old"), predictNode("w3", "", 2, "old"), predictNode("w4", "", 1, "old"),
			},
			maxUnavail:   maxU(intstr.FromInt32(2)),
			wantUpdating: []string{"w1"}, wantNow: []string{"w2"}, wantLater: []string{"w3", "w4"}, wantMax: 2,
		},
		{
			name: "maxUnavailable 50% of four nodes, none updating: two now",
			nodes: []*corev1.Node{
				predictNode("w1", "", 4, "old"), predictNode("w2", "", 3, "old"), predictNode("w3", "", 2, "old"), predictNode("w4", "", 1, "old"),
			},
			maxUnavail: maxU(intstr.FromString("50%")),
			wantNow:    []string{"w1", "w2"}, wantLater: []string{"w3", "w4"}, wantMax: 2,
		},
		{
			name: "maxUnavailable 10% of four rounds down to 0 and is raised to 1",
			nodes: []*corev1.Node{
				predictNode("w1", "", 2, "old"), predictNode("w2", "", 1, "old"),
			},
			maxUnavail: maxU(intstr.FromString("10%")),
			wantNow:    []string{"w1"}, wantLater: []string{"w2"}, wantMax: 1,
		},
		{
			name: "a node cordoned by someone else is skipped and takes a slot: nothing now",
			nodes: []*corev1.Node{
				predictNode("w1", "", 3, "old", cordoned), predictNode("w2", "", 2, "old"), predictNode("w3", "", 1, "old"),
			},
			wantLater: []string{"w2", "w3"}, wantSkipped: []string{"w1"}, wantMax: 1,
		},
		{
			name: "a NotReady node is skipped; with room for two the next candidate is targeted",
			nodes: []*corev1.Node{
				predictNode("w1", "", 3, "old", notReady), predictNode("w2", "", 2, "old"), predictNode("w3", "", 1, "old"),
			},
			maxUnavail: maxU(intstr.FromInt32(2)),
			wantNow:    []string{"w2"}, wantLater: []string{"w3"}, wantSkipped: []string{"w1"}, wantMax: 2,
		},
		{
			name: "a node failing the target counts against the room",
			nodes: []*corev1.Node{
				predictNode("w1", "", 3, "degraded"), predictNode("w2", "", 2, "old"), predictNode("w3", "", 1, "old"),
			},
			wantLater: []string{"w2", "w3"}, wantSkipped: []string{"w1"}, wantMax: 1,
		},
		{
			name: "updated nodes are not in the plan",
			nodes: []*corev1.Node{
				predictNode("w1", "", 3, "done"), predictNode("w2", "", 2, "old"),
			},
			wantNow: []string{"w2"}, wantMax: 1,
		},
		{
			name: "a paused pool targets nothing new",
			nodes: []*corev1.Node{
				predictNode("w1", "", 3, "working"), predictNode("w2", "", 2, "old"),
			},
			paused:       true,
			wantUpdating: []string{"w1"}, wantSkipped: []string{"w2"}, wantMax: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := rollout(false)
			p.Spec.MaxUnavailable = tt.maxUnavail
			p.Spec.Paused = tt.paused
			plan := PredictTargets(p, tt.nodes)
			check := func(what string, got []*corev1.Node, want []string) {
				if want == nil {
					want = []string{}
				}
				if !slices.Equal(names(got), want) {
					t.Errorf("%s = %v, want %v", what, names(got), want)
				}
			}
			check("Updating", plan.Updating, tt.wantUpdating)
			check("Now", plan.Now, tt.wantNow)
			check("Later", plan.Later, tt.wantLater)
			check("Skipped", plan.Skipped, tt.wantSkipped)
			if plan.MaxUnavailable != tt.wantMax {
				t.Errorf("MaxUnavailable = %d, want %d", plan.MaxUnavailable, tt.wantMax)
			}
			order := append(append(append(append([]string{}, tt.wantUpdating...), tt.wantNow...), tt.wantLater...), tt.wantSkipped...)
			if !slices.Equal(names(plan.Order()), order) {
				t.Errorf("Order() = %v, want %v", names(plan.Order()), order)
			}
		})
	}
}

func TestPlanNext(t *testing.T) {
	nodes := []*corev1.Node{
		predictNode("w1", "", 3, "old"), predictNode("w2", "", 2, "old"), predictNode("w3", "", 1, "old"),
	}
	plan := PredictTargets(rollout(false), nodes)
	if got := names(plan.Next(2)); !slices.Equal(got, []string{"w1", "w2"}) {
		t.Errorf("Next(2) = %v, want [w1 w2]", got)
	}
	if got := names(plan.Next(10)); !slices.Equal(got, []string{"w1", "w2", "w3"}) {
		t.Errorf("Next(10) = %v, want all three", got)
	}
	if got := plan.Next(0); len(got) != 0 {
		t.Errorf("Next(0) = %v, want none", names(got))
	}
}

func TestNodesInPoolAndPoolsByNode(t *testing.T) {
	worker := pool(WorkerPool, roles("worker"))
	gpu := pool("gpu", roles("gpu"))
	w := node("w", roles("worker"), nil)
	g := node("g", roles("worker", "gpu"), nil)
	none := node("x", nil, nil)
	pools := []*mcfgv1.MachineConfigPool{worker, gpu}
	nodes := []*corev1.Node{w, g, none}
	if got := names(NodesInPool(gpu, pools, nodes)); !slices.Equal(got, []string{"g"}) {
		t.Errorf("NodesInPool(gpu) = %v, want [g]", got)
	}
	if got := names(NodesInPool(worker, pools, nodes)); !slices.Equal(got, []string{"w"}) {
		t.Errorf("NodesInPool(worker) = %v, want [w] (the custom pool wins for g)", got)
	}
	by := PoolsByNode(pools, nodes)
	if by["w"] != worker || by["g"] != gpu || by["x"] != nil || len(by) != 2 {
		t.Errorf("PoolsByNode = %v", by)
	}
}
