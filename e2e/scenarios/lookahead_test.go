package scenarios

import (
	"fmt"
	"strings"
	"testing"
)

// TestLookaheadReplacementIsReadyBeforeTheMCOTargetsTheNode: four two-GPU nodes, three
// single-replica models, so GPUs are spare. With the default --lookahead=1, while the MCO updates a
// node the guardian surges the models on the node it will target next: for at least one model node
// other than the first, the Surge (trigger MCOPredicted) reaches Ready before the MCO targets that
// node. The order is read from the observer's timeline, not from wall-clock times. The pool
// finishes with every model available throughout and back at one replica.
func TestLookaheadReplacementIsReadyBeforeTheMCOTargetsTheNode(t *testing.T) {
	models := []model{{name: "m1", kind: "Deployment"}, {name: "m2", kind: "Deployment"}, {name: "m3", kind: "Deployment"}}
	s := newScenario(t, "lookahead", gpuNodes(4, 2), "", selectors(models)...)
	for _, m := range models {
		s.createModel(m)
	}
	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	s.waitPoolUpdated()
	for _, m := range models {
		s.waitModelBack(m)
	}
	s.assertAvailable()
	s.forbidEvents("SurgeFailed")

	ahead := 0
	for _, node := range s.nodes {
		readyAt, targetedAt := -1, -1
		for i, e := range s.obs.Timeline() {
			switch {
			case readyAt < 0 && e.Source == "Surge" && strings.Contains(e.What, fmt.Sprintf("for node %s: phase Ready", node)):
				readyAt = i
			case targetedAt < 0 && e.Source == "node" && strings.HasPrefix(e.What, "node "+node+": ") &&
				(strings.Contains(e.What, "targeted for update") || strings.Contains(e.What, "draining for")):
				targetedAt = i
			}
		}
		if readyAt >= 0 && targetedAt >= 0 && readyAt < targetedAt {
			t.Logf("node %s: replacement Ready (timeline entry %d) before the MCO targeted the node (entry %d)", node, readyAt, targetedAt)
			ahead++
		}
	}
	if ahead == 0 {
		t.Fatal("no node's replacement was Ready before the MCO targeted that node: look-ahead did not surge ahead")
	}
	if n := len(s.events()["StallPredicted"]); n == 0 {
		t.Error("no StallPredicted Event for the surges made ahead")
	}
}
