package check

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// Workloads is what Analyze reads about the owners of blocked pods; *workload.Store implements it.
type Workloads interface {
	Resolve(pod metav1.Object) (*workload.Target, error)
	Get(ref workload.Ref) (*workload.Object, error)
	PodOwner(ref workload.Ref) (*workload.PodOwnerState, error)
}

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
}

// Config is the part of the guardian's configuration that changes the prediction.
type Config struct {
	// NamespaceSelector and PoolSelector are --namespace-selector and --pool-selector; nil selects all.
	NamespaceSelector, PoolSelector labels.Selector
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
		r.Pools = append(r.Pools, a.pool(NoPool, true, 1, byName(cl.Nodes), nil))
		return r
	}
	pools := append([]*mcfgv1.MachineConfigPool{}, cl.Pools...)
	sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
	byPool := mco.PoolsByNode(pools, cl.Nodes)
	for _, p := range pools {
		plan := predict(p, mco.NodesInPool(p, pools, cl.Nodes))
		selected := cfg.PoolSelector == nil || cfg.PoolSelector.Matches(labels.Set(p.Labels))
		r.Pools = append(r.Pools, a.pool(p.Name, selected, plan.MaxUnavailable, plan.Order(), stages(plan)))
	}
	var orphans []*corev1.Node
	for _, n := range cl.Nodes {
		if byPool[n.Name] == nil {
			orphans = append(orphans, n)
		}
	}
	if len(orphans) > 0 {
		r.Pools = append(r.Pools, a.pool(NoPool, true, 1, byName(orphans), nil))
	}
	return r
}

// predict is mco.PredictTargets, or for a pool that has nothing left to update, the order of its next
// update: as if a new config were targeted now.
func predict(p *mcfgv1.MachineConfigPool, members []*corev1.Node) mco.Plan {
	plan := mco.PredictTargets(p, members)
	if len(plan.Order()) > 0 || len(members) == 0 {
		return plan
	}
	next := p.DeepCopy()
	next.Spec.Configuration.Name = nextConfig
	return mco.PredictTargets(next, members)
}

