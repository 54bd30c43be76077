package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// leaveFirstCost is the deletion cost given to the surplus pods on nodes that still have to update.
const leaveFirstCost = "-1000"

// notServedRetry is how soon a Surge whose target API is not served (or synced) is looked at again.
const notServedRetry = 30 * time.Second

// surgeCase is one Surge with the live objects it was verified against.
type surgeCase struct {
	s      *v1alpha1.Surge
	target *workload.Target
	obj    *workload.Object
	// owner is nil when the pod owner is gone.
	owner *workload.PodOwnerState
	pods  []*podinfo.Pod
}

// syncSurge moves one Surge along: verify it against the live objects, observe, decide, execute one
// write.
func (c *Controller) syncSurge(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	s, err := c.surges.Get(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		c.flight.forget(key)
		c.writing.forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	sc, retry, err := c.verify(s)
	if errors.Is(err, errTargetGone) {
		return 0, c.targetGone(ctx, s)
	}
	if sc == nil {
		return retry, err
	}
	obs := c.observe(sc)
	c.reportDrainFailed(sc, obs)
	action := guardian.Decide(c.cfg, obs)
	c.log.Debug("decided", zap.String("surge", key.String()), zap.String("phase", string(s.PhaseOf())),
		zap.String("action", string(action.Kind)), zap.String("reason", action.Reason))
	after, err := c.execute(ctx, sc, obs, action)
	if isConflict(err) {
		// The decision was made on a stale object: the informer brings the new one; decide again.
		c.log.Debug("conflict; deciding again", zap.String("surge", key.String()), zap.Error(err))
		return time.Second, nil
	}
	return after, err
}

// verify checks everything the Surge says against the live objects: the namespace is in scope, the
// target exists with the recorded UID, the pod owner is controlled by the target (the same owner
// chain the guardian resolves for a blocked pod), and every field path is one the guardian's code
// writes for that kind. A Surge that fails a check is reported once and left alone. A nil case with
// no error means "look again later" (retry) or "nothing to do". It writes nothing: a Surge whose
// target is gone is errTargetGone, which its sync acts on.
func (c *Controller) verify(s *v1alpha1.Surge) (*surgeCase, time.Duration, error) {
	t := targetOf(s)
	reject := func(reason, format string, args ...any) (*surgeCase, time.Duration, error) {
		c.rejectSurge(s, reason, fmt.Sprintf(format, args...))
		return nil, 0, nil
	}
	if !c.inScope(s.Namespace) {
		return reject("OutOfScope", "namespace %s is outside --namespace-selector or opted out", s.Namespace)
	}
	if err := workload.CheckPaths(t, s.Spec.Fields); err != nil {
		return reject("UnknownField", "%v", err)
	}
	// Read by name, then compare UIDs: a namesake is not the object the surge was made on.
	byName := t.Ref
	byName.UID = ""
	obj, err := c.store.Get(byName)
	var notServed *workload.NotServedError
	switch {
	case errors.As(err, &notServed):
		// Never conclude "deleted" from an API that is not served or not synced yet: wait.
		c.log.Info("target API not available yet; keeping the Surge", zap.String("surge", s.Namespace+"/"+s.Name), zap.Error(err))
		return nil, notServedRetry, nil
	case apierrors.IsNotFound(err):
		return nil, 0, errTargetGone
	case err != nil:
		return nil, 0, fmt.Errorf("reading %s: %w", t.Ref, err)
	}
	if obj.Ref.UID != t.Ref.UID {
		return reject("UIDMismatch", "%s has UID %s, the Surge names %s", t.Ref, obj.Ref.UID, t.Ref.UID)
	}
	if obj.Ignored() {
		return reject("OptedOut", "%s carries %s=true", t.Ref, workload.IgnoreAnnotation)
	}
	return c.verifyOwner(&surgeCase{s: s, target: t, obj: obj}, reject)
}

// verifyOwner checks that the Surge's pod owner is still controlled by its target and reads the
// owner's pods. A pod owner that is gone is no error: the lifecycle restores what it surged.
func (c *Controller) verifyOwner(sc *surgeCase, reject func(reason, format string, args ...any) (*surgeCase, time.Duration, error)) (*surgeCase, time.Duration, error) {
	s, t := sc.s, sc.target
	owner, err := c.store.PodOwner(t.PodOwner)
	switch {
	case apierrors.IsNotFound(err):
		return sc, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("reading %s: %w", t.PodOwner, err)
	}
	if workload.IgnoredByAnnotation(owner.Annotations) {
		return reject("OptedOut", "%s carries %s=true", t.PodOwner, workload.IgnoreAnnotation)
	}
	resolved, err := c.store.ResolveOwner(t.PodOwner)
	var notServed *workload.NotServedError
	if errors.As(err, &notServed) {
		return nil, notServedRetry, nil
	}
	if err != nil || resolved.Ref.Kind != t.Ref.Kind || resolved.Ref.Name != t.Ref.Name || resolved.Ref.UID != t.Ref.UID ||
		resolved.Ref.Resource != t.Ref.Resource || resolved.Component != t.Component {
		return reject("OwnerMismatch", "%s does not control %s (resolved: %v)", t.Ref, t.PodOwner, describeResolved(resolved, err))
	}
	sc.owner = owner
	if sc.pods, err = c.podsOf(s.Namespace, t.PodOwner.Kind, owner); err != nil {
		return nil, 0, err
	}
	c.flight.verified(s)
	return sc, 0, nil
}

func describeResolved(t *workload.Target, err error) string {
	if err != nil {
		return err.Error()
	}
	return t.Ref.String()
}

// rejectSurge reports, once per Surge version, a Surge the guardian will not act on.
func (c *Controller) rejectSurge(s *v1alpha1.Surge, reason, detail string) {
	c.flight.rejected(s)
	if c.reports.once("", fmt.Sprintf("%s/%s/%s", ReasonUntrustedSurge, s.UID, s.ResourceVersion)) {
		c.metrics.SurgesRejected.WithLabelValues(reason).Inc()
		c.event(surgeRef(s), corev1.EventTypeWarning, ReasonUntrustedSurge, actionReport,
			"Surge %s/%s is not acted on (%s): %s. Its fields are left as they are; check them and delete the Surge by hand",
			s.Namespace, s.Name, reason, detail)
	}
}

// errTargetGone: verify found the Surge's target deleted, its API served and synced (see targetGone).
var errTargetGone = errors.New("the Surge's target is gone")

// targetGone handles a Surge whose target was deleted (its API served and synced): the garbage
// collector removes the Surge with its owner; delete it now and say so.
func (c *Controller) targetGone(ctx context.Context, s *v1alpha1.Surge) error {
	if err := c.exec.deleteSurge(ctx, s); err != nil {
		return err
	}
	if s.PhaseOf() != v1alpha1.PhaseFailed {
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, s.Spec.Target.Kind, guardian.ReasonPodOwnerGone).Inc()
		c.event(targetOf(s).Ref.ObjectReference(), corev1.EventTypeWarning, ReasonWorkloadDeleted, actionRestore,
			"%s %s was deleted during its surge for node %s: nothing is left to restore", s.Spec.Target.Kind, s.Spec.Target.Name, s.Spec.Node)
	}
	return nil
}

