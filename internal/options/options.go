// Package options defines drain-guardian's command-line flags, their environment variables and their
// validation. Every flag --some-flag can also be set with DRAIN_GUARDIAN_SOME_FLAG; a flag given on the
// command line wins over the environment.
package options

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/internal/trigger"
)

// EnvPrefix is the prefix of the environment variable that mirrors each flag.
const EnvPrefix = "DRAIN_GUARDIAN_"

// RestoreMode says when a surge is undone.
type RestoreMode string

const (
	// RestoreAuto restores as soon as the workload's original number of pods is Ready on nodes the update
	// will not drain again (freeing the capacity for the next node), at the latest when the pool is Updated.
	RestoreAuto RestoreMode = "auto"
	// RestorePool restores once the node's MachineConfigPool reports Updated.
	RestorePool RestoreMode = "pool"
	// RestoreNode restores once the drained node is updated, Done and schedulable again.
	RestoreNode RestoreMode = "node"
)

// LLMNilSemantics says what an absent LLMInferenceService replica field means to KServe.
type LLMNilSemantics string

const (
	// LLMNilAuto picks by the served API versions: v1alpha2 served means OpenShift AI 3.4 or newer.
	LLMNilAuto LLMNilSemantics = "auto"
	// LLMNilKeep is the 3.4+ behaviour: nil keeps the Deployment's current count.
	LLMNilKeep LLMNilSemantics = "keep"
	// LLMNilOne is the behaviour up to 3.3: nil means one replica.
	LLMNilOne LLMNilSemantics = "one"
)

// Options is the daemon's whole configuration.
type Options struct {
	Kubeconfig string
	DryRun     bool

	LeaderElect             bool
	LeaderElectionNamespace string
	LeaderElectionID        string
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration

	MetricsBindAddress     string
	MetricsSecure          bool
	Profiling              bool
	MetricsCertDir         string
	HealthProbeBindAddress string

	Restore          string
	Preemptive       bool
	Evict            bool
	ScheduleTimeout  time.Duration
	ReadyTimeout     time.Duration
	MaxSurgeDuration time.Duration
	EvictTimeout     time.Duration
	CordonedNodes    bool
	// Sources switch the drain sources of the table trigger.Kinds, by name: each has a flag of its
	// own (Kind.Flag), on by default.
	Sources map[trigger.Name]*bool
	// ReadMachineConfigs computes whether an MCO update drains from the rendered MachineConfigs,
	// before any node is targeted (needs the read-machineconfigs RBAC component).
	ReadMachineConfigs bool
	CordonGracePeriod  time.Duration
	NamespaceSelector  string
	// PlatformNamespaces lets the guardian act in kube-*, openshift-* and its own namespace.
	PlatformNamespaces bool
	PoolSelector       string
	MaxConcurrentSurge int
	// MaxConcurrentSurgePerNamespace bounds one namespace's stalls in flight; 0 means one less than
	// MaxConcurrentSurge (at least 1), so that a slot is always left for another namespace.
	MaxConcurrentSurgePerNamespace int
	// MaxSurgeReplicas bounds the replicas one surge adds.
	MaxSurgeReplicas int
	Lookahead        int
	// DRAUnknownFits counts devices the DRA count cannot judge (taints, partitionable devices,
	// constraints between a claim's devices…) as able to take a replacement.
	DRAUnknownFits  bool
	Workers         int
	ResyncPeriod    time.Duration
	LLMNilSemantics string

	LogFormat string
	LogLevel  string
	// MemoryLimit is the container's memory limit (empty: none known); see SoftMemoryLimit.
	MemoryLimit string
}

// softMemoryShare is the share of the container's memory limit given to the Go runtime as its soft
// limit: the rest is headroom for what the runtime does not count (stacks of goroutines in
// syscalls, cgo, the kernel's page cache of the binary) and for a burst before the collector
// catches up.
const softMemoryShare = 0.85

// SoftMemoryLimit returns the soft memory limit for the Go runtime derived from --memory-limit, or 0
// when it is not set.
func (o *Options) SoftMemoryLimit() int64 {
	if o.MemoryLimit == "" {
		return 0
	}
	q, err := resource.ParseQuantity(o.MemoryLimit)
	if err != nil {
		return 0
	}
	return int64(float64(q.Value()) * softMemoryShare)
}

// serviceAccountNamespaceFile holds the pod's namespace when running in a cluster.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// MaxSurgeReplicasCeiling is the most --max-surge-replicas accepts. The admission policy that
// confines the guardian's writes holds the same ceiling when its settings are missing
// (manifests/base/admissionpolicy.yaml).
const MaxSurgeReplicasCeiling = 10

