package build

import (
	"context"
	"os"
	"path/filepath"
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
	if err := os.WriteFile(filepath.Join(root, "e2e", "go.sum"), nil, 0o644); err != nil {
		t.Fatal(err)
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