// observe gathers what Decide needs from the listers.
func (c *Controller) observe(sc *surgeCase) guardian.Observation {
	s := sc.s
	now := c.clock.Now()
	obs := guardian.Observation{Now: now, Surge: s, Fields: workload.States(sc.obj, s.Spec.Fields), PodOwnerGone: sc.owner == nil}
	pools := c.newPoolLookup()
	if n, err := c.nodes.Get(s.Spec.Node); err == nil {
		obs.Node = n
		pool := pools.of(n)
		c.observeDrain(&obs, c.surgeDrain(n, pool, now))
	}
	if s.Spec.Pool != "" && c.pools != nil {
		obs.Pool, _ = c.pools.Get(s.Spec.Pool)
	}
	obs.CapacityWanted = c.drains.capacityWanted(s.Spec.Pool)
	if guardian.Trigger(s.Spec.Trigger) == guardian.TriggerPrepared {
		// A prepared surge only uses capacity no stall needs, whichever pool the stall is in.
		obs.CapacityWanted = c.drains.anyCapacityWanted()
		obs.PrepareWithdrawn = obs.Pool != nil && (!guardian.PrepareRequested(obs.Pool) || !c.poolSelector.Matches(labels.Set(obs.Pool.Labels)))
	}
	var groupSize int32
	if sc.owner != nil {
		groupSize = sc.owner.GroupSize
	}
	observePods(&obs, sc.pods, s.Spec.Node, groupSize)
	c.observeRefusals(&obs, sc)
	obs.ReadyOnSafeNodes, obs.ReadySurvivors = c.countSurvivors(s, sc.pods, pools, groupSize)
	obs.Groups = groupSize > 0
	if sc.owner != nil {
		for _, f := range s.Spec.Fields {
			if f.ExplicitBeforeRemove != nil {
				obs.CaughtUp = sc.owner.CaughtUp(int32(*f.ExplicitBeforeRemove))
			}
		}
	}
	if s.PhaseOf() == v1alpha1.PhasePending {
		obs.WritingSince = c.writing.since(s, now)
	} else {
		c.writing.forget(keyOf(s))
	}
	c.flight.holding(s, heldResources(s, sc.pods, groupSize))
	return obs
}

