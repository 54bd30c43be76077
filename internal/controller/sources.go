package controller

import (
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/trigger"
)

// sourceNodeIndex indexes the objects of a drain source's resources by the node they concern
// (trigger.Resource.NodeOf).
const sourceNodeIndex = "node"

// sources reads the drains of the sources other than the MCO from the informers, through the table
// trigger.Kinds: only the kinds the flags switch on, each resource only when the cluster serves it.
// Nothing here names a source.
type sources struct {
	kinds []trigger.Kind
	view  *sourceView
}

// sourceView is the trigger.View over the controller's caches.
type sourceView struct {
	nodes     func() []*corev1.Node
	indexers  map[schema.GroupVersionResource]cache.Indexer
	lookahead int
	log       *zap.Logger
}

var _ trigger.View = (*sourceView)(nil)

func (v *sourceView) Nodes() []*corev1.Node { return v.nodes() }
func (v *sourceView) Lookahead() int        { return v.lookahead }

func (v *sourceView) Objects(gvr schema.GroupVersionResource) []*unstructured.Unstructured {
	idx := v.indexers[gvr]
	if idx == nil {
		return nil
	}
	return unstructuredOf(idx.List())
}

func (v *sourceView) ObjectsOn(gvr schema.GroupVersionResource, node string) []*unstructured.Unstructured {
	idx := v.indexers[gvr]
	if idx == nil {
		return nil
	}
	objs, _ := idx.ByIndex(sourceNodeIndex, node)
	return unstructuredOf(objs)
}

func (v *sourceView) Logf(format string, args ...any) {
	v.log.Debug(fmt.Sprintf(format, args...))
}

func unstructuredOf(objs []any) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out
}

// signals is every source's view of node, in the table's order (see guardian.DominantDrain).
func (s *sources) signals(node *corev1.Node) []trigger.Signal {
	return s.read(node, true)
}

// read is signals; without predict, no node is predicted (a prediction may read every node).
func (s *sources) read(node *corev1.Node, predict bool) []trigger.Signal {
	out := make([]trigger.Signal, 0, len(s.kinds))
	for _, k := range s.kinds {
		out = append(out, k.Signal(s.view, node, predict))
	}
	return out
}

// kind is the named source's entry, when it is on.
func (s *sources) kind(name trigger.Name) (trigger.Kind, bool) {
	for _, k := range s.kinds {
		if k.Name == name {
			return k, true
		}
	}
	return trigger.Kind{}, false
}

// signalOf is the signal of the named source about node, and whether that source is on.
func (s *sources) signalOf(name trigger.Name, node *corev1.Node) (trigger.Signal, bool) {
	k, on := s.kind(name)
	if !on {
		return trigger.Signal{}, false
	}
	return k.Signal(s.view, node, true), true
}

// rolloutOver reports whether the named source has no node left to drain: a source without
// rollouts (each drain on its own) always has.
func (s *sources) rolloutOver(name trigger.Name) bool {
	k, on := s.kind(name)
	return !on || k.RolloutOver == nil || k.RolloutOver(s.view)
}

// upcoming names the nodes whose prediction may move when node changes.
func (s *sources) upcoming(node *corev1.Node) []string {
	var out []string
	for _, k := range s.kinds {
		if k.Upcoming != nil {
			out = append(out, k.Upcoming(s.view, node)...)
		}
	}
	return out
}

// drainingNodes lists the nodes the named source drains now.
func (s *sources) drainingNodes(name trigger.Name) []*corev1.Node {
	if k, on := s.kind(name); on && k.DrainingNow != nil {
		return k.DrainingNow(s.view)
	}
	return nil
}

// rollouts are the sources' rollouts as `check` predicts them.
func (s *sources) rollouts() []trigger.Rollout {
	var out []trigger.Rollout
	for _, k := range s.kinds {
		if k.Rollout == nil {
			continue
		}
		if r, ok := k.Rollout(s.view); ok {
			out = append(out, r)
		}
	}
	return out
}

// nodeSignals is the dominant drain of the node over every source (guardian.DominantDrain), with
// the signals it was weighed from.
func (v *view) nodeSignals(node *corev1.Node, mcoDrain guardian.NodeDrain) (guardian.NodeDrain, []trigger.Signal) {
	signals := v.sources.signals(node)
	return guardian.DominantDrain(mcoDrain, signals...), signals
}

