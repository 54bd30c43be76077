package guardian

import (
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// StallReader is what observing a node's stalls reads: the daemon answers from its listers and
// workload store, `check` from its snapshot.
type StallReader interface {
	// Namespace returns the namespace of that name; nil when it cannot be read.
	Namespace(name string) *corev1.Namespace
	// Owner reads the pod's owner chain (see workload.Observe).
	Owner(pod *podinfo.Pod) Owner
	// Surge returns the Surge of the target, of any phase; nil when it has none or Surges are not known.
	Surge(t *workload.Target) *v1alpha1.Surge
	// GroupPods returns the pods of the multi-node workload o that owns pod; GroupOf takes the model
	// of a group from them.
	GroupPods(pod *podinfo.Pod, o Owner) []*podinfo.Pod
	// PDBStatusBehind reports whether the PDB's status counts fewer healthy pods than the reader
	// holds; `check` answers false, as a prediction does not wait for a status to catch up.
	PDBStatusBehind(pdb *policyv1.PodDisruptionBudget) bool
}

// ObserveStalls reads, once, what DecideStalls needs about a node's blocked pods, in their order.
// Owners of pods outside the guardian's scope (see Scope; poolSelected is whether the node's pool
// matches --pool-selector) are not read; several blocked pods of one workload (one controller) are
// read once and share what was read.
func ObserveStalls(cfg StallConfig, poolSelected bool, blocked []blocking.Blocked, r StallReader) []Stall {
	out := make([]Stall, 0, len(blocked))
	seen := map[types.UID]Stall{}
	for _, b := range blocked {
		st := Stall{Blocked: b, Namespace: r.Namespace(b.Pod.Namespace)}
		if reason, _ := Scope(cfg, poolSelected, st.Namespace, b.Pod.Namespace); reason == StallNone {
			observeOwner(&st, seen, r)
		}
		out = append(out, st)
	}
	return out
}

// observeOwner reads the stall's PDB status lag, owner, existing Surge and, for a multi-node
// workload, its group; seen holds what was read for the workload's earlier pods.
func observeOwner(st *Stall, seen map[types.UID]Stall, r StallReader) {
	owner := WorkloadOf(st.Pod)
	if prev, ok := seen[owner]; ok && owner != "" {
		st.PDBStatusBehind, st.Owner, st.Existing, st.Group = prev.PDBStatusBehind, prev.Owner, prev.Existing, prev.Group
		return
	}
	// A pod several PDBs select is unresolvable whatever their status: no need to read it.
	st.PDBStatusBehind = !st.MultiplePDBs && r.PDBStatusBehind(st.PDB)
	st.Owner = r.Owner(st.Pod)
	if st.Owner.Err == nil {
		st.Existing = r.Surge(st.Owner.Target)
		if st.Owner.PodOwner.GroupSize > 0 {
			st.Group = GroupOf(st.Owner, st.Pod, r.GroupPods(st.Pod, st.Owner))
		}
	}
	if owner != "" {
		seen[owner] = *st
	}
}
