package scenarios

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/drain-guardian/drain-guardian/e2e/internal/build"
	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/faultproxy"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// The chaos suite's environment (make chaos).
const (
	chaosEnv     = "E2E_CHAOS"      // set: run the full suite, TestChaos
	chaosSeedEnv = "E2E_CHAOS_SEED" // seed of the faults and the kills (default 1)
	chaosRateEnv = "E2E_CHAOS_RATE" // share of the guardians' requests that meet a fault (default 0.1)
	chaosOutEnv  = "E2E_CHAOS_OUT"  // Markdown file whose chaos table section TestChaos replaces
)

// chaosTimeout bounds one chaos case: setup, a pool update under faults and kills, and the restore.
const chaosTimeout = 9 * time.Minute

// The phases a kill is counted in: the Surge phases a guardian can die in, and "no Surge". A kill
// counts in the phases the Surges are observed in at that moment and, when the first sight of a phase
// set it off, in that phase: every phase a surge passes through is therefore covered by construction,
// however briefly it lasts.
var chaosPhases = []string{"none", "Pending", "Surged", "Ready", "Resolved", "Restoring"}

// chaosCase is one pool scenario run under chaos.
type chaosCase struct {
	name   string
	nodes  int // one GPU each
	models []model
	// restart, when set, is the control-plane component restarted once while a Surge is Surged or
	// Ready.
	restart string
}

// chaosLoading is how long the models of the full suite take to turn Ready: long enough for a few
// leaders to come and go while a replacement loads.
const chaosLoading = "6s"

// chaosCases are the pool scenarios of the full suite.
var chaosCases = []chaosCase{
	{name: "chaos-deployment", nodes: 3, models: []model{{name: "m1", kind: "Deployment", readyDelay: chaosLoading}}, restart: build.KubeAPIServer},
	{name: "chaos-isvc", nodes: 3, models: []model{{name: "m1", kind: "InferenceService", readyDelay: chaosLoading}}, restart: build.Etcd},
	{name: "chaos-llmisvc", nodes: 3, models: []model{{name: "m1", kind: "LLMInferenceService", readyDelay: chaosLoading}}},
	{name: "chaos-models", nodes: 6, models: []model{{name: "m1", kind: "Deployment", readyDelay: chaosLoading}, {name: "m2", kind: "Deployment", readyDelay: chaosLoading}, {name: "m3", kind: "Deployment", readyDelay: chaosLoading}}},
	{name: "chaos-one-spare", nodes: 5, models: []model{{name: "d1", kind: "Deployment", readyDelay: chaosLoading}, {name: "isvc1", kind: "InferenceService", readyDelay: chaosLoading}, {name: "llm1", kind: "LLMInferenceService", readyDelay: chaosLoading}, {name: "d2", kind: "Deployment", readyDelay: chaosLoading}}},
}

// chaosRow is what one case measured.
type chaosRow struct {
	name          string
	faults        map[faultproxy.Fault]int
	kills         int
	killedIn      map[string]int // phase → kills while a Surge was observed in it
	leaderChanges int32
	restart       string // "kube-apiserver (12.3s)", or "" when none was asked for
	avail         testbed.Availability
	below         int // observations of a workload below its original count
	doubles       int // observations of two Surges of one workload, or a count above original+1
	leaks         int // Surges left and counts or specs not back to their original at the end
	pool          time.Duration
	passed        bool
}

// TestChaos runs the pool scenarios (make chaos) with every request of the guardians through a
// fault-injecting proxy, two guardians under leader election whose leader is SIGKILLed at random
// moments and at the first sight of every Surge phase, and a kube-apiserver and an etcd restart
// during a surge. It checks the promises continuously and writes the table to E2E_CHAOS_OUT.
func TestChaos(t *testing.T) {
	if os.Getenv(chaosEnv) == "" {
		t.Skipf("set %s=1 (make chaos) to run the chaos suite", chaosEnv)
	}
	seed, rate := chaosParams(t)
	var rows []*chaosRow
	for i, c := range chaosCases {
		row := &chaosRow{name: c.name}
		rows = append(rows, row)
		row.passed = t.Run(c.name, func(t *testing.T) { runChaos(t, c, seed+uint64(i), rate, row) })
	}
	table := formatChaos(seed, rate, rows)
	t.Logf("chaos suite:\n%s", table)
	kills, phases := 0, map[string]int{}
	for _, r := range rows {
		kills += r.kills
		for p, n := range r.killedIn {
			phases[p] += n
		}
	}
	if kills < 30 {
		t.Errorf("%d kills over the run, want at least 30", kills)
	}
	for _, p := range chaosPhases {
		if phases[p] == 0 {
			t.Errorf("no kill while a Surge was %s", p)
		}
	}
	if out := os.Getenv(chaosOutEnv); out != "" {
		if err := replaceSection(out, "chaos-table", table); err != nil {
			t.Fatal(err)
		}
		t.Logf("table written to %s", out)
	}
}

