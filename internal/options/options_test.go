package options

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestDefaultsValidate(t *testing.T) {
	o := NewOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	// The documented defaults, as the manifests and docs rely on them.
	checks := []struct {
		flag, want string
	}{
		{"leader-elect", "true"}, {"leader-election-id", "drain-guardian"},
		{"lease-duration", "15s"}, {"renew-deadline", "10s"}, {"retry-period", "2s"},
		{"metrics-bind-address", ":8443"}, {"metrics-secure", "true"}, {"metrics-cert-dir", ""},
		{"health-probe-bind-address", ":8081"}, {"restore", "auto"}, {"preemptive", "true"}, {"evict", "true"},
		{"schedule-timeout", "5m0s"}, {"ready-timeout", "30m0s"}, {"max-surge-duration", "24h0m0s"},
		{"cordoned-nodes", "false"}, {"gpu-driver-upgrades", "true"}, {"node-maintenance", "true"},
		{"cordon-grace-period", "10m0s"}, {"namespace-selector", ""},
		{"pool-selector", ""}, {"max-concurrent-surges", "3"}, {"workers", "2"}, {"log-format", "json"},
		{"log-level", "info"}, {"kserve-llm-nil-semantics", "auto"}, {"dry-run", "false"}, {"kubeconfig", ""},
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	for _, c := range checks {
		f := fs.Lookup(c.flag)
		if f == nil {
			t.Errorf("flag --%s is not registered", c.flag)
			continue
		}
		if f.DefValue != c.want {
			t.Errorf("--%s default = %q, want %q", c.flag, f.DefValue, c.want)
		}
	}
}

func TestValidateNamesEveryInvalidFlag(t *testing.T) {
	tests := []struct {
		name  string
		set   func(*Options)
		flags []string
	}{
		{name: "restore", set: func(o *Options) { o.Restore = "cluster" }, flags: []string{"restore"}},
		{name: "nil semantics", set: func(o *Options) { o.LLMNilSemantics = "zero" }, flags: []string{"kserve-llm-nil-semantics"}},
		{name: "zero schedule timeout", set: func(o *Options) { o.ScheduleTimeout = 0 }, flags: []string{"schedule-timeout"}},
		{name: "negative ready timeout", set: func(o *Options) { o.ReadyTimeout = -time.Second }, flags: []string{"ready-timeout"}},
		{name: "zero max surge duration", set: func(o *Options) { o.MaxSurgeDuration = 0 }, flags: []string{"max-surge-duration"}},
		{name: "zero evict timeout", set: func(o *Options) { o.EvictTimeout = 0 }, flags: []string{"evict-timeout"}},
		{name: "zero retry period", set: func(o *Options) { o.RetryPeriod = 0 }, flags: []string{"retry-period"}},
		{name: "negative cordon grace", set: func(o *Options) { o.CordonGracePeriod = -time.Minute }, flags: []string{"cordon-grace-period"}},
		{name: "negative resync", set: func(o *Options) { o.ResyncPeriod = -time.Minute }, flags: []string{"resync-period"}},
		{name: "renew deadline not below lease duration", set: func(o *Options) { o.RenewDeadline = o.LeaseDuration }, flags: []string{"renew-deadline"}},
		{name: "retry period within the renew deadline's jitter", set: func(o *Options) { o.RetryPeriod = 9 * time.Second }, flags: []string{"retry-period"}},
		{name: "zero surges", set: func(o *Options) { o.MaxConcurrentSurge = 0 }, flags: []string{"max-concurrent-surges"}},
		{name: "negative look-ahead", set: func(o *Options) { o.Lookahead = -1 }, flags: []string{"lookahead"}},
		{name: "memory limit not a quantity", set: func(o *Options) { o.MemoryLimit = "lots" }, flags: []string{"memory-limit"}},
		{name: "memory limit zero", set: func(o *Options) { o.MemoryLimit = "0" }, flags: []string{"memory-limit"}},
		{name: "zero workers", set: func(o *Options) { o.Workers = 0 }, flags: []string{"workers"}},
		{name: "namespace selector", set: func(o *Options) { o.NamespaceSelector = "a in (b" }, flags: []string{"namespace-selector"}},
		{name: "pool selector", set: func(o *Options) { o.PoolSelector = "=x" }, flags: []string{"pool-selector"}},
		{name: "log format", set: func(o *Options) { o.LogFormat = "text" }, flags: []string{"log-format"}},
		{name: "log level", set: func(o *Options) { o.LogLevel = "trace" }, flags: []string{"log-level"}},
		{name: "missing kubeconfig", set: func(o *Options) { o.Kubeconfig = filepath.Join(t.TempDir(), "nope") }, flags: []string{"kubeconfig"}},
		{
			name: "several at once",
			set: func(o *Options) {
				o.Restore = "x"
				o.Workers = -1
				o.LogLevel = "loud"
				o.LeaseDuration = 0
			},
			flags: []string{"restore", "workers", "log-level", "lease-duration", "renew-deadline"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			tt.set(o)
			err := o.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			for _, f := range tt.flags {
				if !strings.Contains(err.Error(), "--"+f+":") {
					t.Errorf("Validate() = %q, does not name --%s", err, f)
				}
			}
			if got, want := strings.Count(err.Error(), "\n")+1, len(tt.flags); got != want {
				t.Errorf("Validate() reports %d problems, want %d: %q", got, want, err)
			}
		})
	}
}

func TestValidateAcceptsAlternatives(t *testing.T) {
	for name, set := range map[string]func(*Options){
		"restore node":                        func(o *Options) { o.Restore = "node" },
		"restore pool":                        func(o *Options) { o.Restore = "pool" },
		"nil semantics keep":                  func(o *Options) { o.LLMNilSemantics = "keep" },
		"nil semantics one":                   func(o *Options) { o.LLMNilSemantics = "one" },
		"console logs at debug":               func(o *Options) { o.LogFormat, o.LogLevel = "console", "debug" },
		"selectors":                           func(o *Options) { o.NamespaceSelector, o.PoolSelector = "team in (ml,ai)", "!paused" },
		"zero cordon grace":                   func(o *Options) { o.CordonGracePeriod = 0 },
		"no leader election, any renew value": func(o *Options) { o.LeaderElect, o.RenewDeadline = false, time.Hour },
	} {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			set(o)
			if err := o.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"max-concurrent-surges":    "DRAIN_GUARDIAN_MAX_CONCURRENT_SURGES",
		"kubeconfig":               "DRAIN_GUARDIAN_KUBECONFIG",
		"kserve-llm-nil-semantics": "DRAIN_GUARDIAN_KSERVE_LLM_NIL_SEMANTICS",
	} {
		if got := EnvName(flag); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", flag, got, want)
		}
	}
}

