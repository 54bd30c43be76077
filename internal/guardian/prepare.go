package guardian

import (
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PrepareAnnotation, set to "true" on a MachineConfigPool, asks the guardian to surge, ahead of the
// pool's next update, every workload that would stall it. Only cluster admins can write pools; the
// guardian only reads it.
const PrepareAnnotation = "drain-guardian.io/prepare"

// TriggerPrepared: the pool is being prepared for its next update (PrepareAnnotation); the node is
// not drained yet, and may not be for hours.
const TriggerPrepared Trigger = "Prepared"

// PrepareRequested reports whether the pool asks to be prepared. Only the documented value counts.
func PrepareRequested(pool *mcfgv1.MachineConfigPool) bool {
	return pool != nil && pool.Annotations[PrepareAnnotation] == "true"
}

// PendingConfig returns the config the pool's next (or current) update rolls out, "" when it has
// none: the render controller moves spec.configuration even on a paused pool, so a pending update is
// a spec that differs from the status.
func PendingConfig(pool *mcfgv1.MachineConfigPool) string {
	spec := pool.Spec.Configuration.Name
	if spec == "" || spec == pool.Status.Configuration.Name {
		return ""
	}
	return spec
}

// PrepareNode is one node a pool's next update will drain, with what was observed about its blocked pods.
type PrepareNode struct {
	Node   string
	Stalls []Stall
}

// Prepare is everything DecidePrepare reads about one pool to prepare.
type Prepare struct {
	// Config is the pool's pending config (PendingConfig): the id of the drains to come, so that a
	// prepared Surge covers its node's stall when the MCO drains it.
	Config string
	// PoolSelected: the pool matches --pool-selector.
	PoolSelected bool
	// Nodes are the nodes still to update, in the order the MCO will take them (mco.Plan.Order).
	Nodes []PrepareNode
	// InFlight counts the Surges serving a stall now, including those created but not yet cached.
	InFlight int
	// InFlightByNamespace splits InFlight by namespace (DecidePrepare adds the surges it decides).
	InFlightByNamespace map[string]int
	// Waiting lists the stalls deferred for a slot: while any waits, nothing is prepared.
	Waiting []WaitingStall
	// Ledger is the capacity the prepared surges book against, after every stall's.
	Ledger *Ledger
	// CapacityWanted: a stall of any pool waits for capacity now: nothing is spare for preparing.
	CapacityWanted bool
	// WillNotDrain tells the nodes the update will not drain again (mco.WillNotDrain), which a
	// replacement is placed on first.
	WillNotDrain func(*corev1.Node) bool
}

// PrepareDecision is the stall decision of one node of a pool being prepared.
type PrepareDecision struct {
	Node      string
	Decisions []Decision
}

// DecidePrepare decides, node by node in update order, every workload that would stall the pool's next
// update: a prepared surge (OutcomeSurge), already covered, deferred (no spare capacity, no spare
// slot) or unresolvable, as the stall decision says (DecideStalls). Earlier nodes book the capacity
// first, so that what is spare goes to the first drains, whose stalls would cost the most time.
//
// A prepared surge takes only what stalls leave: it is decided after them (the ledger holds their
// replacements), never while any stall waits for capacity, and never takes the last slot of
// --max-concurrent-surges. A prepared surge that holds capacity a stall waits for is given back
// (see Decide: ReasonCapacityNeeded).
func DecidePrepare(cfg StallConfig, p Prepare) []PrepareDecision {
	out := make([]PrepareDecision, 0, len(p.Nodes))
	room := &Lookahead{CapacityWanted: p.CapacityWanted, WillNotDrain: p.WillNotDrain}
	inFlight := p.InFlight
	decidedOn := map[types.UID]string{}
	for _, n := range p.Nodes {
		ds := make([]Decision, len(n.Stalls))
		var stalls []Stall
		var at []int
		for i, st := range n.Stalls {
			if node, ok := decidedOn[WorkloadOf(st.Pod)]; ok {
				// A workload blocking on several nodes is decided once, on the first node to update.
				ds[i] = Decision{Outcome: OutcomeIgnore, SameAs: -1, Regarding: st.Pod.Ref(), Detail: "decided with node " + node}
				continue
			}
			stalls, at = append(stalls, st), append(at, i)
		}
		w := Wave{
			Node: n.Node, Drain: NodeDrain{Trigger: TriggerPrepared, Drain: p.Config}, PoolSelected: p.PoolSelected,
			Stalls: stalls, InFlight: inFlight, Ledger: p.Ledger, Lookahead: room,
			InFlightByNamespace: p.InFlightByNamespace, Waiting: p.Waiting,
		}
		for k, d := range DecideStalls(cfg, w) {
			if d.SameAs >= 0 {
				d.SameAs = at[d.SameAs]
			} else if uid := WorkloadOf(stalls[k].Pod); uid != "" {
				decidedOn[uid] = n.Node
			}
			if d.Outcome == OutcomeSurge && d.SameAs < 0 {
				inFlight++
			}
			ds[at[k]] = d
		}
		out = append(out, PrepareDecision{Node: n.Node, Decisions: ds})
	}
	return out
}

// prepareRoom decides whether a prepared surge can be made now: no stall waits for capacity, its
// replacements fit (on nodes the update will not drain again if they can, else on any other node:
// with both replicas held until the pool is Updated, the drain of the replacement's node then goes
// as it does for a two-replica workload), and a surge slot stays free for a stall.
func prepareRoom(cfg StallConfig, w *Wave, st *Stall, d Decision) Decision {
	delta, la := int(d.Delta), w.Lookahead
	if la == nil || la.CapacityWanted {
		return d.with(OutcomeDefer, StallLookaheadSkipped, "a stall waits for capacity: a prepared surge only uses what stalls leave")
	}
	if placed, _ := w.Ledger.FitStall(st, delta, la.WillNotDrain, nil); placed < delta {
		if placed, short := w.Ledger.FitStall(st, delta, nil, nil); placed < delta {
			d.Missing = short.Resources
			return d.with(OutcomeDefer, StallLookaheadSkipped, "%s%s", describeShort(st, placed, delta, short, "other"), deviceReasons(short))
		}
	}
	if cfg.MaxInFlight > 0 && w.InFlight+1 >= cfg.MaxInFlight {
		if w.InFlight == 0 {
			// Nothing in flight will free a slot: --max-concurrent-surges=1 leaves none to prepare with.
			return d.with(OutcomeDefer, StallLookaheadSkipped, "--max-concurrent-surges=%d leaves no slot for a prepared surge: the last one stays for a stall that blocks a drain", cfg.MaxInFlight)
		}
		return d.with(OutcomeDefer, StallPrepareQueued, "the last surge slot stays for a stall that blocks a drain")
	}
	if len(w.Waiting) > 0 {
		return d.with(OutcomeDefer, StallLookaheadSkipped, "%d stall(s) wait for a surge slot: a prepared surge only uses what stalls leave", len(w.Waiting))
	}
	if ns := st.Pod.Namespace; cfg.MaxInFlightPerNamespace > 0 && w.InFlightByNamespace[ns] >= cfg.MaxInFlightPerNamespace {
		return d.with(OutcomeDefer, StallPrepareQueued, "namespace %s has %d surges in flight (--max-concurrent-surges-per-namespace=%d)",
			ns, w.InFlightByNamespace[ns], cfg.MaxInFlightPerNamespace)
	}
	return d.with(OutcomeSurge, StallNone, "")
}
