package controller

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Bounds of the one-off reports tied to no node: past maxUnboundReports keys, those older than
// unboundReportTTL are forgotten (and all of them if that is not enough), so that the memory of a
// long-running guardian stays bounded; a forgotten report may be made once more.
const (
	maxUnboundReports = 1024
	unboundReportTTL  = time.Hour
)

// reports de-duplicates one-off reports (an Event and a failure count per stall), so that a stall
// re-examined every resync is reported once.
type reports struct {
	mu    sync.Mutex
	clock clock.Clock
	// byNode maps the keys of reports about a node's current drain to the node.
	byNode map[string]string
	// unbound holds the keys of reports tied to no node (a rejected Surge version, a dry-run write),
	// with when they were made; bounded by maxUnboundReports.
	unbound map[string]time.Time
}

func newReports(clk clock.Clock) *reports {
	return &reports{clock: clk, byNode: map[string]string{}, unbound: map[string]time.Time{}}
}

// once reports whether key is new for node's current drain, remembering it. Keys are forgotten when
// the node's drain ends (forgetNode), so a later drain is reported afresh; keys of no node ("") are
// bounded in number and age.
func (r *reports) once(node, key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if node == "" {
		if _, ok := r.unbound[key]; ok {
			return false
		}
		now := r.clock.Now()
		if len(r.unbound) >= maxUnboundReports {
			r.pruneUnbound(now)
		}
		r.unbound[key] = now
		return true
	}
	if _, ok := r.byNode[key]; ok {
		return false
	}
	r.byNode[key] = node
	return true
}

// forgetNode forgets the reports about node's drain: it ended.
func (r *reports) forgetNode(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, n := range r.byNode {
		if n == node {
			delete(r.byNode, k)
		}
	}
}

// pruneUnbound forgets node-less report keys older than unboundReportTTL, or all of them when that
// leaves too many; r.mu must be held.
func (r *reports) pruneUnbound(now time.Time) {
	for k, at := range r.unbound {
		if now.Sub(at) > unboundReportTTL {
			delete(r.unbound, k)
		}
	}
	if len(r.unbound) >= maxUnboundReports {
		clear(r.unbound)
	}
}
