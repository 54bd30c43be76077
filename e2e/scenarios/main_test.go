package scenarios

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/drain-guardian/drain-guardian/e2e/internal/kservesim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// defaultTimeScale makes the MachineConfig operator simulator 20 times faster than the real MCO:
// a node's drain retries every 3 s and its reboot lasts 3 s.
const defaultTimeScale = 0.05

// suiteTimeScale is the time scale the test bed runs at (TIME_SCALE, or the default).
var suiteTimeScale = defaultTimeScale

// llmNilKeepsCountEnv selects the KServe release the simulator imitates: "true" for OpenShift AI 3.4
// and newer, where an absent LLMInferenceService replica count keeps the Deployment's count; unset or
// "false" for 3.3, where it means one. Only one simulator can own the LLMInferenceServices of a
// cluster, so `make e2e` runs the LLMInferenceService scenario once more with it set.
const llmNilKeepsCountEnv = "E2E_LLM_NIL_KEEPS_COUNT"

// llmNilKeepsCount is the semantics this run's simulator follows.
var llmNilKeepsCount bool

// testBed is shared by every scenario of the binary: starting a control plane takes tens of
// seconds.
var testBed *testbed.TestBed

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping the end-to-end scenarios in -short mode")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	scale := defaultTimeScale
	if s := os.Getenv("TIME_SCALE"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 {
			fmt.Fprintf(os.Stderr, "TIME_SCALE=%q: want a positive number\n", s)
			return 2
		}
		scale = v
	}
	suiteTimeScale = scale
	if v := os.Getenv(llmNilKeepsCountEnv); v != "" {
		keep, err := strconv.ParseBool(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%q: want true or false\n", llmNilKeepsCountEnv, v)
			return 2
		}
		llmNilKeepsCount = keep
	}
	dir, err := os.MkdirTemp("", "drain-guardian-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := testbed.TestBedConfig{
		Dir: dir, TimeScale: scale, Out: os.Stderr, KServe: kservesim.Options{LLMNilKeepsCount: llmNilKeepsCount},
	}
	if os.Getenv(scaleEnv) != "" {
		// A thousand kwok nodes on two cores: kwok's lease renewals lag, and the node lifecycle
		// controller would mark Ready pods NotReady faster than they are created.
		cfg.NodeMonitorGracePeriod = time.Hour
	}
	testBed, err = testbed.StartTestBed(context.Background(), cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the test bed: %v\n", err)
		return 1
	}
	code := m.Run()
	testBed.Stop()
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "test bed state and component logs kept in %s\n", dir)
	}
	return code
}
