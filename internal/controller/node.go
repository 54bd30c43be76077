package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// deferRetry is how soon a stall that could not be surged yet (capacity, concurrency) is looked at again.
const deferRetry = 30 * time.Second

// syncNode finds the pods a PDB keeps on a node that is being (or is about to be) drained, and starts a
// surge for each blocked workload that has none.
func (c *Controller) syncNode(ctx context.Context, name string) (time.Duration, error) {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.state.setNode(name, nil)
		c.state.forgetCordon(name)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	pool := c.poolFor(node)
	if pool != nil && !c.poolSelector.Matches(labels.Set(pool.Labels)) {
		c.state.setNode(name, nil)
		return 0, nil
	}
	now := c.clock.Now()
	var seen time.Time
	if node.Spec.Unschedulable {
		seen = c.state.firstCordonSeen(name, now)
	} else {
		c.state.forgetCordon(name)
	}
	drain := guardian.NodeTrigger(c.cfg, node, pool, c.predicted(node, pool), now, seen)
	if drain.Trigger == "" {
		c.state.setNode(name, nil)
		return drain.RecheckAfter, nil
	}
	stats := &nodeStats{unresolvable: map[string]int{}}
	if pool != nil {
		stats.pool = pool.Name
	}
	blocked, err := c.blockedOn(name)
	if err != nil {
		return 0, err
	}
	var after time.Duration
	var errs []error
	// Several blocked pods of one workload are one stall: the first decides for all of them (a second
	// surge attempt would only meet the first one's write as a conflict).
	decided := map[types.UID]string{}
	capacity := &capacitySnapshot{c: c}
	for _, b := range blocked {
		if !c.inScope(b.Pod.Namespace) {
			continue
		}
		if drain.Trigger != guardian.TriggerMCOPredicted {
			// A predicted node blocks nothing yet.
			stats.blocked++
		}
		var owner types.UID
		if ctrl := metav1.GetControllerOf(b.Pod); ctrl != nil {
			owner = ctrl.UID
		}
		if reason, ok := decided[owner]; ok && owner != "" {
			if reason != "" {
				stats.unresolvable[reason]++
			}
			continue
		}
		if !b.MultiplePDBs && c.pdbStatusBehind(b.PDB) {
			// The PDB's status lags a pod that just turned Ready: look again once it has caught up.
			decided[owner] = ""
			after = shorter(after, pdbLagRetry)
			continue
		}
		retry, unresolvable, err := c.handleBlocked(ctx, stall{node: node, pool: stats.pool, drain: drain, Blocked: b, capacity: capacity})
		decided[owner] = unresolvable
		if unresolvable != "" {
			stats.unresolvable[unresolvable]++
		}
		if err != nil {
			errs = append(errs, err)
		}
		after = shorter(after, retry)
	}
	c.state.setNode(name, stats)
	return after, errors.Join(errs...)
}

// pdbLagRetry is how soon a node is looked at again when a PDB's status lags behind its pods; the
// PDB's own update re-examines it sooner.
const pdbLagRetry = 2 * time.Second

// shorter returns the shorter of two requeue delays, where 0 means none.
func shorter(a, b time.Duration) time.Duration {
	if b > 0 && (a == 0 || b < a) {
		return b
	}
	return a
}

// pdbStatusBehind reports whether the PDB's status counts fewer healthy pods than the cache holds.
func (c *Controller) pdbStatusBehind(pdb *policyv1.PodDisruptionBudget) bool {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return false
	}
	pods, err := c.pods.Pods(pdb.Namespace).List(sel)
	if err != nil {
		return false
	}
	return blocking.StatusBehind(pdb, pods)
}

// poolFor returns the node's MachineConfigPool, or nil (no pool, or MCO detection off).
func (c *Controller) poolFor(node *corev1.Node) *mcfgv1.MachineConfigPool {
	return c.newPoolLookup().of(node)
}

// poolLookup finds nodes' pools from one listing of the pools, each node's at most once: a sync
// that looks at many nodes lists the pools once.
type poolLookup struct {
	pools  []*mcfgv1.MachineConfigPool
	byNode map[string]*mcfgv1.MachineConfigPool
}

