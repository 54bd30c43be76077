package guardian

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// TestActionKindsListed keeps ActionKinds, which the controller's report table is checked against,
// in step with the kinds TestDecide reaches.
func TestActionKindsListed(t *testing.T) {
	listed := map[ActionKind]bool{}
	for _, k := range ActionKinds() {
		listed[k] = true
	}
	for _, k := range allActionKinds {
		if !listed[k] {
			t.Errorf("ActionKinds() misses %s", k)
		}
	}
	if len(listed) != len(allActionKinds) {
		t.Errorf("ActionKinds() = %v, want %v", ActionKinds(), allActionKinds)
	}
}

func TestNextStatus(t *testing.T) {
	ts := metav1.NewTime(now)
	cases := []struct {
		name    string
		phase   v1alpha1.Phase
		surge   func(*v1alpha1.Surge)
		fields  []workload.FieldState
		action  Action
		check   func(t *testing.T, st Step)
		noWrite bool
	}{
		{name: "wait writes nothing", phase: v1alpha1.PhaseSurged, action: Action{Kind: ActWait, After: time.Second}, noWrite: true},
		{name: "fields are a target write", phase: v1alpha1.PhasePending, action: Action{Kind: ActWriteFields}, noWrite: true},
		{name: "evictions are no status write", phase: v1alpha1.PhaseReady, action: Action{Kind: ActEvict}, noWrite: true},
		{name: "restored fields are a target write", phase: v1alpha1.PhaseRestoring, action: Action{Kind: ActRestoreFields}, noWrite: true},
		{
			name: "mark surged", phase: v1alpha1.PhasePending, action: Action{Kind: ActMarkSurged},
			check: func(t *testing.T, st Step) {
				wantPhase(t, st, v1alpha1.PhaseSurged, "Surged spec.replicas from 1 to 2; waiting for 1 replacement replica(s) to be Ready off node node-a")
				wantCondition(t, st, ConditionSurged, "Written")
			},
		},
		{
			name: "mark ready, eviction due", phase: v1alpha1.PhaseSurged, action: Action{Kind: ActMarkReady, EvictionDue: true, EvictNow: true},
			check: func(t *testing.T, st Step) {
				wantPhase(t, st, v1alpha1.PhaseReady, "1 replacement(s) Ready off node node-a")
				wantCondition(t, st, ConditionReplacementReady, "ReplacementReady")
				wantCondition(t, st, ConditionEvictionDue, "NodeDraining")
				if st.Status.ReadyTime == nil || !st.Status.ReadyTime.Equal(&ts) {
					t.Errorf("ReadyTime = %v, want %v", st.Status.ReadyTime, ts)
				}
			},
		},
		{
			name: "mark eviction due keeps the phase", phase: v1alpha1.PhaseReady, action: Action{Kind: ActMarkEvictionDue},
			check: func(t *testing.T, st Step) {
				wantPhase(t, st, v1alpha1.PhaseReady, "")
				wantCondition(t, st, ConditionEvictionDue, "NodeDraining")
			},
		},
		{
			name: "mark resolved, drain over", phase: v1alpha1.PhaseReady, action: Action{Kind: ActMarkResolved, Reason: ReasonDrainOver},
			check: func(t *testing.T, st Step) {
				wantPhase(t, st, v1alpha1.PhaseResolved, "The drain of node node-a is over; holding the surge until it is safe to restore")
				wantCondition(t, st, ConditionDrainUnblocked, "DrainUnblocked")
				if st.Status.ResolvedTime == nil || !st.Status.ResolvedTime.Equal(&ts) {
					t.Errorf("ResolvedTime = %v, want %v", st.Status.ResolvedTime, ts)
				}
			},
		},
		{
			name: "start a failed restore with its detail", phase: v1alpha1.PhaseReady,
			action: Action{Kind: ActStartRestore, Reason: ReasonMultiplePDBs, Failed: true, Detail: "PDB other also selects the pod"},
			check: func(t *testing.T, st Step) {
				wantPhase(t, st, v1alpha1.PhaseRestoring, "Restoring spec.replicas to 1 (MultiplePDBs): PDB other also selects the pod")
				wantCondition(t, st, ConditionRestoring, ReasonMultiplePDBs)
				if !st.Status.Failed || st.Status.Reason != ReasonMultiplePDBs || st.Status.RestoreTime == nil {
					t.Errorf("status = %+v, want failed, reason %s, a restore time", st.Status, ReasonMultiplePDBs)
				}
				s := testSurge(v1alpha1.PhaseRestoring)
				s.Status = *st.Status
				if got := RestoreDetail(s); got != "PDB other also selects the pod" {
					t.Errorf("RestoreDetail() = %q", got)
				}
			},
		},
		{
			name: "finish a failed restore: kept as Failed", phase: v1alpha1.PhaseRestoring,
			surge:  func(s *v1alpha1.Surge) { s.Status.Reason, s.Status.Failed = ReasonReadyTimeout, true },
			fields: []workload.FieldState{workload.FieldChanged}, action: Action{Kind: ActFinish},
			check: func(t *testing.T, st Step) {
				wantPhase(t, st, v1alpha1.PhaseFailed, "Surge for node node-a failed (ReadyTimeout); restored spec.replicas kept as changed by someone else")
				wantCondition(t, st, ConditionRestored, ReasonReadyTimeout)
				if st.Delete || st.Reason != ReasonReadyTimeout || !st.Failed || len(st.Kept) != 1 {
					t.Errorf("step = %+v, want the restore's reason, failed, one kept field", st)
				}
			},
		},
		{
			name: "finish a restore: deleted", phase: v1alpha1.PhaseRestoring,
			surge:  func(s *v1alpha1.Surge) { s.Status.Reason = ReasonPoolUpdated },
			fields: []workload.FieldState{workload.FieldAtOriginal}, action: Action{Kind: ActFinish},
			check: func(t *testing.T, st Step) {
				if !st.Delete || st.Status != nil || st.Reason != ReasonPoolUpdated || st.Failed || st.Kept != nil {
					t.Errorf("step = %+v, want a delete reported as %s", st, ReasonPoolUpdated)
				}
			},
		},
		{
			name: "finish a Pending Surge: dropped", phase: v1alpha1.PhasePending, action: Action{Kind: ActFinish},
			check: func(t *testing.T, st Step) {
				if !st.Delete || st.Status != nil || st.Reason != ReasonUnwritten {
					t.Errorf("step = %+v, want a delete reported as %s", st, ReasonUnwritten)
				}
			},
		},
		{
			name: "discard deletes", phase: v1alpha1.PhasePending, action: Action{Kind: ActDiscard},
			check: func(t *testing.T, st Step) {
				if !st.Delete || st.Status != nil {
					t.Errorf("step = %+v, want a delete", st)
				}
			},
		},
		{
			name: "forget deletes", phase: v1alpha1.PhaseFailed, action: Action{Kind: ActForget},
			check: func(t *testing.T, st Step) {
				if !st.Delete || st.Status != nil {
					t.Errorf("step = %+v, want a delete", st)
				}
			},
		},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			s := testSurge(tt.phase)
			s.Generation = 3
			if tt.surge != nil {
				tt.surge(s)
			}
			before := s.DeepCopy()
			fieldStates := tt.fields
			if fieldStates == nil {
				fieldStates = []workload.FieldState{workload.FieldAtSet}
			}
			st := Next(Observation{Now: now, Surge: s, Fields: fieldStates}, tt.action)
			if !equality.Semantic.DeepEqual(s, before) {
				t.Errorf("Next changed the observed Surge")
			}
			if st.Kind != tt.action.Kind {
				t.Errorf("step kind = %s, want %s", st.Kind, tt.action.Kind)
			}
			if tt.noWrite && (st.Status != nil || st.Delete) {
				t.Errorf("step = %+v, want no status and no delete", st)
			}
			if st.Status != nil && st.Status.ObservedGeneration != 3 {
				t.Errorf("ObservedGeneration = %d, want 3", st.Status.ObservedGeneration)
			}
			if tt.check != nil {
				tt.check(t, st)
			}
		})
	}
}

func wantPhase(t *testing.T, st Step, phase v1alpha1.Phase, message string) {
	t.Helper()
	if st.Status == nil {
		t.Fatalf("step = %+v, want a status", st)
	}
	if st.Status.Phase != phase || (message != "" && st.Status.Message != message) {
		t.Errorf("status = %s %q, want %s %q", st.Status.Phase, st.Status.Message, phase, message)
	}
}

func wantCondition(t *testing.T, st Step, typ, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(st.Status.Conditions, typ)
	if c == nil || c.Reason != reason || c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Time.Equal(now) || c.ObservedGeneration != 3 {
		t.Errorf("condition %s = %+v, want reason %s, true since now, generation 3", typ, c, reason)
	}
}
