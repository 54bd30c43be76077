// Package metrics defines every Prometheus metric drain-guardian exports, on one registry.
//
// Label values are bounded: pool names, workload kinds, trigger and failure reasons come from small fixed
// sets or from the cluster's MachineConfigPools. The only per-object series, surge_start_time_seconds, exists
// only while a surge is active and --max-concurrent-surges bounds how many are.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/drain-guardian/drain-guardian/internal/version"
)

// Namespace prefixes every metric name.
const Namespace = "drain_guardian"

// Metrics holds the registry and every collector the daemon updates.
type Metrics struct {
	Registry *prometheus.Registry

	StallsDetected     *prometheus.CounterVec
	StallsResolved     *prometheus.CounterVec
	StallsFailed       *prometheus.CounterVec
	SurgesActive       *prometheus.GaugeVec
	SurgeStartTime     *prometheus.GaugeVec
	BlockedPods        *prometheus.GaugeVec
	UnresolvableBlocks *prometheus.GaugeVec
	StallResolution    *prometheus.HistogramVec
	ReplacementReady   *prometheus.HistogramVec
	Evictions          *prometheus.CounterVec
	Surges             *prometheus.GaugeVec
	SurgesRejected     *prometheus.CounterVec
	SurgeHeld          *prometheus.HistogramVec
	SurgeHeldResources *prometheus.GaugeVec
	MissingCapacity    *prometheus.GaugeVec
	WriteErrors        *prometheus.CounterVec
	Lookahead          *prometheus.CounterVec
	APIWrites          *prometheus.CounterVec
	DrainsFailed       *prometheus.CounterVec
	Leader             prometheus.Gauge
	BuildInfo          *prometheus.GaugeVec

	// PredictedBlocks and PredictedMissingCapacity are the prediction of the next update (package check).
	PredictedBlocks          *prometheus.GaugeVec
	PredictedMissingCapacity *prometheus.GaugeVec

	// PreparedWorkloads counts, per pool being prepared (drain-guardian.io/prepare), the workloads
	// that would stall its next update, by state (see PreparedStates).
	PreparedWorkloads *prometheus.GaugeVec
}

// The states of drain_guardian_prepared_workloads.
const (
	// PreparedReady: the workload's extra replica is Ready: its drain will not stall.
	PreparedReady = "prepared"
	// PreparedStarting: surged, the extra replica is not Ready yet; or queued for a slot behind
	// surges in flight, which it gets without anything else changing.
	PreparedStarting = "preparing"
	// PreparedWaiting: not surged yet: no spare capacity, or stalls that block a drain wait for the
	// slots.
	PreparedWaiting = "waiting"
	// PreparedUnresolvable: no surge helps (the same reasons as a stall's).
	PreparedUnresolvable = "unresolvable"
)

// PreparedStates lists every state of drain_guardian_prepared_workloads.
func PreparedStates() []string {
	return []string{PreparedReady, PreparedStarting, PreparedWaiting, PreparedUnresolvable}
}

// durationBuckets spans a replacement that is Ready in seconds to a stall that lasts hours: 1s .. ~4.5h.
var durationBuckets = prometheus.ExponentialBuckets(1, 2, 15)