func (c *Controller) newPoolLookup() *poolLookup {
	l := &poolLookup{byNode: map[string]*mcfgv1.MachineConfigPool{}}
	if c.pools != nil {
		l.pools, _ = c.pools.List(labels.Everything())
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
func (c *Controller) inScope(namespace string) bool {
	if c.opts.Excludes(namespace) {
		return false
	}
	ns, err := c.namespaces.Get(namespace)
	if err != nil {
		return false
	}
	return c.nsSelector.Matches(labels.Set(ns.Labels)) && !workload.IgnoredByAnnotation(ns.Annotations)
}

// stall is one blocked pod on a node about to be drained.
type stall struct {
	node  *corev1.Node
	pool  string
	drain guardian.NodeDrain
	blocking.Blocked
	// capacity is the sync's view of the cluster's capacity, shared by its stalls.
	capacity *capacitySnapshot
}

// key names a one-off report about this stall (see state.once).
func (st stall) key(reason string) string {
	return fmt.Sprintf("%s/%s/%s/%s", reason, st.Pod.UID, st.node.Name, st.drain.Drain)
}

// unresolvable reports, once per stall, a blocked pod that no surge will help, and returns the reason
// for the unresolvable-pods gauge.
func (c *Controller) unresolvable(st stall, regarding runtime.Object, kind, eventReason, metricReason, format string, args ...any) string {
	if c.state.once(st.node.Name, st.key(eventReason)) {
		c.event(regarding, corev1.EventTypeWarning, eventReason, actionReport, format, args...)
		c.metrics.StallsFailed.WithLabelValues(st.pool, kind, metricReason).Inc()
	}
	return metricReason
}

// handleBlocked deals with one blocked pod. It returns when to look again, the reason the pod is
// unresolvable (for the gauge), and an error to retry with backoff.
func (c *Controller) handleBlocked(ctx context.Context, st stall) (time.Duration, string, error) {
	pod, node := st.Pod, st.node
	target, err := c.store.Resolve(pod)
	var unsup *workload.UnsupportedError
	if errors.As(err, &unsup) {
		return 0, c.unresolvable(st, pod.Ref(), "Pod", ReasonUnsupportedOwner, guardian.ReasonUnsupported,
			"Pod blocks the drain of node %s (PDB %s allows no disruption) and cannot be surged: %s", node.Name, st.PDB.Name, unsup.Detail), nil
	}
	var notServed *workload.NotServedError
	if errors.As(err, &notServed) {
		return 0, c.unresolvable(st, pod.Ref(), "Pod", ReasonUnsupportedOwner, guardian.ReasonUnsupported,
			"Pod blocks the drain of node %s; it belongs to a %s, but this cluster does not serve that API (or the guardian has not synced it yet)", node.Name, notServed.Kind), nil
	}
	if err != nil {
		return 0, "", err
	}
	obj, err := c.store.Get(target.Ref)
	if apierrors.IsForbidden(err) && target.Ref.ViaScale() {
		gv, _ := schema.ParseGroupVersion(target.Ref.APIVersion)
		return 0, c.unresolvable(st, pod.Ref(), string(target.Ref.Kind), ReasonUnsupportedOwner, guardian.ReasonUnsupported,
			"Pod blocks the drain of node %s; its owner %s %s has a /scale subresource, but the guardian may not use it: grant get and patch on %s/scale in API group %q",
			node.Name, target.Ref.Kind, target.Ref.Name, target.Ref.Resource, gv.Group), nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("reading %s: %w", target.Ref, err)
	}
	owner, err := c.store.PodOwner(target.PodOwner)
	if err != nil {
		return 0, "", fmt.Errorf("reading %s: %w", target.PodOwner, err)
	}
	if obj.Ignored() || workload.IgnoredByAnnotation(owner.Annotations) {
		c.log.Debug("workload opted out", zap.Stringer("workload", target.Ref), zap.String("node", node.Name))
		return 0, "", nil
	}
	if existing := c.surgeOf(target); existing != nil {
		return c.existingSurge(ctx, st, existing)
	}
	kind, ref := string(target.Ref.Kind), obj.ObjectReference()
	delta, why := blocking.SurgeNeeded(st.PDB)
	if st.MultiplePDBs {
		why = blocking.ReasonMultiplePDBs
	}
	if why != "" {
		return 0, c.unresolvable(st, ref, kind, ReasonUnsatisfiablePDB, guardian.ReasonUnsatisfiable,
			"PDB %s blocks the drain of node %s and no surge can satisfy it (%s): pod %s stays; fix the PDB or move the pod by hand",
			st.PDB.Name, node.Name, describePDB(st.PDB, why), pod.Name), nil
	}
	fields, err := workload.PlanSurge(obj, target, owner.Replicas, delta, c.kserve.nilKeepsCount())
	if errors.As(err, &unsup) {
		return 0, c.unresolvable(st, ref, kind, ReasonUnsupportedOwner, guardian.ReasonUnsupported,
			"Pod %s blocks the drain of node %s and is not surged: %s", pod.Name, node.Name, unsup.Detail), nil
	}
	if err != nil {
		return 0, "", err
	}
	if st.drain.Trigger == guardian.TriggerMCOPredicted && !c.lookaheadFits(st, int(delta)) {
		// Looking ahead is only for spare capacity: the stalls being served come first.
		if c.state.once(node.Name, st.key(lookaheadSkipped)) {
			c.metrics.Lookahead.WithLabelValues(lookaheadSkipped).Inc()
			c.log.Info("not surging ahead: no spare capacity after the stalls being served",
				zap.String("pod", pod.Namespace+"/"+pod.Name), zap.String("node", node.Name))
		}
		return deferRetry, "", nil
	}
	if placed, missing := blocking.Fit(pod, int(delta), st.capacity.pendingReplacements(), st.capacity.candidates()); placed < int(delta) {
		// Capacity may free up (a held surge restored, a node joining): look again later. Meanwhile
		// surges of the pool whose survivors are safe give their capacity back (see guardian.finished).
		c.state.wantCapacity(st.pool, node.Name, missing)
		c.enqueueSurges(func(s *v1alpha1.Surge) bool { return s.Spec.Pool == st.pool })
		return deferRetry, c.unresolvable(st, ref, kind, ReasonNoCapacity, guardian.ReasonNoCapacity,
			"Pod %s blocks the drain of node %s, but %d of %d replacement(s) fit on no other schedulable node (requests, taints, affinity): missing %s; not surging",
			pod.Name, node.Name, int(delta)-placed, delta, blocking.DescribeResources(missing)), nil
	}
	c.state.wantCapacity(st.pool, node.Name, nil)
	spec := v1alpha1.SurgeSpec{
		Fields: fields, Node: node.Name, Pool: st.pool, Trigger: string(st.drain.Trigger), Drain: st.drain.Drain,
		PDB: st.PDB.Name, BlockedPod: pod.Name, Delta: delta, Replicas: owner.Replicas,
	}
	retry, unresolvable, err := c.startSurge(ctx, st, newSurge(target, obj, spec), obj, owner)
	if err == nil && retry == 0 && unresolvable == "" {
		// The next stalls of this sync count this surge's replacements, which no cache shows yet.
		st.capacity.reserve(pod, int(delta))
	}
	return retry, unresolvable, err
}

// existingSurge handles a blocked pod whose workload has a Surge already: an active one covers this
// node too; a Failed one for this very drain was reported when it failed; a Failed one for another
// drain is forgotten so that this stall gets a surge of its own.
func (c *Controller) existingSurge(ctx context.Context, st stall, s *v1alpha1.Surge) (time.Duration, string, error) {
	c.enqueueSurge(s)
	if s.PhaseOf() != v1alpha1.PhaseFailed {
		return 0, "", nil
	}
	if s.Spec.Node == st.node.Name && s.Spec.Drain == st.drain.Drain {
		return 0, s.Status.Reason, nil
	}
	if err := c.exec.deleteSurge(ctx, s); err != nil {
		return 0, "", err
	}
	return time.Second, "", nil
}

// startSurge persists the Surge (phase Pending); the Surge's own sync then writes the fields. Nothing
// is written when --max-concurrent-surges stalls are in flight already, or in dry-run.
func (c *Controller) startSurge(ctx context.Context, st stall, s *v1alpha1.Surge, obj *workload.Object, owner *workload.PodOwnerState) (time.Duration, string, error) {
	pod, node := st.Pod, st.node
	ref, kind := obj.ObjectReference(), string(obj.Ref.Kind)
	c.surgeMu.Lock()
	defer c.surgeMu.Unlock()
	lookahead := st.drain.Trigger == guardian.TriggerMCOPredicted
	active := c.inFlight()
	if lookahead && active+1 >= c.opts.MaxConcurrentSurge {
		// A look-ahead surge never takes the last slot: it stays for a stall that blocks a drain.
		if c.state.once(node.Name, st.key(lookaheadSkipped)) {
			c.metrics.Lookahead.WithLabelValues(lookaheadSkipped).Inc()
		}
		return deferRetry, "", nil
	}
	if active >= c.opts.MaxConcurrentSurge {
		if c.state.once(node.Name, st.key(ReasonSurgeDeferred)) {
			c.event(ref, corev1.EventTypeNormal, ReasonSurgeDeferred, actionSurge,
				"Pod %s blocks the drain of node %s; %d stalls are being served (--max-concurrent-surges=%d): waiting",
				pod.Name, node.Name, active, c.opts.MaxConcurrentSurge)
		}
		return deferRetry, "", nil
	}
	pods, err := c.podsOf(pod.Namespace, workload.Kind(s.Spec.PodOwner.Kind), owner)
	if err != nil {
		return 0, "", err
	}
	s.Spec.ReadyBefore = readyElsewhere(pods, node.Name)
	s.Spec.StartTime = metav1.NewTime(c.clock.Now())
	detected, verb := ReasonStallDetected, "blocks the drain of"
	switch st.drain.Trigger {
	case guardian.TriggerMCOTargeted:
		detected, verb = ReasonStallPredicted, "would block the coming drain of"
	case guardian.TriggerMCOPredicted:
		detected, verb = ReasonStallPredicted, "would block the drain of the MCO's next target,"
	}
	change := describeFields(s.Spec.Fields)
	if c.opts.DryRun {
		if c.state.once(node.Name, st.key(ReasonDryRun)) {
			c.event(ref, corev1.EventTypeNormal, ReasonDryRun, actionSurge,
				"Dry run: pod %s %s node %s (PDB %s); would surge %s", pod.Name, verb, node.Name, st.PDB.Name, change)
			c.metrics.StallsDetected.WithLabelValues(st.pool, kind, string(st.drain.Trigger)).Inc()
		}
		return 0, "", nil
	}
	if err := c.exec.createSurge(ctx, s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return time.Second, "", nil
		}
		return 0, "", err
	}
	c.state.created(s)
	c.metrics.StallsDetected.WithLabelValues(st.pool, kind, string(st.drain.Trigger)).Inc()
	if lookahead {
		c.metrics.Lookahead.WithLabelValues(lookaheadSurged).Inc()
	}
	c.event(ref, corev1.EventTypeNormal, detected, actionDetect,
		"Pod %s %s node %s: PDB %s allows no disruption", pod.Name, verb, node.Name, st.PDB.Name)
	c.event(ref, corev1.EventTypeNormal, ReasonSurgeStarted, actionSurge,
		"Surging %s so that a replacement runs elsewhere before node %s drains (Surge %s)", change, node.Name, s.Name)
	c.enqueueSurge(s)
	return 0, "", nil
}

// inFlight counts the Surges serving a stall now (see guardian.InFlight), including those created
// since the informer last delivered.
func (c *Controller) inFlight() int {
	return c.state.inFlight(c.surges.List())
}

// pendingReplacements lists the replacements the stalls in flight still wait for (see
// blocking.Replacements): the scheduler will place them before any new replacement, so the capacity
// check counts them first. A Surge that failed verification books nothing.
func (c *Controller) pendingReplacements() []*podinfo.Pod {
	var out []*podinfo.Pod
	for _, s := range c.surges.List() {
		if !guardian.InFlight(s.PhaseOf()) || c.rejected.has(s) {
			continue
		}
		po := targetOf(s).PodOwner
		owner, err := c.store.PodOwner(po)
		if err != nil {
			continue
		}
		pods, _ := c.podsOf(s.Namespace, po.Kind, owner)
		want := int64(s.Spec.Replicas) + int64(s.Spec.Delta)
		out = append(out, blocking.Replacements(pods, want, s.Spec.Delta, unscheduledCopy)...)
	}
	return out
}

// candidates lists every node with its pods and what they request, for the capacity check.
func (c *Controller) candidates() []blocking.Candidate {
	nodes, _ := c.nodes.List(labels.Everything())
	out := make([]blocking.Candidate, 0, len(nodes))
	for _, n := range nodes {
		pods, _ := c.podsOn(n.Name)
		cand := blocking.Candidate{Node: n, Pods: pods}
		cand.Used = blocking.UsedBy(cand.Pods)
		out = append(out, cand)
	}
	return out
}

// capacitySnapshot is the cluster's capacity as one sync sees it: every node with its pods, and
// the replacements waiting to be placed. It is built on first use, once per sync, however many
// stalls the sync checks: the capacity check reads every node and pod of the cluster.
type capacitySnapshot struct {
	c       *Controller
	cands   []blocking.Candidate
	pending []*podinfo.Pod
	built   bool
}

func (s *capacitySnapshot) build() {
	if !s.built {
		s.cands, s.pending, s.built = s.c.candidates(), s.c.pendingReplacements(), true
	}
}

func (s *capacitySnapshot) candidates() []blocking.Candidate {
	s.build()
	return s.cands
}

func (s *capacitySnapshot) pendingReplacements() []*podinfo.Pod {
	s.build()
	return s.pending
}

// reserve counts n replacements of pod, just asked for, as pending.
func (s *capacitySnapshot) reserve(pod *podinfo.Pod, n int) {
	s.build()
	for range n {
		s.pending = append(s.pending, unscheduledCopy(pod))
	}
}

// readyElsewhere counts Ready pods, not being deleted, off the given node.
func readyElsewhere(pods []*podinfo.Pod, node string) int32 {
	var n int32
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Spec.NodeName != node && p.DeletionTimestamp == nil && p.Ready() {
			n++
		}
	}
	return n
}

func describePDB(pdb *policyv1.PodDisruptionBudget, why string) string {
	switch why {
	case blocking.ReasonMaxUnavailable:
		return fmt.Sprintf("maxUnavailable %s: added replicas raise the expected count too", pdb.Spec.MaxUnavailable.String())
	case blocking.ReasonMultiplePDBs:
		return "more than one PDB selects the pod, and the Eviction API refuses such pods whatever the budgets"
	case blocking.ReasonFullMinAvailable:
		return fmt.Sprintf("minAvailable %s requires every replica", pdb.Spec.MinAvailable.String())
	}
	return fmt.Sprintf("more than %d replicas would be needed", blocking.MaxSurge)
}

// podsOn returns the cached pods bound to the node.
func (c *Controller) podsOn(node string) ([]*podinfo.Pod, error) {
	objs, err := c.podIndexer.ByIndex(nodeNameIndex, node)
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
func (c *Controller) blockedOn(node string) ([]blocking.Blocked, error) {
	pods, err := c.podsOn(node)
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
		list, err := c.pdbs.PodDisruptionBudgets(p.Namespace).List(labels.Everything())
		if err != nil {
			return nil, err
		}
		pdbs = append(pdbs, list...)
	}
	return blocking.Find(pods, pdbs), nil
}
