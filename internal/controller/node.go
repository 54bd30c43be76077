package controller

import (
	"context"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// nodeObservation is what one node sync read about a node under drain: the input of the stall
// decision, gathered from the listers once.
type nodeObservation struct {
	node *corev1.Node
	pool string
	wave guardian.Wave
}

// sync finds the pods a PDB keeps on a node that is being (or is about to be) drained and acts
// on them: observe (listers, once), decide (guardian.DecideStalls, under the executor's admission
// with the surges it starts), apply (Events, metrics, gauges, requeue).
func (r *nodeReconciler) sync(ctx context.Context, name string) (time.Duration, error) {
	obs, after, err := r.nodeUnderDrain(name)
	if obs == nil || err != nil {
		return after, err
	}
	if err := r.observeStalls(obs); err != nil {
		return 0, err
	}
	decisions, starts := r.decideStalls(ctx, obs)
	return r.applyStalls(ctx, obs, decisions, starts)
}

// nodeUnderDrain reads the node and its drain; nil when it is not under drain (and when to look
// again if that may change by itself).
func (r *nodeReconciler) nodeUnderDrain(name string) (*nodeObservation, time.Duration, error) {
	node, err := r.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		r.forgetNode(name)
		r.cordons.forget(name)
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	pool := r.poolFor(node)
	if pool != nil && !r.poolSelector.Matches(labels.Set(pool.Labels)) {
		r.forgetNode(name)
		return nil, 0, nil
	}
	if !node.Spec.Unschedulable {
		r.cordons.forget(name)
	}
	drain, _ := r.nodeSignals(node, r.nodeDrain(node, pool, r.predicted(node, pool), r.clock.Now()))
	if drain.Trigger == "" {
		r.forgetNode(name)
		return nil, drain.RecheckAfter, nil
	}
	obs := &nodeObservation{node: node, wave: guardian.Wave{Node: name, Drain: drain, PoolSelected: true}}
	if pool != nil {
		obs.pool = pool.Name
	}
	return obs, 0, nil
}

// forgetNode forgets a node that is not under drain (any more): its counts, its capacity wanted and
// its one-off reports, so that its next drain is reported afresh.
func (r *nodeReconciler) forgetNode(name string) {
	r.drains.setNode(name, nil, nil)
	r.reports.forgetNode(name)
}

// pdbStatusBehind reports whether the PDB's status counts fewer healthy pods than the cache holds.
func (v *view) pdbStatusBehind(pdb *policyv1.PodDisruptionBudget) bool {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return false
	}
	pods, err := v.pods.Pods(pdb.Namespace).List(sel)
	if err != nil {
		return false
	}
	return blocking.StatusBehind(pdb, pods)
}

// poolFor returns the node's MachineConfigPool, or nil (no pool, or MCO detection off).
func (v *view) poolFor(node *corev1.Node) *mcfgv1.MachineConfigPool {
	return v.newPoolLookup().of(node)
}

// poolLookup finds nodes' pools from one listing of the pools, each node's at most once: a sync
// that looks at many nodes lists the pools once.
type poolLookup struct {
	pools  []*mcfgv1.MachineConfigPool
	byNode map[string]*mcfgv1.MachineConfigPool
}

func (v *view) newPoolLookup() *poolLookup {
	l := &poolLookup{byNode: map[string]*mcfgv1.MachineConfigPool{}}
	if v.pools != nil {
		l.pools, _ = v.pools.List(labels.Everything())
	}
	return l
}

// of returns the node's pool, or nil.
func (l *poolLookup) of(node *corev1.Node) *mcfgv1.MachineConfigPool {
	p, ok := l.byNode[node.Name]
	if !ok {
		p = mco.PoolForNode(node, l.pools)
		l.byNode[node.Name] = p
	}
	return p
}

// inScope applies the platform exclusion (options.Excludes), --namespace-selector and the namespace
// opt-out annotation.
func (b *base) inScope(namespace string) bool {
	if b.opts.Excludes(namespace) {
		return false
	}
	ns, err := b.namespaces.Get(namespace)
	if err != nil {
		return false
	}
	return b.nsSelector.Matches(labels.Set(ns.Labels)) && !workload.IgnoredByAnnotation(ns.Annotations)
}

// readyElsewhere counts Ready pods, not being deleted, off the given node.
func readyElsewhere(pods []*podinfo.Pod, node string, groupSize int32) int32 {
	if groupSize > 0 {
		// A multi-node workload serves with whole groups: count those with no pod on the node.
		return blocking.ReadyGroupsOff(pods, int(groupSize), node)
	}
	var n int32
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Spec.NodeName != node && p.DeletionTimestamp == nil && p.Ready() {
			n++
		}
	}
	return n
}

// podsOn returns the cached pods bound to the node.
func (v *view) podsOn(node string) ([]*podinfo.Pod, error) {
	objs, err := v.pods.Indexer.ByIndex(nodeNameIndex, node)
	if err != nil {
		return nil, err
	}
	pods := make([]*podinfo.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*podinfo.Pod); ok {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// blockedOn returns the pods on the node whose eviction a PDB of their namespace refuses.
func (v *view) blockedOn(node string) ([]blocking.Blocked, error) {
	pods, err := v.podsOn(node)
	if err != nil {
		return nil, err
	}
	var pdbs []*policyv1.PodDisruptionBudget
	namespaces := map[string]bool{}
	for _, p := range pods {
		if namespaces[p.Namespace] {
			continue
		}
		namespaces[p.Namespace] = true
		list, err := v.pdbs.PodDisruptionBudgets(p.Namespace).List(labels.Everything())
		if err != nil {
			return nil, err
		}
		pdbs = append(pdbs, list...)
	}
	return v.selectors.Index(pdbs).Find(pods), nil
}