// observeRefusals fills what says a surge cannot progress: the replacements refused by the pod
// owner's controller (Surged), another PDB selecting the blocked pod (Ready).
func (c *Controller) observeRefusals(obs *guardian.Observation, sc *surgeCase) {
	s, owner := sc.s, sc.owner
	switch {
	case owner == nil:
	case s.PhaseOf() == v1alpha1.PhaseSurged && owner.StatusReplicas < owner.Replicas:
		obs.ReplacementRefused = owner.ReplicaFailure
	case s.PhaseOf() == v1alpha1.PhaseReady && obs.LiveOnNode > 0:
		obs.OtherPDB = c.otherPDB(s, sc.pods)
	}
}

// otherPDB names a PDB, other than the one the Surge was made for, that selects a live pod of the
// workload on the Surge's node while the Surge's own PDB allows a disruption; "" when there is none.
func (c *Controller) otherPDB(s *v1alpha1.Surge, pods []*podinfo.Pod) string {
	own, err := c.pdbs.PodDisruptionBudgets(s.Namespace).Get(s.Spec.PDB)
	if err != nil || own.Status.DisruptionsAllowed < 1 || own.Status.ObservedGeneration < own.Generation {
		return ""
	}
	pdbs, err := c.pdbs.PodDisruptionBudgets(s.Namespace).List(labels.Everything())
	if err != nil {
		return ""
	}
	for _, p := range pods {
		if p.Spec.NodeName != s.Spec.Node || blocking.Skip(p) {
			continue
		}
		for _, pdb := range pdbs {
			if pdb.Name != s.Spec.PDB && c.selectors.Selects(pdb, p) {
				return pdb.Name
			}
		}
	}
	return ""
}

// nodeDrain is NodeTrigger's answer for the node, of the given pool, now.
func (c *Controller) nodeDrain(n *corev1.Node, pool *mcfgv1.MachineConfigPool, predicted bool, now time.Time) guardian.NodeDrain {
	return c.nodeTrigger(n, pool, predicted, c.answers.need(n, pool).Need, now)
}

// nodeTrigger is NodeTrigger with the time the node was first seen cordoned.
func (c *Controller) nodeTrigger(n *corev1.Node, pool *mcfgv1.MachineConfigPool, predicted bool, need mco.Need, now time.Time) guardian.NodeDrain {
	var seen time.Time
	if n.Spec.Unschedulable {
		seen = c.cordons.firstSeen(n.Name, now)
	}
	return guardian.NodeTrigger(c.cfg, n, pool, predicted, need, now, seen)
}

// surgeDrain is nodeDrain for the node of an existing surge, where an update whose drain is not
// answered yet counts as one that drains. A look-ahead surge's node is targeted before its daemon
// says whether the update drains (about a second later), often when no other node of the update
// is left to answer for it: taking that second for a missed prediction would undo the surge the
// coming drain needs, while holding it that long costs nothing. A no-drain answer still ends it.
func (c *Controller) surgeDrain(n *corev1.Node, pool *mcfgv1.MachineConfigPool, now time.Time) guardian.NodeDrain {
	need := c.answers.need(n, pool).Need
	if need == mco.NeedUnknown {
		need = mco.NeedDrain
	}
	return c.nodeTrigger(n, pool, c.predicted(n, pool), need, now)
}

// countSurvivors counts the workload's Ready pods, not being deleted, that a restore keeps: on nodes
// this update will not drain again (safe), and on schedulable nodes the MCO is not updating now
// (survivors, a superset). A StatefulSet's scale-down removes its highest ordinals whatever their
// node, so only ordinals below the original count are counted for it. A LeaderWorkerSet (groupSize
// > 0) counts complete Ready groups the same way (see countGroupSurvivors).
func (c *Controller) countSurvivors(s *v1alpha1.Surge, pods []*podinfo.Pod, pools *poolLookup, groupSize int32) (safe, survivors int32) {
	if groupSize > 0 {
		return c.countGroupSurvivors(s, pods, pools, int(groupSize))
	}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || !p.Ready() {
			continue
		}
		if s.Spec.PodOwner.Kind == string(workload.KindStatefulSet) {
			if ord, ok := ordinal(p); !ok || ord >= int(s.Spec.Replicas) {
				continue
			}
		}
		node, err := c.nodes.Get(p.Spec.NodeName)
		if err != nil {
			continue
		}
		if c.updatingNow(node) {
			continue
		}
		survivors++
		if c.willNotDrain(node, pools) {
			safe++
		}
	}
	return safe, survivors
}

