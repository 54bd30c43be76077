package demo

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drain-guardian/drain-guardian/e2e/internal/build"
)

// testWriter sends each line to t.Log.
type testWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf strings.Builder
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		s := w.buf.String()
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.t.Log(s[:i])
		w.buf.Reset()
		w.buf.WriteString(s[i+1:])
	}
}

// TestDemo runs the demo as a newcomer would and fails when its verdict is bad.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	root, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	if err := Run(ctx, &testWriter{t: t}, root); err != nil {
		t.Fatal(err)
	}
}
