package guardian

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// preparePool: a paused pool of w1, w2, w3 (each one GPU, each running one model under a
// minAvailable-1 PDB, so each drain stalls) plus spare, a node of another, updated pool with the
// given free GPUs. The MCO will take w3 first, then w1, then w2.
func preparePool(t *testing.T, spareGPUs int64) (*fixture, Prepare) {
	f := newFixture(t)
	for _, n := range []string{"w1", "w2", "w3"} {
		f.node(n, 1)
	}
	f.node("spare", spareGPUs)
	models := map[string]string{"w1": "llama", "w2": "granite", "w3": "mistral"}
	for node, model := range models {
		f.deployment(model, 1, 1)
		f.pods[model+"-a"].Spec.NodeName = node
	}
	p := Prepare{Config: "rendered-2", PoolSelected: true, Ledger: f.ledger(),
		WillNotDrain: func(n *corev1.Node) bool { return n.Name == "spare" }}
	for _, node := range []string{"w3", "w1", "w2"} {
		p.Nodes = append(p.Nodes, PrepareNode{Node: node, Stalls: []Stall{f.stall(models[node]+"-a", models[node])}})
	}
	return f, p
}

// outcomes lists "node:outcome" in decision order.
func outcomes(ds []PrepareDecision) []string {
	var out []string
	for _, n := range ds {
		for _, d := range n.Decisions {
			out = append(out, n.Node+":"+map[Outcome]string{OutcomeSurge: "surge", OutcomeCovered: "covered", OutcomeDefer: "defer",
				OutcomeUnresolvable: "unresolvable", OutcomeIgnore: "ignore", OutcomeCleanup: "cleanup"}[d.Outcome])
		}
	}
	return out
}