// countGroupSurvivors is countSurvivors for a LeaderWorkerSet: its scale-down removes the highest
// group indexes whatever their nodes (the StatefulSet ordinal rule, per group), so only complete
// Ready groups of an index below the original count are counted, and a group counts only when every
// one of its pods is on a node that keeps it: a group one pod short serves nothing.
func (c *Controller) countGroupSurvivors(s *v1alpha1.Surge, pods []*podinfo.Pod, pools *poolLookup, size int) (safe, survivors int32) {
	for idx, g := range blocking.CompleteGroups(pods, size) {
		if idx >= int(s.Spec.Replicas) {
			continue
		}
		survives, isSafe := true, true
		for _, p := range g {
			node, err := c.nodes.Get(p.Spec.NodeName)
			if err != nil || c.updatingNow(node) {
				survives = false
				break
			}
			if !c.willNotDrain(node, pools) {
				isSafe = false
			}
		}
		if survives {
			survivors++
			if isSafe {
				safe++
			}
		}
	}
	return safe, survivors
}

// updatingNow is updatingNow, or another source has picked or is draining the node (see
// sources.drainingNow).
func (c *Controller) updatingNow(n *corev1.Node) bool {
	return updatingNow(n) || c.sources.drainingNow(n)
}

// updatingNow reports whether the node is cordoned, or targeted or drained by the MCO: its pods are
// about to leave.
func updatingNow(n *corev1.Node) bool {
	st := mco.ReadNode(n)
	return n.Spec.Unschedulable || st.Targeted() || st.Draining()
}

