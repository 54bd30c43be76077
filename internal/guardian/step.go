package guardian

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// The conditions a Surge gets as it moves through its phases, besides ConditionSurged and
// ConditionEvictionDue.
const (
	ConditionReplacementReady = "ReplacementReady"
	ConditionDrainUnblocked   = "DrainUnblocked"
	ConditionRestoring        = "Restoring"
	ConditionRestored         = "Restored"
)

// ReasonUnwritten is the reason a Finish of a Pending Surge is reported under: the stall ended, or
// the workload went, before the fields were written, and the Surge is dropped with nothing to
// restore. It is never persisted.
const ReasonUnwritten = "Unwritten"

// ActionKinds is every kind of action Decide answers.
func ActionKinds() []ActionKind {
	return []ActionKind{
		ActWait, ActWriteFields, ActMarkSurged, ActDiscard, ActMarkReady, ActMarkEvictionDue, ActEvict, ActMarkResolved,
		ActStartRestore, ActRestoreFields, ActFinish, ActForget,
	}
}

// Step is an Action with what carrying it out leaves behind: the Surge's next status or its
// deletion. The controller writes it as it is and reports it by Kind and Reason.
type Step struct {
	Action
	// Status is the Surge's whole status after the step; nil when the step writes no status (it
	// waits, writes the target's fields, evicts, or deletes the Surge).
	Status *v1alpha1.SurgeStatus
	// Delete: the step deletes the Surge.
	Delete bool
	// Kept, on a Finish, are the fields someone else changed during the surge: the restore left
	// their values.
	Kept []workload.Field
}

// Plan is Decide's action as a Step.
func Plan(cfg Config, o Observation) Step {
	return Next(o, Decide(cfg, o))
}

// Next is the step that carries out a on the observed Surge. A Finish is reported under the
// restore's reason and failure, read from the Surge's status (ReasonUnwritten for a Pending one),
// instead of the action's, which are empty.
func Next(o Observation, a Action) Step {
	st := Step{Action: a}
	s, now := o.Surge, o.Now
	switch a.Kind {
	case ActMarkSurged:
		st.Status = moved(s, v1alpha1.PhaseSurged, "Written", fmt.Sprintf("Surged %s; waiting for %d replacement %s to be Ready off node %s",
			DescribeFields(s.Spec.Fields), s.Spec.Delta, Units(s), s.Spec.Node), now)
	case ActMarkReady:
		st.Status = moved(s, v1alpha1.PhaseReady, "ReplacementReady", fmt.Sprintf("%d replacement(s) Ready off node %s", s.Spec.Delta, s.Spec.Node), now)
		if a.EvictionDue {
			setEvictionDue(st.Status, s, now)
		}
	case ActMarkEvictionDue:
		st.Status = s.Status.DeepCopy()
		setEvictionDue(st.Status, s, now)
	case ActMarkResolved:
		st.Status = moved(s, v1alpha1.PhaseResolved, "DrainUnblocked", Unblocked(s, a.Reason)+"; holding the surge until it is safe to restore", now)
	case ActStartRestore:
		st.Status = restoring(s, a, now)
	case ActFinish:
		finishStep(o, &st)
	case ActDiscard, ActForget:
		st.Delete = true
	}
	if st.Status != nil {
		st.Status.ObservedGeneration = s.Generation
	}
	return st
}

// finishStep fills the step that ends a restore: a successful surge's Surge is deleted; a failed
// one's is kept as Failed, the memory that this drain of this node was tried. A Pending Surge wrote
// nothing and is dropped.
func finishStep(o Observation, st *Step) {
	s := o.Surge
	if s.PhaseOf() == v1alpha1.PhasePending {
		st.Delete, st.Reason = true, ReasonUnwritten
		return
	}
	st.Reason, st.Failed = s.Status.Reason, s.Status.Failed
	for i, f := range s.Spec.Fields {
		if i < len(o.Fields) && o.Fields[i] == workload.FieldChanged {
			st.Kept = append(st.Kept, f)
		}
	}
	if !s.Status.Failed {
		st.Delete = true
		return
	}
	st.Status = moved(s, v1alpha1.PhaseFailed, s.Status.Reason, fmt.Sprintf("Surge for node %s failed (%s); restored %s",
		s.Spec.Node, s.Status.Reason, DescribeRestore(s.Spec.Fields, st.Kept)), o.Now)
}

// moved is the Surge's status moved to a phase, with its message, its time (for Ready and Resolved)
// and its condition, set with reason and message.
func moved(s *v1alpha1.Surge, phase v1alpha1.Phase, reason, message string, now time.Time) *v1alpha1.SurgeStatus {
	next := s.Status.DeepCopy()
	t := metav1.NewTime(now)
	next.Phase, next.Message = phase, message
	condition := map[v1alpha1.Phase]string{
		v1alpha1.PhaseSurged: ConditionSurged, v1alpha1.PhaseReady: ConditionReplacementReady, v1alpha1.PhaseResolved: ConditionDrainUnblocked,
		v1alpha1.PhaseRestoring: ConditionRestoring, v1alpha1.PhaseFailed: ConditionRestored,
	}[phase]
	switch phase {
	case v1alpha1.PhaseReady:
		next.ReadyTime = &t
	case v1alpha1.PhaseResolved:
		next.ResolvedTime = &t
	}
	meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: condition, Status: metav1.ConditionTrue, Reason: reason, Message: message,
		LastTransitionTime: t, ObservedGeneration: s.Generation})
	return next
}

// restoring is the status of a Surge whose restore starts: its reason, whether it failed, when, and
// the observation's detail after the reason in the message (see RestoreDetail).
func restoring(s *v1alpha1.Surge, a Action, now time.Time) *v1alpha1.SurgeStatus {
	next := s.Status.DeepCopy()
	t := metav1.NewTime(now)
	next.Phase, next.Reason, next.Failed, next.RestoreTime = v1alpha1.PhaseRestoring, a.Reason, a.Failed, &t
	next.Message = "Restoring " + DescribeRestore(s.Spec.Fields, nil) + " (" + a.Reason + ")"
	if a.Detail != "" {
		next.Message += ": " + a.Detail
	}
	meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: ConditionRestoring, Status: metav1.ConditionTrue, Reason: a.Reason,
		Message: next.Message, LastTransitionTime: t, ObservedGeneration: s.Generation})
	return next
}

// setEvictionDue records that the Surge's node is being drained while its replacement is Ready:
// --evict-timeout runs from now.
func setEvictionDue(status *v1alpha1.SurgeStatus, s *v1alpha1.Surge, now time.Time) {
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: ConditionEvictionDue, Status: metav1.ConditionTrue,
		Reason: "NodeDraining", Message: fmt.Sprintf("Node %s is being drained: the blocked pod is to leave it", s.Spec.Node),
		LastTransitionTime: metav1.NewTime(now), ObservedGeneration: s.Generation})
}
