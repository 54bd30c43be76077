// Package build compiles the binaries of the local test bed from Go modules: the Kubernetes control
// plane (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl), etcd, kwok and the
// drain-guardian daemon itself.
//
// Control-plane binaries are built once into <repo>/.cluster/bin and reused until the go.sum of the
// module they are built in changes: the first kube-apiserver build takes minutes, and the dependency pins are the only
// input that changes them. The daemon is rebuilt when a source of its module is newer than
// bin/drain-guardian, with the flags `make build` uses.
//
// Building is a step of its own, never part of a test: `make controlplane` (Ensure, which waits for
// another builder without a deadline) runs before every suite, and the suites only Check, which
// answers at once. A test's deadline therefore never includes a build or a wait for the build lock.
package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Names of the binaries the test bed runs.
const (
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kubectl               = "kubectl"
	Etcd                  = "etcd"
	Kwok                  = "kwok"
	DrainGuardian         = "drain-guardian"
	// LWS runs the real LeaderWorkerSet controllers (kubernetes-sigs/lws) for the scenarios of
	// multi-node models; the test bed starts it only for them (TestBed.StartLWS).
	LWS = "lws"
)

// source says where a control-plane binary comes from: a Go package, built inside a module
// directory relative to e2e/ that declares the package as a tool, so that module pins its version
// and dependencies.
type source struct {
	module string
	pkg    string
}

var sources = map[string]source{
	KubeAPIServer:         {".", "k8s.io/kubernetes/cmd/kube-apiserver"},
	KubeControllerManager: {".", "k8s.io/kubernetes/cmd/kube-controller-manager"},
	KubeScheduler:         {".", "k8s.io/kubernetes/cmd/kube-scheduler"},
	Kubectl:               {".", "k8s.io/kubernetes/cmd/kubectl"},
	Etcd:                  {".", "go.etcd.io/etcd/server/v3"},
	// kwok v0.7.0 is built against Kubernetes v0.33 and does not compile against the v0.34 staging
	// modules of the e2e module: it has a module of its own.
	Kwok: {"tools/kwok", "sigs.k8s.io/kwok/cmd/kwok"},
	// The LeaderWorkerSet controllers pin their own Kubernetes and controller-runtime versions: a
	// module of its own, whose main wires lws's controllers and webhooks to the local API server.
	LWS: {"tools/lws", "github.com/drain-guardian/drain-guardian/e2e/tools/lws"},
}

// ControlPlaneBinaries lists the binaries a control plane needs, in build order (the slowest first,
// so the shared dependencies it compiles make the others quick).
var ControlPlaneBinaries = []string{KubeAPIServer, KubeControllerManager, KubeScheduler, Kubectl, Etcd, Kwok}

// OperatorBinaries are the controllers some scenarios run besides the control plane, built with it
// by `make controlplane` but checked only by the scenarios that start them.
var OperatorBinaries = []string{LWS}

// Builder builds binaries into BinDir.
type Builder struct {
	// RepoRoot is the repository root: it holds the daemon's go.mod and the e2e module in e2e/.
	RepoRoot string
	// BinDir receives the control-plane binaries (<RepoRoot>/.cluster/bin by default).
	BinDir string
	// Out receives one progress line per build; nil discards them.
	Out io.Writer
}

// New returns a Builder for the repository at repoRoot that writes binaries to
// <repoRoot>/.cluster/bin and progress to out.
func New(repoRoot string, out io.Writer) *Builder {
	return &Builder{RepoRoot: repoRoot, BinDir: filepath.Join(repoRoot, ".cluster", "bin"), Out: out}
}

// RepoRoot finds the repository root by walking up from the working directory to the first
// directory that contains e2e/go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "e2e", "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root not found: no parent directory contains e2e/go.mod")
		}
		dir = parent
	}
}

// Path returns where the named binary is (or will be) installed.
func (b *Builder) Path(name string) string {
	if name == DrainGuardian {
		return filepath.Join(b.RepoRoot, "bin", DrainGuardian)
	}
	return filepath.Join(b.BinDir, name)
}

// EnsureControlPlane builds every control-plane binary that is missing or stale.
func (b *Builder) EnsureControlPlane(ctx context.Context) error {
	return b.Ensure(ctx, ControlPlaneBinaries...)
}

