package capacity

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// Allocatable is the source that counts node allocatable: CPU, memory, and the extended resources
// of device plugins (nvidia.com/gpu). It counts the requests no other source claims; what a
// placement takes of it is the candidate's Used, which the placement itself keeps.
type Allocatable struct{}

// Open implements Source: node allocatable books on the candidates, not on a Book.
func (Allocatable) Open() Book { return allocatableBook{} }

// Asks implements Source: a replacement asks its requests.
func (Allocatable) Asks(pod *podinfo.Pod, into corev1.ResourceList) {
	addTo(into, pod.Spec.Requests)
}

// Free implements Source: per extended resource, allocatable minus what the pods use, summed over
// the candidates.
func (Allocatable) Free(candidates []Candidate, into map[string]int64) {
	for _, c := range candidates {
		used := c.Used
		if used == nil {
			used = UsedBy(c.Pods)
		}
		for name, q := range c.Node.Status.Allocatable {
			if IsExtended(string(name)) {
				u := used[name]
				into[string(name)] += max(0, q.Value()-u.Value())
			}
		}
	}
}

type allocatableBook struct{ none }

func (allocatableBook) Ask(*podinfo.Pod) Ask { return allocatableAsk{} }

type allocatableAsk struct{ none }

// Fits reports whether the requests no source claimed fit in the node's free allocatable.
func (allocatableAsk) Fits(c *Candidate, unclaimed corev1.ResourceList) bool {
	used := c.Used
	if used == nil {
		used = UsedBy(c.Pods)
	}
	return resourcesFit(unclaimed, c.Node.Status.Allocatable, used)
}

// resourcesFit reports whether requests fit in allocatable minus used.
func resourcesFit(requests, allocatable, used corev1.ResourceList) bool {
	for name, want := range requests {
		if want.IsZero() {
			continue
		}
		free, ok := allocatable[name]
		if !ok {
			return false
		}
		free = free.DeepCopy()
		free.Sub(used[name])
		if free.Cmp(want) < 0 {
			return false
		}
	}
	return true
}

// IsExtended reports whether a resource name is an extended resource (nvidia.com/gpu), as the API
// server defines it: outside the kubernetes.io domain and not a quota "requests." name.
func IsExtended(name string) bool {
	if !strings.Contains(name, "/") || strings.HasPrefix(name, "requests.") {
		return false
	}
	domain, _, _ := strings.Cut(name, "/")
	return domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}