// ordinal is a StatefulSet pod's ordinal: its apps.kubernetes.io/pod-index label, or the number its
// name ends with.
func ordinal(p *podinfo.Pod) (int, bool) {
	v, ok := p.Labels[appsv1.PodIndexLabel]
	if !ok {
		i := strings.LastIndex(p.Name, "-")
		if i < 0 {
			return 0, false
		}
		v = p.Name[i+1:]
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 0
}

// groups reports whether the Surge's replicas are groups of pods (a LeaderWorkerSet's).
func groups(s *v1alpha1.Surge) bool {
	return s.Spec.PodOwner.Kind == string(workload.KindLeaderWorkerSet)
}

// unitsOf names what the Surge's replicas are, for its Events.
func unitsOf(s *v1alpha1.Surge) string {
	if groups(s) {
		return "group(s)"
	}
	return "replica(s)"
}

// heldResources is what the surge's extra replicas request of extended resources (GPUs and the like).
// A finished pod requests nothing the scheduler counts: the first live pod is the model.
func heldResources(s *v1alpha1.Surge, pods []*podinfo.Pod, groupSize int32) corev1.ResourceList {
	i := slices.IndexFunc(pods, func(p *podinfo.Pod) bool { return !blocking.Skip(p) })
	if s.PhaseOf() == v1alpha1.PhaseFailed || i < 0 {
		return nil
	}
	out := corev1.ResourceList{}
	for name, q := range pods[i].Spec.Requests {
		if !strings.Contains(string(name), "/") {
			continue
		}
		total := q.DeepCopy()
		total.Set(q.Value() * int64(s.Spec.Delta) * int64(max(groupSize, 1)))
		out[name] = total
	}
	return out
}

// execute carries out one decision; each case is at most one write (a restore also steers the
// scale-down with pod deletion costs first).
func (c *Controller) execute(ctx context.Context, sc *surgeCase, obs guardian.Observation, a guardian.Action) (time.Duration, error) {
	s, obj := sc.s, sc.obj
	switch a.Kind {
	case guardian.ActWriteFields:
		return time.Second, c.exec.patchTarget(ctx, obj, workload.SurgePatch(obj, s.Spec.Fields), "surge "+describeFields(s.Spec.Fields))
	case guardian.ActMarkSurged:
		return 0, c.setPhase(ctx, s, v1alpha1.PhaseSurged, "Written", fmt.Sprintf("Surged %s; waiting for %d replacement %s to be Ready off node %s", describeFields(s.Spec.Fields), s.Spec.Delta, unitsOf(s), s.Spec.Node), obs.Now)
	case guardian.ActDiscard:
		return 0, c.discard(ctx, sc)
	case guardian.ActMarkReady, guardian.ActMarkEvictionDue:
		return c.markReady(ctx, sc, obs, a)
	case guardian.ActEvict:
		return c.evict(ctx, obj.ObjectReference(), s, sc.pods)
	case guardian.ActMarkResolved:
		return 0, c.markResolved(ctx, sc, obs, a)
	case guardian.ActStartRestore:
		return 0, c.startRestore(ctx, sc, a, obs.Now)
	case guardian.ActRestoreFields:
		patch := workload.RestorePatch(obj, s.Spec.Fields, a.RemoveExplicit)
		if patch == nil {
			return time.Second, nil
		}
		return time.Second, c.exec.patchTarget(ctx, obj, patch, "restore "+describeRestore(s.Spec.Fields, nil))
	case guardian.ActFinish:
		return 0, c.finish(ctx, sc, obs)
	case guardian.ActForget:
		return 0, c.exec.deleteSurge(ctx, s)
	}
	return a.After, nil
}

// discard deletes a Surge whose fields someone else changed before the surge was written.
func (c *Controller) discard(ctx context.Context, sc *surgeCase) error {
	if err := c.exec.deleteSurge(ctx, sc.s); err != nil {
		return err
	}
	c.event(sc.obj.ObjectReference(), corev1.EventTypeNormal, ReasonExternalChange, actionSurge,
		"%s changed by someone else before the surge was written: not surging", describeFields(sc.s.Spec.Fields))
	return nil
}

// markReady records that the replacements are Ready (ActMarkReady) or that the eviction is due
// (ActMarkEvictionDue), then evicts the blocked pod when the decision says now.
func (c *Controller) markReady(ctx context.Context, sc *surgeCase, obs guardian.Observation, a guardian.Action) (time.Duration, error) {
	s, eref := sc.s, sc.obj.ObjectReference()
	next := s.DeepCopy()
	if a.Kind == guardian.ActMarkReady {
		next = withPhase(s, v1alpha1.PhaseReady, "ReplacementReady", fmt.Sprintf("%d replacement(s) Ready off node %s", s.Spec.Delta, s.Spec.Node), obs.Now)
	}
	if a.EvictionDue || a.Kind == guardian.ActMarkEvictionDue {
		setEvictionDue(next, obs.Now)
	}
	if err := c.exec.updateStatus(ctx, next); err != nil {
		return 0, err
	}
	if a.Kind == guardian.ActMarkReady {
		took := obs.Now.Sub(s.Spec.StartTime.Time)
		c.metrics.ReplacementReady.WithLabelValues(s.Spec.Target.Kind).Observe(took.Seconds())
		c.event(eref, corev1.EventTypeNormal, ReasonReplacementReady, actionSurge,
			"%d replacement %s Ready off node %s after %s", s.Spec.Delta, unitsOf(s), s.Spec.Node, took.Round(time.Second))
	}
	if a.EvictNow {
		return c.evict(ctx, eref, s, sc.pods)
	}
	if a.Kind == guardian.ActMarkEvictionDue {
		return a.After, nil
	}
	return 0, nil
}

// markResolved records that the stall is over and the surge is held until it is safe to restore.
func (c *Controller) markResolved(ctx context.Context, sc *surgeCase, obs guardian.Observation, a guardian.Action) error {
	s := sc.s
	what := fmt.Sprintf("No pod of this workload is left on node %s", s.Spec.Node)
	if a.Reason == guardian.ReasonDrainOver {
		what = fmt.Sprintf("The drain of node %s is over", s.Spec.Node)
	}
	if err := c.setPhase(ctx, s, v1alpha1.PhaseResolved, "DrainUnblocked", what+"; holding the surge until it is safe to restore", obs.Now); err != nil {
		return err
	}
	c.observeResolved(s, s.Spec.Target.Kind, obs.Now)
	if guardian.Trigger(s.Spec.Trigger) == guardian.TriggerMCOPredicted {
		c.metrics.Lookahead.WithLabelValues(lookaheadHit).Inc()
	}
	c.event(sc.obj.ObjectReference(), corev1.EventTypeNormal, ReasonStallResolved, actionSurge,
		"%s; the drain can proceed. The surge is held until %s", what, c.holdUntil(s))
	return nil
}

// holdUntil says in words what the restore waits for.
func (c *Controller) holdUntil(s *v1alpha1.Surge) string {
	switch {
	case s.Spec.Pool == "" || guardian.Trigger(s.Spec.Trigger) == guardian.TriggerCordoned:
		return "the node is uncordoned"
	case guardian.Trigger(s.Spec.Trigger) == guardian.TriggerPrepared:
		return "the pool is Updated (prepared ahead of its update)"
	case c.cfg.Restore == guardian.RestoreNode:
		return "the node is updated"
	case c.cfg.Restore == guardian.RestoreAuto:
		if groups(s) {
			return fmt.Sprintf("%d complete group(s) are Ready on nodes this update will not drain again, or the pool is Updated", max(s.Spec.Replicas, 1))
		}
		return fmt.Sprintf("%d pod(s) are Ready on nodes this update will not drain again, or the pool is Updated", max(s.Spec.Replicas, 1))
	}
	return "the pool is Updated"
}

// setPhase moves the Surge to a phase, stamping its time and condition.
func (c *Controller) setPhase(ctx context.Context, s *v1alpha1.Surge, phase v1alpha1.Phase, reason, message string, now time.Time) error {
	return c.exec.updateStatus(ctx, withPhase(s, phase, reason, message, now))
}

// withPhase is a copy of the Surge moved to a phase, with its time and condition.
func withPhase(s *v1alpha1.Surge, phase v1alpha1.Phase, reason, message string, now time.Time) *v1alpha1.Surge {
	next := s.DeepCopy()
	t := metav1.NewTime(now)
	next.Status.Phase, next.Status.Message = phase, message
	condition := map[v1alpha1.Phase]string{
		v1alpha1.PhaseSurged: guardian.ConditionSurged, v1alpha1.PhaseReady: "ReplacementReady", v1alpha1.PhaseResolved: "DrainUnblocked",
		v1alpha1.PhaseRestoring: "Restoring", v1alpha1.PhaseFailed: "Restored",
	}[phase]
	switch phase {
	case v1alpha1.PhaseReady:
		next.Status.ReadyTime = &t
	case v1alpha1.PhaseResolved:
		next.Status.ResolvedTime = &t
	}
	meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{Type: condition, Status: metav1.ConditionTrue, Reason: reason, Message: message, LastTransitionTime: t, ObservedGeneration: s.Generation})
	return next
}

