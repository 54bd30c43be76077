package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/e2e/internal/demo"
)

// benchEnv turns the pool benchmark on (make bench-pool); benchReadyEnv sets the model's load time.
const (
	benchEnv      = "E2E_BENCH"
	benchReadyEnv = "E2E_BENCH_READY"
	benchOutEnv   = "E2E_BENCH_OUT"
)

// benchPool is one shape of pool the benchmark updates.
type benchPool struct {
	title        string
	nodes, gpus  int
	models       int
	baselineGPUs int // GPUs per node for the two-replica baseline, which needs twice the model GPUs
}

// benchRow is one measured pool update.
type benchRow struct {
	pool, variant string
	took          time.Duration
	availability  float64
	gpuMinutes    float64
	surges        int
}

// TestBenchPool updates the same pools with the guardian under each restore policy, and with
// two-replica models and no guardian (the zero-downtime baseline), and prints a Markdown table:
// pool update time, its ratio to the baseline, availability, GPU-minutes held by surges (the extra
// pods over each model's own count, integrated over the update) and surges started. It runs only
// under make bench-pool: it takes minutes, and its figures are read, not asserted (every run still
// checks the model stayed available and the pool finished).
func TestBenchPool(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skipf("set %s=1 (make bench-pool) to run the pool benchmark", benchEnv)
	}
	ready := 20 * time.Second
	if v := os.Getenv(benchReadyEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration", benchReadyEnv, v)
		}
		ready = d
	}
	pools := []benchPool{
		{title: "one spare GPU (5 nodes x 1 GPU, 4 models)", nodes: 5, gpus: 1, models: 4, baselineGPUs: 2},
		{title: "spare GPUs (4 nodes x 2 GPUs, 3 models)", nodes: 4, gpus: 2, models: 3, baselineGPUs: 2},
	}
	var rows []benchRow
	for pi, p := range pools {
		for _, variant := range []string{"baseline", "auto", "pool", "node"} {
			name := fmt.Sprintf("bench-%d-%s", pi+1, variant)
			t.Run(name, func(t *testing.T) {
				rows = append(rows, runBench(t, name, p, variant, ready))
			})
		}
	}
	table := formatBench(rows, ready)
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

// runBench runs one pool update and measures it.
func runBench(t *testing.T, name string, p benchPool, variant string, ready time.Duration) benchRow {
	gpus, replicas := p.gpus, int32(1)
	if variant == "baseline" {
		gpus, replicas = p.baselineGPUs, 2
	}
	models := make([]model, p.models)
	for i := range models {
		models[i] = model{name: fmt.Sprintf("m%d", i+1), kind: "Deployment", readyDelay: ready.String(), replicas: replicas}
	}
	s := newScenario(t, name, gpuNodes(p.nodes, gpus), "", selectors(models)...)
	for _, m := range models {
		s.createModel(m)
	}
	if variant != "baseline" {
		s.startGuardian("--restore=" + variant)
	}
	held := s.sampleExtraPods(models, replicas)
	s.obs.StartSampling()
	s.updatePool()
	start := time.Now()
	s.eventually(poolTimeout+2*time.Duration(p.nodes)*ready, "the pool to be Updated", func() (bool, error) {
		pool, err := testBed.Pool(s.ctx, s.pool)
		if err != nil {
			return false, nil
		}
		return pool.Spec.Configuration.Name == nextConfig && pool.Status.Configuration.Name == nextConfig &&
			int(pool.Status.UpdatedMachineCount) == len(s.nodes), nil
	})
	took := time.Since(start)
	if variant != "baseline" {
		for _, m := range models {
			s.waitModelBack(m)
		}
	}
	gpuMinutes := held()
	a := s.assertAvailable()
	row := benchRow{pool: p.title, variant: variant, took: took, availability: a.Share(), gpuMinutes: gpuMinutes,
		surges: len(s.events()["SurgeStarted"])}
	t.Logf("%s %s: pool update %v, GPU-minutes held by surges %.2f", p.title, variant, took.Round(100*time.Millisecond), gpuMinutes)
	return row
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
		tick := time.NewTicker(demo.SampleInterval)
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

func formatBench(rows []benchRow, ready time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Model load time (T_ready) %v; MCO simulator TIME_SCALE %s.\n\n", ready, timeScaleOf())
	b.WriteString("| pool | variant | pool update | ratio to baseline | availability | GPU-minutes held by surges | surges |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	baseline := map[string]time.Duration{}
	for _, r := range rows {
		if r.variant == "baseline" {
			baseline[r.pool] = r.took
		}
	}
	for _, r := range rows {
		ratio := "-"
		if base := baseline[r.pool]; base > 0 {
			ratio = fmt.Sprintf("%.2fx", r.took.Seconds()/base.Seconds())
		}
		variant := "--restore=" + r.variant
		if r.variant == "baseline" {
			variant = "two replicas, no guardian"
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f s | %s | %.1f%% | %.2f | %d |\n", r.pool, variant, r.took.Seconds(), ratio, 100*r.availability, r.gpuMinutes, r.surges)
	}
	return b.String()
}

func timeScaleOf() string {
	if v := os.Getenv("TIME_SCALE"); v != "" {
		return v
	}
	return fmt.Sprint(defaultTimeScale)
}
