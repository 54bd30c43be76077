package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

const workqueueSubsystem = "workqueue"

// workqueueProvider exports client-go workqueue metrics, labelled by queue name, on our registry.
type workqueueProvider struct {
	depth, longestRunning, unfinished *prometheus.GaugeVec
	adds, retries                     *prometheus.CounterVec
	latency, workDuration             *prometheus.HistogramVec
}

// NewWorkqueueProvider registers the workqueue metrics on m's registry. Pass it to
// workqueue.TypedRateLimitingQueueConfig.MetricsProvider for each queue.
func (m *Metrics) NewWorkqueueProvider() workqueue.MetricsProvider {
	label := []string{"name"}
	p := &workqueueProvider{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: workqueueSubsystem,
			Name: "depth", Help: "Current depth of the workqueue."}, label),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: workqueueSubsystem,
			Name: "adds_total", Help: "Items added to the workqueue."}, label),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: workqueueSubsystem,
			Name: "queue_duration_seconds", Help: "Time an item waits in the workqueue before being processed.",
			Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12)}, label),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: workqueueSubsystem,
			Name: "work_duration_seconds", Help: "Time processing one item takes.",
			Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12)}, label),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: workqueueSubsystem,
			Name: "unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration."}, label),
		longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: workqueueSubsystem,
			Name: "longest_running_processor_seconds", Help: "Seconds the longest-running processor has been running."}, label),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: workqueueSubsystem,
			Name: "retries_total", Help: "Retries (rate-limited re-adds) handled by the workqueue."}, label),
	}
	m.Registry.MustRegister(p.depth, p.adds, p.latency, p.workDuration, p.unfinished, p.longestRunning, p.retries)
	return p
}

func workqueueNames() []string {
	return []string{
		"drain_guardian_workqueue_depth",
		"drain_guardian_workqueue_adds_total",
		"drain_guardian_workqueue_queue_duration_seconds",
		"drain_guardian_workqueue_work_duration_seconds",
		"drain_guardian_workqueue_unfinished_work_seconds",
		"drain_guardian_workqueue_longest_running_processor_seconds",
		"drain_guardian_workqueue_retries_total",
	}
}

func (p *workqueueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}
func (p *workqueueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}
func (p *workqueueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}
func (p *workqueueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.workDuration.WithLabelValues(name)
}
func (p *workqueueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(name)
}
func (p *workqueueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longestRunning.WithLabelValues(name)
}
func (p *workqueueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}
