package guardian

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// fakeStallReader answers ObserveStalls from maps and counts what it was asked, by pod (or PDB) name.
type fakeStallReader struct {
	namespaces map[string]*corev1.Namespace
	// owners are the owners by controller UID; a pod whose controller is not listed fails to resolve.
	owners map[types.UID]Owner
	surges map[string]*v1alpha1.Surge // by target name
	pods   []*podinfo.Pod             // answered for any group
	behind bool

	ownerReads, groupReads, pdbReads map[string]int
	surgeReads                       int
}

func newFakeStallReader(namespaces ...*corev1.Namespace) *fakeStallReader {
	r := &fakeStallReader{namespaces: map[string]*corev1.Namespace{}, owners: map[types.UID]Owner{}, surges: map[string]*v1alpha1.Surge{},
		ownerReads: map[string]int{}, groupReads: map[string]int{}, pdbReads: map[string]int{}}
	for _, ns := range namespaces {
		r.namespaces[ns.Name] = ns
	}
	return r
}

func (r *fakeStallReader) Namespace(name string) *corev1.Namespace { return r.namespaces[name] }

func (r *fakeStallReader) Owner(pod *podinfo.Pod) Owner {
	r.ownerReads[pod.Name]++
	if o, ok := r.owners[WorkloadOf(pod)]; ok {
		return o
	}
	return Owner{Err: errors.New("not in the cache")}
}

func (r *fakeStallReader) Surge(t *workload.Target) *v1alpha1.Surge {
	r.surgeReads++
	return r.surges[t.Ref.Name]
}

func (r *fakeStallReader) GroupPods(pod *podinfo.Pod, _ Owner) []*podinfo.Pod {
	r.groupReads[pod.Name]++
	return r.pods
}

func (r *fakeStallReader) PDBStatusBehind(pdb *policyv1.PodDisruptionBudget) bool {
	r.pdbReads[pdb.Name]++
	return r.behind
}

// deploymentOwner makes the Deployment name (ReplicaSet name-rs, UID name-rs) an owner r knows.
func (r *fakeStallReader) deploymentOwner(namespace, name string) Owner {
	dep := workload.Ref{Kind: workload.KindDeployment, Namespace: namespace, Name: name, UID: types.UID(name)}
	o := Owner{Target: &workload.Target{Ref: dep, PodOwner: dep}, Object: &workload.Object{Ref: dep, Meta: &metav1.ObjectMeta{Name: name}},
		PodOwner: &workload.PodOwnerState{UID: types.UID(name), Replicas: 2}}
	r.owners[types.UID(name+"-rs")] = o
	return o
}

// blockedPod is a pod of namespace whose controller is the ReplicaSet rs, blocked by pdb.
func blockedPod(namespace, name, rs, pdb string) blocking.Blocked {
	p := podinfo.From(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(name),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: types.UID(rs), Controller: ptr.To(true)}}}})
	return blocking.Blocked{Pod: p, PDB: &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: pdb, Namespace: namespace}}}
}

func namespaceOf(name string, lbls map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
}

func TestObserveStallsReadsAWorkloadOnce(t *testing.T) {
	r := newFakeStallReader(namespaceOf("models", nil))
	web := r.deploymentOwner("models", "web")
	r.deploymentOwner("models", "db")
	r.surges["web"] = &v1alpha1.Surge{ObjectMeta: metav1.ObjectMeta{Name: "web-surge", Namespace: "models"}}
	blocked := []blocking.Blocked{blockedPod("models", "web-a", "web-rs", "web"), blockedPod("models", "db-a", "db-rs", "db"),
		blockedPod("models", "web-b", "web-rs", "web")}

	stalls := ObserveStalls(StallConfig{}, true, blocked, r)

	if len(stalls) != 3 || stalls[0].Pod.Name != "web-a" || stalls[1].Pod.Name != "db-a" || stalls[2].Pod.Name != "web-b" {
		t.Fatalf("stalls = %+v, want one per blocked pod, in their order", stalls)
	}
	if r.ownerReads["web-a"] != 1 || r.ownerReads["web-b"] != 0 || r.ownerReads["db-a"] != 1 || r.surgeReads != 2 {
		t.Errorf("owner reads %v, Surge reads %d: want each workload read once", r.ownerReads, r.surgeReads)
	}
	if stalls[2].Owner.Target != web.Target || stalls[2].Existing == nil || stalls[2].Existing.Name != "web-surge" {
		t.Errorf("the second pod of web got owner %+v and Surge %v, want those read for the first", stalls[2].Owner, stalls[2].Existing)
	}
	if stalls[1].Existing != nil {
		t.Errorf("db has no Surge, got %v", stalls[1].Existing)
	}
}

