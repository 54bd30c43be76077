package scenarios

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// benchEnv turns the pool benchmark on (make bench-pool); benchReadyEnv sets the model's load time.
const (
	benchEnv      = "E2E_BENCH"
	benchReadyEnv = "E2E_BENCH_READY"
	benchOutEnv   = "E2E_BENCH_OUT"
	// benchVariantsEnv, when set, runs only the named variants (comma-separated, e.g. baseline,prepared).
	benchVariantsEnv = "E2E_BENCH_VARIANTS"
)

// benchPool is one shape of pool the benchmark updates.
type benchPool struct {
	title        string
	nodes, gpus  int
	models       int
	baselineGPUs int // GPUs per node for the two-replica baseline, which needs twice the model GPUs
}

// benchVariant is one way of running the pool's models through the update.
type benchVariant struct {
	name  string
	label string
	// guardian is nil when no guardian runs; otherwise its flags.
	guardian []string
	// replicas is each model's count (1 when 0); two replicas need the baseline's GPUs.
	replicas int32
	// policy marks the restore-policy comparison (issue 9), run at the longest load time only.
	policy bool
	// prepare runs the window workflow: the pool is paused with its new config pending and prepared
	// (drain-guardian.io/prepare), then unpaused once every model is prepared; the pool time counts
	// from the unpause.
	prepare bool
}

var benchVariants = []benchVariant{
	{name: "baseline", label: "(a) two replicas, no guardian", replicas: 2},
	{name: "lookahead-off", label: "(b) guardian, --lookahead=0", guardian: []string{"--lookahead=0"}},
	{name: "lookahead", label: "(c) guardian, defaults (--restore=auto --lookahead=1)", guardian: []string{}},
	{name: "none", label: "(d) one replica, no guardian"},
	{name: "prepared", label: "(e) guardian, defaults, pool prepared before the window", guardian: []string{}, prepare: true},
	{name: "pool", label: "guardian, --restore=pool --lookahead=0", guardian: []string{"--restore=pool", "--lookahead=0"}, policy: true},
	{name: "node", label: "guardian, --restore=node --lookahead=0", guardian: []string{"--restore=node", "--lookahead=0"}, policy: true},
}

// benchRow is one measured pool update.
type benchRow struct {
	pool    string
	ready   time.Duration
	variant benchVariant
	took    time.Duration
	// updated is how many of nodes were updated when the run ended (all, unless capped).
	updated, nodes int
	capped         bool
	availability   float64
	gpuMinutes     float64
	surges         int
	mcoStalls      int
}

// TestBenchPool updates the same pools under each variant, for each model load time: two-replica
// models with no guardian (the zero-downtime baseline), the guardian with look-ahead off and on,
// single replicas with no guardian (the drain stalls: the run is capped), and the restore policies
// compared at the longest load time. It prints a Markdown table: pool update time, its ratio to the
// baseline, availability, GPU-minutes held by surges (the extra pods over each model's own count,
// integrated over the update), surges started and failed drain attempts of the MCO. It runs only
// under make bench-pool: it takes minutes, and its figures are read, not asserted (every run with a
// guardian still checks the models stayed available and the pool finished).
func TestBenchPool(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skipf("set %s=1 (make bench-pool) to run the pool benchmark", benchEnv)
	}
	readies, err := parseReadies(os.Getenv(benchReadyEnv))
	if err != nil {
		t.Fatalf("%s: %v", benchReadyEnv, err)
	}
	pools := []benchPool{
		{title: "one spare GPU (5 nodes x 1 GPU, 4 models)", nodes: 5, gpus: 1, models: 4, baselineGPUs: 2},
		{title: "spare GPUs (4 nodes x 2 GPUs, 3 models)", nodes: 4, gpus: 2, models: 3, baselineGPUs: 2},
	}
	longest := slices.Max(readies)
	only := strings.Split(os.Getenv(benchVariantsEnv), ",")
	var rows []benchRow
	run := 0
	for _, ready := range readies {
		for _, p := range pools {
			baseline := time.Duration(0)
			for _, v := range benchVariants {
				if v.policy && ready != longest || os.Getenv(benchVariantsEnv) != "" && !slices.Contains(only, v.name) {
					continue
				}
				run++
				name := fmt.Sprintf("bench-%d-%s", run, v.name)
				t.Run(name, func(t *testing.T) {
					row := runBench(t, name, p, v, ready, baseline)
					if v.name == "baseline" {
						baseline = row.took
					}
					rows = append(rows, row)
				})
			}
		}
	}
	table := formatBench(rows)
	t.Logf("pool benchmark:\n%s", table)
	out := os.Getenv(benchOutEnv)
	if out == "" {
		out = filepath.Join(testBed.CP.Dir(), "bench-pool.md")
	}
	if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("table written to %s", out)
}

// parseReadies reads a comma-separated list of model load times (default 5s,20s).
func parseReadies(v string) ([]time.Duration, error) {
	if v == "" {
		v = "5s,20s"
	}
	var out []time.Duration
	for _, f := range strings.Split(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q: want positive durations separated by commas", f)
		}
		out = append(out, d)
	}
	return out, nil
}