// setEvictionDue records that the Surge's node is being drained while its replacement is Ready:
// --evict-timeout runs from now.
func setEvictionDue(s *v1alpha1.Surge, now time.Time) {
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: guardian.ConditionEvictionDue, Status: metav1.ConditionTrue,
		Reason: "NodeDraining", Message: fmt.Sprintf("Node %s is being drained: the blocked pod is to leave it", s.Spec.Node),
		LastTransitionTime: metav1.NewTime(now), ObservedGeneration: s.Generation})
}

// startRestore commits to restoring: the surplus pods on nodes still to update are marked to go
// first, then the Surge moves to Restoring with its reason.
func (c *Controller) startRestore(ctx context.Context, sc *surgeCase, a guardian.Action, now time.Time) error {
	s := sc.s
	// A Pending Surge wrote no fields: there is no scale-down to steer.
	if s.Spec.PodOwner.Kind == string(workload.KindDeployment) && s.PhaseOf() != v1alpha1.PhasePending {
		if err := c.steerScaleDown(ctx, s, sc.pods); err != nil {
			return err
		}
	}
	if a.Reason == guardian.ReasonPredictionMissed && guardian.Trigger(s.Spec.Trigger) == guardian.TriggerMCOPredicted {
		c.metrics.Lookahead.WithLabelValues(lookaheadMissed).Inc()
	}
	if s.Status.ResolvedTime != nil {
		c.metrics.SurgeHeld.WithLabelValues(s.Spec.Pool, s.Spec.Target.Kind).Observe(now.Sub(s.Status.ResolvedTime.Time).Seconds())
	}
	next := s.DeepCopy()
	t := metav1.NewTime(now)
	next.Status.Phase, next.Status.Reason, next.Status.Failed, next.Status.RestoreTime = v1alpha1.PhaseRestoring, a.Reason, a.Failed, &t
	next.Status.Message = "Restoring " + describeRestore(s.Spec.Fields, nil) + " (" + a.Reason + ")"
	if a.Detail != "" {
		next.Status.Message += ": " + a.Detail
	}
	meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{Type: "Restoring", Status: metav1.ConditionTrue, Reason: a.Reason, Message: next.Status.Message, LastTransitionTime: t, ObservedGeneration: s.Generation})
	return c.exec.updateStatus(ctx, next)
}

// finish ends a restore: a successful surge's Surge is deleted; a failed one's is kept as Failed,
// the memory that this drain of this node was tried.
func (c *Controller) finish(ctx context.Context, sc *surgeCase, obs guardian.Observation) error {
	s, obj := sc.s, sc.obj
	if s.PhaseOf() == v1alpha1.PhasePending {
		c.log.Info("stall ended before the surge was written; dropping the Surge", zap.String("surge", s.Namespace+"/"+s.Name))
		return c.exec.deleteSurge(ctx, s)
	}
	var kept []workload.Field
	for i, f := range s.Spec.Fields {
		if obs.Fields[i] == workload.FieldChanged {
			kept = append(kept, f)
		}
	}
	var err error
	if s.Status.Failed {
		err = c.setPhase(ctx, s, v1alpha1.PhaseFailed, s.Status.Reason, fmt.Sprintf("Surge for node %s failed (%s); restored %s", s.Spec.Node, s.Status.Reason, describeRestore(s.Spec.Fields, kept)), obs.Now)
	} else {
		err = c.exec.deleteSurge(ctx, s)
	}
	if err != nil {
		return err
	}
	c.reportRestored(s, obj, kept, obs)
	return nil
}

