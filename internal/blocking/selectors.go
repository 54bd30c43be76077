package blocking

import (
	"slices"
	"sync"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// Matcher is a parsed PDB selector. Each requirement looks a pod's label up in the sorted list of the
// allowed values: labels.Selector compares a value with each of a requirement's values in turn, which
// a tenant's selector of thousands of values would make thousands of comparisons per pod and node
// sync. The list is the selector's own when its values are sorted already (see SortSelectorValues):
// the Matcher then costs no memory per value.
// The zero Matcher selects every pod (an empty selector); a nil *Matcher selects none.
type Matcher struct {
	reqs []requirement
}

type requirement struct {
	key string
	// in: the label must be present with one of values; otherwise it must not be (NotIn: or have
	// none of values).
	in bool
	// values, sorted, is nil for Exists and DoesNotExist.
	values []string
}

// Matches reports whether the selector selects a pod with these labels.
func (m *Matcher) Matches(podLabels map[string]string) bool {
	if m == nil {
		return false
	}
	for _, r := range m.reqs {
		v, has := podLabels[r.key]
		if r.values == nil {
			if has != r.in {
				return false
			}
			continue
		}
		_, listed := slices.BinarySearch(r.values, v)
		if r.in != (has && listed) {
			return false
		}
	}
	return true
}

// Compile parses a PDB's selector; nil when it selects nothing: absent (in policy/v1 a nil selector
// selects no pod) or invalid, as for the disruption controller and the Eviction API.
func Compile(pdb *policyv1.PodDisruptionBudget) *Matcher {
	sel := pdb.Spec.Selector
	if sel == nil {
		return nil
	}
	// LabelSelectorAsSelector validates every key, operator and value, as the API's consumers do.
	if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
		return nil
	}
	m := &Matcher{}
	for k, v := range sel.MatchLabels {
		m.reqs = append(m.reqs, requirement{key: k, in: true, values: []string{v}})
	}
	for _, e := range sel.MatchExpressions {
		r := requirement{key: e.Key}
		switch e.Operator {
		case metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn:
			r.in = e.Operator == metav1.LabelSelectorOpIn
			r.values = e.Values
			if !slices.IsSorted(r.values) {
				r.values = slices.Sorted(slices.Values(e.Values))
			}
			if r.values == nil {
				r.values = []string{}
			}
		case metav1.LabelSelectorOpExists:
			r.in = true
		}
		m.reqs = append(m.reqs, r)
	}
	return m
}

// SortSelectorValues sorts, in place, the values of a selector's In and NotIn requirements, whose
// order means nothing: Compile then uses them as they are instead of a sorted copy. For the informers'
// transform, which owns the objects it is given.
func SortSelectorValues(sel *metav1.LabelSelector) {
	if sel == nil {
		return
	}
	for _, e := range sel.MatchExpressions {
		slices.Sort(e.Values)
	}
}

// SelectorCache holds each PDB's Matcher, parsed once per version of the PDB (UID and
// resourceVersion): a node sync, a PDB event and a Surge's observation then cost a map lookup per
// PDB, whatever the size of its selector. Forget drops a deleted PDB. The nil cache parses every time.
type SelectorCache struct {
	mu sync.Mutex
	m  map[types.UID]cachedMatcher
}

type cachedMatcher struct {
	resourceVersion string
	matcher         *Matcher
}

// NewSelectorCache returns an empty cache.
func NewSelectorCache() *SelectorCache {
	return &SelectorCache{m: map[types.UID]cachedMatcher{}}
}

// Matcher returns the PDB's parsed selector (nil: it selects nothing).
func (c *SelectorCache) Matcher(pdb *policyv1.PodDisruptionBudget) *Matcher {
	if c == nil || pdb.UID == "" {
		return Compile(pdb)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[pdb.UID]; ok && e.resourceVersion == pdb.ResourceVersion {
		return e.matcher
	}
	m := Compile(pdb)
	c.m[pdb.UID] = cachedMatcher{resourceVersion: pdb.ResourceVersion, matcher: m}
	return m
}

// Selects reports whether the PDB selects the pod (see Selects).
func (c *SelectorCache) Selects(pdb *policyv1.PodDisruptionBudget, pod *podinfo.Pod) bool {
	return pdb.Namespace == pod.Namespace && c.Matcher(pdb).Matches(pod.Labels)
}

// Forget drops a deleted PDB's entry.
func (c *SelectorCache) Forget(uid types.UID) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, uid)
}

// Len is the number of PDBs cached.
func (c *SelectorCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
