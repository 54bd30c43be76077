package controller

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
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

// sync moves one Surge along: verify it against the live objects, observe, decide, execute one
// write.
func (r *surgeReconciler) sync(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	s, err := r.surges.Get(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		r.flight.forget(key)
		r.writing.forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	sc, retry, err := r.verify(s)
	if errors.Is(err, errTargetGone) {
		return 0, r.targetGone(ctx, s)
	}
	if sc == nil {
		return retry, err
	}
	obs := r.observe(sc)
	r.reportDrainFailed(sc, obs)
	st := guardian.Plan(r.cfg, obs)
	r.log.Debug("decided", zap.String("surge", key.String()), zap.String("phase", string(s.PhaseOf())),
		zap.String("action", string(st.Kind)), zap.String("reason", st.Reason))
	after, err := r.execute(ctx, sc, obs, st)
	if isConflict(err) {
		// The decision was made on a stale object: the informer brings the new one; decide again.
		r.log.Debug("conflict; deciding again", zap.String("surge", key.String()), zap.Error(err))
		return time.Second, nil
	}
	return after, err
}

// execute carries out one step: its one write through the executor (a restore also steers the
// scale-down with pod deletion costs first), then its report (see surgeReports), made only once the
// write is done: a refused write is decided again, and a Surge someone else deleted first
// (errSurgeGone) was reported by them. A step that evicts now goes on with the evictions, each its
// own write and report.
func (r *surgeReconciler) execute(ctx context.Context, sc *surgeCase, obs guardian.Observation, st guardian.Step) (time.Duration, error) {
	if st.Kind == guardian.ActEvict {
		return r.evict(ctx, sc, obs)
	}
	after, err := r.write(ctx, sc, st)
	if err != nil {
		return 0, err
	}
	r.report(&outcome{step: st, s: sc.s, obj: sc.obj, obs: obs})
	if st.EvictNow {
		return r.evict(ctx, sc, obs)
	}
	return after, nil
}

// write makes the step's one write: the Surge's next status, its deletion, or the target's fields.
// It returns when to look again.
func (r *surgeReconciler) write(ctx context.Context, sc *surgeCase, st guardian.Step) (time.Duration, error) {
	s, obj := sc.s, sc.obj
	switch st.Kind {
	case guardian.ActWriteFields:
		if err := r.exec.patchTarget(ctx, obj, workload.SurgePatch(obj, s.Spec.Fields), "surge "+guardian.DescribeFields(s.Spec.Fields)); err != nil {
			return 0, err
		}
		// Until the cache shows a newer target, a read of it says nothing about this write.
		r.writing.wrote(s, obj.Meta.GetResourceVersion(), r.clock.Now())
		return time.Second, nil
	case guardian.ActRestoreFields:
		patch := workload.RestorePatch(obj, s.Spec.Fields, st.RemoveExplicit)
		if patch == nil {
			return time.Second, nil
		}
		return time.Second, r.exec.patchTarget(ctx, obj, patch, "restore "+guardian.DescribeRestore(s.Spec.Fields, nil))
	case guardian.ActStartRestore:
		if err := r.steerRestore(ctx, sc); err != nil {
			return 0, err
		}
	}
	switch {
	case st.Status != nil:
		next := s.DeepCopy()
		next.Status = *st.Status
		return st.After, r.exec.updateStatus(ctx, next)
	case st.Delete:
		return st.After, r.exec.deleteSurge(ctx, s)
	}
	return st.After, nil
}

// targetGone handles a Surge whose target was deleted (its API served and synced; see verify): the
// garbage collector removes the Surge with its owner; delete it now and say so. A Failed Surge was
// reported when it failed: it is forgotten.
func (r *surgeReconciler) targetGone(ctx context.Context, s *v1alpha1.Surge) error {
	if err := r.exec.deleteSurge(ctx, s); err != nil {
		return err
	}
	st := guardian.Step{Action: guardian.Action{Kind: actTargetGone}, Delete: true}
	if s.PhaseOf() == v1alpha1.PhaseFailed {
		st.Kind = guardian.ActForget
	}
	r.report(&outcome{step: st, s: s})
	return nil
}

// evict asks the Eviction API to remove the workload's pods from the drained node now that the
// replacement is Ready, so that their grace period runs before the MCO's next drain attempt. Each
// eviction is a write of its own, reported (ActEvict) once made.
func (r *surgeReconciler) evict(ctx context.Context, sc *surgeCase, obs guardian.Observation) (time.Duration, error) {
	s, eref := sc.s, sc.obj.ObjectReference()
	for _, p := range sc.pods {
		if p.Spec.NodeName != s.Spec.Node || blocking.Skip(p) {
			continue
		}
		res, err := r.exec.evict(ctx, eref, p, s.Spec.Node)
		switch {
		case err != nil:
			return 0, err
		case res == evicted:
			r.report(&outcome{step: guardian.Step{Action: guardian.Action{Kind: guardian.ActEvict}}, s: s, obj: sc.obj, obs: obs, pod: p})
		case res == evictRefused:
			r.log.Info("eviction refused by the PDB for now; retrying", zap.String("pod", p.Namespace+"/"+p.Name))
		}
	}
	return 5 * time.Second, nil
}

// surgeRef is the reference Events about a Surge itself are recorded against.
func surgeRef(s *v1alpha1.Surge) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Surge", Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}
}
