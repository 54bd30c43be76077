package check

import (
	"fmt"
	"sort"
	"strings"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/trigger"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// Workloads is what Analyze reads about the owners of blocked pods; *workload.Store implements it.
type Workloads = workload.Reader

// Cluster is the snapshot Analyze works on, read from informer listers.
type Cluster struct {
	Nodes      []*corev1.Node
	Pods       []*podinfo.Pod
	PDBs       []*policyv1.PodDisruptionBudget
	Namespaces []*corev1.Namespace
	// Pools are the MachineConfigPools; nil in cordon mode (--mco=false, or no MachineConfigPool API).
	Pools []*mcfgv1.MachineConfigPool
	// Pending are the unscheduled replacements of surges in flight: the scheduler places them first.
	Pending   []*podinfo.Pod
	Workloads Workloads
	// Surge returns the Surge of a target, of any phase, or nil; nil when Surges are not known.
	Surge func(*workload.Target) *v1alpha1.Surge
	// Sources are the capacity sources the replacements are placed on (see capacity.Standard); nil
	// counts node allocatable alone.
	Sources capacity.Sources
	// DrainNeed answers whether a node's pending MCO update drains it (the daemon's MCD answers,
	// see mco.NodeAnswer); nil answers "unknown" for every node.
	DrainNeed func(*corev1.Node, *mcfgv1.MachineConfigPool) mco.Answer
	// Rollouts are the drain sources' rollouts other than the MCO's (trigger.Kind.Rollout), each
	// predicted as a pseudo-pool after the MachineConfigPools.
	Rollouts []trigger.Rollout
	// Selectors, when set, holds the PDBs' parsed selectors across analyses (the daemon's, renewed on
	// a timer); nil parses each PDB's selector once per analysis.
	Selectors *blocking.SelectorCache
}

// Config is the part of the guardian's configuration that changes the prediction.
type Config struct {
	// NamespaceSelector and PoolSelector are --namespace-selector and --pool-selector; nil selects all.
	NamespaceSelector, PoolSelector labels.Selector
	// Excludes tells the namespaces left out whatever the selector says (options.Excludes: the
	// platform's and the guardian's own, unless --platform-namespaces); nil excludes none.
	Excludes func(namespace string) bool
	// MaxSurgeReplicas is --max-surge-replicas; 0 means blocking.MaxSurge.
	MaxSurgeReplicas int32
	// NilKeepsCount is the LLMInferenceService replica semantics (see workload.PlanSurge).
	NilKeepsCount bool
	// HoldAll is --restore=pool: every surge of an update is held until the pool is Updated, so the
	// capacity the surges take adds up over the whole update instead of per wave.
	HoldAll bool
	// ReadyTimes are observed replacement-ready times by workload kind (the target's kind).
	ReadyTimes map[string]time.Duration
	// ReadyEstimate is used for kinds without an observation; zero leaves the added time unknown.
	ReadyEstimate time.Duration
}

// nextConfig is the config an up-to-date pool is assumed to target next, to predict the order of
// its next update.
const nextConfig = "rendered-next"

// Analyze predicts, pool by pool, which pods will block the drain of each node still to update, and
// what the guardian will do about each.
func Analyze(cl Cluster, cfg Config) *Report {
	a := newAnalysis(cl, cfg)
	r := &Report{Mode: "mco"}
	if cl.Pools == nil {
		r.Mode = "cordon"
		r.Pools = append(r.Pools, a.pool(NoPool, true, "", 1, byName(cl.Nodes), nil))
	} else {
		r.Pools = append(r.Pools, a.mcoPools()...)
	}
	for _, ro := range cl.Rollouts {
		r.Pools = append(r.Pools, a.pool(ro.Name, true, ro.Drain, ro.Width, a.inScope(ro.Order), nil))
	}
	return r
}

// mcoPools predicts every MachineConfigPool's next update, then the nodes in no pool.
func (a *analysis) mcoPools() []Pool {
	cl, cfg := a.cl, a.cfg
	var out []Pool
	pools := append([]*mcfgv1.MachineConfigPool{}, cl.Pools...)
	sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
	byPool := mco.PoolsByNode(pools, cl.Nodes)
	for _, p := range pools {
		plan, drain := predict(p, mco.NodesInPool(p, pools, cl.Nodes))
		ans, pending := a.poolDrains(p, plan)
		if pending && ans.Need == mco.NeedNoDrain {
			out = append(out, Pool{Name: p.Name, MaxUnavailable: plan.MaxUnavailable, Nodes: []Node{}, Drain: ans.Need.String(), DrainReason: ans.String()})
			continue
		}
		selected := cfg.PoolSelector == nil || cfg.PoolSelector.Matches(labels.Set(p.Labels))
		pool := a.pool(p.Name, selected, drain, plan.MaxUnavailable, plan.Order(), stages(plan))
		if pending {
			pool.Drain, pool.DrainReason = ans.Need.String(), ans.String()
		}
		out = append(out, pool)
	}
	var orphans []*corev1.Node
	for _, n := range cl.Nodes {
		if byPool[n.Name] == nil {
			orphans = append(orphans, n)
		}
	}
	if len(orphans) > 0 {
		out = append(out, a.pool(NoPool, true, "", 1, byName(orphans), nil))
	}
	return out
}

// predict is mco.PredictTargets, or for a pool that has nothing left to update, the order of its next
// update: as if a new config were targeted now. It also returns the config the update drains to:
// the drain id of the daemon's Surges (a Surge that failed for it is not made again).
func predict(p *mcfgv1.MachineConfigPool, members []*corev1.Node) (mco.Plan, string) {
	plan := mco.PredictTargets(p, members)
	if len(plan.Order()) > 0 || len(members) == 0 {
		return plan, p.Spec.Configuration.Name
	}
	next := p.DeepCopy()
	next.Spec.Configuration.Name = nextConfig
	return mco.PredictTargets(next, members), nextConfig
}

// poolDrains is whether the pool's pending update drains (mco.PoolAnswer), and whether it has
// one pending: a pool with nothing pending is predicted for a next update nobody knows yet.
func (a *analysis) poolDrains(p *mcfgv1.MachineConfigPool, plan mco.Plan) (mco.Answer, bool) {
	if len(plan.Order()) == 0 {
		return mco.Answer{}, false
	}
	if a.cl.DrainNeed == nil {
		return mco.Answer{Reason: "the machine-config daemon's answers are not read"}, true
	}
	return mco.PoolAnswer(p, plan.Order(), a.cl.DrainNeed), true
}

func stages(p mco.Plan) map[string]string {
	out := map[string]string{}
	for stage, nodes := range map[string][]*corev1.Node{StageUpdating: p.Updating, StageNext: p.Now, StageLater: p.Later, StageSkipped: p.Skipped} {
		for _, n := range nodes {
			out[n.Name] = stage
		}
	}
	return out
}

func byName(nodes []*corev1.Node) []*corev1.Node {
	out := append([]*corev1.Node{}, nodes...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// analysis holds the indexes of one Analyze call.
type analysis struct {
	cl         Cluster
	cfg        Config
	stallCfg   guardian.StallConfig
	podsByNode map[string][]*podinfo.Pod
	pdbs       *blocking.PDBIndex
	namespaces map[string]*corev1.Namespace
	// sources are the capacity sources the ledgers count: cl.Sources, or node allocatable alone.
	sources capacity.Sources
	// cands holds every node with its pods and what they use, computed once; waveCands is the
	// buffer candidates fills for each wave (see candidates); candIndex finds a node's entry.
	cands, waveCands []capacity.Candidate
	candIndex        map[string]int
}

func newAnalysis(cl Cluster, cfg Config) *analysis {
	a := &analysis{cl: cl, cfg: cfg, podsByNode: map[string][]*podinfo.Pod{}, pdbs: cl.Selectors.Index(cl.PDBs), namespaces: map[string]*corev1.Namespace{}}
	for _, p := range cl.Pods {
		if p.Spec.NodeName != "" {
			a.podsByNode[p.Spec.NodeName] = append(a.podsByNode[p.Spec.NodeName], p)
		}
	}
	for _, ns := range cl.Namespaces {
		a.namespaces[ns.Name] = ns
	}
	if a.sources = cl.Sources; a.sources == nil {
		a.sources = capacity.Standard(nil)
	}
	// A prediction has no concurrency limit: the limit delays surges, it does not stall them.
	a.stallCfg = guardian.StallConfig{
		NamespaceSelector: cfg.NamespaceSelector, Excludes: cfg.Excludes, MaxSurgeReplicas: cfg.MaxSurgeReplicas,
		NilKeepsCount: cfg.NilKeepsCount, Predicting: true,
	}
	return a
}

// pool predicts one pool whose remaining nodes drain in order, maxUnavailable at a time; drain is
// the config the pool updates to (a Surge that failed for it is not retried).
func (a *analysis) pool(name string, selected bool, drain string, maxUnavailable int, order []*corev1.Node, stage map[string]string) Pool {
	p := Pool{Name: name, MaxUnavailable: max(1, maxUnavailable), Nodes: []Node{}}
	// held are the replacements placed so far that still take capacity when the next one is placed.
	var held []*podinfo.Pod
	var waveTimes []time.Duration
	var t surgeTimes
	for start := 0; start < len(order); start += p.MaxUnavailable {
		wave := order[start:min(start+p.MaxUnavailable, len(order))]
		if !a.cfg.HoldAll {
			held = nil
		}
		ledger := guardian.NewLedger(capacity.New(a.candidates(wave), a.sources...), append(append([]*podinfo.Pod{}, a.cl.Pending...), held...))
		var slowest time.Duration
		for _, n := range wave {
			node := Node{Name: n.Name, Stage: stage[n.Name], Wave: start/p.MaxUnavailable + 1}
			for _, d := range a.node(n, selected, drain, ledger) {
				node.Blocks = append(node.Blocks, d.Block)
				if d.Verdict.Resolvable() && d.replacements > 0 {
					slowest = max(slowest, t.add(a.cfg, d.kind))
				}
			}
			p.Nodes = append(p.Nodes, node)
		}
		held = append(held, ledger.Booked()...)
		waveTimes = append(waveTimes, slowest)
	}
	p.Plan = a.plan(p)
	p.Plan.AddedTimeSource = t.source()
	if t.known() {
		var total time.Duration
		for _, w := range waveTimes {
			total += w
		}
		p.Plan.AddedTime = Duration(total)
	}
	return p
}

// surgeTimes tracks where the replacement-ready times of a pool's surges come from.
type surgeTimes struct {
	surges, observed, unknown int
}

// add counts one surge of the kind and returns how long its replacement takes to be Ready.
func (t *surgeTimes) add(cfg Config, kind string) time.Duration {
	t.surges++
	if d, ok := cfg.ReadyTimes[kind]; ok {
		t.observed++
		return d
	}
	if cfg.ReadyEstimate <= 0 {
		t.unknown++
	}
	return cfg.ReadyEstimate
}

func (t surgeTimes) known() bool { return t.surges > 0 && t.unknown == 0 }

func (t surgeTimes) source() string {
	switch {
	case t.surges == 0:
		return "none"
	case t.unknown > 0:
		return "unknown"
	case t.observed == t.surges:
		return "observed"
	}
	return "estimate"
}

// decision is a Block with what the plan needs of it.
type decision struct {
	Block
	kind         string
	replacements int
}

// node decides every pod that would block n's drain with the daemon's own decision
// (guardian.DecideStalls), booking the surges in the wave's ledger.
func (a *analysis) node(n *corev1.Node, poolSelected bool, drain string, ledger *guardian.Ledger) []decision {
	found := a.pdbs.Find(a.podsByNode[n.Name])
	sort.SliceStable(found, func(i, j int) bool {
		if found[i].Pod.Namespace != found[j].Pod.Namespace {
			return found[i].Pod.Namespace < found[j].Pod.Namespace
		}
		return found[i].Pod.Name < found[j].Pod.Name
	})
	w := guardian.Wave{Node: n.Name, Drain: guardian.NodeDrain{Drain: drain}, PoolSelected: poolSelected, Ledger: ledger,
		Stalls: guardian.ObserveStalls(a.stallCfg, poolSelected, found, snapshotReader{a})}
	out := make([]decision, 0, len(found))
	for i, d := range guardian.DecideStalls(a.stallCfg, w) {
		if d.SameAs >= 0 {
			out = append(out, sameStall(out[d.SameAs], w.Stalls[i]))
			continue
		}
		out = append(out, toDecision(w.Stalls[i], d, a.sources))
	}
	return out
}

// snapshotReader answers guardian.ObserveStalls from the analysis's snapshot.
type snapshotReader struct{ a *analysis }

// Namespace is the snapshot's namespace; nil when it holds none of that name.
func (r snapshotReader) Namespace(name string) *corev1.Namespace { return r.a.namespaces[name] }

// Owner reads the pod's owner chain from the snapshot's workloads.
func (r snapshotReader) Owner(pod *podinfo.Pod) guardian.Owner {
	return workload.Observe(r.a.cl.Workloads, pod)
}

// Surge is the target's Surge; nil when the snapshot knows no Surges.
func (r snapshotReader) Surge(t *workload.Target) *v1alpha1.Surge {
	if r.a.cl.Surge == nil {
		return nil
	}
	return r.a.cl.Surge(t)
}

// GroupPods are the pods of the set, by its name label: only the model of a group is taken from them.
func (r snapshotReader) GroupPods(pod *podinfo.Pod, o guardian.Owner) []*podinfo.Pod {
	var pods []*podinfo.Pod
	for _, p := range r.a.cl.Pods {
		if p.Namespace == pod.Namespace && p.Labels[workload.LWSSetNameLabel] == o.Target.PodOwner.Name {
			pods = append(pods, p)
		}
	}
	return pods
}

// PDBStatusBehind is false: a prediction does not wait for a PDB's status to catch up with its pods
// (the daemon defers such a stall by seconds).
func (r snapshotReader) PDBStatusBehind(*policyv1.PodDisruptionBudget) bool { return false }

// toDecision turns the stall decision into the report's block; sources say what the replacements
// ask.
func toDecision(st guardian.Stall, d guardian.Decision, sources capacity.Sources) decision {
	out := decision{Block: Block{Namespace: st.Pod.Namespace, Pod: st.Pod.Name, PDB: st.PDB.Name, Regarding: d.Regarding,
		Verdict: Verdict(d.Reason.String()), Detail: d.Detail}}
	if d.Target != nil {
		out.Workload, out.kind = string(d.Target.Ref.Kind)+" "+d.Target.Ref.Name, string(d.Target.Ref.Kind)
	}
	switch {
	case d.Outcome == guardian.OutcomeSurge:
		out.Detail, out.Replicas, out.replacements = "", d.Delta, int(d.Delta)
		out.Extra = extended(replicaRequests(st, sources), int64(d.Delta))
		out.Changes = changes(d.Fields)
		if len(out.Extra) > 0 {
			out.Verdict = ResolvableWithCapacity
		}
	case d.Outcome == guardian.OutcomeCovered:
		// The Surge's replacements are counted with the cluster's pending ones.
		out.Detail, out.Replicas = fmt.Sprintf("(Surge %s in flight serves it)", d.Existing.Name), d.Existing.Spec.Delta
		out.Changes = changes(d.Existing.Spec.Fields)
	case d.Reason == guardian.StallNoCapacity:
		out.Replicas, out.Extra, out.Missing = d.Delta, extended(replicaRequests(st, sources), int64(d.Delta)), quantities(d.Missing)
	}
	return out
}

// replicaRequests is what one replica the surge adds requests: the blocked pod's requests, or for a
// multi-node workload those of every pod of its group.
func replicaRequests(st guardian.Stall, sources capacity.Sources) corev1.ResourceList {
	if st.Group == nil {
		return sources.Asks(st.Pod)
	}
	out := corev1.ResourceList{}
	for _, p := range st.Group.Pods {
		for name, q := range sources.Asks(p) {
			v := out[name]
			v.Add(q)
			out[name] = v
		}
	}
	return out
}

// sameStall is the block of a second pod of a workload decided already: one surge serves both.
func sameStall(first decision, st guardian.Stall) decision {
	d := first
	d.Namespace, d.Pod, d.PDB, d.replacements, d.Extra, d.Missing = st.Pod.Namespace, st.Pod.Name, st.PDB.Name, 0, nil, nil
	d.Detail = strings.TrimSpace(d.Detail + " (one surge serves every blocked pod of the workload on this node)")
	return d
}

func changes(fields []workload.Field) []Change {
	out := make([]Change, 0, len(fields))
	for _, f := range fields {
		out = append(out, Change{Path: f.Path, From: f.Original, To: f.Set})
	}
	return out
}

// candidates lists every node with its pods for the capacity check; the nodes of the wave being
// drained count as cordoned.
//
// Every wave of every pool checks against the same nodes but for the wave's own: the candidates and
// what their pods use are computed once, and the slice returned is the analysis's buffer, valid until
// the next call.
func (a *analysis) candidates(wave []*corev1.Node) []capacity.Candidate {
	copy(a.waveCands, a.allCandidates())
	for _, n := range wave {
		if i, ok := a.candIndex[n.Name]; ok {
			cordoned := *a.cands[i].Node // a shallow copy: only Spec.Unschedulable differs
			cordoned.Spec.Unschedulable = true
			a.waveCands[i].Node = &cordoned
		}
	}
	return a.waveCands
}

// allCandidates lists every node with its pods and what they use, computed on first use.
func (a *analysis) allCandidates() []capacity.Candidate {
	if a.cands == nil {
		a.cands, a.candIndex = make([]capacity.Candidate, 0, len(a.cl.Nodes)), make(map[string]int, len(a.cl.Nodes))
		for _, n := range a.cl.Nodes {
			a.candIndex[n.Name] = len(a.cands)
			pods := a.podsByNode[n.Name]
			a.cands = append(a.cands, capacity.Candidate{Node: n, Pods: pods, Used: capacity.UsedBy(pods)})
		}
		a.waveCands = make([]capacity.Candidate, len(a.cands))
	}
	return a.cands
}

// plan sums up the pool's blocks and the extended resources and devices their surges take.
func (a *analysis) plan(p Pool) Plan {
	plan := Plan{Stalls: map[Verdict]int{}}
	peak, wave, missing := map[string]int64{}, map[string]int64{}, map[string]int64{}
	lastWave := 0
	flush := func() {
		for name, v := range wave {
			peak[name] = max(peak[name], v)
		}
		if !a.cfg.HoldAll {
			wave = map[string]int64{}
		}
	}
	for _, n := range p.Nodes {
		if n.Wave != lastWave {
			flush()
			lastWave = n.Wave
		}
		for _, b := range n.Blocks {
			plan.Blocking++
			if b.Verdict.Resolvable() {
				plan.Resolvable++
			} else {
				plan.Stalls[b.Verdict]++
			}
			for name, v := range b.Extra {
				wave[name] += v
			}
			for name, q := range b.Missing {
				if v, err := resource.ParseQuantity(q); err == nil && countable(name) {
					missing[name] += v.Value()
				}
			}
		}
	}
	flush()
	free := a.free()
	for name, v := range peak {
		plan.Resources = append(plan.Resources, Resource{Name: name, Peak: v, Free: free[name], Missing: missing[name]})
	}
	sort.Slice(plan.Resources, func(i, j int) bool { return plan.Resources[i].Name < plan.Resources[j].Name })
	if len(plan.Stalls) == 0 {
		plan.Stalls = nil
	}
	return plan
}

// free sums, per extended resource and DeviceClass, what the schedulable, Ready nodes have free, as
// the sources count it.
func (a *analysis) free() map[string]int64 {
	var schedulable []capacity.Candidate
	for _, c := range a.allCandidates() {
		if !c.Node.Spec.Unschedulable && capacity.NodeReady(c.Node) {
			schedulable = append(schedulable, c)
		}
	}
	return a.sources.Free(schedulable)
}

// countable reports whether the plan sums a resource: an extended resource, or the devices of a
// DeviceClass.
func countable(name string) bool {
	return capacity.IsExtended(name) || capacity.IsDevices(name)
}

// extended returns the extended resources and devices (see countable) of requests, times n; nil when
// there are none.
func extended(requests corev1.ResourceList, n int64) map[string]int64 {
	var out map[string]int64
	for name, q := range requests {
		if countable(string(name)) && !q.IsZero() {
			if out == nil {
				out = map[string]int64{}
			}
			out[string(name)] = q.Value() * n
		}
	}
	return out
}

func quantities(rl corev1.ResourceList) map[string]string {
	out := make(map[string]string, len(rl))
	for name, q := range rl {
		out[string(name)] = q.String()
	}
	return out
}