// ErrNotBuilt is returned by Check when a binary is missing or stale: the suites and the demo do not
// build, `make controlplane` and `make build` do.
var ErrNotBuilt = errors.New("not built")

// Check returns nil when every named binary is present and up to date, and otherwise, at once, an
// error wrapping ErrNotBuilt that names the binaries and says how to build them (and whether another
// process is building them right now). It never builds and never waits.
func (b *Builder) Check(names ...string) error {
	var missing []string
	for _, name := range names {
		stale, err := b.stale(name)
		if err != nil {
			return err
		}
		if stale {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	hint := "run `make controlplane` (and `make build` for drain-guardian) first: the first build takes minutes"
	if held, err := lockHeld(filepath.Join(b.BinDir, ".lock")); err == nil && held {
		hint = "another process is building into " + b.BinDir + " right now; wait for it (`make controlplane` waits) and run again"
	}
	return fmt.Errorf("%w: %s missing or older than its sources in %s: %s", ErrNotBuilt, strings.Join(missing, ", "), b.BinDir, hint)
}

// stale tells whether the named binary is missing or older than what it is built from: the go.sum of
// its module for the control plane, any source of the daemon's module for drain-guardian.
func (b *Builder) stale(name string) (bool, error) {
	fi, err := os.Stat(b.Path(name))
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if name == DrainGuardian {
		newest, err := newestFile(b.RepoRoot, daemonSources)
		if err != nil {
			return false, err
		}
		return fi.ModTime().Before(newest), nil
	}
	src, ok := sources[name]
	if !ok {
		return false, fmt.Errorf("unknown binary %q", name)
	}
	goSum, err := os.Stat(filepath.Join(b.RepoRoot, "e2e", src.module, "go.sum"))
	if err != nil {
		return false, fmt.Errorf("module of %s: %w", name, err)
	}
	return fi.ModTime().Before(goSum.ModTime()), nil
}

// Ensure builds the named binaries that are missing or older than the go.sum of the module they are
// built in; DrainGuardian when older than any of its sources. Concurrent callers, in this or other processes,
// serialise on a lock file so that two test binaries never compile the same thing at once on a
// small machine.
func (b *Builder) Ensure(ctx context.Context, names ...string) error {
	if err := os.MkdirAll(b.BinDir, 0o755); err != nil {
		return err
	}
	// The .cluster directory holds only generated state: keep it out of version control even where
	// the repository's own .gitignore does not mention it.
	ignore := filepath.Join(filepath.Dir(b.BinDir), ".gitignore")
	if filepath.Base(filepath.Dir(b.BinDir)) == ".cluster" {
		if _, err := os.Stat(ignore); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(ignore, []byte("*\n"), 0o644); err != nil {
				return err
			}
		}
	}
	unlock, err := lock(ctx, filepath.Join(b.BinDir, ".lock"), func() {
		b.printf("waiting for another process building into %s...\n", b.BinDir)
	})
	if err != nil {
		return err
	}
	defer unlock()

	for _, name := range names {
		stale, err := b.stale(name)
		if err != nil {
			return err
		}
		if !stale {
			continue
		}
		if name == DrainGuardian {
			if err := b.buildDaemon(ctx); err != nil {
				return err
			}
			continue
		}
		src := sources[name]
		dir := filepath.Join(b.RepoRoot, "e2e", src.module)
		var ldflags string
		if strings.HasPrefix(src.pkg, "k8s.io/kubernetes/") {
			if ldflags, err = kubernetesVersionFlags(ctx, dir); err != nil {
				return err
			}
		}
		if err := b.goBuild(ctx, name, dir, src.pkg, ldflags, b.Path(name), "(first time only, takes minutes)"); err != nil {
			return err
		}
	}
	return nil
}

// daemonSources are the paths, relative to the repository root, whose files the daemon is built from.
var daemonSources = []string{"go.mod", "go.sum", "cmd", "internal", "api"}

// buildDaemon builds bin/drain-guardian as `make build` does (static, -trimpath, version stamped
// from git).
func (b *Builder) buildDaemon(ctx context.Context) error {
	version, revision := gitOutput(ctx, b.RepoRoot, "dev", "describe", "--tags", "--always", "--dirty"), gitOutput(ctx, b.RepoRoot, "unknown", "rev-parse", "HEAD")
	const pkg = "github.com/drain-guardian/drain-guardian/internal/version"
	ldflags := "-X " + pkg + ".Version=" + version + " -X " + pkg + ".Revision=" + revision
	return b.goBuild(ctx, DrainGuardian, b.RepoRoot, "./cmd/drain-guardian", ldflags, b.Path(DrainGuardian), "", "CGO_ENABLED=0", "-trimpath")
}

// newestFile returns the latest modification time of the files under the given paths of root.
func newestFile(root string, paths []string) (time.Time, error) {
	var newest time.Time
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join(root, p)); errors.Is(err, os.ErrNotExist) {
			continue
		}
		err := filepath.WalkDir(filepath.Join(root, p), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if fi.ModTime().After(newest) {
				newest = fi.ModTime()
			}
			return nil
		})
		if err != nil {
			return time.Time{}, err
		}
	}
	return newest, nil
}