// reportRestored tells the story of a finished restore in Events and metrics.
func (c *Controller) reportRestored(s *v1alpha1.Surge, obj *workload.Object, kept []workload.Field, obs guardian.Observation) {
	eref := obj.ObjectReference()
	kind, reason := s.Spec.Target.Kind, s.Status.Reason
	for _, f := range kept {
		cur, present := obj.Int(f.Path)
		now := "unset"
		if present {
			now = fmt.Sprint(cur)
		}
		c.event(eref, corev1.EventTypeNormal, ReasonExternalChange, actionRestore,
			"%s was changed by someone else during the surge (the guardian set %d, it is now %s): keeping their value",
			fieldName(f.Path), f.Set, now)
	}
	if s.Status.ReadyTime != nil && s.Status.ResolvedTime == nil && obs.LiveOnNode == 0 {
		c.observeResolved(s, kind, obs.Now)
	}
	switch {
	case s.Status.Failed && reason == guardian.ReasonMaxDuration:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonSurgeExpired, actionRestore,
			"Surge held longer than --max-surge-duration=%s: restored %s", c.opts.MaxSurgeDuration, describeRestore(s.Spec.Fields, kept))
	case s.Status.Failed && reason == guardian.ReasonWriteTimeout:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonSurgeNotWritten, actionRestore,
			"%s could not be written for %s (refused, or changed by someone else at every attempt): not surging for node %s; pod %s still blocks the drain",
			describeFields(s.Spec.Fields), guardian.PendingTimeout, s.Spec.Node, s.Spec.BlockedPod)
	case s.Status.Failed && reason == guardian.ReasonEvictTimeout:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonEvictionRefused, actionRestore,
			"Pod %s did not leave node %s within --evict-timeout=%s of its replacement being Ready: the workload's own disruption budgets refuse it. Restored %s",
			s.Spec.BlockedPod, s.Spec.Node, c.cfg.EvictTimeout, describeRestore(s.Spec.Fields, kept))
	case s.Status.Failed && reason == guardian.ReasonReplacementRefused:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonReplacementRefused, actionRestore,
			"The replacement pod(s) were refused for %s (%s). Restored %s; pod %s still blocks the drain of node %s",
			guardian.ReplacementRefusedTimeout, restoreDetail(s), describeRestore(s.Spec.Fields, kept), s.Spec.BlockedPod, s.Spec.Node)
		c.enqueueNode(s.Spec.Node)
	case s.Status.Failed && reason == guardian.ReasonMultiplePDBs:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonMultiplePDBs, actionRestore,
			"Pod %s cannot be evicted from node %s although PDB %s allows it: %s, and the Eviction API refuses a pod that two PDBs select. Restored %s",
			s.Spec.BlockedPod, s.Spec.Node, s.Spec.PDB, restoreDetail(s), describeRestore(s.Spec.Fields, kept))
		c.enqueueNode(s.Spec.Node)
	case s.Status.Failed:
		c.metrics.StallsFailed.WithLabelValues(s.Spec.Pool, kind, reason).Inc()
		c.event(eref, corev1.EventTypeWarning, ReasonSurgeFailed, actionRestore,
			"Surge for node %s failed (%s): restored %s; pod %s still blocks the drain", s.Spec.Node, reason, describeRestore(s.Spec.Fields, kept), s.Spec.BlockedPod)
	default:
		c.event(eref, corev1.EventTypeNormal, ReasonSurgeRestored, actionRestore,
			"Restored %s (%s) after %s", describeRestore(s.Spec.Fields, kept), reason, obs.Now.Sub(s.Spec.StartTime.Time).Round(time.Second))
	}
}

// restoreDetail is what the decision to restore observed (guardian.Action.Detail), kept in the
// Restoring condition's message after the reason.
func restoreDetail(s *v1alpha1.Surge) string {
	c := meta.FindStatusCondition(s.Status.Conditions, "Restoring")
	if c == nil {
		return s.Status.Reason
	}
	if _, detail, ok := strings.Cut(c.Message, "("+s.Status.Reason+"): "); ok {
		return detail
	}
	return s.Status.Reason
}

// observePods fills the pod-derived parts of the observation.
func observePods(obs *guardian.Observation, pods []*podinfo.Pod, node string, groupSize int32) {
	obs.ReadyElsewhere = readyElsewhere(pods, node, groupSize)
	for _, p := range pods {
		if p.Spec.NodeName == node && !blocking.Skip(p) {
			obs.LiveOnNode++
		}
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
			continue
		}
		if p.Status.Unschedulable {
			// The pod exists since creation; its scheduling has failed since the condition's transition.
			since := p.CreationTimestamp.Time
			if t := p.Status.UnschedulableSince; !t.IsZero() && t.Time.Before(since) {
				since = t.Time
			}
			if obs.UnschedulableSince == nil || since.Before(*obs.UnschedulableSince) {
				obs.UnschedulableSince = &since
			}
		}
	}
}

