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

// maintenanceNodeIndex indexes NodeMaintenance objects by spec.nodeName.
const maintenanceNodeIndex = "spec.nodeName"

// maintenanceKind is one NodeMaintenance API the guardian reads, when the cluster serves it.
type maintenanceKind struct {
	gvr     schema.GroupVersionResource
	indexer cache.Indexer
	read    func(*unstructured.Unstructured) (trigger.Maintenance, error)
}

// sources reads, from the informers, the drains of the trigger sources other than the MCO (package
// trigger): GPU Operator driver upgrades and NodeMaintenance objects. A source switched off by flag
// gives no signal; one whose API is not served reads nothing (the GPU upgrade's node labels are read
// whether or not the ClusterPolicy API is served: its default policy is assumed then).
type sources struct {
	gpu       bool
	lifecycle bool
	lookahead int
	nodes     func() []*corev1.Node
	// policies is the ClusterPolicy cache, nil when not served or --gpu-driver-upgrades=false.
	policies     cache.Indexer
	maintenances []maintenanceKind
	log          *zap.Logger
}

// signals is every source's view of node, in a fixed order (see guardian.DominantDrain).
func (s *sources) signals(node *corev1.Node) []trigger.Signal {
	return s.read(node, true)
}

// read is signals; without predict, no node is predicted (the prediction reads every node).
func (s *sources) read(node *corev1.Node, predict bool) []trigger.Signal {
	var out []trigger.Signal
	if s.gpu {
		var predicted map[string]bool
		if predict {
			predicted = s.gpuPredicted(node)
		}
		out = append(out, trigger.GPUDriverUpgrades{Predicted: predicted}.Signal(node))
	}
	if len(s.maintenances) > 0 {
		out = append(out, trigger.NewNodeMaintenances(s.maintenancesOf(node.Name)).Signal(node))
	}
	if s.lifecycle {
		out = append(out, trigger.NodeLifecycles{Predict: predict && s.lookahead > 0}.Signal(node))
	}
	return out
}

// signalOf is the signal of the named source about node, and whether that source is on.
func (s *sources) signalOf(name trigger.Name, node *corev1.Node) (trigger.Signal, bool) {
	for _, sig := range s.signals(node) {
		if sig.Source == name {
			return sig, true
		}
	}
	return trigger.Signal{}, false
}

// policy is the upgrade policy of the ClusterPolicy the GPU Operator acts on, or its default.
func (s *sources) policy() trigger.UpgradePolicy {
	if s.policies == nil {
		return trigger.DefaultUpgradePolicy()
	}
	var cps []*unstructured.Unstructured
	for _, o := range s.policies.List() {
		if u, ok := o.(*unstructured.Unstructured); ok {
			cps = append(cps, u)
		}
	}
	p, err := trigger.ActiveUpgradePolicy(cps)
	if err != nil {
		s.log.Debug("reading the ClusterPolicy's upgrade policy; assuming the default", zap.Error(err))
		return trigger.DefaultUpgradePolicy()
	}
	return p
}

// gpuPredicted names the nodes the upgrade controller is expected to pick next (at most
// --lookahead), when node is one waiting to be picked; nil otherwise, so that the prediction, which
// reads every node, runs only for the nodes it can concern.
func (s *sources) gpuPredicted(node *corev1.Node) map[string]bool {
	if s.lookahead == 0 || !trigger.ReadGPUNode(node).Pending() {
		return nil
	}
	out := map[string]bool{}
	for _, n := range trigger.PredictGPUUpgrades(s.nodes(), s.policy()).Predicted(s.lookahead) {
		out[n.Name] = true
	}
	return out
}

// gpuRolloutOver reports whether the driver upgrade has no node left to drain: none waits to be
// picked (skipped nodes aside) and none is between its selection and its end.
func (s *sources) gpuRolloutOver() bool {
	for _, n := range s.nodes() {
		if trigger.ReadGPUNode(n).Pending() || (trigger.GPUDriverUpgrades{}).Signal(n).Active() {
			return false
		}
	}
	return true
}

// maintenancesOf reads the NodeMaintenance objects of every kind served that name the node. One
// that cannot be read is skipped (and logged): the guardian acts on nothing it cannot explain.
func (s *sources) maintenancesOf(node string) []trigger.Maintenance {
	var out []trigger.Maintenance
	for _, k := range s.maintenances {
		objs, _ := k.indexer.ByIndex(maintenanceNodeIndex, node)
		for _, o := range objs {
			u, ok := o.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			m, err := k.read(u)
			if err != nil {
				s.log.Debug("skipping a NodeMaintenance", zap.Error(err))
				continue
			}
			out = append(out, m)
		}
	}
	return out
}