// NewOptions returns the defaults.
func NewOptions() *Options {
	ns := "drain-guardian"
	if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		ns = strings.TrimSpace(string(b))
	}
	return &Options{
		LeaderElect:             true,
		LeaderElectionNamespace: ns,
		LeaderElectionID:        "drain-guardian",
		LeaseDuration:           15 * time.Second,
		RenewDeadline:           10 * time.Second,
		RetryPeriod:             2 * time.Second,
		MetricsBindAddress:      ":8443",
		MetricsSecure:           true,
		HealthProbeBindAddress:  ":8081",
		Restore:                 string(RestoreAuto),
		Preemptive:              true,
		Sources:                 defaultSources(),
		Evict:                   true,
		ScheduleTimeout:         5 * time.Minute,
		ReadyTimeout:            30 * time.Minute,
		MaxSurgeDuration:        24 * time.Hour,
		EvictTimeout:            10 * time.Minute,
		CordonGracePeriod:       10 * time.Minute,
		MaxConcurrentSurge:      3,
		MaxSurgeReplicas:        2,
		Lookahead:               1,
		Workers:                 2,
		ResyncPeriod:            10 * time.Minute,
		LLMNilSemantics:         string(LLMNilAuto),
		LogFormat:               "json",
		LogLevel:                "info",
	}
}

