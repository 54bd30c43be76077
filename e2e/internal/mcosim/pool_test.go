package mcosim

import (
	"strings"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// nodeOpt changes a test node.
type nodeOpt func(*corev1.Node)

func testNode(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			Labels:            map[string]string{"node-role.kubernetes.io/worker": ""},
			Annotations:       map[string]string{},
			CreationTimestamp: metav1.NewTime(epoch),
		},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

// at gives the node its MCO annotations: current, desired and state.
func at(current, desired, state string) nodeOpt {
	return func(n *corev1.Node) {
		n.Annotations[CurrentConfigAnnotation] = current
		n.Annotations[DesiredConfigAnnotation] = desired
		n.Annotations[StateAnnotation] = state
	}
}

// done is a node at config with nothing to do.
func done(config string) nodeOpt { return at(config, config, StateDone) }

func zone(z string) nodeOpt { return func(n *corev1.Node) { n.Labels[ZoneLabel] = z } }

func age(minutesAfterEpoch int) nodeOpt {
	return func(n *corev1.Node) {
		n.CreationTimestamp = metav1.NewTime(epoch.Add(time.Duration(minutesAfterEpoch) * time.Minute))
	}
}

func label(k, v string) nodeOpt { return func(n *corev1.Node) { n.Labels[k] = v } }

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

func notReady(n *corev1.Node) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
}

func reason(r string) nodeOpt { return func(n *corev1.Node) { n.Annotations[ReasonAnnotation] = r } }

type poolOpt func(*mcfgv1.MachineConfigPool)

func testPool(name, target string, opts ...poolOpt) *mcfgv1.MachineConfigPool {
	p := &mcfgv1.MachineConfigPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: mcfgv1.MachineConfigPoolSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"node-role.kubernetes.io/" + name: ""}},
		},
	}
	p.Spec.Configuration.Name = target
	for _, o := range opts {
		o(p)
	}
	return p
}

func maxUnavail(v intstr.IntOrString) poolOpt {
	return func(p *mcfgv1.MachineConfigPool) { p.Spec.MaxUnavailable = &v }
}

func paused(p *mcfgv1.MachineConfigPool) { p.Spec.Paused = true }

func selector(s *metav1.LabelSelector) poolOpt {
	return func(p *mcfgv1.MachineConfigPool) { p.Spec.NodeSelector = s }
}

func names(nodes []*corev1.Node) string {
	var s []string
	for _, n := range nodes {
		s = append(s, n.Name)
	}
	return strings.Join(s, ",")
}

func poolNames(pools []*mcfgv1.MachineConfigPool) string {
	var s []string
	for _, p := range pools {
		s = append(s, p.Name)
	}
	return strings.Join(s, ",")
}

func TestPoolsForNode(t *testing.T) {
	master := testPool(MasterPool, "m")
	worker := testPool(WorkerPool, "w")
	infra := testPool("infra", "i")
	gpu := testPool("gpu", "g")
	emptySelector := testPool("empty", "e", selector(&metav1.LabelSelector{}))
	nilSelector := testPool("nil", "n", selector(nil))
	all := []*mcfgv1.MachineConfigPool{master, worker, infra, gpu, emptySelector, nilSelector}

	tests := []struct {
		name    string
		node    *corev1.Node
		want    string
		wantErr bool
	}{
		{name: "worker only", node: testNode("a"), want: "worker"},
		{name: "custom wins over worker, worker second",
			node: testNode("a", label("node-role.kubernetes.io/infra", "")), want: "infra,worker"},
		{name: "master wins over worker",
			node: testNode("a", label("node-role.kubernetes.io/master", "")), want: "master"},
		{name: "master wins over custom",
			node: testNode("a", label("node-role.kubernetes.io/master", ""), label("node-role.kubernetes.io/infra", "")),
			want: "master,worker"},
		{name: "two custom pools is an error",
			node:    testNode("a", label("node-role.kubernetes.io/infra", ""), label("node-role.kubernetes.io/gpu", "")),
			wantErr: true},
		{name: "no matching pool",
			node: func() *corev1.Node { n := testNode("a"); n.Labels = map[string]string{"x": "y"}; return n }(),
			want: ""},
		{name: "windows nodes are never managed",
			node: testNode("a", label(corev1.LabelOSStable, "windows")), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PoolsForNode(tt.node, all)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if poolNames(got) != tt.want {
				t.Errorf("pools = %q, want %q", poolNames(got), tt.want)
			}
		})
	}
}

