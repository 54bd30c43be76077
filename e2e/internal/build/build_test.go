package build

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseMajorMinor(t *testing.T) {
	for _, tc := range []struct {
		in           string
		major, minor string
		ok           bool
	}{
		{"v1.34.4", "1", "34", true},
		{"v1.35.0-alpha.1", "1", "35", true},
		{"v1", "", "", false},
		{"", "", "", false},
	} {
		major, minor, ok := parseMajorMinor(tc.in)
		if major != tc.major || minor != tc.minor || ok != tc.ok {
			t.Errorf("parseMajorMinor(%q) = %q, %q, %v; want %q, %q, %v", tc.in, major, minor, ok, tc.major, tc.minor, tc.ok)
		}
	}
}

// fakeRepo lays out a repository whose e2e module cannot build anything: any build attempt fails.
func fakeRepo(t *testing.T) *Builder {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "e2e"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, mod := range []string{".", sources[Kwok].module} {
		if err := os.MkdirAll(filepath.Join(root, "e2e", mod), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "e2e", mod, "go.sum"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return New(root, nil)
}

func TestEnsureKeepsUpToDateBinary(t *testing.T) {
	b := fakeRepo(t)
	if err := os.MkdirAll(b.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Path(Kubectl), []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.Ensure(context.Background(), Kubectl); err != nil {
		t.Fatalf("Ensure of a binary newer than go.sum: %v, want no rebuild", err)
	}
	if data, _ := os.ReadFile(b.Path(Kubectl)); string(data) != "binary" {
		t.Fatalf("binary was replaced")
	}
	if _, err := os.Stat(filepath.Join(b.RepoRoot, ".cluster", ".gitignore")); err != nil {
		t.Errorf(".cluster/.gitignore: %v", err)
	}
}

func TestEnsureRebuildsStaleBinary(t *testing.T) {
	b := fakeRepo(t)
	if err := os.MkdirAll(b.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Path(Kubectl), []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(b.Path(Kubectl), old, old); err != nil {
		t.Fatal(err)
	}
	// The fake module cannot build kubectl: an error proves a rebuild was attempted.
	if err := b.Ensure(context.Background(), Kubectl); err == nil {
		t.Fatal("Ensure of a binary older than go.sum did not rebuild it")
	}
	if data, _ := os.ReadFile(b.Path(Kubectl)); string(data) != "binary" {
		t.Fatalf("a failed build replaced the binary")
	}
}

// After `make build`, the test bed runs that binary: a daemon newer than all its sources is not
// rebuilt (a rebuild without make's flags cost a cold run minutes); a source edited since is.
func TestEnsureDaemonRebuildsOnlyWhenASourceIsNewer(t *testing.T) {
	b := fakeRepo(t)
	src := filepath.Join(b.RepoRoot, "internal", "x.go")
	for _, f := range []string{src, filepath.Join(b.RepoRoot, "go.mod"), b.Path(DrainGuardian)} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	for _, f := range []string{src, filepath.Join(b.RepoRoot, "go.mod")} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Ensure(context.Background(), DrainGuardian); err != nil {
		t.Fatalf("Ensure of an up-to-date daemon: %v, want no rebuild", err)
	}
	if err := os.Chtimes(src, time.Now().Add(time.Minute), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The fake repository cannot build the daemon: an error proves a rebuild was attempted.
	if err := b.Ensure(context.Background(), DrainGuardian); err == nil {
		t.Fatal("a source newer than the daemon did not rebuild it")
	}
}

// The suites never build: Check answers at once, with a message that says to build first.
func TestCheckNamesWhatIsMissingAndHowToBuildIt(t *testing.T) {
	b := fakeRepo(t)
	err := b.Check(ControlPlaneBinaries...)
	if !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Check with no binaries = %v, want ErrNotBuilt", err)
	}
	for _, want := range []string{KubeAPIServer, Kwok, "make controlplane"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check error %q does not mention %q", err, want)
		}
	}
	if err := os.MkdirAll(b.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range ControlPlaneBinaries {
		if err := os.WriteFile(b.Path(name), []byte("binary"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Check(ControlPlaneBinaries...); err != nil {
		t.Fatalf("Check with every binary newer than go.sum: %v", err)
	}
}

// A suite started while another process holds the build lock fails at once and says a build is
// running, instead of waiting inside its own deadline.
func TestCheckDoesNotWaitForTheBuildLock(t *testing.T) {
	b := fakeRepo(t)
	if err := os.MkdirAll(b.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Another open file description holding the flock is what another process's build looks like.
	unlock, err := lock(context.Background(), filepath.Join(b.BinDir, ".lock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	done := make(chan error, 1)
	go func() { done <- b.Check(KubeAPIServer) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "another process is building") {
			t.Fatalf("Check while the lock is held = %v, want ErrNotBuilt saying another process is building", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Check waited for the build lock")
	}
}

// Ensure, which `make controlplane` runs, is the one that waits for the lock, and only for as long
// as its context allows: the builder's caller decides, and make gives it no deadline.
func TestEnsureWaitsForTheBuildLock(t *testing.T) {
	b := fakeRepo(t)
	if err := os.MkdirAll(b.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := lock(context.Background(), filepath.Join(b.BinDir, ".lock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	b.Out = lineFunc(func(line string) {
		if strings.Contains(line, "waiting for another process") {
			close(waiting)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Ensure(ctx, Kubectl) }()
	select {
	case err := <-done:
		t.Fatalf("Ensure returned %v while another process held the build lock, want it to wait", err)
	case <-waiting:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Ensure after its context was cancelled = %v, want context.Canceled", err)
	}
	unlock()
}

// lineFunc is an io.Writer that hands each write to a function.
type lineFunc func(string)

func (f lineFunc) Write(p []byte) (int, error) {
	f(string(p))
	return len(p), nil
}