// TestChaosQuick is the CI subset of the chaos suite: one single-replica Deployment's pool update
// under faults and leader kills, no control-plane restart.
func TestChaosQuick(t *testing.T) {
	row := &chaosRow{name: "chaos-quick"}
	runChaos(t, chaosCase{name: row.name, nodes: 3, models: []model{{name: "m1", kind: "Deployment"}}}, 7, 0.1, row)
	row.passed = !t.Failed()
	t.Logf("chaos:\n%s", formatChaos(7, 0.1, []*chaosRow{row}))
	// Each phase the Surge moves to is written by a leader, which is killed when it is seen: a
	// surge that passes Pending, Surged, Ready and Restoring gives at least a few kills.
	if row.kills < 2 {
		t.Errorf("%d kills, want at least 2", row.kills)
	}
	if faultproxy.Sum(row.faults) == 0 {
		t.Error("no fault was injected")
	}
}

func chaosParams(t *testing.T) (uint64, float64) {
	seed, rate := uint64(1), 0.1
	if v := os.Getenv(chaosSeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", chaosSeedEnv, v)
		}
		seed = n
	}
	if v := os.Getenv(chaosRateEnv); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			t.Fatalf("%s=%q: want a number in [0, 1]", chaosRateEnv, v)
		}
		rate = r
	}
	return seed, rate
}

