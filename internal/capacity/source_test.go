package capacity

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// slots is a source plugged in by the tests: each replacement takes one example.com/slot, which only
// the nodes in free have (one each). It books per run, says why it refused, and records its Takes.
type slots struct {
	free  map[string]bool
	taken *[]string
}

const slot corev1.ResourceName = "example.com/slot"

func (s slots) Open() Book { return &slotBook{s: s} }
func (slots) Asks(_ *podinfo.Pod, into corev1.ResourceList) {
	q := into[slot]
	q.Add(resource.MustParse("1"))
	into[slot] = q
}
func (slots) Free([]Candidate, map[string]int64) {}

type slotBook struct {
	none
	s       slots
	used    []string
	refused bool
}

func (b *slotBook) Ask(*podinfo.Pod) Ask { return slotAsk{b} }
func (b *slotBook) Reasons() (string, string) {
	if b.refused {
		return "", "no slot"
	}
	return "", ""
}

type slotAsk struct{ b *slotBook }

func (a slotAsk) Claim(_ *corev1.Node, r corev1.ResourceList) corev1.ResourceList { return r }
func (a slotAsk) Fits(c *Candidate, _ corev1.ResourceList) bool {
	for _, n := range a.b.used {
		if n == c.Node.Name {
			a.b.refused = true
			return false
		}
	}
	if !a.b.s.free[c.Node.Name] {
		a.b.refused = true
	}
	return a.b.s.free[c.Node.Name]
}
func (a slotAsk) Take(c *Candidate) {
	a.b.used = append(a.b.used, c.Node.Name)
	*a.b.s.taken = append(*a.b.s.taken, c.Node.Name)
}

// A source plugged into the list is asked on every placement: one that refuses every node turns a
// replacement that fits into a shortfall, which lists what the source counts and why it refused.
func TestAPluggedSourceIsConsulted(t *testing.T) {
	cands := candidates([]cand{{Node: readyNode("node-b", 1)}, {Node: readyNode("node-c", 1)}})
	pod := podinfo.From(gpuPod("blocked", "node-a", 1))
	if placed, _ := New(cands, Standard(nil)...).Fit(pod, 1, nil); placed != 1 {
		t.Fatalf("placed %d with the standard sources, want 1", placed)
	}
	var taken []string
	refuseAll := slots{free: map[string]bool{}, taken: &taken}
	placed, short := New(cands, append(Standard(nil), refuseAll)...).Fit(pod, 1, nil)
	if placed != 0 || short.Refused != "no slot" {
		t.Fatalf("placed %d refused %q with a source that refuses every node, want 0 and its reason", placed, short.Refused)
	}
	if got, want := DescribeResources(short.Resources), "1 example.com/slot, 1 nvidia.com/gpu, 1 cpu"; got != want {
		t.Errorf("missing %q, want %q", got, want)
	}
	if placed, short := New(pool(gpuNodes(nil, "n1", "n2", "n3", "n4")), append(Standard(nil), refuseAll)...).FitGroups(group0(""), 1, "n1", nil); placed != 0 || short.Nodes != 2 {
		t.Errorf("FitGroups() placed %d, %d nodes missing with a source that refuses every node; want 0, 2", placed, short.Nodes)
	}
}

// A source books only where every source accepted the node: the one that has a slot on node-b only
// takes it there, for the first replacement; the second fits nowhere.
func TestASourceBooksWhereThePodIsPlaced(t *testing.T) {
	cands := candidates([]cand{{Node: readyNode("node-b", 0)}, {Node: readyNode("node-c", 1)}, {Node: readyNode("node-d", 1)}})
	var taken []string
	onC := slots{free: map[string]bool{"node-b": true, "node-c": true}, taken: &taken}
	placed, _ := New(cands, append(Standard(nil), onC)...).Fit(podinfo.From(gpuPod("blocked", "node-a", 1)), 2, nil)
	if placed != 1 || len(taken) != 1 || taken[0] != "node-c" {
		t.Errorf("placed %d, slots taken on %v; want 1 on node-c (node-b has no GPU, node-d no slot)", placed, taken)
	}
}
