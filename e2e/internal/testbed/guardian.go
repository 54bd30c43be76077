package testbed

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
)

// Guardian is a drain-guardian process, run exactly as a user runs it: the shipped binary, a
// kubeconfig of the drain-guardian ServiceAccount, flags.
type Guardian struct {
	// LogPath receives the process's stdout and stderr.
	LogPath string
	// HealthAddr and MetricsAddr are the loopback addresses of the probes and of /metrics (plain
	// HTTP).
	HealthAddr, MetricsAddr string

	*controlplane.Process
}

// StartGuardian runs `bin run` with the given flags plus loopback health and metrics addresses
// (free ports), console logs and plain-HTTP metrics, appending its output to logPath.
func StartGuardian(bin, logPath string, flags ...string) (*Guardian, error) {
	ports, err := controlplane.FreePorts(2)
	if err != nil {
		return nil, err
	}
	g := &Guardian{
		LogPath:     logPath,
		HealthAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		MetricsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
	}
	args := append([]string{
		"run",
		"--health-probe-bind-address=" + g.HealthAddr,
		"--metrics-bind-address=" + g.MetricsAddr,
		"--metrics-secure=false",
		"--log-format=console",
	}, flags...)
	header := fmt.Sprintf("=== %s drain-guardian %v", time.Now().Format(time.RFC3339), args)
	if g.Process, err = controlplane.StartProcess("drain-guardian", bin, args, logPath, header); err != nil {
		return nil, err
	}
	return g, nil
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

// Stop sends SIGTERM, then SIGKILL if the process has not ended within 10 seconds.
func (g *Guardian) Stop() { g.Process.Stop(10 * time.Second) }

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

// SaveProfile fetches the Go profile name (heap, profile, ...) with query (e.g. "gc=1",
// "seconds=60") from /debug/pprof/ of a guardian run with --profiling, into path.
func (g *Guardian) SaveProfile(ctx context.Context, name, query, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.MetricsAddr+"/debug/pprof/"+name+"?"+query, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: status %d (is --profiling set?)", name, resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("profile %s: %w", name, err)
	}
	return f.Close()
}
