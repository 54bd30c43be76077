package main

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
)

func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestBadInputFailsFastNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unreadable kubeconfig", []string{"run", "--kubeconfig=/nonexistent"}, nil, "--kubeconfig: cannot read /nonexistent"},
		{"bad restore mode", []string{"run", "--restore=later"}, nil, `--restore: must be "auto", "pool" or "node"`},
		{"unknown flag", []string{"run", "--no-such-flag"}, nil, "unknown flag: --no-such-flag"},
		{"bad environment value", []string{"run"}, map[string]string{"DRAIN_GUARDIAN_READY_TIMEOUT": "soon"}, "DRAIN_GUARDIAN_READY_TIMEOUT"},
		{"renew deadline not below lease", []string{"run", "--lease-duration=5s", "--renew-deadline=10s"}, nil, "--renew-deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := execute(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestVersionAndHelp(t *testing.T) {
	out, err := execute(t, "version")
	if err != nil || !strings.HasPrefix(out, "drain-guardian ") {
		t.Fatalf("version: %q, %v", out, err)
	}
	out, err = execute(t, "run", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--dry-run", "--restore", "--schedule-timeout", "--max-concurrent-surges", "DRAIN_GUARDIAN_SOME_FLAG"} {
		if !strings.Contains(out, flag) {
			t.Errorf("run --help does not document %s", flag)
		}
	}
}

// The README's flag reference is the daemon's own --help: a flag added, renamed or re-described
// without the README fails here.
func TestREADMEFlagsAreTheRunHelp(t *testing.T) {
	help, err := execute(t, "run", "--help")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	flagLines := func(text string) []string {
		var out []string
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "      --") || strings.HasPrefix(l, "  -h, --help") {
				out = append(out, strings.TrimRight(l, " "))
			}
		}
		return out
	}
	got, want := flagLines(string(readme)), flagLines(help)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("README flags differ from `drain-guardian run --help`; paste its Flags section into the README.\nREADME:\n%s\n--help:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
