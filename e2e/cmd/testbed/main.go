// Command testbed runs the local test bed: a real Kubernetes control plane with fake GPU-capable
// kubelets (kwok), the MachineConfig operator simulator and the KServe simulator, all on loopback.
//
//	testbed up       start it in the background (idempotent) and print how to use it
//	testbed status   tell whether it runs and what it serves
//	testbed down     stop exactly what up started
//	testbed serve    run it in the foreground (what up starts, detached)
//	testbed demo     the newcomer's demo on a private control plane: a stalled pool update resolved
//	                 by drain-guardian with no downtime, as a live timeline and a verdict
//	testbed build    build what is missing of the control plane and drain-guardian, with progress,
//	                 waiting for another process that builds (what `make controlplane` runs)
//
// State lives in <repo>/.cluster (override with --dir): the admin kubeconfig, the guardian's
// kubeconfig, component logs in logs/ and the supervisor's log in testbed.log. Binaries are always
// built into <repo>/.cluster/bin.
// TIME_SCALE (default 1.0) scales every delay of the MachineConfig operator simulator;
// KSERVESIM_LLM_NIL_KEEPS_COUNT=true makes the KServe simulator treat an absent
// LLMInferenceService replica count as "keep the current count" (newer RHOAI) instead of 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/drain-guardian/drain-guardian/e2e/internal/build"
	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/demo"
	"github.com/drain-guardian/drain-guardian/e2e/internal/kservesim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
)

const (
	pidFile   = "testbed.pid"
	readyFile = "testbed.ready"
	logFile   = "testbed.log"

	upTimeout     = 10 * time.Minute
	downTimeout   = 60 * time.Second
	simulatorStop = 10 * time.Second
)

func main() {
	fs := flag.NewFlagSet("testbed", flag.ExitOnError)
	dirFlag := fs.String("dir", "", "state directory (default <repo>/.cluster)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: testbed [--dir DIR] up|down|status|serve|demo|build\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() != 1 {
		fs.Usage()
		os.Exit(2)
	}
	root, err := build.RepoRoot()
	if err != nil {
		fatal(err)
	}
	dir := *dirFlag
	if dir == "" {
		dir = filepath.Join(root, ".cluster")
	}
	if dir, err = filepath.Abs(dir); err != nil {
		fatal(err)
	}
	tb := &testbed{root: root, dir: dir}
	switch fs.Arg(0) {
	case "up":
		err = tb.up()
	case "down":
		err = tb.down()
	case "status":
		err = tb.status()
	case "serve":
		err = tb.serve()
	case "build":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = buildAll(ctx, root)
		stop()
	case "demo":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		// The build comes first and has no deadline: the demo's own time is the story's.
		if err = buildAll(ctx, root); err == nil {
			err = demo.Run(ctx, os.Stdout, root)
		}
		stop()
	default:
		fs.Usage()
		os.Exit(2)
	}
	if err != nil {
		fatal(err)
	}
}

// buildAll builds every binary the test bed runs that is missing or stale, printing progress; it
// waits without a deadline for another process that holds the build lock.
func buildAll(ctx context.Context, root string) error {
	start := time.Now()
	b := build.New(root, os.Stdout)
	if err := b.Ensure(ctx, append(append(build.ControlPlaneBinaries, build.OperatorBinaries...), build.DrainGuardian)...); err != nil {
		return err
	}
	fmt.Printf("control plane and drain-guardian are built (%s)\n", time.Since(start).Round(time.Second))
	return nil
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
	os.Exit(1)
}

type testbed struct {
	root string
	dir  string
}

func (tb *testbed) path(name string) string { return filepath.Join(tb.dir, name) }