func stages(p mco.Plan) map[string]string {
	out := map[string]string{}
	for stage, nodes := range map[string][]*corev1.Node{"updating": p.Updating, "next": p.Now, "later": p.Later, "skipped": p.Skipped} {
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
	podsByNode map[string][]*podinfo.Pod
	pdbs       *blocking.PDBIndex
	namespaces map[string]*corev1.Namespace
	// cands holds every node with its pods and what they use, computed once; waveCands is the
	// buffer candidates fills for each wave (see candidates); candIndex finds a node's entry.
	cands, waveCands []blocking.Candidate
	candIndex        map[string]int
}

func newAnalysis(cl Cluster, cfg Config) *analysis {
	a := &analysis{cl: cl, cfg: cfg, podsByNode: map[string][]*podinfo.Pod{}, pdbs: blocking.NewPDBIndex(cl.PDBs), namespaces: map[string]*corev1.Namespace{}}
	for _, p := range cl.Pods {
		if p.Spec.NodeName != "" {
			a.podsByNode[p.Spec.NodeName] = append(a.podsByNode[p.Spec.NodeName], p)
		}
	}
	for _, ns := range cl.Namespaces {
		a.namespaces[ns.Name] = ns
	}
	return a
}

// pool predicts one pool whose remaining nodes drain in order, maxUnavailable at a time.
func (a *analysis) pool(name string, selected bool, maxUnavailable int, order []*corev1.Node, stage map[string]string) Pool {
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
		cands := a.candidates(wave)
		var slowest time.Duration
		for _, n := range wave {
			node := Node{Name: n.Name, Stage: stage[n.Name], Wave: start/p.MaxUnavailable + 1}
			for _, d := range a.node(n, selected, cands, &held) {
				node.Blocks = append(node.Blocks, d.Block)
				if d.Verdict.Resolvable() && d.replacements > 0 {
					slowest = max(slowest, t.add(a.cfg, d.kind))
				}
			}
			p.Nodes = append(p.Nodes, node)
		}
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

// node decides every pod that would block n's drain. Several blocked pods of one workload are one
// stall, decided once, as the daemon does.
func (a *analysis) node(n *corev1.Node, poolSelected bool, cands []blocking.Candidate, held *[]*podinfo.Pod) []decision {
	pods := a.podsByNode[n.Name]
	found := a.pdbs.Find(pods)
	sort.SliceStable(found, func(i, j int) bool {
		if found[i].Pod.Namespace != found[j].Pod.Namespace {
			return found[i].Pod.Namespace < found[j].Pod.Namespace
		}
		return found[i].Pod.Name < found[j].Pod.Name
	})
	decided := map[types.UID]decision{}
	var out []decision
	for _, b := range found {
		var owner types.UID
		if c := metav1.GetControllerOf(b.Pod); c != nil {
			owner = c.UID
		}
		if prev, ok := decided[owner]; ok && owner != "" {
			d := prev
			d.Namespace, d.Pod, d.PDB, d.replacements, d.Extra, d.Missing = b.Pod.Namespace, b.Pod.Name, b.PDB.Name, 0, nil, nil
			d.Detail = strings.TrimSpace(d.Detail + " (one surge serves every blocked pod of the workload on this node)")
			out = append(out, d)
			continue
		}
		d := a.decide(b, poolSelected, cands, held)
		decided[owner] = d
		out = append(out, d)
	}
	return out
}

// decide mirrors the daemon's handling of one blocked pod (controller.handleBlocked) without acting.
func (a *analysis) decide(b blocking.Blocked, poolSelected bool, cands []blocking.Candidate, held *[]*podinfo.Pod) decision {
	d := decision{Block: Block{Namespace: b.Pod.Namespace, Pod: b.Pod.Name, PDB: b.PDB.Name, Regarding: &corev1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: b.Pod.Namespace, Name: b.Pod.Name, UID: b.Pod.UID,
	}}}
	stop := func(v Verdict, format string, args ...any) decision {
		d.Verdict, d.Detail = v, fmt.Sprintf(format, args...)
		return d
	}
	if !poolSelected {
		return stop(OutOfScope, "the pool does not match --pool-selector: the guardian leaves it alone")
	}
	if v, why := a.namespaceScope(b.Pod.Namespace); v != "" {
		return stop(v, "%s", why)
	}
	target, err := a.cl.Workloads.Resolve(b.Pod)
	var unsup *workload.UnsupportedError
	var notServed *workload.NotServedError
	switch {
	case errors.As(err, &unsup):
		return stop(UnsupportedOwner, "%s", unsup.Detail)
	case errors.As(err, &notServed):
		return stop(UnsupportedOwner, "owned by a %s, which this cluster does not serve (or the guardian may not list)", notServed.Kind)
	case err != nil:
		return stop(UnsupportedOwner, "owner not found: %v", err)
	}
	d.Workload, d.kind, d.Regarding = string(target.Ref.Kind)+" "+target.Ref.Name, string(target.Ref.Kind), target.Ref.ObjectReference()
	obj, err := a.cl.Workloads.Get(target.Ref)
	switch {
	case apierrors.IsForbidden(err) && target.Ref.ViaScale():
		gv, _ := schema.ParseGroupVersion(target.Ref.APIVersion)
		return stop(MissingRBAC, "%s %s has a /scale subresource the guardian may not use: grant get and patch on %s/scale in API group %q",
			target.Ref.Kind, target.Ref.Name, target.Ref.Resource, gv.Group)
	case errors.As(err, &notServed):
		return stop(UnsupportedOwner, "owned by a %s, which this cluster does not serve (or the guardian may not list)", notServed.Kind)
	case err != nil:
		return stop(UnsupportedOwner, "reading %s: %v", target.Ref, err)
	}
	owner, err := a.cl.Workloads.PodOwner(target.PodOwner)
	if err != nil {
		return stop(UnsupportedOwner, "reading %s: %v", target.PodOwner, err)
	}
	if obj.Ignored() || workload.IgnoredByAnnotation(owner.Annotations) {
		return stop(OptedOut, "%s=true on %s: the guardian will not surge it", workload.IgnoreAnnotation, target.Ref.Kind)
	}
	delta, why := blocking.SurgeNeeded(b.PDB)
	if b.MultiplePDBs {
		return stop(MultiplePDBs, "more than one PDB selects the pod; the Eviction API refuses it whatever the budgets")
	}
	if why != "" {
		return stop(UnsatisfiablePDB, "%s", describePDB(b.PDB, why))
	}
	fields, err := workload.PlanSurge(obj, target, owner.Replicas, delta, a.cfg.NilKeepsCount)
	if errors.As(err, &unsup) {
		return stop(UnsupportedOwner, "%s", unsup.Detail)
	} else if err != nil {
		return stop(UnsupportedOwner, "%v", err)
	}
	for _, f := range fields {
		d.Changes = append(d.Changes, Change{Path: f.Path, From: f.Original, To: f.Set})
	}
	d.Replicas = delta
	placed, missing := blocking.Fit(b.Pod, int(delta), append(append([]*podinfo.Pod{}, a.cl.Pending...), *held...), cands)
	for range placed {
		*held = append(*held, b.Pod.Unscheduled(b.Pod.Name))
	}
	d.Extra = extended(b.Pod.Spec.Requests, int64(delta))
	if placed < int(delta) {
		d.Changes = nil
		d.Missing = quantities(missing)
		return stop(NoCapacity, "%d of %d replacement(s) fit on no other schedulable node: missing %s", int(delta)-placed, delta, blocking.DescribeResources(missing))
	}
	d.replacements = placed
	d.Verdict = Resolvable
	if len(d.Extra) > 0 {
		d.Verdict = ResolvableWithCapacity
	}
	return d
}

// namespaceScope applies --namespace-selector and the namespace opt-out annotation, as the daemon does.
// Labels and annotations are the namespace owner's input: only the documented values count.
func (a *analysis) namespaceScope(name string) (Verdict, string) {
	ns, ok := a.namespaces[name]
	if !ok {
		return OutOfScope, fmt.Sprintf("namespace %s is not readable", name)
	}
	if workload.IgnoredByAnnotation(ns.Annotations) {
		return OptedOut, fmt.Sprintf("%s=true on namespace %s", workload.IgnoreAnnotation, name)
	}
	if a.cfg.NamespaceSelector != nil && !a.cfg.NamespaceSelector.Matches(labels.Set(ns.Labels)) {
		return OutOfScope, fmt.Sprintf("namespace %s does not match --namespace-selector", name)
	}
	return "", ""
}

// candidates lists every node with its pods for the capacity check; the nodes of the wave being
// drained count as cordoned.
//
// Every wave of every pool checks against the same nodes but for the wave's own: the candidates and
// what their pods use are computed once, and the slice returned is the analysis's buffer, valid until
// the next call.
func (a *analysis) candidates(wave []*corev1.Node) []blocking.Candidate {
	if a.cands == nil {
		a.cands, a.candIndex = make([]blocking.Candidate, 0, len(a.cl.Nodes)), make(map[string]int, len(a.cl.Nodes))
		for _, n := range a.cl.Nodes {
			a.candIndex[n.Name] = len(a.cands)
			pods := a.podsByNode[n.Name]
			a.cands = append(a.cands, blocking.Candidate{Node: n, Pods: pods, Used: blocking.UsedBy(pods)})
		}
		a.waveCands = make([]blocking.Candidate, len(a.cands))
	}
	copy(a.waveCands, a.cands)
	for _, n := range wave {
		if i, ok := a.candIndex[n.Name]; ok {
			cordoned := *a.cands[i].Node // a shallow copy: only Spec.Unschedulable differs
			cordoned.Spec.Unschedulable = true
			a.waveCands[i].Node = &cordoned
		}
	}
	return a.waveCands
}

// plan sums up the pool's blocks and the extended resources their surges take.
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
				if v, err := resource.ParseQuantity(q); err == nil && blocking.IsExtended(name) {
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

// free sums, per extended resource, allocatable minus requests over the schedulable, Ready nodes.
func (a *analysis) free() map[string]int64 {
	out := map[string]int64{}
	for _, n := range a.cl.Nodes {
		if n.Spec.Unschedulable || !nodeReady(n) {
			continue
		}
		used := map[string]int64{}
		for _, p := range a.podsByNode[n.Name] {
			if p.Finished() {
				continue
			}
			for name, q := range extended(p.Spec.Requests, 1) {
				used[name] += q
			}
		}
		for name, q := range n.Status.Allocatable {
			if blocking.IsExtended(string(name)) {
				out[string(name)] += max(0, q.Value()-used[string(name)])
			}
		}
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// extended returns the extended resources of requests, times n; nil when there are none.
func extended(requests corev1.ResourceList, n int64) map[string]int64 {
	var out map[string]int64
	for name, q := range requests {
		if blocking.IsExtended(string(name)) && !q.IsZero() {
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

func describePDB(pdb *policyv1.PodDisruptionBudget, why string) string {
	switch why {
	case blocking.ReasonMaxUnavailable:
		return fmt.Sprintf("PDB %s has maxUnavailable %s: added replicas raise the expected count too, so no surge helps", pdb.Name, pdb.Spec.MaxUnavailable.String())
	case blocking.ReasonFullMinAvailable:
		return fmt.Sprintf("PDB %s has minAvailable %s: it requires every replica, whatever their number", pdb.Name, pdb.Spec.MinAvailable.String())
	}
	return fmt.Sprintf("PDB %s would need more than %d added replicas", pdb.Name, blocking.MaxSurge)
}
