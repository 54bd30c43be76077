// Package testbed is what the end-to-end scenarios, the benchmarks and the demo share: a local control
// plane with the MachineConfig operator and KServe simulators running in-process, drain-guardian
// processes run as a user runs them, an Observer that records a timeline of a pool update and
// samples a model's availability, and builders of the pools, models and PDBs the scenarios use.
package testbed

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	mcfgclientset "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/drain-guardian/drain-guardian/e2e/internal/build"
	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/kservesim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
)

// TestBedConfig configures StartTestBed.
type TestBedConfig struct {
	// Dir holds the control plane's state and the logs (Dir/logs); required.
	Dir string
	// RepoRoot is the repository root; empty means found from the working directory.
	RepoRoot string
	// TimeScale multiplies every delay of the MachineConfig operator simulator (0.05 = 20x faster).
	TimeScale float64
	// KServe selects the KServe release the KServe simulator imitates.
	KServe kservesim.Options
	// Out receives progress lines; nil discards them.
	Out io.Writer
	// NodeMonitorGracePeriod is passed to the control plane (see controlplane.Options).
	NodeMonitorGracePeriod time.Duration
}

// TestBed is a running control plane with the MachineConfig operator and KServe simulators, and
// a freshly built drain-guardian binary.
type TestBed struct {
	// CP is the control plane.
	CP *controlplane.ControlPlane
	// MCFG is a machineconfiguration clientset authenticated as admin.
	MCFG mcfgclientset.Interface
	// GuardianBinary is the path of the drain-guardian binary built from the repository.
	GuardianBinary string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	logs   []*os.File
	// timeScale is the simulators' time scale (TestBedConfig.TimeScale).
	timeScale float64
	// builder builds (and checks) the binaries of the repository.
	builder *build.Builder
	out     io.Writer
}

// StartTestBed checks that the control plane and drain-guardian are built (`make controlplane build`;
// it never builds, so a caller's deadline never includes a build), starts the control plane and
// runs both simulators in-process, each logging to Dir/logs/<name>.log.
func StartTestBed(ctx context.Context, cfg TestBedConfig) (*TestBed, error) {
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	root := cfg.RepoRoot
	if root == "" {
		var err error
		if root, err = build.RepoRoot(); err != nil {
			return nil, err
		}
	}
	if cfg.TimeScale <= 0 {
		return nil, fmt.Errorf("time scale must be positive, got %v", cfg.TimeScale)
	}
	builder := build.New(root, out)
	if err := builder.Check(build.DrainGuardian); err != nil {
		return nil, err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: cfg.Dir, RepoRoot: root, Out: out, NodeMonitorGracePeriod: cfg.NodeMonitorGracePeriod})
	if err != nil {
		return nil, err
	}
	mcfg, err := mcfgclientset.NewForConfig(cp.RESTConfig())
	if err != nil {
		cp.Stop()
		return nil, err
	}
	tb := &TestBed{CP: cp, MCFG: mcfg, GuardianBinary: builder.Path(build.DrainGuardian), timeScale: cfg.TimeScale, out: out, builder: builder}
	// The simulators outlive the caller's start-up context: they stop with Stop.
	simCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	tb.cancel = cancel
	sims := map[string]func(context.Context) error{
		"mcosim":    func(ctx context.Context) error { return mcosim.Run(ctx, cp.RESTConfig(), cfg.TimeScale) },
		"kservesim": func(ctx context.Context) error { return kservesim.Run(ctx, cp.RESTConfig(), cfg.KServe) },
	}
	for name, run := range sims {
		f, err := os.Create(filepath.Join(cp.LogDir(), name+".log"))
		if err != nil {
			tb.Stop()
			return nil, err
		}
		tb.logs = append(tb.logs, f)
		logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(f), textlogger.Verbosity(2)))
		tb.wg.Go(func() {
			if err := run(klog.NewContext(simCtx, logger)); err != nil && simCtx.Err() == nil {
				fmt.Fprintf(out, "%s stopped with an error: %v\n", name, err)
			}
		})
	}
	return tb, nil
}

// Stop stops the simulators, then the control plane. The state directory is kept.
func (tb *TestBed) Stop() {
	if tb.cancel != nil {
		tb.cancel()
	}
	tb.wg.Wait()
	for _, f := range tb.logs {
		_ = f.Close()
	}
	tb.CP.Stop()
}

// LogPath returns the path of a simulator's or a control-plane component's log.
func (tb *TestBed) LogPath(name string) string {
	return filepath.Join(tb.CP.LogDir(), name+".log")
}
