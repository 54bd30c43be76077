package controller

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
)

// nodeStats is the last blocked-pod count of a node under drain.
type nodeStats struct {
	pool         string
	blocked      int
	unresolvable map[string]int
}

// recentTTL bounds how long a Surge created by this process counts as in flight before the
// informer has delivered it.
const recentTTL = time.Minute

// capacityWantedTTL is how long a stall deferred for capacity keeps asking held surges of its pool
// to give theirs back; the stall re-asks on every retry.
const capacityWantedTTL = 2 * deferRetry

// state is the controller's in-memory bookkeeping, guarded by one mutex. Nothing in it is needed to
// resume after a restart: the Surges are the state; this only routes, de-duplicates and feeds gauges.
type state struct {
	mu      sync.Mutex
	metrics *metrics.Metrics
	watched map[string]nodeStats
	// reported holds the keys of one-off reports (an Event and a failure count per stall), so that a
	// stall re-examined every resync is reported once.
	reported map[string]string
	// unbound holds the keys of one-off reports tied to no node (a rejected Surge version, a dry-run
	// write), with when they were made; bounded by maxUnboundReports.
	unbound    map[string]time.Time
	cordonSeen map[string]time.Time
	// trusted maps the Surges that passed verification to their last phase; untrusted ones are absent
	// and never count against --max-concurrent-surges.
	trusted map[types.NamespacedName]trustedSurge
	// recent holds Surges this process created that the informer may not have delivered yet.
	recent map[types.NamespacedName]time.Time
	// wanted holds, per pool, the stalls deferred for lack of capacity and what they miss.
	wanted map[string]map[string]wantedCapacity
	// leading gates the state gauges: only the leader reports them.
	leading bool
}

type trustedSurge struct {
	uid   types.UID
	phase v1alpha1.Phase
	pool  string
	kind  string
	start time.Time
	held  corev1.ResourceList
}

type wantedCapacity struct {
	missing corev1.ResourceList
	at      time.Time
}

func newState(m *metrics.Metrics) *state {
	return &state{
		metrics: m, watched: map[string]nodeStats{}, reported: map[string]string{}, unbound: map[string]time.Time{}, cordonSeen: map[string]time.Time{},
		trusted: map[types.NamespacedName]trustedSurge{}, recent: map[types.NamespacedName]time.Time{}, wanted: map[string]map[string]wantedCapacity{},
	}
}

// setLeading starts (or stops) reporting the gauges.
func (s *state) setLeading(leading bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leading = leading
	s.updateSurgeGauges()
	s.updateNodeGauges()
}

func keyOf(sg *v1alpha1.Surge) types.NamespacedName {
	return types.NamespacedName{Namespace: sg.Namespace, Name: sg.Name}
}

// created remembers a Surge this process just created.
func (s *state) created(sg *v1alpha1.Surge) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recent[keyOf(sg)] = time.Now()
}

// verified records a Surge that passed verification, with its phase.
func (s *state) verified(sg *v1alpha1.Surge) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := keyOf(sg)
	t := s.trusted[key]
	if t.uid != sg.UID {
		t = trustedSurge{uid: sg.UID}
	}
	t.phase, t.pool, t.kind, t.start = sg.PhaseOf(), sg.Spec.Pool, sg.Spec.Target.Kind, sg.Spec.StartTime.Time
	s.trusted[key] = t
	delete(s.recent, key)
	s.updateSurgeGauges()
}

// holding records the extended resources a trusted Surge's extra replicas hold.
func (s *state) holding(sg *v1alpha1.Surge, held corev1.ResourceList) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.trusted[keyOf(sg)]; ok && t.uid == sg.UID {
		t.held = held
		s.trusted[keyOf(sg)] = t
		s.updateSurgeGauges()
	}
}

// rejected forgets a Surge that failed verification.
func (s *state) rejected(sg *v1alpha1.Surge) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.trusted, keyOf(sg))
	s.updateSurgeGauges()
}

// forgetSurge forgets a deleted Surge.
func (s *state) forgetSurge(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recent, key)
	delete(s.trusted, key)
	s.updateSurgeGauges()
}

// inFlight counts the trusted Surges serving a stall, plus those created but not seen yet. Surges
// lists what the informer has now: a trusted Surge it no longer has is gone.
func (s *state) inFlight(surges []*v1alpha1.Surge) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	seen := map[types.NamespacedName]bool{}
	for _, sg := range surges {
		seen[keyOf(sg)] = true
		if t, ok := s.trusted[keyOf(sg)]; ok && t.uid == sg.UID && guardian.InFlight(sg.PhaseOf()) {
			n++
		}
	}
	for key, at := range s.recent {
		if time.Since(at) > recentTTL {
			delete(s.recent, key)
		} else if !seen[key] {
			n++
		}
	}
	return n
}