// watchSources registers the informers of the sources the options switch on, each resource when the
// cluster serves it.
func (i *Informers) watchSources() error {
	v := i.view
	v.sources = &sources{view: &sourceView{
		lookahead: i.opts.Lookahead, log: i.log, indexers: map[schema.GroupVersionResource]cache.Indexer{},
		nodes: func() []*corev1.Node {
			nodes, _ := v.nodes.List(labels.Everything())
			return nodes
		},
	}}
	for _, k := range trigger.Kinds {
		if !i.opts.SourceOn(k.Name) {
			continue
		}
		v.sources.kinds = append(v.sources.kinds, k)
		for _, r := range k.Resources {
			inf, err := i.watchServed(r.GVR, func(c *Controller) cache.ResourceEventHandler { return c.handler(c.onSourceObject(r)) }, slimSource(r))
			if err != nil {
				return err
			}
			if inf == nil {
				continue
			}
			if r.NodeOf != nil {
				if err := inf.AddIndexers(cache.Indexers{sourceNodeIndex: nodeIndexOf(r)}); err != nil {
					return err
				}
			}
			v.sources.view.indexers[r.GVR] = inf.GetIndexer()
		}
	}
	return nil
}

// watchServed registers gvr's informer of the dynamic informer factory if the cluster serves it,
// with the controller's handler; nil when it does not.
func (i *Informers) watchServed(gvr schema.GroupVersionResource, handler func(*Controller) cache.ResourceEventHandler, transform cache.TransformFunc) (cache.SharedIndexInformer, error) {
	served, err := servesResource(i.clients.Discovery, gvr.GroupVersion().String(), gvr.Resource)
	if err != nil {
		return nil, fmt.Errorf("discovering %s: %w", gvr.GroupResource(), err)
	}
	if !served {
		i.log.Info("not served by this cluster: not read", zap.String("resource", gvr.GroupResource().String()))
		return nil, nil
	}
	inf := i.dynamicFactory.ForResource(gvr).Informer()
	if err := inf.SetTransform(transform); err != nil {
		return nil, err
	}
	i.register(inf, handler)
	return inf, nil
}

// slimSource is the informer transform of a source's resource: managedFields dropped, and what
// the source's Slim leaves out.
func slimSource(r trigger.Resource) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return stripManagedFields(obj)
		}
		u.SetManagedFields(nil)
		if r.Slim != nil {
			r.Slim(u)
		}
		return u, nil
	}
}

// nodeIndexOf is the sourceNodeIndex function of a resource.
func nodeIndexOf(r trigger.Resource) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if node := r.NodeOf(u); node != "" {
				return []string{node}, nil
			}
		}
		return nil, nil
	}
}

// onSourceObject re-examines what an object of a source's resource concerns: the node it names and
// its Surges, or the nodes its source says it affects.
func (c *Controller) onSourceObject(r trigger.Resource) func(any) {
	return func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		if r.NodeOf != nil {
			if n := r.NodeOf(u); n != "" {
				c.enqueueNode(n)
				c.enqueueSurges(func(s *v1alpha1.Surge) bool { return s.Spec.Node == n })
			}
		}
		if r.Affects != nil {
			for _, n := range r.Affects(c.sources.view, u) {
				c.enqueueNode(n)
			}
		}
	}
}

// observeDrain fills in the Surge's view of its node's drain. The drain it was made for is current
// as long as any source still has it under way, even while another source dominates the node: a
// driver upgrade that starts while the MCO drains the node for its surge must not end that surge
// (and make a second one). Otherwise the node's dominant drain is current.
func (v *view) observeDrain(obs *guardian.Observation, mcoDrain guardian.NodeDrain) {
	s := obs.Surge
	dominant, signals := v.nodeSignals(obs.Node, mcoDrain)
	obs.CurrentDrain = dominant.Drain
	for _, d := range guardian.Drains(mcoDrain, signals...) {
		if d == s.Spec.Drain {
			obs.CurrentDrain = d
		}
	}
	t := guardian.Trigger(s.Spec.Trigger)
	if !guardian.FromSource(t) {
		return
	}
	sig, on := v.sources.signalOf(trigger.Name(t), obs.Node)
	if !on {
		// The source was switched off since: the node is back as far as the guardian can tell once
		// it is schedulable.
		obs.SourceBack, obs.SourceRolloutOver = !obs.Node.Spec.Unschedulable, true
		return
	}
	obs.SourceDraining = sig.Phase == trigger.PhaseDraining && sig.Drain == s.Spec.Drain
	obs.SourceBack = sig.Back
	obs.SourceRolloutOver = v.sources.rolloutOver(trigger.Name(t))
}

