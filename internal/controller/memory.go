package controller

// This file holds when the writes of each Pending Surge began: not needed to resume after a restart
// (a guardian back from an outage gives a Surge a full minute of attempts again).

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
)

// writeAttempts remembers when this process first tried to write the fields of each Pending Surge,
// and which version of the target its write replaced once one went through: the Pending deadline
// (guardian.PendingTimeout) runs from the first, so a guardian back from an outage gives a Surge
// created before it a full minute of attempts. Forgotten once the Surge leaves Pending
// or is deleted.
type writeAttempts struct {
	mu    sync.Mutex
	first map[types.NamespacedName]attempt
}

type attempt struct {
	uid types.UID
	at  time.Time
	// replaced is the resourceVersion of the target that this process's write of the fields
	// replaced ("" before a write went through): while the cache still holds that version, it has
	// not seen the write.
	replaced string
}

// record returns the Surge's attempt, starting one at now if there is none for this Surge (by UID).
// Call it with w.mu held.
func (w *writeAttempts) record(s *v1alpha1.Surge, now time.Time) attempt {
	if w.first == nil {
		w.first = map[types.NamespacedName]attempt{}
	}
	a, ok := w.first[keyOf(s)]
	if !ok || a.uid != s.UID {
		a = attempt{uid: s.UID, at: now}
		w.first[keyOf(s)] = a
	}
	return a
}

// since returns when the first attempt for the Surge was seen, recording now if none was.
func (w *writeAttempts) since(s *v1alpha1.Surge, now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.record(s, now).at
}

// wrote records that the Surge's fields were written over the target at resourceVersion replaced.
func (w *writeAttempts) wrote(s *v1alpha1.Surge, replaced string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.record(s, now)
	a.replaced = replaced
	w.first[keyOf(s)] = a
}

// unseen reports whether this process wrote the Surge's fields and the target read (at
// resourceVersion current) is still the version that write replaced.
func (w *writeAttempts) unseen(s *v1alpha1.Surge, current string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.first[keyOf(s)]
	return ok && a.uid == s.UID && a.replaced != "" && a.replaced == current
}

func (w *writeAttempts) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.first, key)
}