// nodeSignals is the dominant drain of the node over every source (guardian.DominantDrain), with
// the signals it was weighed from.
func (c *Controller) nodeSignals(node *corev1.Node, mcoDrain guardian.NodeDrain) (guardian.NodeDrain, []trigger.Signal) {
	signals := c.sources.signals(node)
	return guardian.DominantDrain(mcoDrain, signals...), signals
}

// watchSources registers the informers of the sources the options switch on and the cluster
// serves.
func (c *Controller) watchSources() error {
	c.sources = &sources{gpu: c.opts.GPUDriverUpgrades, lifecycle: c.opts.NodeLifecycle, lookahead: c.opts.Lookahead, log: c.log, nodes: func() []*corev1.Node {
		nodes, _ := c.nodes.List(labels.Everything())
		return nodes
	}}
	if c.opts.GPUDriverUpgrades {
		inf, err := c.watchServed(trigger.ClusterPolicyGVR, c.handler(c.onClusterPolicy))
		if err != nil {
			return err
		}
		if inf != nil {
			c.sources.policies = inf.GetIndexer()
		}
	}
	if !c.opts.NodeMaintenance {
		return nil
	}
	kinds := []struct {
		gvr  schema.GroupVersionResource
		read func(*unstructured.Unstructured) (trigger.Maintenance, error)
	}{
		{trigger.Medik8sNodeMaintenanceGVR, trigger.ReadMedik8sNodeMaintenance},
		{trigger.NVIDIANodeMaintenanceGVR, trigger.ReadNVIDIANodeMaintenance},
	}
	for _, k := range kinds {
		inf, err := c.watchServed(k.gvr, c.handler(c.onNodeMaintenance))
		if err != nil {
			return err
		}
		if inf == nil {
			continue
		}
		if err := inf.AddIndexers(cache.Indexers{maintenanceNodeIndex: maintenanceNode}); err != nil {
			return err
		}
		c.sources.maintenances = append(c.sources.maintenances, maintenanceKind{gvr: k.gvr, indexer: inf.GetIndexer(), read: k.read})
	}
	return nil
}

// watchServed starts watching gvr through the dynamic informer factory if the cluster serves it;
// nil when it does not.
func (c *Controller) watchServed(gvr schema.GroupVersionResource, h cache.ResourceEventHandler) (cache.SharedIndexInformer, error) {
	served, err := servesResource(c.clients.Discovery, gvr.GroupVersion().String(), gvr.Resource)
	if err != nil {
		return nil, fmt.Errorf("discovering %s: %w", gvr.GroupResource(), err)
	}
	if !served {
		c.log.Info("not served by this cluster: its drains are not followed", zap.String("resource", gvr.GroupResource().String()))
		return nil, nil
	}
	inf := c.dynamicFactory.ForResource(gvr).Informer()
	if err := inf.SetTransform(slimTrigger); err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(h); err != nil {
		return nil, err
	}
	c.synced = append(c.synced, inf.HasSynced)
	return inf, nil
}

// slimTrigger keeps, of a ClusterPolicy or NodeMaintenance, the metadata without managedFields and
// the parts package trigger reads: a ClusterPolicy's spec.driver.upgradePolicy (the rest of its spec
// configures a dozen operands), a NodeMaintenance's spec and status.
func slimTrigger(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return stripManagedFields(obj)
	}
	u.SetManagedFields(nil)
	if u.GetKind() == "ClusterPolicy" {
		policy, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "driver", "upgradePolicy")
		delete(u.Object, "spec")
		delete(u.Object, "status")
		if found {
			_ = unstructured.SetNestedField(u.Object, policy, "spec", "driver", "upgradePolicy")
		}
	}
	return u, nil
}

// maintenanceNode is the maintenanceNodeIndex function.
func maintenanceNode(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	if node, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName"); node != "" {
		return []string{node}, nil
	}
	return nil, nil
}

// onNodeMaintenance re-examines the node a NodeMaintenance names, and its Surges.
func (c *Controller) onNodeMaintenance(obj any) {
	nodes, _ := maintenanceNode(obj)
	for _, n := range nodes {
		c.enqueueNode(n)
		c.enqueueSurges(func(s *v1alpha1.Surge) bool { return s.Spec.Node == n })
	}
}

// onClusterPolicy re-examines the nodes a driver upgrade concerns: the upgrade policy shapes its
// prediction.
func (c *Controller) onClusterPolicy(any) {
	nodes, _ := c.nodes.List(labels.Everything())
	for _, n := range nodes {
		if trigger.ReadGPUNode(n).Managed() {
			c.enqueueNode(n.Name)
		}
	}
}