// runChaos runs one case and fills row.
func runChaos(t *testing.T, c chaosCase, seed uint64, rate float64, row *chaosRow) {
	s := newScenarioWithin(t, chaosTimeout, c.name, gpuNodes(c.nodes, 1), "", selectors(c.models)...)
	for _, m := range c.models {
		s.createModel(m)
	}
	specs := s.kserveSpecs(c.models)
	inv := s.watchInvariants()

	proxyLog, err := os.Create(filepath.Join(testBed.CP.LogDir(), "faultproxy-"+c.name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxyLog.Close() })
	proxy, err := faultproxy.Start(faultproxy.Config{
		Upstream: testBed.CP.Server(), UpstreamCA: testBed.CP.ServerCA(), Seed: seed, Rate: rate, Log: proxyLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	kubeconfig := filepath.Join(testBed.CP.Dir(), "guardian-"+c.name+".kubeconfig")
	if err := proxy.WriteKubeconfig(testBed.CP.GuardianKubeconfig(), kubeconfig); err != nil {
		t.Fatal(err)
	}

	f := s.startFleet(kubeconfig)
	leaseTransitions := s.waitLeaseHolder()
	s.obs.StartSampling()
	s.updatePool()
	start := time.Now()

	chaosCtx, stopChaos := context.WithCancel(s.ctx)
	var wg sync.WaitGroup
	k := &killer{rng: rand.New(rand.NewPCG(seed, 0xc4a05)), fleet: f, inv: inv, killedIn: map[string]int{}}
	wg.Go(func() { k.run(chaosCtx, s) })
	restarted := make(chan string, 1)
	if c.restart != "" {
		wg.Go(func() { restarted <- s.restartDuringSurge(chaosCtx, inv, c.restart) })
	}

	s.eventually(chaosTimeout, "pool "+s.pool+" to be Updated under chaos", func() (bool, error) {
		p, err := testBed.Pool(s.ctx, s.pool)
		if err != nil {
			return false, nil
		}
		return p.Spec.Configuration.Name == nextConfig && p.Status.Configuration.Name == nextConfig &&
			int(p.Status.UpdatedMachineCount) == len(s.nodes), nil
	})
	row.pool = time.Since(start)
	// The faults and the kills go on: the restore must get through them too.
	s.eventually(3*time.Minute, "no Surge left and every model back to one Ready replica", func() (bool, error) {
		if s.hasSurge() {
			return false, nil
		}
		return s.obs.ReadyPods() >= 1 && inv.atOriginal(), nil
	})
	stopChaos()
	wg.Wait()
	if c.restart != "" {
		row.restart = <-restarted
	}

	row.avail = s.obs.StopSampling()
	row.faults = proxy.Counts()
	row.kills, row.killedIn = k.counts()
	row.leaderChanges = s.leaseTransitions() - leaseTransitions
	row.below, row.doubles = inv.violations(t)
	row.leaks = len(s.surges()) + inv.notAtOriginal(t) + s.specsChanged(specs)
	if errs := f.errors(); len(errs) > 0 {
		t.Errorf("starting guardians: %v", errs)
	}
	t.Logf("%s: pool %v, faults %s, %d kills %v, %d leader changes, restart %q, availability %v",
		c.name, row.pool.Round(100*time.Millisecond), faultproxy.Summary(row.faults), row.kills, row.killedIn, row.leaderChanges, row.restart, row.avail)
	if row.avail.Samples < 10 || row.avail.Available != row.avail.Samples {
		t.Errorf("a model was unavailable: %v", row.avail)
	}
	if row.below+row.doubles+row.leaks > 0 {
		t.Errorf("%d observations below an original count, %d doubles, %d leaks", row.below, row.doubles, row.leaks)
	}
	if c.restart != "" && !strings.HasPrefix(row.restart, c.restart+" (") {
		t.Errorf("restart of %s: %s", c.restart, row.restart)
	}
}

// kserveSpecs returns the spec JSON of each KServe model, keyed by kind/name.
func (s *scenario) kserveSpecs(models []model) map[string]string {
	out := map[string]string{}
	for _, m := range models {
		if gvr, ok := kserveResource(m.kind); ok {
			out[m.kind+"/"+m.name] = specJSON(s.getUnstructured(gvr, m.name))
		}
	}
	return out
}

func kserveResource(kind string) (schema.GroupVersionResource, bool) {
	switch kind {
	case "InferenceService":
		return testbed.InferenceServices, true
	case "LLMInferenceService":
		return testbed.LLMInferenceServices, true
	}
	return schema.GroupVersionResource{}, false
}

// specsChanged counts the KServe models whose spec is not byte for byte what it was.
func (s *scenario) specsChanged(before map[string]string) int {
	n := 0
	for key, spec := range before {
		kind, name, _ := strings.Cut(key, "/")
		gvr, _ := kserveResource(kind)
		if got := specJSON(s.getUnstructured(gvr, name)); got != spec {
			s.t.Errorf("%s spec not restored:\nbefore %s\nafter  %s", key, spec, got)
			n++
		}
	}
	return n
}

// invariants watches, through informers of its own (not through the proxy), every Deployment,
// StatefulSet and Surge of the namespace and records each change that breaks a promise.
type invariants struct {
	mu       sync.Mutex
	original map[string]int32 // kind/name → replicas when the watch started
	current  map[string]int32
	below    []string
	doubles  []string
	phases   map[string]string // Surge name → phase
	targets  map[string]string // Surge name → target kind/name
	seen     map[string]bool   // phases seen since the watch started
	newPhase chan string       // a phase seen for the first time
}

// watchInvariants starts the watch; the originals are the counts at this moment.
func (s *scenario) watchInvariants() *invariants {
	s.t.Helper()
	inv := &invariants{
		original: map[string]int32{}, current: map[string]int32{}, phases: map[string]string{},
		targets: map[string]string{}, seen: map[string]bool{}, newPhase: make(chan string, 16),
	}
	kubeInf := informers.NewSharedInformerFactoryWithOptions(s.kube, 0, informers.WithNamespace(s.ns))
	dynInf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(testBed.CP.Dynamic(), 0, s.ns, nil)
	deployments := kubeInf.Apps().V1().Deployments().Informer()
	statefulSets := kubeInf.Apps().V1().StatefulSets().Informer()
	surges := dynInf.ForResource(testbed.Surges).Informer()
	kubeInf.Start(s.ctx.Done())
	dynInf.Start(s.ctx.Done())
	if !cache.WaitForCacheSync(s.ctx.Done(), deployments.HasSynced, statefulSets.HasSynced, surges.HasSynced) {
		s.fatalf("invariant watch did not sync")
	}
	for _, obj := range deployments.GetStore().List() {
		d := obj.(*appsv1.Deployment)
		inv.original["Deployment/"+d.Name] = replicasOf(d.Spec.Replicas)
	}
	for _, obj := range statefulSets.GetStore().List() {
		st := obj.(*appsv1.StatefulSet)
		inv.original["StatefulSet/"+st.Name] = replicasOf(st.Spec.Replicas)
	}
	for k, v := range inv.original {
		inv.current[k] = v
	}
	onWorkload := func(obj any) {
		switch o := obj.(type) {
		case *appsv1.Deployment:
			inv.count("Deployment/"+o.Name, replicasOf(o.Spec.Replicas), s.obs.Elapsed())
		case *appsv1.StatefulSet:
			inv.count("StatefulSet/"+o.Name, replicasOf(o.Spec.Replicas), s.obs.Elapsed())
		}
	}
	for _, i := range []cache.SharedIndexInformer{deployments, statefulSets} {
		_, _ = i.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onWorkload, UpdateFunc: func(_, o any) { onWorkload(o) }})
	}
	_, _ = surges.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { inv.surge(o, false, s.obs.Elapsed()) },
		UpdateFunc: func(_, o any) { inv.surge(o, false, s.obs.Elapsed()) },
		DeleteFunc: func(o any) { inv.surge(o, true, s.obs.Elapsed()) },
	})
	return inv
}