// reportDrainFailed reports, once per drain, a Surge serving a node whose source gave up on its
// drain (a driver upgrade in upgrade-failed): the node stays cordoned until someone intervenes, and
// the surge is held until it is back or --max-surge-duration runs out.
func (r *surgeReconciler) reportDrainFailed(sc *surgeCase, obs guardian.Observation) {
	s := sc.s
	t := guardian.Trigger(s.Spec.Trigger)
	if obs.Node == nil || !guardian.FromSource(t) || s.PhaseOf() == v1alpha1.PhaseRestoring || s.PhaseOf() == v1alpha1.PhaseFailed {
		return
	}
	sig, on := r.sources.signalOf(trigger.Name(t), obs.Node)
	if !on || sig.Phase != trigger.PhaseFailed || sig.Drain != s.Spec.Drain {
		return
	}
	if !r.reports.once("", fmt.Sprintf("%s/%s/%s", ReasonDrainFailed, s.UID, s.Spec.Drain)) {
		return
	}
	r.metrics.DrainsFailed.WithLabelValues(string(t)).Inc()
	r.event(sc.obj.ObjectReference(), corev1.EventTypeWarning, ReasonDrainFailed, actionReport,
		"The %s of node %s failed (%q) while Surge %s served it; the node stays cordoned until someone intervenes. The surge is held until the node is back, at most --max-surge-duration",
		t, s.Spec.Node, sig.Detail, s.Name)
}

// sourceLookaheadRoom is what a surge ahead of a source's drain may use: capacity on nodes no
// source and no MCO update will drain, after the replacements the stalls on the nodes the source
// drains now will ask for (as lookaheadRoom is for the MCO).
func (b *base) sourceLookaheadRoom(t guardian.Trigger, pool string) *guardian.Lookahead {
	pools := b.newPoolLookup()
	return &guardian.Lookahead{
		CapacityWanted: b.demand.capacityWanted(pool),
		WillNotDrain:   func(n *corev1.Node) bool { return b.willNotDrain(n, pools) },
		Unserved:       b.unservedStalls(b.sources.drainingNodes(trigger.Name(t))),
	}
}

// willNotDrain reports whether neither the MCO's update (mco.WillNotDrain) nor any other source will
// drain the node: a place for a replacement, and for the survivors of a restore.
func (v *view) willNotDrain(n *corev1.Node, pools *poolLookup) bool {
	return mco.WillNotDrain(n, pools.of(n)) && !v.sources.willDrain(n)
}

// enqueueUpcoming re-examines the nodes the sources will pick next when a node they concern
// changes: one node finishing moves the prediction along.
func (c *Controller) enqueueUpcoming(node *corev1.Node) {
	for _, n := range c.sources.upcoming(node) {
		c.enqueueNode(n)
	}
}

// willDrain reports whether a source other than the MCO is still to drain the node (waiting to be
// picked, planned, picked, draining): a replacement placed there would have to move again.
func (s *sources) willDrain(n *corev1.Node) bool {
	for _, k := range s.kinds {
		if k.WillDrain != nil && k.WillDrain(s.view, n) {
			return true
		}
	}
	return false
}

// drainingNow reports whether a source other than the MCO has picked the node, or is draining it or
// working on it drained: its pods are about to leave, or must not come back yet.
func (s *sources) drainingNow(n *corev1.Node) bool {
	for _, sig := range s.read(n, false) {
		if sig.Active() && sig.Phase != trigger.PhasePredicted {
			return true
		}
	}
	return false
}
