package controller

import (
	"sync"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// Look-ahead results, the lookahead_total metric's label.
const (
	lookaheadSurged  = "surged"
	lookaheadHit     = "hit"
	lookaheadMissed  = "missed"
	lookaheadSkipped = "skipped"
)

// predicted reports whether the MCO is about to update node: it is among the next --lookahead nodes
// the pool's node controller will target (mco.PredictTargets), or it is targeted already (the
// prediction came true; its drain follows).
func (b *base) predicted(node *corev1.Node, pool *mcfgv1.MachineConfigPool) bool {
	if b.cfg.Lookahead == 0 || pool == nil || !mco.PoolUpdating(pool) {
		return false
	}
	if st := mco.ReadNode(node); st.Targeted() && st.DesiredConfig == pool.Spec.Configuration.Name {
		return true
	}
	for _, n := range b.plan(pool).Next(b.cfg.Lookahead) {
		if n.Name == node.Name {
			return true
		}
	}
	return false
}

// plan predicts the node controller's next moves for pool. The prediction reads every node: it is
// made once per pool and kept until a node or pool changes (planCache).
func (v *view) plan(pool *mcfgv1.MachineConfigPool) mco.Plan {
	if p, ok := v.plans.get(pool); ok {
		return p
	}
	nodes, _ := v.nodes.List(labels.Everything())
	pools, _ := v.pools.List(labels.Everything())
	p := mco.PredictTargets(pool, mco.NodesInPool(pool, pools, nodes))
	v.plans.put(pool, p)
	return p
}

// planCache holds the pools' predicted plans; any node or pool event clears it.
type planCache struct {
	mu    sync.Mutex
	plans map[string]cachedPlan
}

type cachedPlan struct {
	resourceVersion string
	plan            mco.Plan
}

func (pc *planCache) get(pool *mcfgv1.MachineConfigPool) (mco.Plan, bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	cp, ok := pc.plans[pool.Name]
	return cp.plan, ok && cp.resourceVersion == pool.ResourceVersion
}

func (pc *planCache) put(pool *mcfgv1.MachineConfigPool, p mco.Plan) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.plans == nil {
		pc.plans = map[string]cachedPlan{}
	}
	pc.plans[pool.Name] = cachedPlan{resourceVersion: pool.ResourceVersion, plan: p}
}

// invalidate forgets every plan: a node or pool changed.
func (pc *planCache) invalidate() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	clear(pc.plans)
}

// enqueuePredicted re-examines the nodes the pool will update next: a node of the pool starting or
// finishing its update moves the prediction along.
func (c *Controller) enqueuePredicted(node *corev1.Node) {
	if c.opts.Lookahead == 0 {
		return
	}
	pool := c.poolFor(node)
	if pool == nil || !mco.PoolUpdating(pool) {
		return
	}
	for _, n := range c.plan(pool).Next(c.opts.Lookahead) {
		c.enqueueNode(n.Name)
	}
}

// unservedStalls returns, for every pod blocked on the given nodes whose workload has no Surge yet,
// an unscheduled copy: the replacement that stall will ask for, which comes before any look-ahead.
func (v *view) unservedStalls(nodes []*corev1.Node) []*podinfo.Pod {
	var out []*podinfo.Pod
	for _, n := range nodes {
		blocked, _ := v.blockedOn(n.Name)
		for _, b := range blocked {
			if v.hasSurge(b.Pod) {
				continue
			}
			out = append(out, guardian.Replacement(b.Pod))
		}
	}
	return out
}

// hasSurge reports whether the pod's workload has a Surge (of any phase) already.
func (v *view) hasSurge(pod *podinfo.Pod) bool {
	target, err := v.store.Resolve(pod)
	return err == nil && v.surgeOf(target) != nil
}
