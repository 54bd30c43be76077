package controller

import (
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/drain-guardian/drain-guardian/internal/guardian"
)

// The controller's in-memory bookkeeping is split by job, each with its own lock: drains (the nodes
// under drain and the capacity their stalls want, here), cordons (when nodes were first seen
// cordoned, here), flight (which Surges count as in flight), reports (one-off report keys) and
// gauges (publication). Nothing in it is needed to resume after a restart: the Surges are the
// state; this only routes, de-duplicates and feeds gauges.

// nodeStats is the last blocked-pod count of a node under drain.
type nodeStats struct {
	pool         string
	blocked      int
	unresolvable map[unresolvable]int
}

// unresolvable labels the unresolvable-pods gauge: the Event's reason, and the verdict that
// drain_guardian_predicted_blocks and `check` name the same stall by.
type unresolvable struct{ reason, verdict string }

// capacityWantedTTL is how long a stall deferred for capacity keeps asking held surges of its pool
// to give theirs back; the stall re-asks on every retry.
const capacityWantedTTL = 2 * guardian.DeferRetry

type wantedCapacity struct {
	missing corev1.ResourceList
	at      time.Time
}

// drains holds the nodes under drain with their blocked-pod counts, and per pool the stalls deferred
// for lack of capacity with what they miss. The stall path writes it; the Surge lifecycle (a held
// surge gives its capacity back) and the look-ahead read it.
type drains struct {
	mu      sync.Mutex
	clock   clock.Clock
	gauges  *gauges
	watched map[string]nodeStats
	wanted  map[string]map[string]wantedCapacity
}

func newDrains(clk clock.Clock, g *gauges) *drains {
	return &drains{clock: clk, gauges: g, watched: map[string]nodeStats{}, wanted: map[string]map[string]wantedCapacity{}}
}

// setNode stores a node's blocked-pod counts and what its stalls miss (nil: nothing), or forgets the
// node (st nil: it is not being drained).
func (d *drains) setNode(node string, st *nodeStats, missing corev1.ResourceList) {
	d.update(func() {
		for pool := range d.wanted {
			delete(d.wanted[pool], node)
		}
		if st == nil {
			delete(d.watched, node)
			return
		}
		d.watched[node] = *st
		if missing != nil {
			if d.wanted[st.pool] == nil {
				d.wanted[st.pool] = map[string]wantedCapacity{}
			}
			d.wanted[st.pool][node] = wantedCapacity{missing: missing, at: d.clock.Now()}
		}
	})
}

// update changes the drains under the lock and publishes the gauges after releasing it.
func (d *drains) update(change func()) {
	d.mu.Lock()
	change()
	snapshot := nodeGauges{watched: maps.Clone(d.watched), wanted: map[string]map[string]wantedCapacity{}}
	for pool, nodes := range d.wanted {
		snapshot.wanted[pool] = maps.Clone(nodes)
	}
	d.mu.Unlock()
	d.gauges.setNodes(snapshot)
}

// wantingNodes lists the nodes whose stalls wait for capacity.
func (d *drains) wantingNodes() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, nodes := range d.wanted {
		for n := range nodes {
			out = append(out, n)
		}
	}
	return out
}

// anyCapacityWanted reports whether a stall of any pool waits for capacity now.
func (d *drains) anyCapacityWanted() bool {
	d.mu.Lock()
	pools := make([]string, 0, len(d.wanted))
	for pool := range d.wanted {
		pools = append(pools, pool)
	}
	d.mu.Unlock()
	for _, pool := range pools {
		if d.capacityWanted(pool) {
			return true
		}
	}
	return false
}

// capacityWanted reports whether a stall of the pool waits for capacity now.
func (d *drains) capacityWanted(pool string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	for node, w := range d.wanted[pool] {
		if now.Sub(w.at) > capacityWantedTTL {
			delete(d.wanted[pool], node)
			continue
		}
		return true
	}
	return false
}

func (d *drains) watchedNodes() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.watched))
	for n := range d.watched {
		out = append(out, n)
	}
	return out
}

// cordons remembers when this process first saw each node cordoned (since it was last schedulable),
// for cordons whose taint carries no time.
type cordons struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// forget forgets when node was first seen cordoned: it is schedulable again, or gone.
func (c *cordons) forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, node)
}

// firstSeen returns when node was first seen cordoned, now if this is the first time.
func (c *cordons) firstSeen(node string, now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]time.Time{}
	}
	if t, ok := c.seen[node]; ok {
		return t
	}
	c.seen[node] = now
	return now
}