// up builds what is missing, starts `testbed serve` detached (own session, output to
// testbed.log) and returns once the cluster is ready. When the test bed already runs it only
// prints how to use it.
func (tb *testbed) up() error {
	if pid, ok := tb.running(); ok {
		if _, err := os.Stat(tb.path(readyFile)); err == nil {
			fmt.Printf("test bed already running (pid %d)\n", pid)
			tb.printUsage()
			return nil
		}
		fmt.Printf("test bed starting (pid %d); waiting until it is ready\n", pid)
		return tb.waitReady(pid, nil)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Build in the foreground so that progress shows where the user is looking.
	b := build.New(tb.root, os.Stdout)
	if err := b.EnsureControlPlane(ctx); err != nil {
		return err
	}
	if err := b.Ensure(ctx, build.DrainGuardian); err != nil {
		fmt.Printf("warning: drain-guardian does not build, the test bed starts without it:\n%v\n", err)
	}

	_ = os.Remove(tb.path(readyFile))
	_ = os.Remove(tb.path(pidFile))
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.Create(tb.path(logFile))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(self, "--dir", tb.dir, "serve")
	cmd.Dir = tb.root
	cmd.Stdout, cmd.Stderr = logf, logf
	// A session of its own: closing the terminal or ^C in it does not reach the supervisor.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the supervisor: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Printf("starting the test bed (pid %d, log %s)...\n", cmd.Process.Pid, tb.path(logFile))
	return tb.waitReady(cmd.Process.Pid, exited)
}

// waitReady waits until the supervisor pid marks the test bed ready, fails, or exits.
func (tb *testbed) waitReady(pid int, exited <-chan error) error {
	deadline := time.Now().Add(upTimeout)
	for {
		if _, err := os.Stat(tb.path(readyFile)); err == nil {
			fmt.Println("test bed is up")
			tb.printUsage()
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the supervisor exited (%v) before the test bed was ready; last lines of %s:\n%s",
				err, tb.path(logFile), lastLines(tb.path(logFile), 30))
		default:
		}
		if exited == nil && !alive(pid) {
			return fmt.Errorf("the supervisor (pid %d) is gone; see %s", pid, tb.path(logFile))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the test bed was not ready after %s; see %s", upTimeout, tb.path(logFile))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (tb *testbed) printUsage() {
	kubectl := build.New(tb.root, nil).Path(build.Kubectl)
	fmt.Printf(`
  export KUBECONFIG=%s
  kubectl:              %s
  guardian kubeconfig:  %s
  run the guardian:     %s run --kubeconfig=%s
  logs:                 %s, %s
  stop:                 testbed down
`, tb.path("kubeconfig"), kubectl, tb.path("guardian.kubeconfig"),
		filepath.Join(tb.root, "bin", build.DrainGuardian), tb.path("guardian.kubeconfig"),
		tb.path(logFile), tb.path("logs"))
}

// down stops the supervisor named by the pid file, which stops the simulators and then the
// control plane in reverse start order.
func (tb *testbed) down() error {
	pid, ok := tb.running()
	if !ok {
		_ = os.Remove(tb.path(pidFile))
		_ = os.Remove(tb.path(readyFile))
		fmt.Println("test bed is not running")
		return nil
	}
	fmt.Printf("stopping the test bed (pid %d)...\n", pid)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	deadline := time.Now().Add(downTimeout)
	for alive(pid) {
		if time.Now().After(deadline) {
			// Its children die with it (parent-death signal).
			fmt.Printf("the supervisor did not stop within %s; killing it\n", downTimeout)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = os.Remove(tb.path(pidFile))
	_ = os.Remove(tb.path(readyFile))
	fmt.Println("test bed stopped")
	return nil
}

func (tb *testbed) status() error {
	pid, ok := tb.running()
	if !ok {
		fmt.Println("test bed: not running")
		return nil
	}
	if _, err := os.Stat(tb.path(readyFile)); err != nil {
		fmt.Printf("test bed: starting (pid %d)\n", pid)
		return nil
	}
	fmt.Printf("test bed: running (pid %d)\n", pid)
	cfg, err := clientcmd.BuildConfigFromFlags("", tb.path("kubeconfig"))
	if err != nil {
		return err
	}
	cfg.Timeout = 5 * time.Second
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	v, err := c.Discovery().ServerVersion()
	if err != nil {
		fmt.Printf("  apiserver %s: unreachable: %v\n", cfg.Host, err)
		return nil
	}
	fmt.Printf("  apiserver %s: Kubernetes %s\n", cfg.Host, v.GitVersion)
	nodes, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err == nil {
		fmt.Printf("  nodes: %d\n", len(nodes.Items))
	}
	tb.printUsage()
	return nil
}

// serve runs the control plane and the simulators until SIGTERM or SIGINT, then stops them.
func (tb *testbed) serve() error {
	if pid, ok := tb.running(); ok && pid != os.Getpid() {
		return fmt.Errorf("a test bed already runs in %s (pid %d)", tb.dir, pid)
	}
	if err := os.MkdirAll(tb.dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(tb.path(pidFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(tb.path(pidFile))
	defer os.Remove(tb.path(readyFile))

	timeScale := 1.0
	if s := os.Getenv("TIME_SCALE"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("TIME_SCALE=%q: want a positive number", s)
		}
		timeScale = v
	}

	var kserveOpts kservesim.Options
	if s := os.Getenv("KSERVESIM_LLM_NIL_KEEPS_COUNT"); s != "" {
		v, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("KSERVESIM_LLM_NIL_KEEPS_COUNT=%q: want true or false", s)
		}
		kserveOpts.LLMNilKeepsCount = v
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: tb.dir, RepoRoot: tb.root, Out: os.Stdout})
	if err != nil {
		return err
	}
	defer cp.Stop()

	simCtx, cancelSims := context.WithCancel(ctx)
	var wg sync.WaitGroup
	runSim := func(name string, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Printf("%s: starting\n", name)
			if err := run(simCtx); err != nil && simCtx.Err() == nil {
				fmt.Printf("%s stopped with an error: %v\n", name, err)
				return
			}
			fmt.Printf("%s: stopped\n", name)
		}()
	}
	runSim("mcosim", func(ctx context.Context) error { return mcosim.Run(ctx, cp.RESTConfig(), timeScale) })
	runSim("kservesim", func(ctx context.Context) error { return kservesim.Run(ctx, cp.RESTConfig(), kserveOpts) })

	if err := os.WriteFile(tb.path(readyFile), []byte(cp.Server()+"\n"), 0o644); err != nil {
		cancelSims()
		return err
	}
	fmt.Printf("test bed ready (TIME_SCALE=%g)\n", timeScale)
	<-ctx.Done()
	fmt.Println("stopping the simulators")
	cancelSims()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(simulatorStop):
		fmt.Printf("simulators still running after %s; stopping the control plane anyway\n", simulatorStop)
	}
	fmt.Println("stopping the control plane")
	return nil
}

// running returns the pid in the pid file when that process is alive and is a test bed supervisor
// (a stale pid file may name a pid reused by something else).
func (tb *testbed) running() (int, bool) {
	data, err := os.ReadFile(tb.path(pidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 || !alive(pid) {
		return 0, false
	}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "testbed") || args[len(args)-1] != "serve" {
			return 0, false
		}
	}
	return pid, true
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// /proc/PID/stat is "PID (COMM) STATE ..."; COMM may hold spaces, STATE follows the last ')'.
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false
		}
	}
	return true
}

func lastLines(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
