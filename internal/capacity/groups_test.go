package capacity

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

const (
	zone            = "topology.kubernetes.io/zone"
	groupIndexLabel = "leaderworkerset.sigs.k8s.io/group-index"
	groupKeyLabel   = "leaderworkerset.sigs.k8s.io/group-key"
)

// member is a pod of group idx of the LeaderWorkerSet "big" on node, requesting 8 GPUs, Ready.
func member(name, node string, idx string) *corev1.Pod {
	p := gpuPod(name, node, 8)
	p.Labels = map[string]string{"leaderworkerset.sigs.k8s.io/name": "big", groupIndexLabel: idx, groupKeyLabel: "key-" + idx}
	return p
}

func gpuNodes(zones map[string]string, names ...string) []*corev1.Node {
	var out []*corev1.Node
	for _, n := range names {
		node := readyNode(n, 8)
		if z, ok := zones[n]; ok {
			node = labeled(node, zone, z)
		}
		out = append(out, node)
	}
	return out
}

// pool is four 8-GPU nodes running group 0 of a size-2 set on n1 and n2, plus the given pods.
func pool(nodes []*corev1.Node, extra ...*corev1.Pod) []Candidate {
	pods := append([]*corev1.Pod{member("big-0", "n1", "0"), member("big-0-1", "n2", "0")}, extra...)
	var cs []cand
	for _, n := range nodes {
		c := cand{Node: n}
		for _, p := range pods {
			if p.Spec.NodeName == n.Name {
				c.Pods = append(c.Pods, p)
			}
		}
		cs = append(cs, c)
	}
	return candidates(cs)
}

func group0(key string) *blocking.Group {
	return &blocking.Group{Pods: infos(member("big-0", "n1", "0"), member("big-0-1", "n2", "0")), TopologyKey: key}
}

// A surge of a multi-node model adds a whole group: it fits only where every one of its pods does, and
// what is missing is said in nodes ("missing 1 node with 8 nvidia.com/gpu").
func TestFitGroups(t *testing.T) {
	gpus8 := corev1.ResourceList{gpu: resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("1")}
	tests := []struct {
		name        string
		group       *blocking.Group
		n           int
		cands       []Candidate
		wantPlaced  int
		wantNodes   int
		wantDomain  bool
		wantPerNode corev1.ResourceList
	}{
		{name: "two spare nodes: the group fits", group: group0(""), n: 1, cands: pool(gpuNodes(nil, "n1", "n2", "n3", "n4")), wantPlaced: 1},
		{name: "one spare node: no half group", group: group0(""), n: 1,
			cands: pool(gpuNodes(nil, "n1", "n2", "n3", "n4"), gpuPod("other", "n4", 8)), wantNodes: 1, wantPerNode: gpus8},
		{name: "no spare node", group: group0(""), n: 1,
			cands: pool(gpuNodes(nil, "n1", "n2", "n3", "n4"), gpuPod("a", "n3", 8), gpuPod("b", "n4", 8)), wantNodes: 2, wantPerNode: gpus8},
		{name: "the node being drained is no spare node", group: group0(""), n: 1,
			cands: pool(gpuNodes(nil, "n1", "n2", "n3", "n4")), wantNodes: 1, wantPerNode: gpus8},
		{name: "a second group misses what the first took", group: group0(""), n: 2,
			cands: pool(gpuNodes(nil, "n1", "n2", "n3", "n4", "n5")), wantPlaced: 1, wantNodes: 1, wantPerNode: gpus8},
		{name: "exclusive topology: a free zone of two nodes takes the group", group: group0(zone), n: 1,
			cands: pool(gpuNodes(map[string]string{"n1": "a", "n2": "a", "n3": "b", "n4": "b"}, "n1", "n2", "n3", "n4")), wantPlaced: 1},
		{name: "exclusive topology: spare nodes in two zones cannot hold one group", group: group0(zone), n: 1,
			cands: pool(gpuNodes(map[string]string{"n1": "a", "n2": "a", "n3": "b", "n4": "c"}, "n1", "n2", "n3", "n4")), wantNodes: 1, wantDomain: true, wantPerNode: gpus8},
		{name: "exclusive topology: a zone running another group is not free", group: group0(zone), n: 1,
			cands: pool(gpuNodes(map[string]string{"n1": "a", "n2": "a", "n3": "b", "n4": "b", "n5": "b"}, "n1", "n2", "n3", "n4", "n5"),
				withLabels(gpuPod("other-0", "n5", 1), map[string]string{groupKeyLabel: "other"})),
			wantNodes: 2, wantDomain: true, wantPerNode: gpus8},
		{name: "exclusive topology: nodes without the label are no domain", group: group0(zone), n: 1,
			cands: pool(gpuNodes(map[string]string{"n1": "a", "n2": "a"}, "n1", "n2", "n3", "n4")), wantNodes: 2, wantDomain: true, wantPerNode: gpus8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exclude := "n1"
			if strings.Contains(tt.name, "being drained") {
				// n3 is the node being drained in this case: its free GPUs are no room for the group.
				exclude = "n3"
			}
			placed, short := New(tt.cands, Standard(nil)...).FitGroups(tt.group, tt.n, exclude, nil)
			if placed != tt.wantPlaced || short.Nodes != tt.wantNodes {
				t.Fatalf("FitGroups() placed %d, %d node(s) missing; want %d, %d", placed, short.Nodes, tt.wantPlaced, tt.wantNodes)
			}
			if tt.wantNodes > 0 && !sameResources(short.PerNode, tt.wantPerNode) {
				t.Errorf("PerNode = %v, want %v", short.PerNode, tt.wantPerNode)
			}
			if (short.Domain != "") != tt.wantDomain {
				t.Errorf("Domain = %q, want one: %v", short.Domain, tt.wantDomain)
			}
		})
	}
}

// A group booked by an earlier surge (pending) takes its room first: the next group does not fit on it.
func TestFitGroupsAfterPending(t *testing.T) {
	cands := pool(gpuNodes(nil, "n1", "n2", "n3", "n4"))
	pending := []*podinfo.Pod{group0("").Pods[0].Unscheduled("r0"), group0("").Pods[1].Unscheduled("r1")}
	if placed, short := New(cands, Standard(nil)...).FitGroups(group0(""), 1, "n1", pending); placed != 0 || short.Nodes != 2 {
		t.Errorf("FitGroups() after a pending group = %d placed, %d nodes missing; want 0, 2", placed, short.Nodes)
	}
	if podCounts(cands)[2] != 0 {
		t.Error("FitGroups changed the caller's candidates")
	}
}
