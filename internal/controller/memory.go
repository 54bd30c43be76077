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
