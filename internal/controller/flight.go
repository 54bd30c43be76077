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
}

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
	return &flight{clock: clk, gauges: g, trusted: map[types.NamespacedName]trustedSurge{}, recent: map[types.NamespacedName]recentSurge{}}
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
	// unverified are the replacements booked by the Surges this process created but has not
	// verified yet: the cache may not show them, nor their pods.
	unverified []*podinfo.Pod
}

// view returns the Surges in flight. cached is what the informer holds now: a trusted Surge it no
// longer holds is gone.
func (f *flight) view(cached []*v1alpha1.Surge) inFlightView {
	f.mu.Lock()
	defer f.mu.Unlock()
	var v inFlightView
	for _, sg := range cached {
		if _, recent := f.recent[keyOf(sg)]; recent {
			continue
		}
		if t, ok := f.trusted[keyOf(sg)]; ok && t.uid == sg.UID && guardian.InFlight(sg) {
			v.trusted = append(v.trusted, sg)
		}
	}
	now := f.clock.Now()
	for key, r := range f.recent {
		if now.Sub(r.at) > recentTTL {
			delete(f.recent, key)
			continue
		}
		v.unverified = append(v.unverified, r.replacements...)
		v.count++
	}
	v.count += len(v.trusted)
	return v
}
