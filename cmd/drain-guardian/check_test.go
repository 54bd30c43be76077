package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drain-guardian/drain-guardian/internal/check"
)

// TestCheckFailuresExitThree checks that every failure of check exits 3, never 1 or 2 (which are
// answers), with an error naming the flag or the cluster.
func TestCheckFailuresExitThree(t *testing.T) {
	unreachable := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad output", []string{"check", "--output=xml"}, `--output: must be one of table, json, yaml, got "xml"`},
		{"negative estimate", []string{"check", "--ready-estimate=-1m"}, "--ready-estimate: must not be negative"},
		{"unparsable estimate", []string{"check", "--ready-estimate=soon"}, `invalid argument "soon" for "--ready-estimate"`},
		{"bad metrics URL", []string{"check", "--metrics-url=localhost:8080"}, "--metrics-url: want an http or https URL"},
		{"unknown flag", []string{"check", "--leader-elect"}, "unknown flag: --leader-elect"},
		{"bad daemon flag", []string{"check", "--restore=later"}, `--restore: must be "auto", "pool" or "node"`},
		{"unreadable kubeconfig", []string{"check", "--kubeconfig=/nonexistent"}, "--kubeconfig: cannot read /nonexistent"},
		{"unreachable cluster", []string{"check", "--kubeconfig=" + unreachable}, "cannot reach the Kubernetes API at https://127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := execute(t, tc.args...)
			var exit *exitError
			if !errors.As(err, &exit) || exit.code != check.ExitError {
				t.Fatalf("error %v, want exit code %d", err, check.ExitError)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestCheckHelp(t *testing.T) {
	out, err := execute(t, "check", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--output", "--ready-estimate", "--metrics-url", "--mco", "--kubeconfig", "--namespace-selector", "--restore", "Exit codes: 0", "rbac-check.yaml"} {
		if !strings.Contains(out, want) {
			t.Errorf("check --help does not mention %s", want)
		}
	}
	if strings.Contains(out, "--leader-elect") {
		t.Error("check --help offers --leader-elect, which plays no part in a check")
	}
}

func TestFetchReadyTimes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "drain_guardian_replacement_ready_duration_seconds_sum{kind=\"Deployment\"} 90\n"+
			"drain_guardian_replacement_ready_duration_seconds_count{kind=\"Deployment\"} 3\n")
	}))
	defer srv.Close()
	got, err := fetchReadyTimes(t.Context(), srv.URL+"/metrics")
	if err != nil || got["Deployment"] != 30*time.Second {
		t.Errorf("ready times %v, %v; want Deployment 30s", got, err)
	}
	if _, err := fetchReadyTimes(t.Context(), srv.URL+"/nowhere"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("error %v, want the 404 named", err)
	}
}
