package guardian

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// Whatever a tenant does to its surged workload (replacements that never turn Ready, are refused or
// cannot schedule, fields changed under the guardian, a second PDB, a pod that never leaves), a Surge
// made for a drain under way gives its slot back within SlotHold. Each run is a life of one Surge
// against a tenant picked at random (see tenant), with the time stepping as Decide asks.
func TestInFlightSurgeFreesItsSlotWithinSlotHold(t *testing.T) {
	cfg := defaultConfig()
	cfg.EvictTimeout = 10 * time.Minute
	bound := SlotHold(cfg)
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 32))
			tn := newTenant(r, cfg)
			s := testSurge(v1alpha1.PhasePending)
			start := s.Spec.StartTime.Time
			clock := start
			for InFlight(s) {
				if held := clock.Sub(start); held > bound {
					t.Fatalf("the Surge holds its slot %s after its start, beyond SlotHold %s (phase %s)", held, bound, s.PhaseOf())
				}
				a := Decide(cfg, tn.observe(s, clock, start))
				if !apply(s, a, clock) {
					return
				}
				step := a.After
				if step <= 0 || step > time.Minute {
					step = time.Duration(1+r.IntN(60)) * time.Second
				}
				clock = clock.Add(step)
			}
		})
	}
}

// tenant is a run's adversary: when (if ever) the write lands and the replacement turns Ready, and
// whether it refuses the replacement, keeps it Unschedulable or pins the pod with a second PDB. The
// node is being drained and the blocked pod never leaves.
type tenant struct {
	writeLands, readyAt              time.Duration
	refuse, unschedulable, secondPDB bool
}

func newTenant(r *rand.Rand, cfg Config) tenant {
	return tenant{
		writeLands: time.Duration(r.IntN(int(2*PendingTimeout/time.Second))) * time.Second,
		readyAt:    time.Duration(r.IntN(int((cfg.ReadyTimeout+5*time.Minute)/time.Second))) * time.Second,
		refuse:     r.IntN(4) == 0, unschedulable: r.IntN(4) == 0, secondPDB: r.IntN(4) == 0,
	}
}

// observe is what the guardian sees of the tenant's surge at now.
func (tn tenant) observe(s *v1alpha1.Surge, now, start time.Time) Observation {
	age := now.Sub(start)
	o := Observation{Now: now, Surge: s, Node: drainingNode(), Pool: updatingPool(), CurrentDrain: s.Spec.Drain, LiveOnNode: 1,
		WritingSince: start, Fields: []workload.FieldState{workload.FieldAtSet}}
	if s.PhaseOf() == v1alpha1.PhasePending && age < tn.writeLands {
		o.Fields = []workload.FieldState{workload.FieldAtOriginal}
	}
	if age >= tn.readyAt {
		o.ReadyElsewhere = 1
	}
	if tn.unschedulable {
		o.UnschedulableSince = &start
	}
	if tn.refuse {
		o.ReplacementRefused = "exceeded quota"
	}
	if tn.secondPDB {
		o.OtherPDB = "pin"
	}
	return o
}

// apply plays an action's write on the Surge; false once the Surge is gone or restoring.
func apply(s *v1alpha1.Surge, a Action, now time.Time) bool {
	t := metav1.NewTime(now)
	switch a.Kind {
	case ActMarkSurged:
		s.Status.Phase = v1alpha1.PhaseSurged
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: ConditionSurged, Status: metav1.ConditionTrue, Reason: "Written", LastTransitionTime: t})
	case ActMarkReady, ActMarkEvictionDue:
		s.Status.Phase = v1alpha1.PhaseReady
		if a.EvictionDue || a.Kind == ActMarkEvictionDue {
			meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: ConditionEvictionDue, Status: metav1.ConditionTrue, Reason: "NodeDraining", LastTransitionTime: t})
		}
	case ActStartRestore:
		s.Status.Phase = v1alpha1.PhaseRestoring
	case ActMarkResolved:
		s.Status.Phase = v1alpha1.PhaseResolved
	case ActDiscard, ActFinish, ActForget:
		return false
	}
	return true
}

// A freed slot goes first to the namespaces with the fewest surges in flight, then to the stall that
// waited longest: a stall of a namespace with no surge in flight gets a free slot unless a stall of
// another such namespace waited longer, whatever the other namespaces hold or queue. Random waves
// check the property of the slot rule.
func TestFreeSlotGoesToANamespaceWithNothingInFlight(t *testing.T) {
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 3))
		f := gpuCluster(t)
		cfg := StallConfig{MaxInFlight: 1 + r.IntN(5)}
		if r.IntN(2) == 0 {
			cfg.MaxInFlightPerNamespace = max(1, cfg.MaxInFlight-1)
		}
		w := f.wave(f.stall("llama-a", "llama"))
		w.InFlightByNamespace = map[string]int{}
		// The other tenants: whatever they hold (within their limits) and queue.
		for i := range 1 + r.IntN(4) {
			ns := fmt.Sprintf("tenant-%d", i)
			held := r.IntN(cfg.MaxInFlight)
			if cfg.MaxInFlightPerNamespace > 0 {
				held = min(held, cfg.MaxInFlightPerNamespace)
			}
			if w.InFlight+held > cfg.MaxInFlight {
				held = cfg.MaxInFlight - w.InFlight
			}
			w.InFlight += held
			w.InFlightByNamespace[ns] = held
			for j := range r.IntN(4) {
				w.Waiting = append(w.Waiting, WaitingStall{Workload: types.UID(fmt.Sprintf("%s-%d", ns, j)), Namespace: ns,
					Since: now.Add(time.Duration(r.IntN(600)) * time.Second)})
			}
		}
		mine := now.Add(time.Duration(r.IntN(600)) * time.Second)
		w.Stalls[0].WaitingSince = mine
		free := cfg.MaxInFlight - w.InFlight
		ahead := 0
		for _, o := range w.Waiting {
			if w.InFlightByNamespace[o.Namespace] == 0 && o.Since.Before(mine) {
				ahead++
			}
		}
		d := DecideStalls(cfg, w)[0]
		if free > ahead && d.Outcome != OutcomeSurge {
			t.Fatalf("seed %d: %d free slot(s), %d stall(s) of namespaces with nothing in flight waited longer: decision %s (%s), want a surge",
				seed, free, ahead, d.Reason, d.Detail)
		}
		if free <= 0 && d.Outcome == OutcomeSurge {
			t.Fatalf("seed %d: surged with no free slot", seed)
		}
	}
}