func TestNodesForPool(t *testing.T) {
	worker := testPool(WorkerPool, "w")
	infra := testPool("infra", "i")
	gpu := testPool("gpu", "g")
	pools := []*mcfgv1.MachineConfigPool{worker, infra, gpu}
	nodes := []*corev1.Node{
		testNode("w2"),
		testNode("w1"),
		testNode("i1", label("node-role.kubernetes.io/infra", "")),
		testNode("ambiguous", label("node-role.kubernetes.io/infra", ""), label("node-role.kubernetes.io/gpu", "")),
	}
	if got := names(NodesForPool(worker, pools, nodes)); got != "w1,w2" {
		t.Errorf("worker members = %q, want w1,w2 (a node in a custom pool is not a worker member)", got)
	}
	if got := names(NodesForPool(infra, pools, nodes)); got != "i1" {
		t.Errorf("infra members = %q, want i1 (ambiguous nodes belong to no pool)", got)
	}
}

func TestNodesToTarget(t *testing.T) {
	const old, next = "rendered-worker-old", "rendered-worker-new"
	tests := []struct {
		name  string
		pool  *mcfgv1.MachineConfigPool
		nodes []*corev1.Node
		want  string
	}{
		{
			name:  "nothing to do when all are at the target",
			pool:  testPool(WorkerPool, next),
			nodes: []*corev1.Node{testNode("a", done(next)), testNode("b", done(next))},
			want:  "",
		},
		{
			name:  "default maxUnavailable is one",
			pool:  testPool(WorkerPool, next),
			nodes: []*corev1.Node{testNode("a", done(old)), testNode("b", done(old)), testNode("c", done(old))},
			want:  "a",
		},
		{
			name: "zone order first, then oldest first; unlabeled nodes last",
			pool: testPool(WorkerPool, next, maxUnavail(intstr.FromInt32(4))),
			nodes: []*corev1.Node{
				testNode("nolabel-old", done(old), age(0)),
				testNode("b-young", done(old), zone("zone-b"), age(5)),
				testNode("b-old", done(old), zone("zone-b"), age(1)),
				testNode("a-young", done(old), zone("zone-a"), age(9)),
				testNode("nolabel-young", done(old), age(3)),
			},
			want: "a-young,b-old,b-young,nolabel-old",
		},
		{
			name: "a node already updating uses up the only slot",
			pool: testPool(WorkerPool, next),
			nodes: []*corev1.Node{
				testNode("a", at(old, next, StateWorking)),
				testNode("b", done(old)),
			},
			want: "",
		},
		{
			name: "a targeted node whose daemon has not started counts as unavailable",
			pool: testPool(WorkerPool, next),
			nodes: []*corev1.Node{
				testNode("a", at(old, next, StateDone)),
				testNode("b", done(old)),
			},
			want: "",
		},
		{
			name:  "a cordoned node counts as unavailable",
			pool:  testPool(WorkerPool, next),
			nodes: []*corev1.Node{testNode("a", done(old), cordoned), testNode("b", done(old))},
			want:  "",
		},
		{
			name:  "a NotReady node counts as unavailable",
			pool:  testPool(WorkerPool, next, maxUnavail(intstr.FromInt32(2))),
			nodes: []*corev1.Node{testNode("a", done(next), notReady), testNode("b", done(old)), testNode("c", done(old))},
			want:  "b",
		},
		{
			name: "a failing node at the target uses up a slot without being unavailable",
			pool: testPool(WorkerPool, next, maxUnavail(intstr.FromInt32(2))),
			nodes: []*corev1.Node{
				testNode("a", at(old, next, StateDegraded)),
				testNode("b", done(old)),
				testNode("c", done(old)),
			},
			want: "b",
		},
		{
			name: "a failing node on an older target can be retargeted",
			pool: testPool(WorkerPool, next),
			nodes: []*corev1.Node{
				testNode("a", at(old, "rendered-worker-older", StateDegraded)),
				testNode("b", done(old)),
			},
			want: "a",
		},
		{
			name: "a percentage rounds down but never below one",
			pool: testPool(WorkerPool, next, maxUnavail(intstr.FromString("10%"))),
			nodes: []*corev1.Node{
				testNode("a", done(old)), testNode("b", done(old)), testNode("c", done(old)),
			},
			want: "a",
		},
		{
			name: "a percentage of a larger pool",
			pool: testPool(WorkerPool, next, maxUnavail(intstr.FromString("50%"))),
			nodes: []*corev1.Node{
				testNode("a", done(old)), testNode("b", done(old)), testNode("c", done(old)), testNode("d", done(old)),
			},
			want: "a,b",
		},
		{
			name:  "a paused pool targets nothing",
			pool:  testPool(WorkerPool, next, paused),
			nodes: []*corev1.Node{testNode("a", done(old))},
			want:  "",
		},
		{
			name:  "an unconfigured pool targets nothing",
			pool:  testPool(WorkerPool, ""),
			nodes: []*corev1.Node{testNode("a", done(old))},
			want:  "",
		},
		{
			name: "capacity left by an updated node is used",
			pool: testPool(WorkerPool, next),
			nodes: []*corev1.Node{
				testNode("a", done(next)),
				testNode("b", done(old), zone("z2")),
				testNode("c", done(old), zone("z1")),
			},
			want: "c",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NodesToTarget(tt.pool, tt.nodes)
			if err != nil {
				t.Fatal(err)
			}
			if names(got) != tt.want {
				t.Errorf("targets = %q, want %q", names(got), tt.want)
			}
		})
	}
}

