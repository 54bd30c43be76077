package controller

import (
	"sync"

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
