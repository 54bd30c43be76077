package controller

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
)

// gauges publishes the state gauges from snapshots that the bookkeeping types hand over after
// releasing their own locks; only the leader publishes them. Its mutex only orders publications,
// so that two snapshots are never interleaved into one series set.
type gauges struct {
	mu      sync.Mutex
	metrics *metrics.Metrics
	leading bool
	surges  map[types.NamespacedName]trustedSurge
	nodes   nodeGauges
}

// nodeGauges is what the node gauges show: blocked-pod counts and capacity wanted.
type nodeGauges struct {
	watched map[string]nodeStats
	wanted  map[string]map[string]wantedCapacity
}

func newGauges(m *metrics.Metrics) *gauges { return &gauges{metrics: m} }

// setLeading starts (or stops) publishing.
func (g *gauges) setLeading(leading bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leading = leading
	g.publishSurges()
	g.publishNodes()
}

// setSurges publishes a snapshot of the trusted Surges.
func (g *gauges) setSurges(snapshot map[types.NamespacedName]trustedSurge) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.surges = snapshot
	g.publishSurges()
}

// setNodes publishes a snapshot of the nodes under drain.
func (g *gauges) setNodes(snapshot nodeGauges) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nodes = snapshot
	g.publishNodes()
}

func (g *gauges) publishSurges() {
	m := g.metrics
	m.SurgesActive.Reset()
	m.SurgeStartTime.Reset()
	m.Surges.Reset()
	m.SurgeHeldResources.Reset()
	if !g.leading {
		return
	}
	for _, p := range []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseSurged, v1alpha1.PhaseReady, v1alpha1.PhaseResolved, v1alpha1.PhaseRestoring, v1alpha1.PhaseFailed} {
		m.Surges.WithLabelValues(string(p)).Set(0)
	}
	held := corev1.ResourceList{}
	for key, t := range g.surges {
		m.Surges.WithLabelValues(string(t.phase)).Inc()
		if t.phase == v1alpha1.PhaseFailed {
			continue
		}
		m.SurgesActive.WithLabelValues(t.pool, t.kind).Inc()
		m.SurgeStartTime.WithLabelValues(key.Namespace, key.Name, t.kind).Set(float64(t.start.Unix()))
		for name, q := range t.held {
			sum, ok := held[name]
			if !ok {
				sum = *resource.NewQuantity(0, q.Format)
			}
			sum.Add(q)
			held[name] = sum
		}
	}
	for name, q := range held {
		m.SurgeHeldResources.WithLabelValues(string(name)).Set(q.AsApproximateFloat64())
	}
}

func (g *gauges) publishNodes() {
	m := g.metrics
	m.BlockedPods.Reset()
	m.UnresolvableBlocks.Reset()
	m.MissingCapacity.Reset()
	if !g.leading {
		return
	}
	for _, n := range g.nodes.watched {
		m.BlockedPods.WithLabelValues(n.pool).Add(float64(n.blocked))
		for u, count := range n.unresolvable {
			m.UnresolvableBlocks.WithLabelValues(n.pool, u.reason, u.verdict).Add(float64(count))
		}
	}
	for pool, nodes := range g.nodes.wanted {
		for _, w := range nodes {
			for name, q := range w.missing {
				m.MissingCapacity.WithLabelValues(pool, string(name)).Add(q.AsApproximateFloat64())
			}
		}
	}
}
