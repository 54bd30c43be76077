package controller

// This file holds when the writes of each Pending Surge began: not needed to resume after a restart
// (a guardian back from an outage gives a Surge a full minute of attempts again).

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
)

// writeAttempts remembers when this process first tried to write the fields of each Pending Surge:
// the Pending deadline (guardian.PendingTimeout) runs from there, so a guardian back from an outage
// gives a Surge created before it a full minute of attempts. Forgotten once the Surge leaves Pending
// or is deleted.
type writeAttempts struct {
	mu    sync.Mutex
	first map[types.NamespacedName]attempt
	// written holds, for a Pending Surge whose fields this process wrote, the resourceVersion of the
	// target that write replaced: while the cache still holds that version, it has not seen the write.
	written map[types.NamespacedName]attempt
}

type attempt struct {
	uid types.UID
	at  time.Time
	rv  string
}

// wrote records that the Surge's fields were written over the target at resourceVersion replaced.
func (w *writeAttempts) wrote(s *v1alpha1.Surge, replaced string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written == nil {
		w.written = map[types.NamespacedName]attempt{}
	}
	w.written[keyOf(s)] = attempt{uid: s.UID, rv: replaced}
}

// unseen reports whether this process wrote the Surge's fields and the target read (at
// resourceVersion current) is still the version that write replaced.
func (w *writeAttempts) unseen(s *v1alpha1.Surge, current string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.written[keyOf(s)]
	return ok && a.uid == s.UID && a.rv == current
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
	delete(w.written, key)
}
