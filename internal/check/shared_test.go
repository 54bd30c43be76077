package check

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// These tests pin the answers `check` used to give differently from the daemon; both now call
// guardian.DecideStalls.

// flakyOwners answers the pod-owner read of one workload with a transient error, as a cache miss or
// a timeout would.
type flakyOwners struct {
	Workloads
	name string
}

func (f flakyOwners) PodOwner(ref workload.Ref) (*workload.PodOwnerState, error) {
	if ref.Name == f.name {
		return nil, errors.New("the server was unable to return a response in the time allotted")
	}
	return f.Workloads.PodOwner(ref)
}

// A transient error reading an owner is no verdict on the owner: unknown, not unsupported-owner
// (which made the daemon's periodic prediction raise a false UpdateWillStall).
func TestTransientOwnerErrorIsUnknown(t *testing.T) {
	cl := mixed(t).build()
	cl.Workloads = flakyOwners{Workloads: cl.Workloads, name: "web"}
	b := block(t, Analyze(cl, Config{}), "web")
	if b.Verdict != Unknown || b.Verdict.Resolvable() {
		t.Fatalf("web: %s (%s), want %s", b.Verdict, b.Detail, Unknown)
	}
	if !strings.Contains(b.Detail, "looking again") {
		t.Errorf("web: detail %q does not say it is looked at again", b.Detail)
	}
}

// `check` reads the Surges: a workload with a Surge in flight is served by it; one whose Surge
// failed for this very update (the pool is updating to rendered-2) is not surged again; a Failed
// Surge of an earlier update is replaced.
func TestExistingSurges(t *testing.T) {
	surges := map[string]*v1alpha1.Surge{
		"web": {ObjectMeta: metav1.ObjectMeta{Name: "deployment-web"}, Status: v1alpha1.SurgeStatus{Phase: v1alpha1.PhaseSurged},
			Spec: v1alpha1.SurgeSpec{Delta: 1, Fields: []v1alpha1.Field{{Path: "/spec/replicas", Original: ptr.To[int64](1), Set: 2}}}},
		"granite": {ObjectMeta: metav1.ObjectMeta{Name: "inferenceservice-granite"}, Spec: v1alpha1.SurgeSpec{Node: "gpu-a", Drain: "rendered-2"},
			Status: v1alpha1.SurgeStatus{Phase: v1alpha1.PhaseFailed, Reason: "ReadyTimeout", Message: "not Ready in 30m"}},
		"db": {ObjectMeta: metav1.ObjectMeta{Name: "statefulset-db"}, Spec: v1alpha1.SurgeSpec{Node: "cpu-c", Drain: "rendered-0"},
			Status: v1alpha1.SurgeStatus{Phase: v1alpha1.PhaseFailed}},
	}
	c := mixed(t)
	c.snap.Pools[0].Spec.Configuration.Name = "rendered-2"
	for _, p := range c.snap.PDBs {
		if p.Name == "db" { // a satisfiable PDB: db would be surged but for its Surge
			p.Spec.MaxUnavailable, p.Spec.MinAvailable = nil, ptr.To(intstr.FromInt32(1))
		}
	}
	cl := c.build()
	cl.Surge = func(t *workload.Target) *v1alpha1.Surge { return surges[t.Ref.Name] }
	r := Analyze(cl, Config{})

	if web := block(t, r, "web"); web.Verdict != Resolvable || !strings.Contains(web.Detail, "deployment-web in flight") || len(web.Extra) != 0 {
		t.Errorf("web: %s %q extra %v, want resolvable by the Surge in flight, taking nothing more", web.Verdict, web.Detail, web.Extra)
	}
	if granite := block(t, r, "granite"); granite.Verdict != SurgeFailed || !strings.Contains(granite.Detail, "ReadyTimeout") {
		t.Errorf("granite: %s %q, want surge-failed saying why", granite.Verdict, granite.Detail)
	}
	// granite's failed surge takes no GPU: llama gets the free one.
	if llama := block(t, r, "llama"); llama.Verdict != ResolvableWithCapacity {
		t.Errorf("llama: %s (%s), want resolvable-with-capacity", llama.Verdict, llama.Detail)
	}
	if db := block(t, r, "db"); db.Verdict != Resolvable {
		t.Errorf("db: %s (%s), want resolvable: a Failed Surge of an earlier update is replaced", db.Verdict, db.Detail)
	}
}

// A stall whose replacements fit only in part books nothing: the daemon makes no Surge for it, so
// the room it could not use stays for the next stall (`check` used to book the part that fit).
func TestNoCapacityBooksNothing(t *testing.T) {
	c := newCluster(t)
	c.pool()
	c.node("gpu-a", 4)
	c.node("spare", 1)
	c.snap.Nodes[1].Labels = map[string]string{"kubernetes.io/hostname": "spare"} // in no pool
	c.deployment("big", "gpu-a", 1, nil)
	c.snap.PDBs[len(c.snap.PDBs)-1].Spec.MinAvailable = ptr.To(intstr.FromInt32(2)) // a surge of 2, one fits
	c.deployment("small", "gpu-a", 1, nil)
	r := Analyze(c.build(), Config{})
	if big := block(t, r, "big"); big.Verdict != NoCapacity || big.Missing["nvidia.com/gpu"] != "1" {
		t.Fatalf("big: %s missing %v, want no-capacity missing 1 GPU", big.Verdict, big.Missing)
	}
	if small := block(t, r, "small"); small.Verdict != ResolvableWithCapacity {
		t.Fatalf("small: %s (%s), want resolvable-with-capacity on the GPU big could not use", small.Verdict, small.Detail)
	}
}
