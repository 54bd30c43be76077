package controller

import (
	"context"
	"slices"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// stallConfig is the configuration of the daemon's stall decisions.
func (b *base) stallConfig() guardian.StallConfig {
	return guardian.StallConfig{
		NamespaceSelector: b.nsSelector, Excludes: b.opts.Excludes,
		NilKeepsCount: b.kserve.nilKeepsCount(), MaxInFlight: b.opts.MaxConcurrentSurge,
		MaxInFlightPerNamespace: b.opts.PerNamespaceLimit(), MaxSurgeReplicas: int32(b.opts.MaxSurgeReplicas),
	}
}

// observeStalls reads, once, what the stall decision needs about the node's blocked pods (see
// guardian.ObserveStalls), and the room of a look-ahead surge.
func (b *base) observeStalls(obs *nodeObservation) error {
	blocked, err := b.blockedOn(obs.node.Name)
	if err != nil {
		return err
	}
	obs.wave.Stalls = append(obs.wave.Stalls, guardian.ObserveStalls(b.stallConfig(), true, blocked, stallReader{b.view})...)
	switch {
	case guardian.FromSource(obs.wave.Drain.Trigger) && obs.wave.Drain.Predicted:
		obs.wave.Lookahead = b.sourceLookaheadRoom(obs.wave.Drain.Trigger, obs.pool)
	case obs.wave.Drain.Lookahead():
		obs.wave.Lookahead = b.lookaheadRoom(obs.pool)
	}
	return nil
}

// stallReader answers guardian.ObserveStalls from the daemon's listers and workload store.
type stallReader struct{ v *view }

// Namespace is the namespace from the lister; nil when it cannot be read.
func (r stallReader) Namespace(name string) *corev1.Namespace {
	ns, _ := r.v.namespaces.Get(name)
	return ns
}

// Owner reads the pod's owner chain from the workload store.
func (r stallReader) Owner(pod *podinfo.Pod) guardian.Owner { return workload.Observe(r.v.store, pod) }

// Surge is the target's cached Surge, of any phase.
func (r stallReader) Surge(t *workload.Target) *v1alpha1.Surge { return r.v.surgeOf(t) }

// GroupPods are the pods the owner's pod owner selects and owns.
func (r stallReader) GroupPods(pod *podinfo.Pod, o guardian.Owner) []*podinfo.Pod {
	pods, _ := r.v.podsOf(pod.Namespace, o.Target.PodOwner.Kind, o.PodOwner)
	return pods
}

// PDBStatusBehind compares the PDB's status with the pods in the cache.
func (r stallReader) PDBStatusBehind(pdb *policyv1.PodDisruptionBudget) bool {
	return r.v.pdbStatusBehind(pdb)
}

// lookaheadRoom is what a look-ahead surge of the pool may use (see guardian.Lookahead); nil when
// the pool cannot be read.
//
// The replacement may go only to a node neither the MCO nor another source is about to drain: a
// node planned for maintenance (or picked by any source) is no place for it. A drain predicted by
// a source other than the MCO on a node in no pool (plain Kubernetes) uses the same room, with no
// MCO stall before it.
func (b *base) lookaheadRoom(pool string) *guardian.Lookahead {
	var p *mcfgv1.MachineConfigPool
	if b.pools != nil {
		var err error
		if p, err = b.pools.Get(pool); err != nil && pool != "" {
			return nil
		}
	}
	pools := b.newPoolLookup()
	room := &guardian.Lookahead{
		CapacityWanted: b.demand.capacityWanted(pool),
		WillNotDrain:   func(n *corev1.Node) bool { return b.willNotDrain(n, pools) },
	}
	if p != nil {
		room.Unserved = b.unservedStalls(b.plan(p).Updating)
	}
	return room
}

// decideStalls decides the node's stalls and starts the surges decided, under the executor's
// admission: the ledger counts the replacements of every Surge in flight, those created by another
// worker a moment ago included, so that no two stalls book the same capacity or slot.
func (b *base) decideStalls(ctx context.Context, obs *nodeObservation) ([]guardian.Decision, map[int]*surgeStart) {
	var decisions []guardian.Decision
	starts := map[int]*surgeStart{}
	b.exec.admit(ctx, func() []*surgeStart {
		view := b.flight.view(b.surges.List())
		wave := obs.wave
		wave.InFlight, wave.InFlightByNamespace, wave.Waiting = view.count, view.byNamespace, view.waiting
		for i := range wave.Stalls {
			wave.Stalls[i].WaitingSince = b.flight.waitingSince(guardian.WorkloadOf(wave.Stalls[i].Pod))
		}
		wave.Ledger = guardian.NewLazyLedger(b.capacityNow, b.booked(view))
		decisions = guardian.DecideStalls(b.stallConfig(), wave)
		var out []*surgeStart
		for i, d := range decisions {
			if d.Outcome == guardian.OutcomeSurge && d.SameAs < 0 {
				starts[i] = b.surgeStart(obs, &wave.Stalls[i], d)
				out = append(out, starts[i])
			}
		}
		return out
	})
	return decisions, starts
}

// surgeStart builds the Surge (phase Pending) a decision asks for; its own sync then writes the fields.
func (b *base) surgeStart(obs *nodeObservation, st *guardian.Stall, d guardian.Decision) *surgeStart {
	o, node := st.Owner, obs.node.Name
	spec := v1alpha1.SurgeSpec{
		Fields: d.Fields, Node: node, Pool: obs.pool, Trigger: string(obs.wave.Drain.Trigger), Drain: obs.wave.Drain.Drain,
		PDB: st.PDB.Name, BlockedPod: st.Pod.Name, Delta: d.Delta, Replicas: o.PodOwner.Replicas,
		StartTime: metav1.NewTime(b.clock.Now()),
	}
	if pods, err := b.podsOf(st.Pod.Namespace, o.Target.PodOwner.Kind, o.PodOwner); err == nil {
		spec.ReadyBefore = readyElsewhere(pods, node, o.PodOwner.GroupSize)
	}
	start := &surgeStart{surge: newSurge(o.Target, o.Object, spec)}
	for range d.Delta {
		if st.Group == nil {
			start.replacements = append(start.replacements, guardian.Replacement(st.Pod))
			continue
		}
		for _, p := range st.Group.Pods {
			start.replacements = append(start.replacements, guardian.Replacement(p))
		}
	}
	return start
}

// booked lists the replacements every Surge in flight still waits for: those of the cached, verified
// Surges and those booked by the Surges this process created but has not verified yet. A held Surge's
// pods still to place count too: a drain that evicts one of its replicas gets it recreated, Pending,
// and that pod takes the next free GPU before a replacement surged after it.
func (v *view) booked(view inFlightView) []*podinfo.Pod {
	surges := append(slices.Clip(view.trusted), view.held...)
	return append(v.pendingReplacements(surges), view.unverified...)
}

// pendingReplacements lists, for the given Surges in flight, the replacements the scheduler has
// still to place: their owners' unscheduled pods and the replicas not created yet. A Surge waits for
// at most the replicas it added (its delta), whatever count its workload asks for.
func (v *view) pendingReplacements(surges []*v1alpha1.Surge) []*podinfo.Pod {
	var out []*podinfo.Pod
	for _, s := range surges {
		owner, err := v.store.PodOwner(targetOf(s).PodOwner)
		if err != nil {
			continue
		}
		pods, _ := v.podsOf(s.Namespace, targetOf(s).PodOwner.Kind, owner)
		out = append(out, waitingFor(s, pods, owner.GroupSize)...)
	}
	return out
}

// waitingFor returns the replacements a Surge waits for (see blocking.Replacements): never more than
// its delta, whatever count its workload asks for. For a workload of groups (groupSize pods each,
// bounded by workload.MaxGroupSize) counts are groups, and the pods are those of the groups.
func waitingFor(s *v1alpha1.Surge, pods []*podinfo.Pod, groupSize int32) []*podinfo.Pod {
	per := int64(max(groupSize, 1))
	return blocking.Replacements(pods, (int64(s.Spec.Replicas)+int64(s.Spec.Delta))*per, int32(int64(s.Spec.Delta)*per), guardian.Replacement)
}

// capacityNow is what every node can take as the capacity sources count it, read from the caches now:
// node allocatable and, when the cluster serves Dynamic Resource Allocation, its devices.
func (b *base) capacityNow() *capacity.Capacity {
	return capacity.New(b.candidates(), capacity.Standard(b.devices())...)
}

// candidates lists every node with its pods and what they request, for the capacity ledger.
func (v *view) candidates() []capacity.Candidate {
	nodes, _ := v.nodes.List(labels.Everything())
	out := make([]capacity.Candidate, 0, len(nodes))
	for _, n := range nodes {
		pods, _ := v.podsOn(n.Name)
		out = append(out, capacity.Candidate{Node: n, Pods: pods, Used: capacity.UsedBy(pods)})
	}
	return out
}