// gitOutput runs git in dir and returns its trimmed output, or def when git fails.
func gitOutput(ctx context.Context, dir, def string, args ...string) string {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v
	}
	return def
}

// goBuild runs `nice go build` in dir and installs the result at out atomically, so that an
// interrupted build never leaves a truncated binary that looks up to date. extra holds environment
// settings (NAME=value) and build flags (-flag).
func (b *Builder) goBuild(ctx context.Context, name, dir, pkg, ldflags, out, note string, extra ...string) error {
	msg := "building " + name
	if note != "" {
		msg += " " + note
	}
	b.printf("%s...\n", msg)
	start := time.Now()
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	args := []string{"go", "build", "-o", tmp}
	var env []string
	for _, e := range extra {
		if strings.HasPrefix(e, "-") {
			args = append(args, e)
		} else {
			env = append(env, e)
		}
	}
	if ldflags != "" {
		args = append(args, "-ldflags="+ldflags)
	}
	args = append(args, pkg)
	var cmd *exec.Cmd
	if nice, err := exec.LookPath("nice"); err == nil {
		cmd = exec.CommandContext(ctx, nice, append([]string{"-n", "10"}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, args[0], args[1:]...)
	}
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	// go build says nothing while it compiles: say every progressInterval that it still runs.
	stopProgress := b.progress(name, start)
	output, err := cmd.CombinedOutput()
	stopProgress()
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("building %s (%s in %s): %w\n%s", name, pkg, dir, err, output)
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	b.printf("built %s in %s\n", name, time.Since(start).Round(time.Second))
	return nil
}

// kubernetesVersionFlags stamps the Kubernetes binaries with the version of k8s.io/kubernetes the
// module in dir pins, as the upstream release build does; unstamped they report
// v0.0.0-master, which clients such as kubectl warn about.
func kubernetesVersionFlags(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("reading the k8s.io/kubernetes version in %s: %w", dir, err)
	}
	version := strings.TrimSpace(string(out))
	major, minor, ok := parseMajorMinor(version)
	if !ok {
		return "", fmt.Errorf("unexpected k8s.io/kubernetes version %q", version)
	}
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags,
			"-X", pkg+".gitVersion="+version,
			"-X", pkg+".gitMajor="+major,
			"-X", pkg+".gitMinor="+minor,
			"-X", pkg+".gitTreeState=clean",
		)
	}
	return strings.Join(flags, " "), nil
}

// parseMajorMinor splits "v1.34.4" into "1" and "34".
func parseMajorMinor(version string) (string, string, bool) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// progressInterval is how often a running build reports that it still runs.
var progressInterval = 30 * time.Second

// progress prints "still building NAME" every progressInterval until the returned func is called.
func (b *Builder) progress(name string, start time.Time) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				b.printf("  still building %s (%s)\n", name, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done); <-stopped }
}

func (b *Builder) printf(format string, args ...any) {
	if b.Out != nil {
		fmt.Fprintf(b.Out, format, args...)
	}
}

// lockHeld tells whether another open file holds the flock on path, without waiting for it.
func lockHeld(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return false, nil
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

// lock takes an exclusive flock on path, polling so that ctx can cancel the wait; waiting is called
// once if the lock is held elsewhere.
func lock(ctx context.Context, path string, waiting func()) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if waiting != nil {
			waiting()
			waiting = nil
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