func TestDecidePrepare(t *testing.T) {
	tests := []struct {
		name   string
		spare  int64
		cfg    StallConfig
		mutate func(*fixture, *Prepare)
		want   string
		detail string
		reason StallReason // of every deferred workload, when set
	}{
		{name: "every stall prepared in update order", spare: 3, want: "w3:surge w1:surge w2:surge"},
		// Spare capacity goes to the first drains: the first node's stall costs a whole model load.
		{name: "capacity goes to the first nodes to update", spare: 2, want: "w3:surge w1:surge w2:defer", detail: "missing 1 nvidia.com/gpu", reason: StallLookaheadSkipped},
		{name: "nothing spare while a stall waits for capacity", spare: 3, mutate: func(_ *fixture, p *Prepare) { p.CapacityWanted = true },
			want: "w3:defer w1:defer w2:defer", detail: "a stall waits for capacity"},
		// Another pool's stall, surged a moment ago, has its replacement still to place: it comes first.
		{name: "stalls' pending replacements come first", spare: 3, mutate: func(f *fixture, p *Prepare) {
			p.Ledger = NewLedger(p.Ledger.room(), []*podinfo.Pod{Replacement(f.pods["llama-a"])})
		}, want: "w3:surge w1:surge w2:defer"},
		// No node the update will not drain has room: a node of the pool with a free GPU serves, the
		// drain of that node then goes as for a two-replica model.
		{name: "a node still to update when no safe node has room", spare: 0, mutate: func(f *fixture, p *Prepare) {
			f.node("w4", 1)
			p.Ledger = f.ledger()
		}, want: "w3:surge w1:defer w2:defer"},
		{name: "the last concurrency slot stays for a stall", spare: 3, cfg: StallConfig{MaxInFlight: 3}, mutate: func(_ *fixture, p *Prepare) { p.InFlight = 1 },
			want: "w3:surge w1:defer w2:defer", detail: "last surge slot", reason: StallPrepareQueued},
		{name: "a single slot is never a prepared surge's", spare: 3, cfg: StallConfig{MaxInFlight: 1},
			want: "w3:defer w1:defer w2:defer", detail: "leaves no slot", reason: StallLookaheadSkipped},
		// Queued behind the pool's own prepared surges: it starts as they turn Ready.
		{name: "a namespace's share of the slots", spare: 3, cfg: StallConfig{MaxInFlight: 5, MaxInFlightPerNamespace: 2}, mutate: func(f *fixture, p *Prepare) {
			p.InFlightByNamespace = map[string]int{f.ns.Name: 1}
		}, want: "w3:surge w1:defer w2:defer", detail: "surges in flight", reason: StallPrepareQueued},
		{name: "an existing Surge covers", spare: 3, mutate: func(_ *fixture, p *Prepare) {
			p.Nodes[0].Stalls[0].Existing = surge("s", "w3", "rendered-2", v1alpha1.PhaseReady)
		}, want: "w3:covered w1:surge w2:surge"},
		{name: "a prepared surge that failed is not retried for the same update", spare: 3, mutate: func(_ *fixture, p *Prepare) {
			s := surge("s", "w3", "rendered-2", v1alpha1.PhaseFailed)
			s.Spec.Trigger = string(TriggerPrepared)
			p.Nodes[0].Stalls[0].Existing = s
		}, want: "w3:unresolvable w1:surge w2:surge"},
		// A model with a pod on w3 and one on w2, both blocked: one surge, decided on w3, the first to update.
		{name: "a workload blocking on two nodes is decided once", spare: 3, mutate: func(f *fixture, p *Prepare) {
			second := f.pods["mistral-a"].Unscheduled("mistral-b")
			second.Spec.NodeName = "w2"
			p.Nodes[2].Stalls = append(p.Nodes[2].Stalls, Stall{Blocked: blocking.Blocked{Pod: second, PDB: f.pdbs["mistral"]}, Namespace: f.ns,
				Owner: p.Nodes[0].Stalls[0].Owner})
		}, want: "w3:surge w1:surge w2:surge w2:ignore"},
		{name: "pool out of scope", spare: 3, mutate: func(_ *fixture, p *Prepare) { p.PoolSelected = false }, want: "w3:ignore w1:ignore w2:ignore"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, p := preparePool(t, tt.spare)
			if tt.mutate != nil {
				tt.mutate(f, &p)
			}
			ds := DecidePrepare(tt.cfg, p)
			if got := strings.Join(outcomes(ds), " "); got != tt.want {
				t.Fatalf("outcomes = %q, want %q", got, tt.want)
			}
			if tt.detail == "" {
				return
			}
			for _, n := range ds {
				for _, d := range n.Decisions {
					if d.Outcome == OutcomeDefer && !strings.Contains(d.Detail, tt.detail) {
						t.Errorf("%s: detail %q lacks %q", n.Node, d.Detail, tt.detail)
					}
					if d.Outcome == OutcomeDefer && tt.reason != StallNone && d.Reason != tt.reason {
						t.Errorf("%s: reason %v, want %v", n.Node, d.Reason, tt.reason)
					}
				}
			}
		})
	}
}

// A prepared surge that failed ahead of the update does not keep the drain itself from its own surge.
func TestFailedPrepareGivesWayToTheDrain(t *testing.T) {
	f := gpuCluster(t)
	w := f.wave(f.stall("llama-a", "llama"))
	s := surge("s", "w1", "rendered-2", v1alpha1.PhaseFailed)
	s.Spec.Trigger = string(TriggerPrepared)
	w.Stalls[0].Existing = s
	if d := DecideStalls(StallConfig{}, w)[0]; d.Outcome != OutcomeCleanup {
		t.Errorf("outcome = %v (%s), want the failed prepared Surge cleaned up", d.Outcome, d.Detail)
	}
}

func TestPendingConfig(t *testing.T) {
	p := pausedPool()
	if got := PendingConfig(p); got != "rendered-b" {
		t.Errorf("paused pool with a moved spec: PendingConfig = %q, want rendered-b", got)
	}
	if got := PendingConfig(updatedPool()); got != "" {
		t.Errorf("updated pool: PendingConfig = %q, want none", got)
	}
	p.Annotations = map[string]string{PrepareAnnotation: "yes"}
	if PrepareRequested(p) {
		t.Error("only the documented value true asks for a prepare")
	}
	p.Annotations[PrepareAnnotation] = "true"
	if !PrepareRequested(p) {
		t.Error(`prepare: "true" not seen`)
	}
}