func replicasOf(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// count records a workload's count: below its original breaks a promise, and so does more than
// one above it (every model here has one replica, so a single surge adds exactly one).
func (inv *invariants) count(key string, replicas int32, at time.Duration) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	orig, ok := inv.original[key]
	if !ok {
		return
	}
	inv.current[key] = replicas
	switch {
	case replicas < orig:
		inv.below = append(inv.below, fmt.Sprintf("%+.1fs %s at %d, original %d", at.Seconds(), key, replicas, orig))
	case replicas > orig+1:
		inv.doubles = append(inv.doubles, fmt.Sprintf("%+.1fs %s at %d, original %d", at.Seconds(), key, replicas, orig))
	}
}

// surge records a Surge's phase and checks that no other Surge has the same target.
func (inv *invariants) surge(obj any, deleted bool, at time.Duration) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if deleted {
		delete(inv.phases, u.GetName())
		delete(inv.targets, u.GetName())
		return
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	if phase == "" {
		phase = "Pending"
	}
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "target", "kind")
	name, _, _ := unstructured.NestedString(u.Object, "spec", "target", "name")
	target := kind + "/" + name
	for other, t := range inv.targets {
		if other != u.GetName() && t == target {
			inv.doubles = append(inv.doubles, fmt.Sprintf("%+.1fs Surges %s and %s of %s", at.Seconds(), other, u.GetName(), target))
		}
	}
	inv.phases[u.GetName()], inv.targets[u.GetName()] = phase, target
	if !inv.seen[phase] {
		inv.seen[phase] = true
		select {
		case inv.newPhase <- phase:
		default:
		}
	}
}

// currentPhases returns the phases of the Surges that exist now ("none" without any).
func (inv *invariants) currentPhases() []string {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	set := map[string]bool{}
	for _, p := range inv.phases {
		set[p] = true
	}
	if len(set) == 0 {
		return []string{"none"}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func (inv *invariants) hasSeen(phases ...string) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, p := range phases {
		if inv.seen[p] {
			return true
		}
	}
	return false
}

// atOriginal reports whether every workload is back at its original count.
func (inv *invariants) atOriginal() bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for k, v := range inv.original {
		if inv.current[k] != v {
			return false
		}
	}
	return true
}

// notAtOriginal counts, and reports, the workloads whose count is not the original.
func (inv *invariants) notAtOriginal(t *testing.T) int {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	n := 0
	for k, v := range inv.original {
		if inv.current[k] != v {
			t.Errorf("%s ends at %d replicas, original %d", k, inv.current[k], v)
			n++
		}
	}
	return n
}

// violations reports and counts the observations that broke a promise.
func (inv *invariants) violations(t *testing.T) (below, doubles int) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, v := range inv.below {
		t.Errorf("below the original count: %s", v)
	}
	for _, v := range inv.doubles {
		t.Errorf("double surge: %s", v)
	}
	return len(inv.below), len(inv.doubles)
}

// guardianFleet is two guardians under leader election through the proxy, each restarted a second after it
// exits, as the Deployment's kubelet would.
type guardianFleet struct {
	s     *scenario
	flags []string

	mu    sync.Mutex
	slots [2]*testbed.Guardian
	errs  []error
}

