// Package blocking decides which pods on a node a PodDisruptionBudget keeps from being evicted, and
// whether adding replicas can change that. Whether the replacements fit elsewhere is
// internal/capacity's.
//
// Everything here is pure: callers pass objects read from informer listers.
package blocking

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// Unsatisfiable reasons: why adding replicas cannot make a PDB allow a disruption.
const (
	// ReasonMaxUnavailable: with maxUnavailable, every added healthy replica also raises the expected
	// count, so the allowed disruptions stay what they are.
	ReasonMaxUnavailable = "MaxUnavailable"
	// ReasonFullMinAvailable: minAvailable of 100% requires every expected pod, whatever their number.
	ReasonFullMinAvailable = "MinAvailableAll"
	// ReasonMultiplePDBs: several PDBs select the pod; the Eviction API refuses to evict it at all.
	ReasonMultiplePDBs = "MultiplePDBs"
	// ReasonTooManyReplicas: the surge needed exceeds MaxSurge replicas.
	ReasonTooManyReplicas = "SurgeTooLarge"
)

// MaxSurge caps how many replicas one surge may add.
const MaxSurge = 10

// Blocked is a pod whose eviction a PDB refuses.
type Blocked struct {
	Pod *podinfo.Pod
	PDB *policyv1.PodDisruptionBudget
	// MultiplePDBs: more than one PDB selects the pod. The Eviction API refuses such a pod outright,
	// whatever the budgets allow, so no surge can help.
	MultiplePDBs bool
}

// Skip reports whether the pod takes no part in a drain decision: DaemonSet and mirror pods are left on
// the node by the MCO's drain, terminal pods are gone already, and a pod being deleted is leaving anyway.
func Skip(pod *podinfo.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return true
	}
	if pod.Finished() {
		return true
	}
	if _, ok := pod.Annotations[podinfo.MirrorAnnotation]; ok {
		return true
	}
	if c := metav1.GetControllerOf(pod); c != nil && c.Kind == "DaemonSet" {
		return true
	}
	return false
}

// Selects reports whether pdb selects pod. In policy/v1 a nil selector selects nothing and an empty
// one selects every pod of the namespace.
func Selects(pdb *policyv1.PodDisruptionBudget, pod *podinfo.Pod) bool {
	var none *SelectorCache
	return none.Selects(pdb, pod)
}

// blocks reports whether pdb refuses to evict pod, as the Eviction API decides it: no disruption allowed,
// except that an unhealthy pod may go when the budget is otherwise met (IfHealthyBudget) or always
// (AlwaysAllow).
func blocks(pdb *policyv1.PodDisruptionBudget, pod *podinfo.Pod) bool {
	// The Eviction API does not consult PDBs for a pod that is not running yet.
	if pod.Status.Phase == corev1.PodPending {
		return false
	}
	// A PDB the disruption controller has not yet processed blocks every eviction.
	if pdb.Status.ObservedGeneration < pdb.Generation {
		return true
	}
	if pdb.Status.DisruptionsAllowed > 0 {
		return false
	}
	if !pod.Ready() {
		if p := pdb.Spec.UnhealthyPodEvictionPolicy; p != nil && *p == policyv1.AlwaysAllow {
			return false
		}
		if pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy {
			return false
		}
	}
	return true
}

// Find returns the pods whose eviction a PDB refuses, with the first such PDB. pdbs lists the PDBs of
// the pods' namespaces. Each PDB's selector is parsed once per call, whatever the number of pods.
func Find(pods []*podinfo.Pod, pdbs []*policyv1.PodDisruptionBudget) []Blocked {
	return NewPDBIndex(pdbs).Find(pods)
}

// PDBIndex holds PDBs by namespace with their selectors parsed: parsing a selector validates every
// key and value, which costs more than matching it, so an analysis of many nodes parses each PDB
// once. A PDB whose selector is absent or invalid selects nothing, as for the disruption controller,
// and is left out of the index: it costs nothing per pod.
type PDBIndex struct {
	byNamespace map[string][]compiledPDB
}

type compiledPDB struct {
	pdb *policyv1.PodDisruptionBudget
	sel *Matcher
}