// runBench runs one pool update and measures it. Without a guardian and with single replicas the
// drain stalls for good: the run stops at twice the baseline's time (capped).
func runBench(t *testing.T, name string, p benchPool, v benchVariant, ready, baseline time.Duration) benchRow {
	gpus, replicas := p.gpus, max(v.replicas, 1)
	if replicas > 1 {
		gpus = p.baselineGPUs
	}
	models := make([]model, p.models)
	for i := range models {
		models[i] = model{name: fmt.Sprintf("m%d", i+1), kind: "Deployment", readyDelay: ready.String(), replicas: replicas}
	}
	s := newScenario(t, name, gpuNodes(p.nodes, gpus), "", selectors(models)...)
	for _, m := range models {
		s.createModel(m)
	}
	if v.guardian != nil {
		s.startGuardian(v.guardian...)
	}
	held := s.sampleExtraPods(models, replicas)
	s.obs.StartSampling()
	if v.prepare {
		s.prepareWindow()
	} else {
		s.updatePool()
	}
	start := time.Now()
	limit := poolTimeout + 2*time.Duration(p.nodes)*ready
	stalls := v.guardian == nil && replicas == 1
	if stalls {
		limit = 2 * baseline
		if baseline == 0 {
			limit = 2 * time.Minute
		}
	}
	row := benchRow{pool: p.title, ready: ready, variant: v, nodes: p.nodes}
	done := func() bool {
		pool, err := testBed.Pool(s.ctx, s.pool)
		if err != nil {
			return false
		}
		row.updated = int(pool.Status.UpdatedMachineCount)
		return pool.Spec.Configuration.Name == nextConfig && pool.Status.Configuration.Name == nextConfig &&
			row.updated == len(s.nodes)
	}
	if stalls {
		for time.Since(start) < limit && !done() {
			time.Sleep(pollInterval)
		}
		row.capped = !done()
	} else {
		s.eventually(limit, "the pool to be Updated", func() (bool, error) { return done(), nil })
	}
	row.took = time.Since(start)
	if v.guardian != nil {
		for _, m := range models {
			s.waitModelBack(m)
		}
	}
	row.gpuMinutes = held()
	if stalls {
		row.availability = s.obs.StopSampling().Share()
	} else {
		row.availability = s.assertAvailable().Share()
	}
	row.surges = len(s.events()["SurgeStarted"])
	row.mcoStalls = s.failedDrainAttempts()
	t.Logf("%s, T_ready %v, %s: pool update %v (%d/%d nodes), GPU-minutes held by surges %.2f, failed drain attempts %d",
		p.title, ready, v.label, row.took.Round(100*time.Millisecond), row.updated, row.nodes, row.gpuMinutes, row.mcoStalls)
	return row
}

// failedDrainAttempts counts the MCO simulator's failed drain attempts on the scenario's nodes: the
// stalls the MCO itself saw.
func (s *scenario) failedDrainAttempts() int {
	f, err := os.Open(testBed.LogPath("mcosim"))
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "drain attempt failed") {
			continue
		}
		for _, node := range s.nodes {
			if strings.Contains(line, `"`+node+`"`) {
				n++
				break
			}
		}
	}
	return n
}

// sampleExtraPods integrates, every 100 ms until stopped, the pods each model runs beyond its own
// count (each holds one GPU), and returns the stop function, which answers the GPU-minutes.
func (s *scenario) sampleExtraPods(models []model, replicas int32) func() float64 {
	var mu sync.Mutex
	var gpuSeconds float64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(testbed.SampleInterval)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				pods, err := s.kube.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{})
				if err != nil {
					continue
				}
				per := map[string]int32{}
				for _, p := range pods.Items {
					if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
						per[p.Labels["app"]]++
					}
				}
				extra := int32(0)
				for _, m := range models {
					extra += max(per[m.name]-replicas, 0)
				}
				mu.Lock()
				gpuSeconds += float64(extra) * now.Sub(last).Seconds()
				mu.Unlock()
				last = now
			}
		}
	}()
	return func() float64 {
		close(done)
		<-stopped
		mu.Lock()
		defer mu.Unlock()
		return gpuSeconds / 60
	}
}

func formatBench(rows []benchRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "MCO simulator TIME_SCALE %v (a node's reboot: %v).\n\n", suiteTimeScale, scaledReboot())
	b.WriteString("| pool | T_ready | variant | pool update | ratio to (a) | availability | GPU-minutes held by surges | surges | failed MCO drain attempts |\n")
	b.WriteString("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	type poolReady struct {
		pool  string
		ready time.Duration
	}
	baseline := map[poolReady]time.Duration{}
	for _, r := range rows {
		if r.variant.name == "baseline" {
			baseline[poolReady{r.pool, r.ready}] = r.took
		}
	}
	for _, r := range rows {
		ratio := "-"
		if base := baseline[poolReady{r.pool, r.ready}]; base > 0 && !r.capped {
			ratio = fmt.Sprintf("%.2fx", r.took.Seconds()/base.Seconds())
		}
		took := fmt.Sprintf("%.1f s", r.took.Seconds())
		if r.capped {
			took = fmt.Sprintf("stalled: %d/%d nodes at %.0f s", r.updated, r.nodes, r.took.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %v | %s | %s | %s | %.1f%% | %.2f | %d | %d |\n",
			r.pool, r.ready, r.variant.label, took, ratio, 100*r.availability, r.gpuMinutes, r.surges, r.mcoStalls)
	}
	return b.String()
}

// scaledReboot is the simulated reboot time at the suite's time scale.
func scaledReboot() time.Duration {
	t, err := mcosim.ScaledTimings(suiteTimeScale)
	if err != nil {
		return 0
	}
	return t.Reboot
}