func (s *scenario) startFleet(kubeconfig string) *guardianFleet {
	s.t.Helper()
	f := &guardianFleet{s: s, flags: []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=true",
		"--leader-election-namespace=" + controlplane.GuardianNamespace,
		"--leader-election-id=e2e-" + s.name,
		"--lease-duration=4s", "--renew-deadline=3s", "--retry-period=500ms",
	}}
	for i := range f.slots {
		s.logs = append(s.logs, f.logPath(i))
		f.spawn(i)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	s.t.Cleanup(func() {
		cancel()
		<-done
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, g := range f.slots {
			if g != nil {
				g.Stop()
			}
		}
	})
	go func() {
		defer close(done)
		f.supervise(ctx)
	}()
	return f
}

func (f *guardianFleet) logPath(i int) string {
	return filepath.Join(testBed.CP.LogDir(), fmt.Sprintf("guardian-%s-%c.log", f.s.name, 'a'+i))
}

func (f *guardianFleet) spawn(i int) {
	g, err := testbed.StartGuardian(testBed.GuardianBinary, f.logPath(i), append(f.s.guardianFlags(), f.flags...)...)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.errs = append(f.errs, err)
		return
	}
	f.slots[i] = g
}

func (f *guardianFleet) supervise(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	exited := map[int]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for i := range f.slots {
				f.mu.Lock()
				g := f.slots[i]
				f.mu.Unlock()
				if g != nil {
					if gone, _ := g.Exited(); !gone {
						continue
					}
				}
				if _, ok := exited[i]; !ok {
					exited[i] = now
				}
				if now.Sub(exited[i]) >= time.Second {
					delete(exited, i)
					f.spawn(i)
				}
			}
		}
	}
}

// other returns the running guardian that is not g, or nil.
func (f *guardianFleet) other(g *testbed.Guardian) *testbed.Guardian {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.slots {
		if o != nil && o != g {
			if gone, _ := o.Exited(); !gone {
				return o
			}
		}
	}
	return nil
}

// leader returns the guardian that reports leading, or nil.
func (f *guardianFleet) leader(ctx context.Context) *testbed.Guardian {
	f.mu.Lock()
	slots := f.slots
	f.mu.Unlock()
	for _, g := range slots {
		if g == nil {
			continue
		}
		if m, err := g.Metrics(ctx); err == nil && testbed.IsLeader(m) {
			return g
		}
	}
	return nil
}

func (f *guardianFleet) errors() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs...)
}

// A leader lives between killMin and killMax once the killer has seen it lead, unless a Surge phase
// is seen for the first time first: long enough to sync and write, not to finish a surge.
const killMin, killMax = 500 * time.Millisecond, 4 * time.Second

// killer SIGKILLs the leader at random moments of its leadership and at the first sight of each
// Surge phase, and now and then the standby with it.
type killer struct {
	rng   *rand.Rand
	fleet *guardianFleet
	inv   *invariants

	mu       sync.Mutex
	kills    int
	killedIn map[string]int
}

func (k *killer) run(ctx context.Context, s *scenario) {
	for {
		g := k.waitLeader(ctx)
		if g == nil {
			return
		}
		// written is the phase whose first sight triggers this kill: the leader killed is the one that
		// has just written it (or, if it died meanwhile, the one that took over from it), so the kill
		// counts in that phase even when the Surge has moved on since: Ready lasts one sync.
		written := ""
		select {
		case <-ctx.Done():
			return
		case <-time.After(killMin + time.Duration(k.rng.Float64()*float64(killMax-killMin))):
			g = k.fleet.leader(ctx)
		case written = <-k.inv.newPhase:
			g = k.waitLeader(ctx)
		}
		if g == nil {
			continue
		}
		phases := k.inv.currentPhases()
		if written != "" && !slices.Contains(phases, written) {
			phases = append(phases, written)
		}
		s.note("CHAOS: SIGKILL the leader (pid %d) while Surges are %v", g.Pid(), phases)
		g.Kill()
		k.count(phases)
		// One time in three the standby goes too: for a second no guardian runs at all.
		if k.rng.IntN(3) == 0 {
			if other := k.fleet.other(g); other != nil {
				s.note("CHAOS: SIGKILL the standby (pid %d) as well", other.Pid())
				other.Kill()
				k.count(phases)
			}
		}
	}
}

