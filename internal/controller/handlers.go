package controller

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// onNode re-examines the node and every Surge made for it, and the stalls deferred for capacity: a
// node coming back from its reboot, schedulable and Ready, brings its capacity with it.
func (c *Controller) onNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	c.plans.invalidate()
	c.answers.invalidate()
	c.enqueueNode(n.Name)
	c.enqueueSurges(func(s *v1alpha1.Surge) bool { return s.Spec.Node == n.Name })
	c.enqueuePredicted(n)
	c.enqueueUpcoming(n)
	if !n.Spec.Unschedulable {
		for _, w := range c.drains.wantingNodes() {
			c.enqueueNode(w)
		}
	}
}

// podHandler is onPod for every event, and on a deletion also re-examines the stalls deferred for
// capacity: the deleted pod's requests are free now.
func (c *Controller) podHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: c.onPod,
		UpdateFunc: func(old, obj any) {
			if changed(old, obj) {
				c.onPod(obj)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			c.onPod(obj)
			for _, n := range c.drains.wantingNodes() {
				c.enqueueNode(n)
			}
		},
	}
}

// onPod re-examines the pod's node when it is under drain, and the Surges of the pod's namespace: a
// replacement turning Ready or a blocked pod leaving moves a surge along. A namespace holds few Surges
// (one per surged workload), so matching them all is cheaper than resolving the pod's owner.
func (c *Controller) onPod(obj any) {
	p, ok := obj.(*podinfo.Pod)
	if !ok {
		return
	}
	for _, n := range c.drains.watchedNodes() {
		if n == p.Spec.NodeName {
			c.enqueueNode(n)
		}
	}
	if p.DeletionTimestamp != nil || p.Finished() {
		// A pod leaving frees its requests: a stall deferred for capacity may fit now.
		for _, n := range c.drains.wantingNodes() {
			c.enqueueNode(n)
		}
	}
	for _, s := range c.surges.InNamespace(p.Namespace) {
		c.enqueueSurge(s)
	}
}

// onPool re-examines the pool's nodes and the Surges held for it.
func (c *Controller) onPool(obj any) {
	p, ok := obj.(*mcfgv1.MachineConfigPool)
	if !ok {
		return
	}
	c.plans.invalidate()
	c.enqueuePool(p.Name)
	nodes, _ := c.nodes.List(labels.Everything())
	pools, _ := c.pools.List(labels.Everything())
	for _, n := range nodes {
		if owner := mco.PoolForNode(n, pools); owner != nil && owner.Name == p.Name {
			c.enqueueNode(n.Name)
		}
	}
	// Any pool's progress can make nodes safe for survivors of any surge (--restore=auto).
	c.enqueueSurges(func(*v1alpha1.Surge) bool { return true })
}

// enqueueWatchedNodes re-examines every node under drain, e.g. when a KServe kind becomes known.
func (c *Controller) enqueueWatchedNodes() {
	for _, n := range c.drains.watchedNodes() {
		c.enqueueNode(n)
	}
}

// onPDB re-examines the nodes under drain that run a pod the PDB selects, and the Ready Surges whose
// blocked pod it selects: its budget is all that changed. A cluster's thousands of PDBs change status
// all the time (every pod turning Ready or not); only those of pods on draining nodes matter.
//
// A Ready Surge's eviction is usually refused at first: the replacement turned Ready a moment before
// the disruption controller raised the budget. Waking the Surge when the budget moves evicts the pod
// as soon as the API server allows it, instead of on the next retry, by which time the MCO's own
// drain attempt may have taken it (and with it the grace period the early eviction saves).
func (c *Controller) onPDB(obj any) {
	pdb, ok := obj.(*policyv1.PodDisruptionBudget)
	if !ok {
		return
	}
	for _, n := range c.drains.watchedNodes() {
		if c.selectsPodOn(pdb, n) {
			c.enqueueNode(n)
		}
	}
	for _, s := range c.surges.InNamespace(pdb.Namespace) {
		if s.PhaseOf() == v1alpha1.PhaseReady && c.selectsPodOn(pdb, s.Spec.Node) {
			c.enqueueSurge(s)
		}
	}
}

// pdbHandler is onPDB for every event; a deleted PDB's parsed selector is forgotten.
func (c *Controller) pdbHandler() cache.ResourceEventHandler {
	h := c.handler(c.onPDB).(cache.ResourceEventHandlerFuncs)
	return cache.ResourceEventHandlerFuncs{
		AddFunc: h.AddFunc, UpdateFunc: h.UpdateFunc,
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pdb, ok := obj.(*policyv1.PodDisruptionBudget); ok {
				c.selectors.Forget(pdb.UID)
			}
			h.DeleteFunc(obj)
		},
	}
}

// selectsPodOn reports whether the PDB selects a pod of its namespace on the node.
func (c *Controller) selectsPodOn(pdb *policyv1.PodDisruptionBudget, node string) bool {
	sel := c.selectors.Matcher(pdb)
	if sel == nil {
		return false
	}
	pods, _ := c.podsOn(node)
	for _, p := range pods {
		if p.Namespace == pdb.Namespace && sel.Matches(p.Labels) {
			return true
		}
	}
	return false
}

// onScalable re-examines the Surges whose target or pod owner the object is: someone may change their
// fields, and a two-step restore waits on the pod owner's counts. It also re-examines the nodes under
// drain that run a pod of the object's namespace: a stall deferred as NotSteady is surged as soon as
// its workload settles.
func (c *Controller) onScalable(kind workload.Kind) func(obj any) {
	return func(obj any) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return
		}
		c.enqueueNodesRunning(m.GetNamespace())
		for _, s := range c.surges.InNamespace(m.GetNamespace()) {
			target := s.Spec.Target.Kind == string(kind) && s.Spec.Target.Name == m.GetName()
			owner := s.Spec.PodOwner.Kind == string(kind) && s.Spec.PodOwner.Name == m.GetName()
			if target || owner {
				c.enqueueSurge(s)
			}
		}
	}
}

// enqueueNodesRunning re-examines the nodes under drain that run a pod of the namespace. Nodes under
// drain are few; each lookup is an index read.
func (c *Controller) enqueueNodesRunning(namespace string) {
	for _, n := range c.drains.watchedNodes() {
		pods, _ := c.podsOn(n)
		if slices.ContainsFunc(pods, func(p *podinfo.Pod) bool { return p.Namespace == namespace }) {
			c.enqueueNode(n)
		}
	}
}

// onSurge moves a Surge along when it changes; a Prepared one's pool reports its readiness again.
func (c *Controller) onSurge(obj any) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		c.queue.Add(key{Surge: keyOfObject(u)})
		if trigger, _, _ := unstructured.NestedString(u.Object, "spec", "trigger"); trigger == string(guardian.TriggerPrepared) {
			if pool, _, _ := unstructured.NestedString(u.Object, "spec", "pool"); pool != "" {
				c.enqueuePool(pool)
			}
		}
	}
}
