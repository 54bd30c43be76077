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

// The binary installed as a kubectl or oc plugin (a symlink named kubectl-drain_guardian or
// oc-drain_guardian) runs the same commands and speaks of itself as the CLI calls it; as
// /usr/bin/gather in the must-gather image it is the gather command writing to /must-gather.
func TestInvocationName(t *testing.T) {
	for _, tc := range []struct {
		argv0, args string
		want        []string
	}{
		{"/usr/local/bin/kubectl-drain_guardian", "--help", []string{"kubectl drain-guardian [command]", "check", "gather"}},
		{"oc-drain_guardian", "check --help", []string{"oc drain-guardian check [flags]", "--ready-estimate"}},
		{"oc-drain_guardian", "gather --help", []string{"oc drain-guardian gather [flags]", "--dest string"}},
		{"/opt/bin/drain-guardian", "--help", []string{"drain-guardian [command]"}},
		{"/usr/bin/gather", "--help", []string{"gather [flags]", `(default "/must-gather")`}},
	} {
		t.Run(tc.argv0+" "+tc.args, func(t *testing.T) {
			cmd := commandFor(tc.argv0, strings.Fields(tc.args))
			var out bytes.Buffer
			cmd.SetOut(&out)
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if strings.Contains(out.String(), "drain-guardian drain-guardian") {
				t.Errorf("name doubled:\n%s", out.String())
			}
		})
	}
	// Outside must-gather, gather needs to be told where to write.
	cmd := commandFor("kubectl-drain_guardian", []string{"gather"})
	cmd.SetOut(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--dest: required") {
		t.Errorf("gather without --dest: %v", err)
	}
}
