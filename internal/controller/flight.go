package controller

import (
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// recentTTL bounds how long a Surge created by this process counts as in flight before it is
// verified (or the informer shows it gone).
const recentTTL = time.Minute

// flight knows which Surges count as in flight: those that passed verification (trusted) and those
// this process created and has not verified yet (recent), whether the informer delivered them or not.
// Untrusted Surges (a tenant's forgery, a rejected one) never count, nor book capacity.
type flight struct {
	mu     sync.Mutex
	clock  clock.Clock
	gauges *gauges
	// trusted maps the Surges that passed verification to their last phase.
	trusted map[types.NamespacedName]trustedSurge
	// recent holds the Surges this process created, with the replacements they book, until verified.
	recent map[types.NamespacedName]recentSurge
	// waiting holds the stalls deferred for a slot, by workload, until surged or no longer deferred.
	waiting map[types.UID]waitingStall
}

// waitingStall is a stall deferred for a slot: since when, and when it was last deferred (an entry
// not deferred again within waitingTTL is a stall that went away).
type waitingStall struct {
	namespace   string
	since, seen time.Time
}

// waitingTTL bounds how long a deferred stall counts as waiting without being deferred again: it is
// looked at again every guardian.DeferRetry while it waits.
const waitingTTL = 3 * guardian.DeferRetry

type trustedSurge struct {
	uid   types.UID
	phase v1alpha1.Phase
	pool  string
	kind  string
	start time.Time
	held  corev1.ResourceList
}

type recentSurge struct {
	at           time.Time
	replacements []*podinfo.Pod
}

func newFlight(clk clock.Clock, g *gauges) *flight {
	return &flight{
		clock: clk, gauges: g, trusted: map[types.NamespacedName]trustedSurge{},
		recent: map[types.NamespacedName]recentSurge{}, waiting: map[types.UID]waitingStall{},
	}
}

func keyOf(sg *v1alpha1.Surge) types.NamespacedName {
	return types.NamespacedName{Namespace: sg.Namespace, Name: sg.Name}
}

// created remembers a Surge this process just created, with the replacements it books (its delta).
func (f *flight) created(sg *v1alpha1.Surge, replacements []*podinfo.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recent[keyOf(sg)] = recentSurge{at: f.clock.Now(), replacements: replacements}
}

// wait records that the workload's stall was deferred for a slot, and returns since when it waits.
func (f *flight) wait(workload types.UID, namespace string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	w, ok := f.waiting[workload]
	if !ok || now.Sub(w.seen) > waitingTTL {
		w = waitingStall{namespace: namespace, since: now}
	}
	w.seen = now
	f.waiting[workload] = w
	return w.since
}

// unwait forgets a stall that no longer waits for a slot (surged, covered, or not deferred).
func (f *flight) unwait(workload types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.waiting, workload)
}

// waitingSince returns since when the workload's stall waits for a slot; zero when it does not.
func (f *flight) waitingSince(workload types.UID) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w, ok := f.waiting[workload]; ok && f.clock.Now().Sub(w.seen) <= waitingTTL {
		return w.since
	}
	return time.Time{}
}

// verified records a Surge that passed verification, with its phase.
func (f *flight) verified(sg *v1alpha1.Surge) {
	f.update(func() {
		key := keyOf(sg)
		t := f.trusted[key]
		if t.uid != sg.UID {
			t = trustedSurge{uid: sg.UID}
		}
		t.phase, t.pool, t.kind, t.start = sg.PhaseOf(), sg.Spec.Pool, sg.Spec.Target.Kind, sg.Spec.StartTime.Time
		f.trusted[key] = t
		delete(f.recent, key)
	})
}

// holding records the extended resources a trusted Surge's extra replicas hold.
func (f *flight) holding(sg *v1alpha1.Surge, held corev1.ResourceList) {
	f.update(func() {
		if t, ok := f.trusted[keyOf(sg)]; ok && t.uid == sg.UID {
			t.held = held
			f.trusted[keyOf(sg)] = t
		}
	})
}

// rejected forgets a Surge that failed verification.
func (f *flight) rejected(sg *v1alpha1.Surge) {
	f.update(func() {
		delete(f.trusted, keyOf(sg))
		delete(f.recent, keyOf(sg))
	})
}

// forget forgets a deleted Surge.
func (f *flight) forget(key types.NamespacedName) {
	f.update(func() {
		delete(f.recent, key)
		delete(f.trusted, key)
	})
}

// update changes the trusted set under the lock and publishes the gauges after releasing it.
func (f *flight) update(change func()) {
	f.mu.Lock()
	change()
	snapshot := maps.Clone(f.trusted)
	f.mu.Unlock()
	f.gauges.setSurges(snapshot)
}

// inFlightView is what flight says about the Surges serving a stall now.
type inFlightView struct {
	// count is the number of Surges in flight.
	count int
	// trusted lists the cached Surges in flight whose pending replacements the cache shows.
	trusted []*v1alpha1.Surge
	// held lists the cached trusted Surges that hold their count without serving a stall (Resolved, or
	// a Ready prepared one): a pod of theirs that a drain evicted comes back as a pending pod, which
	// the scheduler places before any later replacement.
	held []*v1alpha1.Surge
	// unverified are the replacements booked by the Surges this process created but has not
	// verified yet: the cache may not show them, nor their pods.
	unverified []*podinfo.Pod
	// byNamespace splits count by namespace (a fresh map the caller may change).
	byNamespace map[string]int
	// waiting lists the stalls that wait for a slot.
	waiting []guardian.WaitingStall
}

// view returns the Surges in flight. cached is what the informer holds now: a trusted Surge it no
// longer holds is gone.
func (f *flight) view(cached []*v1alpha1.Surge) inFlightView {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := inFlightView{byNamespace: map[string]int{}}
	for _, sg := range cached {
		if _, recent := f.recent[keyOf(sg)]; recent {
			continue
		}
		t, ok := f.trusted[keyOf(sg)]
		switch {
		case !ok || t.uid != sg.UID:
		case guardian.InFlight(sg):
			v.trusted = append(v.trusted, sg)
			v.byNamespace[sg.Namespace]++
		case sg.PhaseOf() == v1alpha1.PhaseReady || sg.PhaseOf() == v1alpha1.PhaseResolved:
			v.held = append(v.held, sg)
		}
	}
	now := f.clock.Now()
	for key, r := range f.recent {
		if now.Sub(r.at) > recentTTL {
			delete(f.recent, key)
			continue
		}
		v.unverified = append(v.unverified, r.replacements...)
		v.byNamespace[key.Namespace]++
		v.count++
	}
	v.count += len(v.trusted)
	for uid, w := range f.waiting {
		if now.Sub(w.seen) > waitingTTL {
			delete(f.waiting, uid)
			continue
		}
		v.waiting = append(v.waiting, guardian.WaitingStall{Workload: uid, Namespace: w.namespace, Since: w.since})
	}
	return v
}