func (c *Controller) observeResolved(s *v1alpha1.Surge, kind string, now time.Time) {
	c.metrics.StallsResolved.WithLabelValues(s.Spec.Pool, kind).Inc()
	c.metrics.StallResolution.WithLabelValues(s.Spec.Pool, kind).Observe(now.Sub(s.Spec.StartTime.Time).Seconds())
}

// evict asks the Eviction API to remove the workload's pods from the drained node now that the
// replacement is Ready, so that their grace period runs before the MCO's next drain attempt.
func (c *Controller) evict(ctx context.Context, eref *corev1.ObjectReference, s *v1alpha1.Surge, pods []*podinfo.Pod) (time.Duration, error) {
	for _, p := range pods {
		if p.Spec.NodeName != s.Spec.Node || blocking.Skip(p) {
			continue
		}
		res, err := c.exec.evict(ctx, eref, p, s.Spec.Node)
		switch {
		case err != nil:
			return 0, err
		case res == evicted:
			c.event(eref, corev1.EventTypeNormal, ReasonPodEvicted, actionEvict,
				"Evicted pod %s from node %s: its replacement is Ready elsewhere", p.Name, s.Spec.Node)
		case res == evictRefused:
			c.log.Info("eviction refused by the PDB for now; retrying", zap.String("pod", p.Namespace+"/"+p.Name))
		}
	}
	return 5 * time.Second, nil
}

func describeFields(fields []workload.Field) string {
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		from := "unset"
		if f.Original != nil {
			from = fmt.Sprint(*f.Original)
		}
		parts = append(parts, fmt.Sprintf("%s from %s to %d", fieldName(f.Path), from, f.Set))
	}
	return strings.Join(parts, ", ")
}

// fieldName turns a JSON pointer into the dotted form people write.
func fieldName(pointer string) string {
	return strings.ReplaceAll(strings.TrimPrefix(pointer, "/"), "/", ".")
}

func describeRestore(fields, kept []workload.Field) string {
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		if slices.ContainsFunc(kept, func(k workload.Field) bool { return k.Path == f.Path }) {
			parts = append(parts, fmt.Sprintf("%s kept as changed by someone else", fieldName(f.Path)))
			continue
		}
		to := "unset"
		if f.Original != nil {
			to = fmt.Sprint(*f.Original)
		}
		parts = append(parts, fmt.Sprintf("%s to %s", fieldName(f.Path), to))
	}
	return strings.Join(parts, ", ")
}

// steerScaleDown sets a low pod-deletion-cost on the surplus pods that sit on nodes still to update
// so that the ReplicaSet removes those when the count goes back down. (The ReplicaSet removes
// unscheduled and not-Ready pods before it looks at the cost: steering only works between Ready pods.)
func (c *Controller) steerScaleDown(ctx context.Context, s *v1alpha1.Surge, pods []*podinfo.Pod) error {
	var live []*podinfo.Pod
	for _, p := range pods {
		if !blocking.Skip(p) {
			live = append(live, p)
		}
	}
	surplus := int(s.Spec.Delta)
	if len(live) <= surplus {
		return nil
	}
	// Unscheduled pods go first, then pods on nodes being updated now, then on nodes the update will
	// still drain, never the others.
	pools := c.newPoolLookup()
	rank := func(p *podinfo.Pod) int {
		n, err := c.nodes.Get(p.Spec.NodeName)
		switch {
		case p.Spec.NodeName == "" || err != nil:
			return 0
		case c.updatingNow(n):
			return 1
		case !c.willNotDrain(n, pools):
			return 2
		}
		return rankSafe
	}
	sort.SliceStable(live, func(i, j int) bool { return rank(live[i]) < rank(live[j]) })
	for _, p := range live[:surplus] {
		if rank(p) == rankSafe || p.Annotations[podinfo.DeletionCostAnnotation] == leaveFirstCost {
			continue
		}
		if err := c.exec.setDeletionCost(ctx, p, leaveFirstCost); err != nil && !errors.Is(err, errDryRun) {
			return err
		}
	}
	return nil
}

// rankSafe is steerScaleDown's rank of a pod on a node this update will not drain again.
const rankSafe = 3

// surgeRef is the reference Events about a Surge itself are recorded against.
func surgeRef(s *v1alpha1.Surge) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Surge", Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}
}
