package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"

	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// onNode re-examines the node and every surge made for it.
func (c *Controller) onNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	c.enqueueNode(n.Name)
	for _, t := range c.state.surges() {
		if t.node == n.Name {
			c.enqueueWorkload(t.ref)
		}
	}
}

// onPod re-examines the pod's node when it is under drain, and the surge whose workload the pod
// belongs to: a replacement turning Ready or a blocked pod leaving moves a surge along.
func (c *Controller) onPod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	for _, n := range c.state.watchedNodes() {
		if n == p.Spec.NodeName {
			c.enqueueNode(n)
		}
	}
	for _, t := range c.state.surges() {
		if t.selector != nil && t.ref.Namespace == p.Namespace && t.selector.Matches(labels.Set(p.Labels)) {
			c.enqueueWorkload(t.ref)
		}
	}
}

// onPool re-examines the pool's nodes and the surges held for it.
func (c *Controller) onPool(obj any) {
	p, ok := obj.(*mcfgv1.MachineConfigPool)
	if !ok {
		return
	}
	nodes, _ := c.nodes.List(labels.Everything())
	pools, _ := c.pools.List(labels.Everything())
	for _, n := range nodes {
		if owner := mco.PoolForNode(n, pools); owner != nil && owner.Name == p.Name {
			c.enqueueNode(n.Name)
		}
	}
	for _, t := range c.state.surges() {
		if t.pool == p.Name {
			c.enqueueWorkload(t.ref)
		}
	}
}

// enqueueWatchedNodes re-examines every node under drain, e.g. when a PDB's status changes.
func (c *Controller) enqueueWatchedNodes() {
	for _, n := range c.state.watchedNodes() {
		c.enqueueNode(n)
	}
}

// onScalable follows objects that may carry a surge record, the targets of tracked surges (someone
// may change their fields), and pod owners of tracked surges (whose replica counts a two-step restore
// waits on).
func (c *Controller) onScalable(kind workload.Kind) func(obj any) {
	return func(obj any) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return
		}
		ref := workload.Ref{Kind: kind, Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID()}
		tracked := c.state.isTracked(ref)
		if _, ok := m.GetAnnotations()[workload.RecordAnnotation]; ok || tracked {
			if !tracked {
				c.state.track(trackedSurge{ref: ref})
			}
			c.enqueueWorkload(ref)
		}
		for _, t := range c.state.surges() {
			owner := t.podOwner.Kind == kind && t.podOwner.Namespace == ref.Namespace && t.podOwner.Name == ref.Name
			if owner || t.target == ref {
				c.enqueueWorkload(t.ref)
			}
		}
	}
}