// New creates the metrics and registers them, with the Go and process collectors, on a fresh registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		StallsDetected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "stalls_detected_total",
			Help: "Drains blocked (or predicted to be blocked) by a PodDisruptionBudget, per workload.",
		}, []string{"pool", "kind", "trigger"}),
		StallsResolved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "stalls_resolved_total",
			Help: "Stalls resolved: the blocked pod left the node while its replacement was Ready.",
		}, []string{"pool", "kind"}),
		StallsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "stalls_failed_total",
			Help: "Stalls the guardian could not resolve, by reason.",
		}, []string{"pool", "kind", "reason"}),
		SurgesActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "surges_active",
			Help: "Workloads currently surged by the guardian.",
		}, []string{"pool", "kind"}),
		SurgeStartTime: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "surge_start_time_seconds",
			Help: "Unix time at which each active surge started; the series disappears on restore.",
		}, []string{"namespace", "name", "kind"}),
		BlockedPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "blocked_pods",
			Help: "Pods on a node being drained or targeted whose PodDisruptionBudget allows no disruption.",
		}, []string{"pool"}),
		UnresolvableBlocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "unresolvable_blocked_pods",
			Help: "Blocked pods that no surge can help, by reason (the Event's) and verdict (drain_guardian_predicted_blocks' and check's).",
		}, []string{"pool", "reason", "verdict"}),
		StallResolution: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "stall_resolution_duration_seconds",
			Help:    "Time from a stall's detection to the blocked pod leaving the node.",
			Buckets: durationBuckets,
		}, []string{"pool", "kind"}),
		ReplacementReady: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "replacement_ready_duration_seconds",
			Help:    "Time from a surge to its replacement pod being Ready on another node.",
			Buckets: durationBuckets,
		}, []string{"kind"}),
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "evictions_total",
			Help: "Evictions of blocked pods requested through the Eviction API, by result (success, blocked, error).",
		}, []string{"result"}),
		Surges: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "surges",
			Help: "Surge objects the guardian acts on, by phase (Pending, Surged, Ready, Resolved, Restoring, Failed).",
		}, []string{"phase"}),
		SurgesRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "surges_rejected_total",
			Help: "Surge objects not acted on because they failed verification against the live objects, by reason.",
		}, []string{"reason"}),
		SurgeHeld: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "surge_held_seconds",
			Help:    "Time a surge was held after its stall was resolved, until its restore started.",
			Buckets: durationBuckets,
		}, []string{"pool", "kind"}),
		SurgeHeldResources: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "surge_extra_resources",
			Help: "Extended resources (nvidia.com/gpu, ...) requested by the extra replicas of active surges.",
		}, []string{"resource"}),
		MissingCapacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "missing_capacity",
			Help: "Resources requested by replacements that fit on no node, for stalls deferred with NoCapacity; DRA devices as deviceclass.resource.kubernetes.io/<class>.",
		}, []string{"pool", "resource"}),
		WriteErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "write_errors_total",
			Help: "API writes refused, by resource and reason (Conflict, AlreadyExists, Forbidden, Invalid, NotFound, TooManyRequests, ServerError, Other).",
		}, []string{"resource", "reason"}),
		Lookahead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "lookahead_total",
			Help: "Look-ahead surges for nodes the MCO was predicted to target next, by result: surged (started), hit (the node was drained as predicted), missed (the prediction did not come true; restored), skipped (no spare capacity or surge slot left after the stalls being served).",
		}, []string{"result"}),
		APIWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "api_writes_total",
			Help: "API writes the guardian made (refused ones included), by resource and verb: what each resolved stall costs the API server.",
		}, []string{"resource", "verb"}),
		DrainsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "drains_failed_total",
			Help: "Drains their source gave up while a surge served the node (a GPU driver upgrade reaching upgrade-failed), by trigger.",
		}, []string{"trigger"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "leader",
			Help: "1 while this replica holds the leader-election Lease (or runs without election), else 0.",
		}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "build_info",
			Help: "Always 1; the labels name the running build.",
		}, []string{"version", "revision", "goversion"}),
	}
	m.PredictedBlocks = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "predicted_blocks",
		Help: "Pods that would block a drain of the pool's next update, by predicted verdict (resolvable, resolvable-with-capacity, or why it will stall).",
	}, []string{"pool", "verdict"})
	m.PredictedMissingCapacity = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "predicted_missing_capacity",
		Help: "Extended resources (and DRA devices, as deviceclass.resource.kubernetes.io/<class>) the surges of the pool's next update would need beyond what is free.",
	}, []string{"pool", "resource"})
	m.PreparedWorkloads = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "prepared_workloads",
		Help: "Workloads that would stall the next update of a pool being prepared (drain-guardian.io/prepare), by state (prepared, preparing, waiting, unresolvable).",
	}, []string{"pool", "state"})
	m.Registry.MustRegister(m.PredictedBlocks, m.PredictedMissingCapacity, m.PreparedWorkloads)
	m.Registry.MustRegister(
		m.StallsDetected, m.StallsResolved, m.StallsFailed, m.SurgesActive, m.SurgeStartTime,
		m.BlockedPods, m.UnresolvableBlocks, m.StallResolution, m.ReplacementReady, m.Evictions,
		m.Surges, m.SurgesRejected, m.SurgeHeld, m.SurgeHeldResources, m.MissingCapacity, m.WriteErrors, m.Lookahead, m.APIWrites,
		m.DrainsFailed, m.Leader, m.BuildInfo,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.BuildInfo.WithLabelValues(version.Version, version.Revision, version.GoVersion()).Set(1)
	return m
}

// Names lists the name of every drain_guardian_ metric family the daemon exports, including the workqueue
// metrics. Histograms are listed by base name (without _bucket, _sum, _count).
func Names() []string {
	return append([]string{
		"drain_guardian_stalls_detected_total",
		"drain_guardian_stalls_resolved_total",
		"drain_guardian_stalls_failed_total",
		"drain_guardian_surges_active",
		"drain_guardian_surge_start_time_seconds",
		"drain_guardian_blocked_pods",
		"drain_guardian_unresolvable_blocked_pods",
		"drain_guardian_stall_resolution_duration_seconds",
		"drain_guardian_replacement_ready_duration_seconds",
		"drain_guardian_evictions_total",
		"drain_guardian_surges",
		"drain_guardian_surges_rejected_total",
		"drain_guardian_surge_held_seconds",
		"drain_guardian_surge_extra_resources",
		"drain_guardian_missing_capacity",
		"drain_guardian_write_errors_total",
		"drain_guardian_lookahead_total",
		"drain_guardian_api_writes_total",
		"drain_guardian_drains_failed_total",
		"drain_guardian_leader",
		"drain_guardian_build_info",
		"drain_guardian_predicted_blocks",
		"drain_guardian_predicted_missing_capacity",
		"drain_guardian_prepared_workloads",
	}, workqueueNames()...)
}