func (k *killer) count(phases []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kills++
	for _, p := range phases {
		k.killedIn[p]++
	}
}

// waitLeader polls until a guardian leads; nil when ctx ends first.
func (k *killer) waitLeader(ctx context.Context) *testbed.Guardian {
	for {
		if g := k.fleet.leader(ctx); g != nil {
			return g
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (k *killer) counts() (int, map[string]int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int, len(k.killedIn))
	for p, n := range k.killedIn {
		out[p] = n
	}
	return k.kills, out
}

// restartDuringSurge restarts a control-plane component once a Surge is Surged or Ready, and says
// how it went.
func (s *scenario) restartDuringSurge(ctx context.Context, inv *invariants, name string) string {
	for !inv.hasSeen("Surged", "Ready") {
		select {
		case <-ctx.Done():
			return "not reached: no Surge was Surged or Ready"
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.note("CHAOS: restart %s", name)
	start := time.Now()
	if err := testBed.CP.Restart(ctx, name); err != nil {
		return fmt.Sprintf("failed: %v", err)
	}
	took := time.Since(start)
	s.note("CHAOS: %s back after %v", name, took.Round(100*time.Millisecond))
	return fmt.Sprintf("%s (%.1fs)", name, took.Seconds())
}

// waitLeaseHolder waits until the case's Lease has a holder and returns its transitions so far.
func (s *scenario) waitLeaseHolder() int32 {
	s.t.Helper()
	var transitions int32
	s.eventually(30*time.Second, "a guardian to hold the Lease", func() (bool, error) {
		l, err := s.kube.CoordinationV1().Leases(controlplane.GuardianNamespace).Get(s.ctx, "e2e-"+s.name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return false, nil
		}
		if l.Spec.LeaseTransitions != nil {
			transitions = *l.Spec.LeaseTransitions
		}
		return true, nil
	})
	return transitions
}

// leaseTransitions reads how often the case's Lease changed hands.
func (s *scenario) leaseTransitions() int32 {
	l, err := s.kube.CoordinationV1().Leases(controlplane.GuardianNamespace).Get(s.ctx, "e2e-"+s.name, metav1.GetOptions{})
	if err != nil || l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

// formatChaos renders the rows as a Markdown table with a totals line.
func formatChaos(seed uint64, rate float64, rows []*chaosRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Seed %d, fault rate %.0f %% of the guardians' requests, TIME_SCALE %g.\n\n", seed, 100*rate, suiteTimeScale)
	b.WriteString("| scenario | faults injected | kills (by Surge phase) | leader changes | control-plane restart | availability | below original | doubles | leaks | pool update | result |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	var faults, kills, below, doubles, leaks int
	killedIn := map[string]int{}
	for _, r := range rows {
		faults += faultproxy.Sum(r.faults)
		kills += r.kills
		below, doubles, leaks = below+r.below, doubles+r.doubles, leaks+r.leaks
		for p, n := range r.killedIn {
			killedIn[p] += n
		}
		restart := r.restart
		if restart == "" {
			restart = "—"
		}
		result := "passed"
		if !r.passed {
			result = "**failed**"
		}
		fmt.Fprintf(&b, "| %s | %d: %s | %d (%s) | %d | %s | %.1f %% (%d/%d) | %d | %d | %d | %.1f s | %s |\n",
			r.name, faultproxy.Sum(r.faults), faultproxy.Summary(r.faults), r.kills, phaseSummary(r.killedIn), r.leaderChanges, restart,
			100*r.avail.Share(), r.avail.Available, r.avail.Samples, r.below, r.doubles, r.leaks, r.pool.Seconds(), result)
	}
	if len(rows) > 1 {
		fmt.Fprintf(&b, "| **total** | %d | %d (%s) | | | | %d | %d | %d | | |\n", faults, kills, phaseSummary(killedIn), below, doubles, leaks)
	}
	return b.String()
}

func phaseSummary(killedIn map[string]int) string {
	var parts []string
	for _, p := range chaosPhases {
		if n := killedIn[p]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// replaceSection replaces what lies between <!-- name:begin --> and <!-- name:end --> in the file.
func replaceSection(path, name, content string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin, end := "<!-- "+name+":begin -->", "<!-- "+name+":end -->"
	text := string(b)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s … %s section", path, begin, end)
	}
	text = text[:i+len(begin)] + "\n" + content + text[j:]
	return os.WriteFile(path, []byte(text), 0o644)
}