// observeDrain fills in the Surge's view of its node's drain. The drain it was made for is current
// as long as any source still has it under way, even while another source dominates the node: a
// driver upgrade that starts while the MCO drains the node for its surge must not end that surge
// (and make a second one). Otherwise the node's dominant drain is current.
func (c *Controller) observeDrain(obs *guardian.Observation, mcoDrain guardian.NodeDrain) {
	s := obs.Surge
	dominant, signals := c.nodeSignals(obs.Node, mcoDrain)
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
	sig, on := c.sources.signalOf(trigger.Name(t), obs.Node)
	if !on {
		// The source was switched off since: the node is back as far as the guardian can tell once
		// it is schedulable.
		obs.SourceBack, obs.SourceRolloutOver = !obs.Node.Spec.Unschedulable, true
		return
	}
	obs.SourceDraining = sig.Phase == trigger.PhaseDraining && sig.Drain == s.Spec.Drain
	obs.SourceBack = sig.Back
	obs.SourceRolloutOver = t != guardian.TriggerGPUDriverUpgrade || c.sources.gpuRolloutOver()
}

// reportDrainFailed reports, once per drain, a Surge serving a node whose source gave up on its
// drain (a driver upgrade in upgrade-failed): the node stays cordoned until someone intervenes, and
// the surge is held until it is back or --max-surge-duration runs out.
func (c *Controller) reportDrainFailed(sc *surgeCase, obs guardian.Observation) {
	s := sc.s
	t := guardian.Trigger(s.Spec.Trigger)
	if obs.Node == nil || !guardian.FromSource(t) || s.PhaseOf() == v1alpha1.PhaseRestoring || s.PhaseOf() == v1alpha1.PhaseFailed {
		return
	}
	sig, on := c.sources.signalOf(trigger.Name(t), obs.Node)
	if !on || sig.Phase != trigger.PhaseFailed || sig.Drain != s.Spec.Drain {
		return
	}
	if !c.reports.once("", fmt.Sprintf("%s/%s/%s", ReasonDrainFailed, s.UID, s.Spec.Drain)) {
		return
	}
	c.metrics.DrainsFailed.WithLabelValues(string(t)).Inc()
	c.event(sc.obj.ObjectReference(), corev1.EventTypeWarning, ReasonDrainFailed, actionReport,
		"The %s of node %s failed (%q) while Surge %s served it; the node stays cordoned until someone intervenes. The surge is held until the node is back, at most --max-surge-duration",
		t, s.Spec.Node, sig.Detail, s.Name)
}

// gpuWillDrain reports whether the driver upgrade has still to drain the node: it waits to be
// picked, or is between its selection and its end.
func gpuWillDrain(n *corev1.Node) bool {
	return trigger.ReadGPUNode(n).Pending() || (trigger.GPUDriverUpgrades{}).Signal(n).Active()
}

// gpuLookaheadRoom is what a look-ahead surge ahead of the driver upgrade may use: capacity on nodes
// neither the upgrade nor an MCO update will drain, after the replacements the stalls on the nodes
// upgrading now will ask for (as lookaheadRoom is for the MCO).
func (c *Controller) gpuLookaheadRoom(pool string) *guardian.Lookahead {
	plan := trigger.PredictGPUUpgrades(c.sources.nodes(), c.sources.policy())
	pools := c.newPoolLookup()
	return &guardian.Lookahead{
		CapacityWanted: c.drains.capacityWanted(pool),
		WillNotDrain:   func(n *corev1.Node) bool { return !gpuWillDrain(n) && mco.WillNotDrain(n, pools.of(n)) },
		Unserved:       c.unservedStalls(plan.Upgrading),
	}
}

// enqueueGPUPredicted re-examines the nodes the driver upgrade will pick next when a node it
// concerns changes: one node finishing moves the prediction along.
func (c *Controller) enqueueGPUPredicted(node *corev1.Node) {
	if !c.sources.gpu || c.cfg.Lookahead == 0 || !trigger.ReadGPUNode(node).Managed() {
		return
	}
	for _, n := range trigger.PredictGPUUpgrades(c.sources.nodes(), c.sources.policy()).Predicted(c.cfg.Lookahead) {
		c.enqueueNode(n.Name)
	}
}

// willDrain reports whether a source other than the MCO has a drain of the node under way, picked
// or planned (a NodeMaintenance pending, MaintenancePlanned): a replacement placed there would
// have to move again.
func (s *sources) willDrain(n *corev1.Node) bool {
	for _, sig := range s.read(n, false) {
		if sig.Active() {
			return true
		}
	}
	return s.lifecycle && (trigger.NodeLifecycles{Predict: true}).Signal(n).Active()
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
