package podinfo

import (
	"crypto/sha256"
	"runtime"
	"sync"
	"weak"
)

// interner holds one copy of each distinct value, found by the SHA-256 of its encoding, for as long
// as a pod refers to it: entries are weak, and the last pod to go lets its value be collected and
// the entry be dropped. Pods come and go with the workloads, so a table that only grew would keep
// every template a cluster ever ran.
type interner[T any] struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]weak.Pointer[T]
}

func newInterner[T any]() *interner[T] {
	return &interner[T]{entries: map[[sha256.Size]byte]weak.Pointer[T]{}}
}

// intern returns the shared value whose encoding is encoded, making it with mk the first time. The
// hash is collision-resistant: two different encodings (which tenants choose) never share a value.
func (in *interner[T]) intern(encoded []byte, mk func() *T) *T {
	key := sha256.Sum256(encoded)
	in.mu.Lock()
	defer in.mu.Unlock()
	if p := in.entries[key].Value(); p != nil {
		return p
	}
	v := mk()
	in.entries[key] = weak.Make(v)
	runtime.AddCleanup(v, in.drop, key)
	return v
}

// drop removes the entry of a collected value, unless a newer value has taken its place.
func (in *interner[T]) drop(key [sha256.Size]byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if wp, ok := in.entries[key]; ok && wp.Value() == nil {
		delete(in.entries, key)
	}
}

// len is the number of entries, live or not yet dropped.
func (in *interner[T]) len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.entries)
}
