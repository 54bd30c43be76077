package scenarios

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/drain-guardian/drain-guardian/e2e/internal/demo"
)

// defaultTimeScale makes the MachineConfig operator simulator 20 times faster than the real MCO:
// a node's drain retries every 3 s and its reboot lasts 3 s.
const defaultTimeScale = 0.05

// testBed is shared by every scenario of the binary: starting a control plane takes tens of
// seconds.
var testBed *demo.TestBed

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
	dir, err := os.MkdirTemp("", "drain-guardian-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testBed, err = demo.StartTestBed(context.Background(), demo.TestBedConfig{Dir: dir, TimeScale: scale, Out: os.Stderr})
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