// NewPDBIndex parses the selectors of pdbs.
func NewPDBIndex(pdbs []*policyv1.PodDisruptionBudget) *PDBIndex {
	var none *SelectorCache
	return none.Index(pdbs)
}

// Index is NewPDBIndex with the selectors parsed once per version of each PDB, by the cache.
func (c *SelectorCache) Index(pdbs []*policyv1.PodDisruptionBudget) *PDBIndex {
	x := &PDBIndex{byNamespace: map[string][]compiledPDB{}}
	for _, pdb := range pdbs {
		if sel := c.Matcher(pdb); sel != nil {
			x.byNamespace[pdb.Namespace] = append(x.byNamespace[pdb.Namespace], compiledPDB{pdb, sel})
		}
	}
	return x
}

// Find returns the pods whose eviction a PDB of the index refuses, with the first such PDB.
func (x *PDBIndex) Find(pods []*podinfo.Pod) []Blocked {
	var out []Blocked
	for _, pod := range pods {
		if Skip(pod) {
			continue
		}
		var matched []*policyv1.PodDisruptionBudget
		for _, c := range x.byNamespace[pod.Namespace] {
			if c.sel.Matches(pod.Labels) {
				matched = append(matched, c.pdb)
			}
		}
		switch {
		case len(matched) > 1:
			out = append(out, Blocked{Pod: pod, PDB: matched[0], MultiplePDBs: true})
		case len(matched) == 1 && blocks(matched[0], pod):
			out = append(out, Blocked{Pod: pod, PDB: matched[0]})
		}
	}
	return out
}

// StatusBehind reports whether the PDB's status counts fewer healthy pods than are Ready now among
// selected (the namespace's pods the PDB selects): the disruption controller has not caught up with a
// pod that just turned Ready, and the budget is about to allow a disruption. A stall seen then is
// stale; acting on it would surge a workload whose drain is about to go through.
func StatusBehind(pdb *policyv1.PodDisruptionBudget, selected []*podinfo.Pod) bool {
	var healthy int32
	for _, p := range selected {
		if p.DeletionTimestamp == nil && p.Ready() {
			healthy++
		}
	}
	return healthy > pdb.Status.CurrentHealthy
}

// SurgeNeeded returns how many healthy replicas must be added for pdb to allow one disruption, or the
// reason no number of added replicas can.
func SurgeNeeded(pdb *policyv1.PodDisruptionBudget) (int32, string) {
	return SurgeNeededPer(pdb, 1)
}

// SurgeNeededPer is SurgeNeeded for a workload whose replica is perReplica pods (a LeaderWorkerSet's
// group): each replica added adds that many pods to the PDB's expected and healthy counts. The answer
// is in replicas, at most MaxSurge of them; perReplica is bounded by the caller.
func SurgeNeededPer(pdb *policyv1.PodDisruptionBudget, perReplica int32) (int32, string) {
	perReplica = max(perReplica, 1)
	if pdb.Spec.MaxUnavailable != nil {
		return 0, ReasonMaxUnavailable
	}
	healthy, expected := pdb.Status.CurrentHealthy, pdb.Status.ExpectedPods
	minAvail := pdb.Spec.MinAvailable
	if minAvail == nil {
		// Neither field set: the API server defaults minAvailable to 1.
		one := intstr.FromInt32(1)
		minAvail = &one
	}
	for d := int32(1); d <= MaxSurge; d++ {
		if pods := d * perReplica; healthy+pods-desiredHealthy(minAvail, expected+pods) >= 1 {
			return d, ""
		}
		if minAvail.Type == intstr.String && isFull(minAvail) {
			return 0, ReasonFullMinAvailable
		}
	}
	return 0, ReasonTooManyReplicas
}

func isFull(v *intstr.IntOrString) bool {
	n, err := intstr.GetScaledValueFromIntOrPercent(v, 100, true)
	return err == nil && n >= 100
}

// desiredHealthy mirrors the disruption controller: a percentage of the expected pods, rounded up.
func desiredHealthy(minAvailable *intstr.IntOrString, expected int32) int32 {
	if minAvailable.Type == intstr.Int {
		return minAvailable.IntVal
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(minAvailable, int(expected), true)
	if err != nil {
		return math.MaxInt32
	}
	return int32(n)
}