func TestNodesToTargetRejectsInvalidMaxUnavailable(t *testing.T) {
	pool := testPool(WorkerPool, "new", maxUnavail(intstr.FromString("lots")))
	if _, err := NodesToTarget(pool, []*corev1.Node{testNode("a", done("old"))}); err == nil {
		t.Fatal("expected an error for maxUnavailable \"lots\"")
	}
}

func TestUpdateInProgressTaintFollowsTargeting(t *testing.T) {
	pool := testPool(WorkerPool, "new")
	tests := []struct {
		node *corev1.Node
		want bool
	}{
		{testNode("untargeted", done("old")), true},
		{testNode("targeted", at("old", "new", StateWorking)), false},
		{testNode("updated", done("new")), false},
	}
	for _, tt := range tests {
		if got := needsUpdateInProgressTaint(tt.node, pool); got != tt.want {
			t.Errorf("%s: needs taint = %v, want %v", tt.node.Name, got, tt.want)
		}
	}
	n := testNode("a")
	n.Spec.Taints = []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoSchedule}, UpdateInProgressTaint()}
	if !hasUpdateInProgressTaint(n) {
		t.Error("hasUpdateInProgressTaint = false for a node with the taint")
	}
	if hasUpdateInProgressTaint(testNode("b")) {
		t.Error("hasUpdateInProgressTaint = true for a node without taints")
	}
}

