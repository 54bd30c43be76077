package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Guardian is a drain-guardian process, run exactly as a user runs it: the shipped binary, a
// kubeconfig of the drain-guardian ServiceAccount, flags.
type Guardian struct {
	// LogPath receives the process's stdout and stderr.
	LogPath string
	// HealthAddr and MetricsAddr are the loopback addresses of the probes and of /metrics (plain
	// HTTP).
	HealthAddr, MetricsAddr string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartGuardian runs `bin run` with the given flags plus loopback health and metrics addresses
// (free ports), console logs and plain-HTTP metrics, appending its output to logPath.
func StartGuardian(bin, logPath string, flags ...string) (*Guardian, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	g := &Guardian{
		LogPath:     logPath,
		HealthAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		MetricsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		done:        make(chan struct{}),
	}
	args := append([]string{
		"run",
		"--health-probe-bind-address=" + g.HealthAddr,
		"--metrics-bind-address=" + g.MetricsAddr,
		"--metrics-secure=false",
		"--log-format=console",
	}, flags...)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "=== %s drain-guardian %v\n", time.Now().Format(time.RFC3339), args)
	g.cmd = exec.Command(bin, args...)
	g.cmd.Stdout, g.cmd.Stderr = logFile, logFile
	g.cmd.SysProcAttr = childSysProcAttr()
	if err := g.cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting drain-guardian: %w", err)
	}
	go func() {
		g.err = g.cmd.Wait()
		_ = logFile.Close()
		close(g.done)
	}()
	return g, nil
}

// Pid is the process id.
func (g *Guardian) Pid() int { return g.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (g *Guardian) Exited() (bool, error) {
	select {
	case <-g.done:
		return true, g.err
	default:
		return false, nil
	}
}

// WaitReady waits until /readyz answers 200 (informer caches synced), failing early if the process
// exits.
func (g *Guardian) WaitReady(ctx context.Context, timeout time.Duration) error {
	return g.waitHTTP(ctx, timeout, "/readyz", func(status int, _ string) bool { return status == http.StatusOK })
}

// WaitLeader waits until the process reports drain_guardian_leader 1 on /metrics.
func (g *Guardian) WaitLeader(ctx context.Context, timeout time.Duration) error {
	return g.waitHTTP(ctx, timeout, "/metrics", func(status int, body string) bool {
		return status == http.StatusOK && IsLeader(body)
	})
}

// Metrics returns the current /metrics text.
func (g *Guardian) Metrics(ctx context.Context) (string, error) {
	status, body, err := get(ctx, "http://"+g.MetricsAddr+"/metrics")
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("/metrics answered %d", status)
	}
	return body, nil
}

func (g *Guardian) waitHTTP(ctx context.Context, timeout time.Duration, path string, ok func(int, string) bool) error {
	addr := g.HealthAddr
	if path == "/metrics" {
		addr = g.MetricsAddr
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if gone, err := g.Exited(); gone {
			return false, fmt.Errorf("drain-guardian exited: %v (log: %s)", err, g.LogPath)
		}
		status, body, err := get(ctx, "http://"+addr+path)
		if err != nil {
			return false, nil
		}
		return ok(status, body), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for drain-guardian %s: %w", path, err)
	}
	return nil
}

// Kill sends SIGKILL and waits for the process to end: a crash, with no chance to clean up.
func (g *Guardian) Kill() {
	_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	<-g.done
}

// Stop sends SIGTERM, then SIGKILL if the process has not ended within 10 seconds.
func (g *Guardian) Stop() {
	_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		g.Kill()
	}
}

// IsLeader reports whether a /metrics text has drain_guardian_leader 1.
func IsLeader(metrics string) bool {
	for _, line := range strings.Split(metrics, "\n") {
		if line == "drain_guardian_leader 1" {
			return true
		}
	}
	return false
}

func get(ctx context.Context, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
