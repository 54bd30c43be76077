package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// trackedSurge is what the controller remembers of an object carrying a surge record. It is derived
// from the informers (rebuilt on every start) and only routes events and feeds gauges: decisions are
// always made from the record itself.
type trackedSurge struct {
	// ref is the object carrying the record; target the one whose fields changed (often the same).
	ref      workload.Ref
	target   workload.Ref
	node     string
	pool     string
	podOwner workload.Ref
	selector labels.Selector
	start    time.Time
}

// nodeStats is the last blocked-pod count of a node under drain.
type nodeStats struct {
	pool         string
	blocked      int
	unresolvable map[string]int
}

// state is the controller's in-memory bookkeeping, guarded by one mutex.
type state struct {
	mu      sync.Mutex
	metrics *metrics.Metrics
	tracked map[workload.Ref]trackedSurge
	watched map[string]nodeStats
	// reported holds the keys of one-off reports (an Event and a failure count per stall), so that a
	// stall re-examined every resync is reported once.
	reported   map[string]string
	cordonSeen map[string]time.Time
	// leading gates the state gauges: a standby replica tracks surges from its informers too, but only
	// the leader reports them, so that summing over replicas counts each surge once.
	leading bool
}

// setLeading starts (or stops) reporting the gauges.
func (s *state) setLeading(leading bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leading = leading
	s.updateSurgeGauges()
	s.updateNodeGauges()
}

func newState(m *metrics.Metrics) *state {
	return &state{
		metrics: m, tracked: map[workload.Ref]trackedSurge{}, watched: map[string]nodeStats{},
		reported: map[string]string{}, cordonSeen: map[string]time.Time{},
	}
}

// track records (or refreshes) an active surge and updates the surge gauges.
func (s *state) track(t trackedSurge) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tracked[t.ref] = t
	s.updateSurgeGauges()
}

// untrack forgets a surge; it reports whether it was tracked.
func (s *state) untrack(ref workload.Ref) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.tracked[ref]
	if ok {
		delete(s.tracked, ref)
		s.updateSurgeGauges()
	}
	return ok
}

func (s *state) get(ref workload.Ref) (trackedSurge, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tracked[ref]
	return t, ok
}

func (s *state) isTracked(ref workload.Ref) bool {
	_, ok := s.get(ref)
	return ok
}

func (s *state) surges() []trackedSurge {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]trackedSurge, 0, len(s.tracked))
	for _, t := range s.tracked {
		out = append(out, t)
	}
	return out
}

func (s *state) updateSurgeGauges() {
	s.metrics.SurgesActive.Reset()
	s.metrics.SurgeStartTime.Reset()
	if !s.leading {
		return
	}
	for _, t := range s.tracked {
		s.metrics.SurgesActive.WithLabelValues(t.pool, string(t.ref.Kind)).Inc()
		if !t.start.IsZero() {
			s.metrics.SurgeStartTime.WithLabelValues(t.ref.Namespace, t.ref.Name, string(t.ref.Kind)).Set(float64(t.start.Unix()))
		}
	}
}

// setNode stores a node's blocked-pod counts (nil: the node is not being drained) and updates the gauges.
func (s *state) setNode(node string, st *nodeStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == nil {
		delete(s.watched, node)
		for k, n := range s.reported {
			if n == node {
				delete(s.reported, k)
			}
		}
	} else {
		s.watched[node] = *st
	}
	s.updateNodeGauges()
}

func (s *state) updateNodeGauges() {
	s.metrics.BlockedPods.Reset()
	s.metrics.UnresolvableBlocks.Reset()
	if !s.leading {
		return
	}
	for _, n := range s.watched {
		s.metrics.BlockedPods.WithLabelValues(n.pool).Add(float64(n.blocked))
		for reason, count := range n.unresolvable {
			s.metrics.UnresolvableBlocks.WithLabelValues(n.pool, reason).Add(float64(count))
		}
	}
}

func (s *state) watchedNodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.watched))
	for n := range s.watched {
		out = append(out, n)
	}
	return out
}

// once reports whether key is new for node's current drain, remembering it. Keys are forgotten when
// the node's drain ends, so a later drain is reported afresh.
func (s *state) once(node, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.reported[key]; ok {
		return false
	}
	s.reported[key] = node
	return true
}

// forgetCordon forgets when node was first seen cordoned: it is schedulable again, or gone.
func (s *state) forgetCordon(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cordonSeen, node)
}

// firstCordonSeen returns when this process first saw node cordoned (since it was last schedulable).
func (s *state) firstCordonSeen(node string, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.cordonSeen[node]; ok {
		return t
	}
	s.cordonSeen[node] = now
	return now
}