// wantCapacity records (missing != nil) or clears what a deferred stall on node misses.
func (s *state) wantCapacity(pool, node string, missing corev1.ResourceList) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if missing == nil {
		delete(s.wanted[pool], node)
	} else {
		if s.wanted[pool] == nil {
			s.wanted[pool] = map[string]wantedCapacity{}
		}
		s.wanted[pool][node] = wantedCapacity{missing: missing, at: time.Now()}
	}
	s.updateNodeGauges()
}

// wantingNodes lists the nodes whose stalls wait for capacity.
func (s *state) wantingNodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, nodes := range s.wanted {
		for n := range nodes {
			out = append(out, n)
		}
	}
	return out
}

// capacityWanted reports whether a stall of the pool waits for capacity now.
func (s *state) capacityWanted(pool string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for node, w := range s.wanted[pool] {
		if time.Since(w.at) > capacityWantedTTL {
			delete(s.wanted[pool], node)
			continue
		}
		return true
	}
	return false
}

func (s *state) updateSurgeGauges() {
	s.metrics.SurgesActive.Reset()
	s.metrics.SurgeStartTime.Reset()
	s.metrics.Surges.Reset()
	s.metrics.SurgeHeldResources.Reset()
	if !s.leading {
		return
	}
	for _, p := range []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseSurged, v1alpha1.PhaseReady, v1alpha1.PhaseResolved, v1alpha1.PhaseRestoring, v1alpha1.PhaseFailed} {
		s.metrics.Surges.WithLabelValues(string(p)).Set(0)
	}
	held := map[string]*resource.Quantity{}
	for key, t := range s.trusted {
		s.metrics.Surges.WithLabelValues(string(t.phase)).Inc()
		if t.phase == v1alpha1.PhaseFailed {
			continue
		}
		s.metrics.SurgesActive.WithLabelValues(t.pool, t.kind).Inc()
		s.metrics.SurgeStartTime.WithLabelValues(key.Namespace, key.Name, t.kind).Set(float64(t.start.Unix()))
		for name, q := range t.held {
			if held[string(name)] == nil {
				held[string(name)] = resource.NewQuantity(0, q.Format)
			}
			held[string(name)].Add(q)
		}
	}
	for name, q := range held {
		s.metrics.SurgeHeldResources.WithLabelValues(name).Set(q.AsApproximateFloat64())
	}
}

// setNode stores a node's blocked-pod counts (nil: the node is not being drained) and updates the gauges.
func (s *state) setNode(node string, st *nodeStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == nil {
		delete(s.watched, node)
		for pool := range s.wanted {
			delete(s.wanted[pool], node)
		}
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
	s.metrics.MissingCapacity.Reset()
	if !s.leading {
		return
	}
	for _, n := range s.watched {
		s.metrics.BlockedPods.WithLabelValues(n.pool).Add(float64(n.blocked))
		for reason, count := range n.unresolvable {
			s.metrics.UnresolvableBlocks.WithLabelValues(n.pool, reason).Add(float64(count))
		}
	}
	for pool, nodes := range s.wanted {
		for _, w := range nodes {
			for name, q := range w.missing {
				s.metrics.MissingCapacity.WithLabelValues(pool, string(name)).Add(q.AsApproximateFloat64())
			}
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

// Bounds of the one-off reports tied to no node: past maxUnboundReports keys, those older than
// unboundReportTTL are forgotten (and all of them if that is not enough), so that the memory of a
// long-running guardian stays bounded; a forgotten report may be made once more.
const (
	maxUnboundReports = 1024
	unboundReportTTL  = time.Hour
)

// once reports whether key is new for node's current drain, remembering it. Keys are forgotten when
// the node's drain ends, so a later drain is reported afresh; keys of no node ("") are bounded in
// number and age.
func (s *state) once(node, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if node == "" {
		if _, ok := s.unbound[key]; ok {
			return false
		}
		if len(s.unbound) >= maxUnboundReports {
			s.pruneUnbound(time.Now())
		}
		s.unbound[key] = time.Now()
		return true
	}
	if _, ok := s.reported[key]; ok {
		return false
	}
	s.reported[key] = node
	return true
}

// pruneUnbound forgets node-less report keys older than unboundReportTTL, or all of them when that
// leaves too many; s.mu must be held.
func (s *state) pruneUnbound(now time.Time) {
	for k, at := range s.unbound {
		if now.Sub(at) > unboundReportTTL {
			delete(s.unbound, k)
		}
	}
	if len(s.unbound) >= maxUnboundReports {
		clear(s.unbound)
	}
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
