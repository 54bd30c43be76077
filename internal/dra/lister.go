package dra

import (
	"hash/maphash"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
)

// Listers reads what the count needs from the informers' caches (whose transform is Slim).
type Listers struct {
	Slices    resourcelisters.ResourceSliceLister
	Claims    resourcelisters.ResourceClaimLister
	Templates resourcelisters.ResourceClaimTemplateLister
	Classes   resourcelisters.DeviceClassLister
}

// InventoryCache builds the Inventory from the listers once per change of the objects it is built
// from. Building it reads every device of the cluster (a thousand slices of eight GPUs: 7 ms and
// 3 MB, see BenchmarkInventory), and most capacity checks find no slice, claim or class changed
// since the last one. The zero value is ready to use; it is safe for concurrent use.
type InventoryCache struct {
	mu  sync.Mutex
	key inventoryKey
	inv *Inventory
}

// inventoryKey identifies the cached objects an Inventory was built from: every write changes an
// object's resourceVersion, so equal keys mean the same objects (up to a 64-bit hash collision).
type inventoryKey struct {
	n   int
	sum uint64
}

var keySeed = maphash.MakeSeed()

// Inventory returns an Inventory of everything cached now, for the caller's goroutine alone: a fork
// (see Inventory.Fork) of the one built last when the objects are the same, else a new one.
func (c *InventoryCache) Inventory(l Listers) (*Inventory, error) {
	slices, err := l.Slices.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	claims, err := l.Claims.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	classes, err := l.Classes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	key, ok := keyOf(slices, claims, classes)
	if !ok {
		return NewInventory(slices, claims, classes), nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inv == nil || key != c.key {
		c.inv, c.key = NewInventory(slices, claims, classes), key
	}
	return c.inv.Fork(), nil
}

// keyOf sums a hash of every object's UID and resourceVersion, in any order. An object without a
// resourceVersion (never one an API server returned) cannot be told from its next version: no key.
func keyOf(slices []*resourcev1.ResourceSlice, claims []*resourcev1.ResourceClaim, classes []*resourcev1.DeviceClass) (inventoryKey, bool) {
	key := inventoryKey{n: len(slices) + len(claims) + len(classes)}
	var h maphash.Hash
	h.SetSeed(keySeed)
	add := func(m *metav1.ObjectMeta) bool {
		if m.ResourceVersion == "" {
			return false
		}
		h.Reset()
		h.WriteString(string(m.UID))
		h.WriteByte(0)
		h.WriteString(m.ResourceVersion)
		key.sum += h.Sum64()
		return true
	}
	for _, s := range slices {
		if !add(&s.ObjectMeta) {
			return key, false
		}
	}
	for _, cl := range claims {
		if !add(&cl.ObjectMeta) {
			return key, false
		}
	}
	for _, cl := range classes {
		if !add(&cl.ObjectMeta) {
			return key, false
		}
	}
	return key, true
}

// ResourceClaim implements Objects.
func (l Listers) ResourceClaim(namespace, name string) (*resourcev1.ResourceClaim, bool) {
	c, err := l.Claims.ResourceClaims(namespace).Get(name)
	return c, err == nil
}

// ResourceClaimTemplate implements Objects.
func (l Listers) ResourceClaimTemplate(namespace, name string) (*resourcev1.ResourceClaimTemplate, bool) {
	t, err := l.Templates.ResourceClaimTemplates(namespace).Get(name)
	return t, err == nil
}
