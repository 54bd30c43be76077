package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/drain-guardian/drain-guardian/e2e/internal/gpuopsim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/nmosim"
)

// The operators a scenario can run besides the MCO and KServe simulators, which every scenario
// has: each acts on every node of the cluster (the GPU Operator upgrades every GPU node), so a
// scenario starts the one it needs and stops it when it ends.
const (
	GPUOperator             = "gpuopsim"
	NodeMaintenanceOperator = "nmosim"
)

var operators = map[string]func(ctx context.Context, cfg *rest.Config, timeScale float64) error{
	GPUOperator:             gpuopsim.Run,
	NodeMaintenanceOperator: nmosim.Run,
}

// StartOperator runs the named operator simulator (GPUOperator, NodeMaintenanceOperator) at the
// test bed's time scale, logging to its log (LogPath(name)), until the returned stop is called;
// stop waits for it to end. The simulator's CRD must be installed (the control plane installs
// e2e/crds).
func (tb *TestBed) StartOperator(name string) (stop func(), err error) {
	run, ok := operators[name]
	if !ok {
		return nil, fmt.Errorf("no operator simulator %q", name)
	}
	f, err := os.OpenFile(filepath.Join(tb.CP.LogDir(), name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(f), textlogger.Verbosity(2)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := run(ctx, tb.CP.RESTConfig(), tb.timeScale); err != nil && ctx.Err() == nil {
			fmt.Fprintf(tb.out, "%s stopped with an error at %s: %v\n", name, time.Now().Format(time.TimeOnly), err)
		}
	})
	return func() {
		cancel()
		wg.Wait()
		_ = f.Close()
	}, nil
}
