package controller

import (
	"sync"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/mco"
)

// mcdAnswers reads whether an MCO update drains its node: the machine-config daemon's own answer on
// the node's MachineConfigNode and annotations, or, for a node not targeted yet, the answer of
// another node on the same update (mco.Answers). The collected answers are kept until a node or a
// MachineConfigNode changes, as the pools' plans are.
type mcdAnswers struct {
	// mcns is nil when the cluster serves no MachineConfigNodes: the annotations answer alone, when
	// the daemon requests the drain (or the uncordon without one).
	mcns  mcfglisters.MachineConfigNodeLister
	nodes func() []*corev1.Node

	// rendered computes the answer from the rendered MachineConfigs when nothing else has
	// answered; nil without --read-machineconfigs.
	rendered *renderedConfigs

	mu     sync.Mutex
	cached mco.Answers
}

// mcn returns the node's MachineConfigNode, nil when there is none.
func (a *mcdAnswers) mcn(node string) *mcfgv1.MachineConfigNode {
	if a == nil || a.mcns == nil {
		return nil
	}
	m, err := a.mcns.Get(node)
	if err != nil {
		return nil
	}
	return m
}

// need answers for the node's update (targeted, or the pool's next for it): the daemon's own
// answer first, then another node's on the same update, then, with --read-machineconfigs, the
// daemon's decision computed from the rendered configs. The daemon's answer always wins: it is
// what the node will do.
func (a *mcdAnswers) need(node *corev1.Node, pool *mcfgv1.MachineConfigPool) mco.Answer {
	if ans := mco.NodeAnswer(node, a.mcn(node.Name)); ans.Known() {
		return ans
	}
	u, ok := mco.UpdateOf(node, pool)
	if !ok {
		return mco.Answer{Reason: "the node has no update pending"}
	}
	if ans := a.all().For(u); ans.Known() || a.rendered == nil {
		return ans
	}
	return a.rendered.decide(u)
}

// all is every targeted node's answer, collected once per change.
func (a *mcdAnswers) all() mco.Answers {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cached == nil {
		a.cached = mco.CollectAnswers(a.nodes(), a.mcn)
	}
	return a.cached
}

// invalidate forgets the collected answers: a node or a MachineConfigNode changed.
func (a *mcdAnswers) invalidate() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cached = nil
}

// watchMachineConfigNodes reads MachineConfigNodes when the cluster serves them (OpenShift 4.19 and
// later): they carry the daemon's answer about a second after the targeting, a second or two
// before the drain request on the node.
func (i *Informers) watchMachineConfigNodes() error {
	served, err := servesResource(i.clients.Discovery, "machineconfiguration.openshift.io/v1", "machineconfignodes")
	if err != nil || !served {
		if err == nil {
			i.log.Info("MachineConfigNodes are not served: whether an update drains is read from the node annotations only")
		}
		return err
	}
	inf := i.mcoFactory.Machineconfiguration().V1().MachineConfigNodes()
	i.view.answers.mcns = inf.Lister()
	i.register(inf.Informer(), func(c *Controller) cache.ResourceEventHandler { return c.handler(c.onMachineConfigNode) })
	return i.watchRenderedConfigs()
}

// onMachineConfigNode re-examines the node (its update may now be known to drain, or not), its
// Surges, and the nodes the pool will update next, whose look-ahead reads the same answer.
func (c *Controller) onMachineConfigNode(obj any) {
	m, ok := obj.(*mcfgv1.MachineConfigNode)
	if !ok {
		return
	}
	c.answers.invalidate()
	c.enqueueNode(m.Name)
	c.enqueueSurges(func(s *v1alpha1.Surge) bool { return s.Spec.Node == m.Name })
	if n, err := c.nodes.Get(m.Name); err == nil {
		c.enqueuePredicted(n)
	}
}