func TestInitialAnnotations(t *testing.T) {
	pool := testPool(WorkerPool, "rendered-1")
	got := initialAnnotations(testNode("fresh"), pool)
	want := map[string]string{CurrentConfigAnnotation: "rendered-1", DesiredConfigAnnotation: "rendered-1", StateAnnotation: StateDone}
	if len(got) != len(want) {
		t.Fatalf("initial annotations = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if got := initialAnnotations(testNode("managed", done("rendered-0")), pool); got != nil {
		t.Errorf("a managed node got initial annotations %v", got)
	}
	if got := initialAnnotations(testNode("fresh"), testPool(WorkerPool, "")); got != nil {
		t.Errorf("a node of an unconfigured pool got initial annotations %v", got)
	}
}

func condition(status mcfgv1.MachineConfigPoolStatus, t mcfgv1.MachineConfigPoolConditionType) *mcfgv1.MachineConfigPoolCondition {
	for i := range status.Conditions {
		if status.Conditions[i].Type == t {
			return &status.Conditions[i]
		}
	}
	return nil
}

func TestCalculatePoolStatus(t *testing.T) {
	const old, next = "rendered-old", "rendered-new"
	now := metav1.NewTime(epoch.Add(time.Hour))
	type want struct {
		machines, updated, ready, unavailable, degraded int32
		updatedCond, updatingCond, degradedCond         corev1.ConditionStatus
		configuration                                   string
	}
	tests := []struct {
		name  string
		pool  *mcfgv1.MachineConfigPool
		nodes []*corev1.Node
		want  want
	}{
		{
			name:  "all updated",
			pool:  testPool(WorkerPool, next),
			nodes: []*corev1.Node{testNode("a", done(next)), testNode("b", done(next))},
			want: want{machines: 2, updated: 2, ready: 2, updatedCond: "True", updatingCond: "False",
				degradedCond: "False", configuration: next},
		},
		{
			name: "rolling: one draining, one waiting",
			pool: testPool(WorkerPool, next),
			nodes: []*corev1.Node{
				testNode("a", done(next)),
				testNode("b", at(old, next, StateWorking), cordoned),
				testNode("c", done(old)),
			},
			want: want{machines: 3, updated: 1, ready: 1, unavailable: 1, updatedCond: "False", updatingCond: "True",
				degradedCond: "False"},
		},
		{
			name: "updated but cordoned is not ready and not Updated",
			pool: testPool(WorkerPool, next),
			nodes: []*corev1.Node{
				testNode("a", done(next), cordoned),
			},
			want: want{machines: 1, updated: 1, ready: 0, unavailable: 1, updatedCond: "False", updatingCond: "True",
				degradedCond: "False"},
		},
		{
			name: "a degraded node degrades the pool",
			pool: testPool(WorkerPool, next),
			nodes: []*corev1.Node{
				testNode("a", at(old, next, StateDegraded), reason("failed to drain node: a after 1 hour"), cordoned),
				testNode("b", done(next)),
			},
			want: want{machines: 2, updated: 1, ready: 1, unavailable: 1, degraded: 1, updatedCond: "False",
				updatingCond: "True", degradedCond: "True"},
		},
		{
			name:  "a paused pool is not Updating",
			pool:  testPool(WorkerPool, next, paused),
			nodes: []*corev1.Node{testNode("a", done(old))},
			want:  want{machines: 1, updatedCond: "False", updatingCond: "False", degradedCond: "False"},
		},
		{
			name:  "an empty pool is Updated",
			pool:  testPool(WorkerPool, next),
			nodes: nil,
			want:  want{updatedCond: "True", updatingCond: "False", degradedCond: "False", configuration: next},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := CalculatePoolStatus(tt.pool, tt.nodes, now)
			got := want{
				machines: s.MachineCount, updated: s.UpdatedMachineCount, ready: s.ReadyMachineCount,
				unavailable: s.UnavailableMachineCount, degraded: s.DegradedMachineCount,
				configuration: s.Configuration.Name,
			}
			for _, c := range []struct {
				t   mcfgv1.MachineConfigPoolConditionType
				dst *corev1.ConditionStatus
			}{
				{mcfgv1.MachineConfigPoolUpdated, &got.updatedCond},
				{mcfgv1.MachineConfigPoolUpdating, &got.updatingCond},
				{mcfgv1.MachineConfigPoolDegraded, &got.degradedCond},
			} {
				if cond := condition(s, c.t); cond != nil {
					*c.dst = cond.Status
				}
			}
			if got != tt.want {
				t.Errorf("status = %+v\nwant     %+v", got, tt.want)
			}
			if s.ObservedGeneration != tt.pool.Generation {
				t.Errorf("observedGeneration = %d, want %d", s.ObservedGeneration, tt.pool.Generation)
			}
		})
	}
}

func TestCalculatePoolStatusDegradedMessageNamesTheNode(t *testing.T) {
	pool := testPool(WorkerPool, "new")
	s := CalculatePoolStatus(pool, []*corev1.Node{
		testNode("gpu-1", at("old", "new", StateDegraded), reason("failed to drain node: gpu-1 after 1 hour")),
	}, metav1.NewTime(epoch))
	nd := condition(s, mcfgv1.MachineConfigPoolNodeDegraded)
	if nd == nil || nd.Status != corev1.ConditionTrue {
		t.Fatalf("NodeDegraded = %+v, want True", nd)
	}
	if !strings.Contains(nd.Message, "gpu-1") || !strings.Contains(nd.Message, "failed to drain node") {
		t.Errorf("NodeDegraded message %q does not name the node and its reason", nd.Message)
	}
	if nd.Reason != "1 nodes are reporting degraded status on sync" {
		t.Errorf("NodeDegraded reason = %q", nd.Reason)
	}
}