func TestObserveStallsLeavesOutOfScopeOwnersUnread(t *testing.T) {
	r := newFakeStallReader(namespaceOf("models", map[string]string{"team": "ai"}), namespaceOf("other", nil))
	r.deploymentOwner("models", "web")
	r.deploymentOwner("other", "api")
	r.deploymentOwner("gone", "old")
	cfg := StallConfig{NamespaceSelector: labels.SelectorFromSet(labels.Set{"team": "ai"})}
	blocked := []blocking.Blocked{blockedPod("models", "web-a", "web-rs", "web"), blockedPod("other", "api-a", "api-rs", "api"),
		blockedPod("gone", "old-a", "old-rs", "old")}

	stalls := ObserveStalls(cfg, true, blocked, r)

	if r.ownerReads["web-a"] != 1 || r.ownerReads["api-a"] != 0 || r.ownerReads["old-a"] != 0 || r.surgeReads != 1 || len(r.pdbReads) != 1 {
		t.Errorf("owner reads %v, Surge reads %d, PDB reads %v: want only the in-scope pod's owner read", r.ownerReads, r.surgeReads, r.pdbReads)
	}
	ds := DecideStalls(cfg, Wave{Node: "w1", PoolSelected: true, Stalls: stalls, Ledger: NewLedger(capacity.New(nil, capacity.Standard(nil)...), nil)})
	if !ds[0].InScope {
		t.Errorf("web-a: %s (%s), want it in scope", ds[0].Reason, ds[0].Detail)
	}
	for _, d := range ds[1:] {
		if d.Reason != StallOutOfScope {
			t.Errorf("%s: %s (%s), want it reported out of scope", d.Regarding.Name, d.Reason, d.Detail)
		}
	}

	r = newFakeStallReader(namespaceOf("models", nil))
	r.deploymentOwner("models", "web")
	ObserveStalls(StallConfig{}, false, blocked[:1], r)
	if len(r.ownerReads) != 0 {
		t.Errorf("a pool that does not match --pool-selector had its owners read: %v", r.ownerReads)
	}
}

func TestObserveStallsAsksPDBStatusOnlyOfOneBudget(t *testing.T) {
	r := newFakeStallReader(namespaceOf("models", nil))
	r.behind = true
	r.deploymentOwner("models", "web")
	r.deploymentOwner("models", "db")
	multiple := blockedPod("models", "db-a", "db-rs", "db-shared")
	multiple.MultiplePDBs = true
	blocked := []blocking.Blocked{blockedPod("models", "web-a", "web-rs", "web"), multiple}

	stalls := ObserveStalls(StallConfig{}, true, blocked, r)

	if !stalls[0].PDBStatusBehind {
		t.Error("the status of web's PDB lags behind its pods, the stall does not say so")
	}
	if stalls[1].PDBStatusBehind || r.pdbReads["db-shared"] != 0 {
		t.Errorf("a pod several PDBs select: status behind %v, asked %d times; want never asked", stalls[1].PDBStatusBehind, r.pdbReads["db-shared"])
	}
}

func TestObserveStallsReadsGroupPodsOnlyForAGroup(t *testing.T) {
	c := newGroupCluster()
	r := newFakeStallReader(c.ns)
	r.owners[WorkloadOf(c.leader)] = c.owner
	r.deploymentOwner("models", "web")
	r.pods = []*podinfo.Pod{c.leader, c.worker}
	blocked := []blocking.Blocked{{Pod: c.leader, PDB: c.pdb}, blockedPod("models", "web-a", "web-rs", "web"),
		blockedPod("models", "uncached-a", "uncached-rs", "uncached")}

	stalls := ObserveStalls(StallConfig{}, true, blocked, r)

	if stalls[0].Group == nil || len(stalls[0].Group.Pods) != 2 {
		t.Fatalf("the LeaderWorkerSet's stall has group %+v, want a group of 2 pods", stalls[0].Group)
	}
	if stalls[1].Group != nil || stalls[2].Group != nil {
		t.Errorf("a Deployment's replica is one pod, and an owner not read has none: groups %+v, %+v", stalls[1].Group, stalls[2].Group)
	}
	if r.groupReads[c.leader.Name] != 1 || len(r.groupReads) != 1 {
		t.Errorf("group pods read for %v, want only the group's", r.groupReads)
	}
	if r.surgeReads != 2 || stalls[2].Owner.Err == nil {
		t.Errorf("Surge read %d times, owner error %v: an owner that could not be read has no Surge looked up", r.surgeReads, stalls[2].Owner.Err)
	}
}
