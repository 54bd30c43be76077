package check

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/drain-guardian/drain-guardian/internal/trigger"
)

// nodesView is a trigger.View of nodes alone: no ClusterPolicy (the default upgrade policy).
type nodesView []*corev1.Node

func (v nodesView) Nodes() []*corev1.Node                                          { return v }
func (nodesView) Objects(schema.GroupVersionResource) []*unstructured.Unstructured { return nil }
func (nodesView) ObjectsOn(schema.GroupVersionResource, string) []*unstructured.Unstructured {
	return nil
}
func (nodesView) Lookahead() int      { return 0 }
func (nodesView) Logf(string, ...any) {}

// withGPURollout adds the driver upgrade's rollout, as the daemon's table gives it.
func withGPURollout(cl Cluster) Cluster {
	if r, ok := trigger.GPUDriverUpgradeKind.Rollout(nodesView(cl.Nodes)); ok {
		cl.Rollouts = append(cl.Rollouts, r)
	}
	return cl
}

// gpuCluster: four one-GPU nodes the GPU Operator manages, three single-replica models, one spare
// GPU; the MCO pool has nothing to update.
func gpuCluster(t *testing.T, states ...string) *cluster {
	c := newCluster(t)
	c.pool()
	for i, name := range []string{"g1", "g2", "g3", "g4"} {
		c.node(name, 1).Labels[trigger.GPUUpgradeStateLabel] = states[i]
	}
	for i, m := range []string{"m1", "m2", "m3"} {
		c.deployment(m, []string{"g1", "g2", "g3"}[i], 1, nil)
	}
	return c
}

func gpuPool(t *testing.T, r *Report) Pool {
	t.Helper()
	for _, p := range r.Pools {
		if p.Name == trigger.GPUDriverUpgradePool {
			return p
		}
	}
	t.Fatalf("no %s in the report", trigger.GPUDriverUpgradePool)
	return Pool{}
}

// check reports the stalls the next driver upgrade meets: one node at a time (the default policy),
// every model resolvable on the spare GPU; with driver upgrades off it reports none.
func TestGPUDriverUpgradeStalls(t *testing.T) {
	done := trigger.GPUStateDone
	cl := withGPURollout(gpuCluster(t, done, done, done, done).build())
	r := Analyze(cl, Config{})
	p := gpuPool(t, r)
	if len(p.Nodes) != 4 || p.MaxUnavailable != 1 {
		t.Fatalf("%d nodes %d at a time, want 4 one at a time", len(p.Nodes), p.MaxUnavailable)
	}
	got := map[string]Verdict{}
	for _, n := range p.Nodes {
		for _, b := range n.Blocks {
			got[b.Pod] = b.Verdict
		}
	}
	if len(got) != 3 || got["m1"] != ResolvableWithCapacity || got["m2"] != ResolvableWithCapacity || got["m3"] != ResolvableWithCapacity {
		t.Fatalf("driver upgrade verdicts %v, want the three models resolvable-with-capacity", got)
	}

	cl.Rollouts = nil
	for _, p := range Analyze(cl, Config{}).Pools {
		if p.Name == trigger.GPUDriverUpgradePool {
			t.Fatalf("a driver upgrade reported with --gpu-driver-upgrades=false")
		}
	}
}

// A node with the skip label is not upgraded, so its model blocks nothing; a failed node is left
// out too. With the spare GPU taken by a fourth model, every stall has no capacity.
func TestGPUDriverUpgradeSkipAndNoCapacity(t *testing.T) {
	waiting := trigger.GPUStateUpgradeRequired
	c := gpuCluster(t, waiting, waiting, trigger.GPUStateFailed, waiting)
	c.snap.Nodes[0].Labels[trigger.GPUUpgradeSkipLabel] = "true"
	c.deployment("m4", "g4", 1, nil)
	cl := withGPURollout(c.build())
	p := gpuPool(t, Analyze(cl, Config{}))
	var names []string
	for _, n := range p.Nodes {
		names = append(names, n.Name)
		for _, b := range n.Blocks {
			if b.Verdict != NoCapacity {
				t.Errorf("%s on %s: %s, want no-capacity", b.Pod, n.Name, b.Verdict)
			}
		}
	}
	if len(names) != 2 || names[0] != "g2" || names[1] != "g4" {
		t.Fatalf("nodes %v, want [g2 g4] (g1 skipped, g3 failed)", names)
	}
}