// AddFlags registers every flag on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Empty: in-cluster config, then $KUBECONFIG, then ~/.kube/config.")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "Decide and report every action (logs, Events, metrics) without writing to any workload, pod or Surge.")

	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader with a Lease so that several replicas can run; only the leader acts.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader-election Lease (default: the pod's own namespace).")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "Name of the leader-election Lease.")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "How long a non-leader waits before taking over an unrenewed Lease.")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", o.RenewDeadline, "How long the leader keeps retrying to renew before giving up leadership.")
	fs.DurationVar(&o.RetryPeriod, "retry-period", o.RetryPeriod, "Interval between leader-election attempts.")

	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address of the /metrics endpoint; \"0\" disables it.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "Serve /metrics over TLS and admit only callers a TokenReview authenticates and a SubjectAccessReview allows to get /metrics.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Also serve Go's profiles (net/http/pprof) under /debug/pprof/ on the metrics endpoint, behind its checks: a caller needs get on the profile's path (e.g. an RBAC rule for /debug/pprof/*).")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", o.MetricsCertDir, "Directory with tls.crt and tls.key for /metrics (reloaded on change); empty: a self-signed certificate made at start-up.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of the plain-HTTP /healthz and /readyz endpoints; \"0\" disables them.")

	fs.StringVar(&o.Restore, "restore", o.Restore, "When to undo a surge: \"auto\" as soon as the workload's original number of pods is Ready on nodes this update will not drain again (and at the latest when the pool is Updated), \"pool\" once the node's MachineConfigPool is Updated, \"node\" once the drained node is updated and schedulable again.")
	fs.BoolVar(&o.Preemptive, "preemptive", o.Preemptive, "Surge as soon as the MCO targets a node of an updating pool and its machine-config daemon says the update drains (MachineConfigNode, about a second later), before its drain starts; an update applied without a drain is never surged.")
	fs.BoolVar(&o.Evict, "evict", o.Evict, "Evict the blocked pod (Eviction API) as soon as its replacement is Ready, instead of waiting for the MCO's next drain attempt.")
	fs.DurationVar(&o.ScheduleTimeout, "schedule-timeout", o.ScheduleTimeout, "Undo a surge whose replacement pod stays Unschedulable this long.")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", o.ReadyTimeout, "Undo a surge whose replacement pod is not Ready this long after the surge.")
	fs.DurationVar(&o.MaxSurgeDuration, "max-surge-duration", o.MaxSurgeDuration, "Safety valve: undo any surge older than this, whatever the pool's state.")
	fs.DurationVar(&o.EvictTimeout, "evict-timeout", o.EvictTimeout, "Undo, and report, a surge whose blocked pod has not left its drained node this long after its replacement is Ready and the drain started (the workload's own budgets refuse the eviction).")
	fs.BoolVar(&o.CordonedNodes, "cordoned-nodes", o.CordonedNodes, "Also treat any node cordoned for longer than --cordon-grace-period as being drained (drains not made by the MCO).")
	fs.DurationVar(&o.CordonGracePeriod, "cordon-grace-period", o.CordonGracePeriod, "With --cordoned-nodes: how long a node must be cordoned before the guardian acts.")
	fs.StringVar(&o.NamespaceSelector, "namespace-selector", o.NamespaceSelector, "Label selector of the namespaces the guardian may act in (empty: all).")
	fs.BoolVar(&o.PlatformNamespaces, "platform-namespaces", o.PlatformNamespaces, "Also act in kube-*, openshift-* and the guardian's own namespace (their operators manage their own disruption; the shipped ValidatingAdmissionPolicy refuses these writes unless changed too).")
	fs.StringVar(&o.PoolSelector, "pool-selector", o.PoolSelector, "Label selector of the MachineConfigPools the guardian watches (empty: all).")
	fs.IntVar(&o.MaxConcurrentSurge, "max-concurrent-surges", o.MaxConcurrentSurge, "At most this many stalls served at the same time (surges not yet resolved); surges held only until it is safe to restore them do not count.")
	fs.IntVar(&o.MaxConcurrentSurgePerNamespace, "max-concurrent-surges-per-namespace", o.MaxConcurrentSurgePerNamespace, "At most this many of the --max-concurrent-surges stalls from one namespace (0: one less than --max-concurrent-surges, at least 1, so a slot is always left for another namespace); a freed slot goes first to the namespace with the fewest in flight.")
	fs.IntVar(&o.MaxSurgeReplicas, "max-surge-replicas", o.MaxSurgeReplicas, "At most this many replicas (LeaderWorkerSet groups) added by one surge, 1 to 10; a PDB that needs more is reported (SurgeTooLarge), not surged. The manifests set it from the ConfigMap drain-guardian-settings, which bounds the admission policy too: change it there.")
	fs.BoolVar(&o.DRAUnknownFits, "dra-unknown-fits", o.DRAUnknownFits, "Count Dynamic Resource Allocation devices the guardian cannot judge (device taints, partitionable devices, consumable capacity, constraints between a claim's devices) as free for a replacement; off: such a stall is deferred as NoCapacity, with the reason.")
	fs.BoolVar(&o.ReadMachineConfigs, "read-machineconfigs", o.ReadMachineConfigs, "Compute whether an MCO update drains from the rendered MachineConfigs and MachineConfiguration cluster's node disruption policies, before any node is targeted (check and prepare say no-drain ahead; the look-ahead acts on the first node). Rendered configs carry secrets: grant the read with the read-machineconfigs kustomize component; only digests are kept, nothing is logged.")
	for _, k := range trigger.Kinds {
		fs.BoolVar(o.Sources[k.Name], k.Flag, *o.Sources[k.Name], k.Usage)
	}
	fs.IntVar(&o.Lookahead, "lookahead", o.Lookahead, "Surge the blocked workloads of the next N nodes the MCO will target while the nodes before them drain and reboot, when spare capacity is left after the stalls being served (0: off).")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Number of reconcile workers.")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", o.ResyncPeriod, "Informer resync period: how often every object is reconciled even without a change.")
	fs.StringVar(&o.LLMNilSemantics, "kserve-llm-nil-semantics", o.LLMNilSemantics, "Meaning of an absent LLMInferenceService replicas field: \"one\" (OpenShift AI up to 3.3), \"keep\" (3.4 and newer: keep the Deployment's count), \"auto\" (keep when v1alpha2 is served).")

	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "Log format: \"json\" or \"console\".")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "Log level: \"debug\", \"info\", \"warn\" or \"error\".")
	fs.StringVar(&o.MemoryLimit, "memory-limit", o.MemoryLimit, "The container's memory limit (e.g. 512Mi; the manifests set it from the downward API): the Go runtime's soft memory limit is 85% of it, unless GOMEMLIMIT is set. Empty: no soft limit.")
}

// ApplyEnv sets every flag that was not given on the command line from its environment variable, if set.
// lookup is os.LookupEnv in production.
func ApplyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		name := EnvName(f.Name)
		v, ok := lookup(name)
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s=%q: %w", name, v, err))
		}
	})
	return errors.Join(errs...)
}

// EnvName is the environment variable that mirrors the flag name.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Validate reports every invalid setting at once, each naming its flag.
func (o *Options) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	switch RestoreMode(o.Restore) {
	case RestoreAuto, RestorePool, RestoreNode:
	default:
		bad("restore", "must be \"auto\", \"pool\" or \"node\", got %q", o.Restore)
	}
	switch LLMNilSemantics(o.LLMNilSemantics) {
	case LLMNilAuto, LLMNilKeep, LLMNilOne:
	default:
		bad("kserve-llm-nil-semantics", "must be \"auto\", \"keep\" or \"one\", got %q", o.LLMNilSemantics)
	}
	for flag, d := range map[string]time.Duration{
		"schedule-timeout": o.ScheduleTimeout, "ready-timeout": o.ReadyTimeout,
		"max-surge-duration": o.MaxSurgeDuration, "lease-duration": o.LeaseDuration, "evict-timeout": o.EvictTimeout,
		"renew-deadline": o.RenewDeadline, "retry-period": o.RetryPeriod,
	} {
		if d <= 0 {
			bad(flag, "must be positive, got %s", d)
		}
	}
	if o.CordonGracePeriod < 0 {
		bad("cordon-grace-period", "must not be negative, got %s", o.CordonGracePeriod)
	}
	if o.ResyncPeriod < 0 {
		bad("resync-period", "must not be negative, got %s", o.ResyncPeriod)
	}
	if o.LeaderElect && o.RenewDeadline >= o.LeaseDuration {
		bad("renew-deadline", "must be shorter than --lease-duration (%s), got %s", o.LeaseDuration, o.RenewDeadline)
	}
	// client-go's leader election refuses a renew deadline within 1.2 retry periods (its jitter).
	if o.LeaderElect && float64(o.RenewDeadline) <= 1.2*float64(o.RetryPeriod) {
		bad("retry-period", "must be shorter than --renew-deadline (%s) divided by 1.2, got %s", o.RenewDeadline, o.RetryPeriod)
	}
	if o.MaxConcurrentSurgePerNamespace < 0 || o.MaxConcurrentSurgePerNamespace > o.MaxConcurrentSurge {
		bad("max-concurrent-surges-per-namespace", "must be between 0 and --max-concurrent-surges (%d), got %d", o.MaxConcurrentSurge, o.MaxConcurrentSurgePerNamespace)
	}
	if o.MaxSurgeReplicas < 1 || o.MaxSurgeReplicas > MaxSurgeReplicasCeiling {
		bad("max-surge-replicas", "must be between 1 and %d, got %d", MaxSurgeReplicasCeiling, o.MaxSurgeReplicas)
	}
	if o.MaxConcurrentSurge < 1 {
		bad("max-concurrent-surges", "must be at least 1, got %d", o.MaxConcurrentSurge)
	}
	if o.Lookahead < 0 {
		bad("lookahead", "must not be negative, got %d", o.Lookahead)
	}
	if o.Workers < 1 {
		bad("workers", "must be at least 1, got %d", o.Workers)
	}
	if _, err := labels.Parse(o.NamespaceSelector); err != nil {
		bad("namespace-selector", "%v", err)
	}
	if _, err := labels.Parse(o.PoolSelector); err != nil {
		bad("pool-selector", "%v", err)
	}
	if o.LogFormat != "json" && o.LogFormat != "console" {
		bad("log-format", "must be \"json\" or \"console\", got %q", o.LogFormat)
	}
	switch o.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log-level", "must be debug, info, warn or error, got %q", o.LogLevel)
	}
	if o.MemoryLimit != "" {
		if q, err := resource.ParseQuantity(o.MemoryLimit); err != nil || q.Sign() <= 0 {
			bad("memory-limit", "must be a positive quantity such as 512Mi, got %q", o.MemoryLimit)
		}
	}
	if o.Kubeconfig != "" {
		if _, err := os.Stat(o.Kubeconfig); err != nil {
			bad("kubeconfig", "cannot read %s: %v", o.Kubeconfig, errors.Unwrap(err))
		}
	}
	return errors.Join(errs...)
}

// PerNamespaceLimit is the number of stalls one namespace may have in flight (see
// MaxConcurrentSurgePerNamespace).
func (o *Options) PerNamespaceLimit() int {
	if o.MaxConcurrentSurgePerNamespace > 0 {
		return o.MaxConcurrentSurgePerNamespace
	}
	return max(1, o.MaxConcurrentSurge-1)
}

// Excludes reports whether the namespace is the platform's, out of the guardian's scope unless
// --platform-namespaces opts it in: kube-* and openshift-* (and "openshift"), whose workloads the
// MCO and the cluster operators drain and disrupt on their own terms, and the guardian's own, where
// surging itself would only take the capacity it serves. A compromised or confused guardian must not
// be able to scale the control plane's operators; the shipped ValidatingAdmissionPolicy refuses the
// same namespaces at the API server.
func (o *Options) Excludes(namespace string) bool {
	if o.PlatformNamespaces {
		return false
	}
	return strings.HasPrefix(namespace, "kube-") || strings.HasPrefix(namespace, "openshift-") || namespace == "openshift" ||
		namespace == o.LeaderElectionNamespace
}

// defaultSources turns every drain source of the table on.
func defaultSources() map[trigger.Name]*bool {
	out := make(map[trigger.Name]*bool, len(trigger.Kinds))
	for _, k := range trigger.Kinds {
		on := true
		out[k.Name] = &on
	}
	return out
}

// SourceOn reports whether the named drain source is switched on.
func (o *Options) SourceOn(name trigger.Name) bool {
	on, ok := o.Sources[name]
	return ok && *on
}

// SetSource switches the named drain source on or off.
func (o *Options) SetSource(name trigger.Name, on bool) {
	o.Sources[name] = &on
}