func TestCalculatePoolStatusKeepsTransitionTimesAndConfiguration(t *testing.T) {
	const old, next = "rendered-old", "rendered-new"
	t0, t1, t2 := metav1.NewTime(epoch), metav1.NewTime(epoch.Add(time.Minute)), metav1.NewTime(epoch.Add(2*time.Minute))
	pool := testPool(WorkerPool, old)
	nodes := []*corev1.Node{testNode("a", done(old))}
	pool.Status = CalculatePoolStatus(pool, nodes, t0)
	if !PoolUpdated(pool) {
		t.Fatalf("pool at its target is not PoolUpdated: %+v", pool.Status)
	}

	// A new target: Updated flips to False at t1, configuration stays old.
	pool.Spec.Configuration.Name = next
	pool.Generation = 2
	pool.Status = CalculatePoolStatus(pool, nodes, t1)
	if got := condition(pool.Status, mcfgv1.MachineConfigPoolUpdated); got.Status != corev1.ConditionFalse || !got.LastTransitionTime.Equal(&t1) {
		t.Errorf("Updated after retarget = %+v, want False since t1", got)
	}
	if pool.Status.Configuration.Name != old {
		t.Errorf("status.configuration moved to %q before the nodes updated", pool.Status.Configuration.Name)
	}
	if PoolUpdated(pool) {
		t.Error("PoolUpdated while the pool is rolling out")
	}

	// Still rolling at t2: the transition time stays t1.
	pool.Status = CalculatePoolStatus(pool, []*corev1.Node{testNode("a", at(old, next, StateWorking))}, t2)
	if got := condition(pool.Status, mcfgv1.MachineConfigPoolUpdated); !got.LastTransitionTime.Equal(&t1) {
		t.Errorf("Updated lastTransitionTime = %v, want %v (status did not change)", got.LastTransitionTime, t1)
	}

	// Done at t2: configuration follows the target.
	pool.Status = CalculatePoolStatus(pool, []*corev1.Node{testNode("a", done(next))}, t2)
	if pool.Status.Configuration.Name != next || !PoolUpdated(pool) {
		t.Errorf("after the rollout: configuration %q, PoolUpdated %v", pool.Status.Configuration.Name, PoolUpdated(pool))
	}
}

func TestPoolUpdatedNeedsCurrentGeneration(t *testing.T) {
	pool := testPool(WorkerPool, "new")
	pool.Status = CalculatePoolStatus(pool, []*corev1.Node{testNode("a", done("new"))}, metav1.NewTime(epoch))
	if !PoolUpdated(pool) {
		t.Fatal("PoolUpdated = false for an updated pool")
	}
	pool.Generation++
	if PoolUpdated(pool) {
		t.Error("PoolUpdated = true although the status is for an older generation")
	}
}

func TestNodeStatePredicates(t *testing.T) {
	tests := []struct {
		name            string
		node            *corev1.Node
		updated         bool
		drainInProgress bool
	}{
		{name: "done", node: testNode("a", done("x")), updated: true},
		{name: "unmanaged", node: testNode("a")},
		{name: "targeted", node: testNode("a", at("x", "y", StateDone))},
		{name: "same config but working", node: testNode("a", at("x", "x", StateWorking))},
		{name: "draining", node: func() *corev1.Node {
			n := testNode("a", at("x", "y", StateWorking))
			n.Annotations[DesiredDrainAnnotation] = DrainRequest("y")
			n.Annotations[LastAppliedDrainAnnotation] = UncordonRequest("x")
			return n
		}(), drainInProgress: true},
		{name: "drained", node: func() *corev1.Node {
			n := testNode("a", at("x", "y", StateWorking))
			n.Annotations[DesiredDrainAnnotation] = DrainRequest("y")
			n.Annotations[LastAppliedDrainAnnotation] = DrainRequest("y")
			return n
		}()},
		{name: "uncordoning", node: func() *corev1.Node {
			n := testNode("a", at("x", "y", StateWorking))
			n.Annotations[DesiredDrainAnnotation] = UncordonRequest("y")
			n.Annotations[LastAppliedDrainAnnotation] = DrainRequest("y")
			return n
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NodeUpdated(tt.node); got != tt.updated {
				t.Errorf("NodeUpdated = %v, want %v", got, tt.updated)
			}
			if got := DrainInProgress(tt.node); got != tt.drainInProgress {
				t.Errorf("DrainInProgress = %v, want %v", got, tt.drainInProgress)
			}
		})
	}
	if !NodeUpdatedTo(testNode("a", done("x")), "x") || NodeUpdatedTo(testNode("a", done("x")), "y") {
		t.Error("NodeUpdatedTo does not compare the config")
	}
}
