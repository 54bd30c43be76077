package controller

// This file holds what the controller remembers of Surges besides state: which failed verification,
// and when the writes of a Pending one began. Neither is needed to resume after a restart.

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
)

// rejectedSurges remembers the Surges that failed verification, by UID, until they pass it again or
// are deleted. Such a Surge is nobody's stall in flight, whatever its phase says: it books no
// capacity. A Surge not verified yet (just after a restart) still does: counting it too long only
// defers a stall, not counting it could place two replacements on one free GPU.
type rejectedSurges struct {
	mu   sync.Mutex
	uids map[types.NamespacedName]types.UID
}

func (r *rejectedSurges) add(s *v1alpha1.Surge) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.uids == nil {
		r.uids = map[types.NamespacedName]types.UID{}
	}
	r.uids[keyOf(s)] = s.UID
}

func (r *rejectedSurges) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.uids, key)
}

func (r *rejectedSurges) has(s *v1alpha1.Surge) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	uid, ok := r.uids[keyOf(s)]
	return ok && uid == s.UID
}

// writeAttempts remembers when this process first tried to write the fields of each Pending Surge:
// the Pending deadline (guardian.PendingTimeout) runs from there, so a guardian back from an outage
// gives a Surge created before it a full minute of attempts. Forgotten once the Surge leaves Pending
// or is deleted.
type writeAttempts struct {
	mu    sync.Mutex
	first map[types.NamespacedName]attempt
}

type attempt struct {
	uid types.UID
	at  time.Time
}

// since returns when the first attempt for the Surge was seen, recording now if none was.
func (w *writeAttempts) since(s *v1alpha1.Surge, now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first == nil {
		w.first = map[types.NamespacedName]attempt{}
	}
	a, ok := w.first[keyOf(s)]
	if !ok || a.uid != s.UID {
		a = attempt{uid: s.UID, at: now}
		w.first[keyOf(s)] = a
	}
	return a.at
}

func (w *writeAttempts) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.first, key)
}