func TestApplyEnv(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, o *Options)
		wantErr []string // substrings of the error
	}{
		{
			name: "env sets unset flags",
			env: map[string]string{
				"DRAIN_GUARDIAN_MAX_CONCURRENT_SURGES": "7",
				"DRAIN_GUARDIAN_LEADER_ELECT":          "false",
				"DRAIN_GUARDIAN_READY_TIMEOUT":         "45m",
				"DRAIN_GUARDIAN_RESTORE":               "node",
			},
			check: func(t *testing.T, o *Options) {
				if o.MaxConcurrentSurge != 7 || o.LeaderElect || o.ReadyTimeout != 45*time.Minute || o.Restore != "node" {
					t.Errorf("options = surges %d, leader-elect %v, ready-timeout %s, restore %q; want 7, false, 45m, node",
						o.MaxConcurrentSurge, o.LeaderElect, o.ReadyTimeout, o.Restore)
				}
			},
		},
		{
			name: "command line wins over env",
			args: []string{"--max-concurrent-surges=5", "--dry-run"},
			env:  map[string]string{"DRAIN_GUARDIAN_MAX_CONCURRENT_SURGES": "7", "DRAIN_GUARDIAN_DRY_RUN": "false"},
			check: func(t *testing.T, o *Options) {
				if o.MaxConcurrentSurge != 5 || !o.DryRun {
					t.Errorf("options = surges %d, dry-run %v; want the command line's 5, true", o.MaxConcurrentSurge, o.DryRun)
				}
			},
		},
		{
			name: "env without the prefix is ignored",
			env:  map[string]string{"MAX_CONCURRENT_SURGES": "7", "WORKERS": "9"},
			check: func(t *testing.T, o *Options) {
				if o.MaxConcurrentSurge != 3 || o.Workers != 2 {
					t.Errorf("options = surges %d, workers %d; want defaults 3, 2", o.MaxConcurrentSurge, o.Workers)
				}
			},
		},
		{
			name:    "bad env values name their variables",
			env:     map[string]string{"DRAIN_GUARDIAN_WORKERS": "many", "DRAIN_GUARDIAN_SCHEDULE_TIMEOUT": "soon", "DRAIN_GUARDIAN_EVICT": "perhaps"},
			wantErr: []string{"DRAIN_GUARDIAN_WORKERS", "DRAIN_GUARDIAN_SCHEDULE_TIMEOUT", "DRAIN_GUARDIAN_EVICT"},
		},
		{
			name: "bad env value of a flag given on the command line is not read",
			args: []string{"--workers=4"},
			env:  map[string]string{"DRAIN_GUARDIAN_WORKERS": "many"},
			check: func(t *testing.T, o *Options) {
				if o.Workers != 4 {
					t.Errorf("workers = %d, want 4", o.Workers)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := ApplyEnv(fs, func(k string) (string, bool) {
				v, ok := tt.env[k]
				return v, ok
			})
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatal("ApplyEnv() = nil, want an error")
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("ApplyEnv() = %q, does not name %s", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ApplyEnv() = %v", err)
			}
			tt.check(t, o)
		})
	}
}

// The downward API gives the container's limit in bytes; the Go runtime gets 85% of it.
func TestSoftMemoryLimit(t *testing.T) {
	for _, tt := range []struct {
		limit string
		want  int64
	}{
		{"", 0},
		{"536870912", 456340275},
		{"512Mi", 456340275},
	} {
		o := NewOptions()
		o.MemoryLimit = tt.limit
		if got := o.SoftMemoryLimit(); got != tt.want {
			t.Errorf("SoftMemoryLimit(%q) = %d, want %d", tt.limit, got, tt.want)
		}
	}
}

func TestExcludesThePlatformUnlessOptedIn(t *testing.T) {
	o := NewOptions()
	o.LeaderElectionNamespace = "guardian"
	for ns, want := range map[string]bool{
		"kube-system": true, "kube-public": true, "openshift-monitoring": true, "openshift": true, "guardian": true,
		"models": false, "default": false, "kubeflow": false, "openshiftai-models": false, "team-openshift-x": false,
	} {
		if got := o.Excludes(ns); got != want {
			t.Errorf("Excludes(%q) = %v, want %v", ns, got, want)
		}
	}
	o.PlatformNamespaces = true
	for _, ns := range []string{"kube-system", "openshift-monitoring", "guardian"} {
		if o.Excludes(ns) {
			t.Errorf("--platform-namespaces: %s still excluded", ns)
		}
	}
}
