package guardian

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	appslisters "k8s.io/client-go/listers/apps/v1"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

const gpu = corev1.ResourceName("nvidia.com/gpu")

// t0 is the time the fairness cases count waiting from.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fixture is a cluster of GPU nodes and one-replica Deployments, each with one pod on w1 guarded by
// a minAvailable-1 PDB: every pod blocks w1's drain.
type fixture struct {
	t     *testing.T
	nodes []*corev1.Node
	deps  cache.Indexer
	rss   cache.Indexer
	pods  map[string]*podinfo.Pod
	pdbs  map[string]*policyv1.PodDisruptionBudget
	ns    *corev1.Namespace
}

func newFixture(t *testing.T) *fixture {
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	return &fixture{t: t, deps: idx(), rss: idx(), pods: map[string]*podinfo.Pod{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		ns: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "models", Labels: map[string]string{"team": "ai"}}}}
}

func (f *fixture) node(name string, gpus int64) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"),
				gpu: *resource.NewQuantity(gpus, resource.DecimalSI)},
		},
	}
	f.nodes = append(f.nodes, n)
	return n
}

// deployment adds a Deployment of replicas (one pod on w1 per replica, each requesting gpus) and a
// PDB over it allowing no disruption.
func (f *fixture) deployment(name string, replicas int32, gpus int64) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "models", UID: types.UID(name)},
		Spec:   appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
		Status: appsv1.DeploymentStatus{Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: replicas}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name + "-rs", Namespace: "models", UID: types.UID(name + "-rs"),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: d.UID, Controller: ptr.To(true)}}}}
	if err := f.deps.Add(d); err != nil {
		f.t.Fatal(err)
	}
	if err := f.rss.Add(rs); err != nil {
		f.t.Fatal(err)
	}
	for i := range replicas {
		p := podinfo.From(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + string(rune('a'+i)), Namespace: "models", UID: types.UID(name + string(rune('a'+i))),
				Labels:          map[string]string{"app": name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: "w1", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{gpu: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
		f.pods[p.Name] = p
	}
	f.pdbs[name] = &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "models"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
		Status: policyv1.PodDisruptionBudgetStatus{CurrentHealthy: replicas, DesiredHealthy: replicas, ExpectedPods: replicas}}
}

func (f *fixture) store() *workload.Store {
	return &workload.Store{
		ReplicaSets: workload.MetadataIndex{Indexer: f.rss, Resource: appsv1.Resource("replicasets")},
		Deployments: appslisters.NewDeploymentLister(f.deps),
		HPAs:        autoscalinglisters.NewHorizontalPodAutoscalerLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})),
	}
}

// stall observes the pod the way the controller and `check` do.
func (f *fixture) stall(pod, pdb string) Stall {
	p := f.pods[pod]
	st := Stall{Blocked: blocking.Blocked{Pod: p, PDB: f.pdbs[pdb]}, Namespace: f.ns}
	st.Owner = workload.Observe(f.store(), p)
	return st
}

func (f *fixture) ledger() *Ledger {
	var cands []capacity.Candidate
	for _, n := range f.nodes {
		var on []*podinfo.Pod
		for _, p := range f.pods {
			if p.Spec.NodeName == n.Name {
				on = append(on, p)
			}
		}
		cands = append(cands, capacity.Candidate{Node: n, Pods: on})
	}
	return NewLedger(capacity.New(cands, capacity.Standard(nil)...), nil)
}

func (f *fixture) wave(stalls ...Stall) Wave {
	return Wave{Node: "w1", Drain: NodeDrain{Trigger: TriggerMCODrain, Drain: "rendered-2"}, PoolSelected: true, Stalls: stalls, Ledger: f.ledger()}
}

// gpuCluster: w1 (cordoned, drained) runs the models; w2 has one free GPU.
func gpuCluster(t *testing.T) *fixture {
	f := newFixture(t)
	f.node("w1", 8).Spec.Unschedulable = true
	f.node("w2", 1)
	f.deployment("llama", 1, 1)
	f.deployment("granite", 1, 1)
	return f
}

func surge(name, node, drain string, phase v1alpha1.Phase) *v1alpha1.Surge {
	return &v1alpha1.Surge{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "models"},
		Spec:   v1alpha1.SurgeSpec{Node: node, Drain: drain},
		Status: v1alpha1.SurgeStatus{Phase: phase, Reason: "Unschedulable"}}
}

func TestDecideStallsOutcomes(t *testing.T) {
	transient := errors.New("connection refused")
	tests := []struct {
		name    string
		cfg     StallConfig
		mutate  func(*fixture, *Wave)
		outcome Outcome
		reason  StallReason
		detail  string
		inScope bool
	}{
		{name: "surge", outcome: OutcomeSurge, inScope: true},
		{name: "pool out of scope", mutate: func(_ *fixture, w *Wave) { w.PoolSelected = false }, outcome: OutcomeIgnore, reason: StallOutOfScope, detail: "--pool-selector"},
		{name: "namespace unreadable", mutate: func(_ *fixture, w *Wave) { w.Stalls[0].Namespace = nil }, outcome: OutcomeIgnore, reason: StallOutOfScope, detail: "not readable"},
		{name: "namespace not selected", cfg: StallConfig{NamespaceSelector: labels.SelectorFromSet(labels.Set{"team": "web"})},
			outcome: OutcomeIgnore, reason: StallOutOfScope, detail: "--namespace-selector"},
		{name: "namespace opted out", mutate: func(f *fixture, _ *Wave) { f.ns.Annotations = map[string]string{workload.IgnoreAnnotation: "true"} },
			outcome: OutcomeIgnore, reason: StallOptedOut, detail: "namespace models"},
		{name: "namespace opt-out takes only true", mutate: func(f *fixture, _ *Wave) { f.ns.Annotations = map[string]string{workload.IgnoreAnnotation: "yes"} },
			outcome: OutcomeSurge, inScope: true},
		{name: "workload opted out", mutate: func(_ *fixture, w *Wave) {
			w.Stalls[0].Owner.Object.Meta.SetAnnotations(map[string]string{workload.IgnoreAnnotation: "true"})
		}, outcome: OutcomeIgnore, reason: StallOptedOut, detail: "Deployment", inScope: true},
		{name: "PDB status behind", mutate: func(_ *fixture, w *Wave) { w.Stalls[0].PDBStatusBehind = true },
			outcome: OutcomeDefer, reason: StallPDBStatusBehind, inScope: true},
		{name: "unsupported owner", mutate: func(_ *fixture, w *Wave) {
			w.Stalls[0].Owner = Owner{Err: &workload.UnsupportedError{Detail: "a bare pod has no owner to scale"}}
		}, outcome: OutcomeUnresolvable, reason: StallUnsupportedOwner, detail: "bare pod", inScope: true},
		{name: "owner API not served", mutate: func(_ *fixture, w *Wave) {
			w.Stalls[0].Owner = Owner{Err: &workload.NotServedError{Kind: workload.KindInferenceService}}
		}, outcome: OutcomeUnresolvable, reason: StallUnsupportedOwner, detail: "does not serve", inScope: true},
		// Formerly UnsupportedOwner in the daemon: the answer is a missing permission.
		{name: "forbidden /scale", mutate: func(_ *fixture, w *Wave) {
			w.Stalls[0].Owner = Owner{Target: &workload.Target{Ref: workload.Ref{Kind: "Rollout", Name: "canary", APIVersion: "argoproj.io/v1alpha1", Resource: "rollouts"}},
				Err: apierrors.NewForbidden(schema.GroupResource{Resource: "rollouts/scale"}, "canary", nil)}
		}, outcome: OutcomeUnresolvable, reason: StallMissingRBAC, detail: `grant get and patch on rollouts/scale in API group "argoproj.io"`, inScope: true},
		// Formerly UnsupportedOwner in `check`: a transient error is no verdict on the owner.
		{name: "transient owner error", mutate: func(_ *fixture, w *Wave) { w.Stalls[0].Owner = Owner{Err: transient} },
			outcome: OutcomeDefer, reason: StallUnknown, detail: "connection refused", inScope: true},
		{name: "owner cache miss", mutate: func(_ *fixture, w *Wave) {
			w.Stalls[0].Owner = Owner{Err: apierrors.NewNotFound(appsv1.Resource("replicasets"), "llama-rs")}
		}, outcome: OutcomeDefer, reason: StallUnknown, inScope: true},
		// Formerly UnsatisfiablePDB in the daemon and multiple-pdbs in `check`: one reason, whose Event
		// stays UnsatisfiablePDB.
		{name: "multiple PDBs", mutate: func(_ *fixture, w *Wave) { w.Stalls[0].MultiplePDBs = true },
			outcome: OutcomeUnresolvable, reason: StallMultiplePDBs, detail: "more than one PDB", inScope: true},
		{name: "multiple PDBs are no status lag", mutate: func(_ *fixture, w *Wave) { w.Stalls[0].MultiplePDBs, w.Stalls[0].PDBStatusBehind = true, true },
			outcome: OutcomeUnresolvable, reason: StallMultiplePDBs, inScope: true},
		{name: "maxUnavailable 0", mutate: func(_ *fixture, w *Wave) {
			w.Stalls[0].PDB = &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "llama"},
				Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
		}, outcome: OutcomeUnresolvable, reason: StallUnsatisfiablePDB, detail: "maxUnavailable 0", inScope: true},
		{name: "active Surge covers", mutate: func(_ *fixture, w *Wave) { w.Stalls[0].Existing = surge("s", "w0", "x", v1alpha1.PhaseReady) },
			outcome: OutcomeCovered, inScope: true},
		{name: "failed Surge of this drain", mutate: func(_ *fixture, w *Wave) { w.Stalls[0].Existing = surge("s", "w1", "rendered-2", v1alpha1.PhaseFailed) },
			outcome: OutcomeUnresolvable, reason: StallSurgeFailed, detail: "Unschedulable", inScope: true},
		{name: "failed Surge of an earlier drain", mutate: func(_ *fixture, w *Wave) { w.Stalls[0].Existing = surge("s", "w1", "rendered-1", v1alpha1.PhaseFailed) },
			outcome: OutcomeCleanup, inScope: true},
		{name: "predicting: a failed Surge of an earlier drain is gone", cfg: StallConfig{Predicting: true},
			mutate:  func(_ *fixture, w *Wave) { w.Stalls[0].Existing = surge("s", "w1", "rendered-1", v1alpha1.PhaseFailed) },
			outcome: OutcomeSurge, inScope: true},
		{name: "no capacity", mutate: func(f *fixture, w *Wave) {
			f.nodes[1].Status.Allocatable[gpu] = resource.MustParse("0")
			w.Ledger = f.ledger()
		},
			outcome: OutcomeDefer, reason: StallNoCapacity, detail: "missing 1 nvidia.com/gpu", inScope: true},
		{name: "concurrency limit", cfg: StallConfig{MaxInFlight: 2}, mutate: func(_ *fixture, w *Wave) { w.InFlight = 2 },
			outcome: OutcomeDefer, reason: StallDeferred, detail: "--max-concurrent-surges=2", inScope: true},
		{name: "below the concurrency limit", cfg: StallConfig{MaxInFlight: 2}, mutate: func(_ *fixture, w *Wave) { w.InFlight = 1 },
			outcome: OutcomeSurge, inScope: true},
		// A one-replica workload under minAvailable: 90% needs nine more replicas: a tenant's budget must
		// not hand it nine GPUs.
		{name: "surge too large", cfg: StallConfig{MaxSurgeReplicas: 2}, mutate: func(_ *fixture, w *Wave) {
			w.Stalls[0].PDB = &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "llama"},
				Spec:   policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromString("90%"))},
				Status: policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}}
		}, outcome: OutcomeUnresolvable, reason: StallSurgeTooLarge, detail: "9 added replicas, more than --max-surge-replicas=2", inScope: true},
		{name: "surge within --max-surge-replicas", cfg: StallConfig{MaxSurgeReplicas: 1}, outcome: OutcomeSurge, inScope: true},
		// A count below what runs (an HPA's minimum while it runs more): the write would change it by
		// more than the admission policy allows.
		{name: "write beyond --max-surge-replicas", cfg: StallConfig{MaxSurgeReplicas: 2}, mutate: func(_ *fixture, w *Wave) {
			w.Stalls[0].Owner.PodOwner.Replicas = 3
			w.Stalls[0].Owner.PodOwner.StatusReplicas, w.Stalls[0].Owner.PodOwner.UpdatedReplicas, w.Stalls[0].Owner.PodOwner.ReadyReplicas = 3, 3, 3
			w.Stalls[0].Owner.Object.Content["spec"].(map[string]any)["replicas"] = int64(1)
		}, outcome: OutcomeUnresolvable, reason: StallSurgeTooLarge, detail: "from 1 to 4 changes it by 3", inScope: true},
		{name: "restore below 1", mutate: func(_ *fixture, w *Wave) {
			w.Stalls[0].Owner.Object.Content["spec"].(map[string]any)["replicas"] = int64(0)
		}, outcome: OutcomeUnresolvable, reason: StallUnsupportedOwner, detail: "below 1", inScope: true},
		{name: "namespace at its limit", cfg: StallConfig{MaxInFlight: 3, MaxInFlightPerNamespace: 2}, mutate: func(_ *fixture, w *Wave) {
			w.InFlight, w.InFlightByNamespace = 2, map[string]int{"models": 2}
		}, outcome: OutcomeDefer, reason: StallDeferred, detail: "--max-concurrent-surges-per-namespace=2", inScope: true},
		// One team's models with nobody else waiting use every slot their namespace may have.
		{name: "namespace below its limit, nobody waiting", cfg: StallConfig{MaxInFlight: 3, MaxInFlightPerNamespace: 2}, mutate: func(_ *fixture, w *Wave) {
			w.InFlight, w.InFlightByNamespace = 1, map[string]int{"models": 1}
		}, outcome: OutcomeSurge, inScope: true},
		// The last free slot goes to the namespace with fewer surges in flight.
		{name: "free slot goes to a namespace with fewer in flight", cfg: StallConfig{MaxInFlight: 3}, mutate: func(_ *fixture, w *Wave) {
			w.InFlight, w.InFlightByNamespace = 2, map[string]int{"models": 2}
			w.Waiting = []WaitingStall{{Workload: "other", Namespace: "team-b", Since: t0.Add(time.Minute)}}
			w.Stalls[0].WaitingSince = t0
		}, outcome: OutcomeDefer, reason: StallDeferred, detail: "go first to 1 stall(s)", inScope: true},
		// With as many in flight, the stall that waited longest goes first.
		{name: "free slot goes to the oldest stall", cfg: StallConfig{MaxInFlight: 3}, mutate: func(_ *fixture, w *Wave) {
			w.InFlight, w.InFlightByNamespace = 2, map[string]int{"models": 1, "team-b": 1}
			w.Waiting = []WaitingStall{{Workload: "other", Namespace: "team-b", Since: t0.Add(time.Minute)}}
			w.Stalls[0].WaitingSince = t0
		}, outcome: OutcomeSurge, inScope: true},
		{name: "a stall waiting for its own namespace's limit takes no free slot", cfg: StallConfig{MaxInFlight: 3, MaxInFlightPerNamespace: 1}, mutate: func(_ *fixture, w *Wave) {
			w.InFlight, w.InFlightByNamespace = 1, map[string]int{"team-b": 1}
			w.Waiting = []WaitingStall{{Workload: "other", Namespace: "team-b", Since: t0}}
		}, outcome: OutcomeSurge, inScope: true},
		// A tenant's 2000000000 replicas held at one pod by a quota: the added replica would never come.
		{name: "not steady: replicas wanted but not running", mutate: func(_ *fixture, w *Wave) {
			w.Stalls[0].Owner.PodOwner.Replicas = 2000000000
		}, outcome: OutcomeDefer, reason: StallNotSteady, detail: "2000000000 replicas wanted, 1 running", inScope: true},
		{name: "not steady: rollout in progress", mutate: func(_ *fixture, w *Wave) { w.Stalls[0].Owner.PodOwner.UpdatedReplicas = 0 },
			outcome: OutcomeDefer, reason: StallNotSteady, detail: "rollout", inScope: true},
		{name: "not steady: replica not Ready", mutate: func(_ *fixture, w *Wave) { w.Stalls[0].Owner.PodOwner.ReadyReplicas = 0 },
			outcome: OutcomeDefer, reason: StallNotSteady, detail: "1 replicas wanted, 0 Ready", inScope: true},
		{name: "not steady: spec not observed yet", mutate: func(_ *fixture, w *Wave) { w.Stalls[0].Owner.PodOwner.Generation = 3 },
			outcome: OutcomeDefer, reason: StallNotSteady, detail: "latest spec", inScope: true},
		// An active Surge makes its workload unsettled: it still covers the stall.
		{name: "a Surge in flight covers an unsettled workload", mutate: func(_ *fixture, w *Wave) {
			w.Stalls[0].Owner.PodOwner.Replicas = 2
			w.Stalls[0].Existing = surge("s", "w1", "rendered-2", v1alpha1.PhaseSurged)
		}, outcome: OutcomeCovered, inScope: true},
		{name: "look-ahead without room", mutate: func(_ *fixture, w *Wave) { w.Drain.Trigger = TriggerMCOPredicted },
			outcome: OutcomeDefer, reason: StallLookaheadSkipped, inScope: true},
		{name: "look-ahead while capacity is wanted", mutate: func(_ *fixture, w *Wave) {
			w.Drain.Trigger, w.Lookahead = TriggerMCOPredicted, &Lookahead{CapacityWanted: true}
		}, outcome: OutcomeDefer, reason: StallLookaheadSkipped, inScope: true},
		{name: "look-ahead only on nodes not drained again", mutate: func(_ *fixture, w *Wave) {
			w.Drain.Trigger, w.Lookahead = TriggerMCOPredicted, &Lookahead{WillNotDrain: func(n *corev1.Node) bool { return n.Name != "w2" }}
		}, outcome: OutcomeDefer, reason: StallLookaheadSkipped, inScope: true},
		{name: "look-ahead after the unserved stalls", mutate: func(f *fixture, w *Wave) {
			w.Drain.Trigger, w.Lookahead = TriggerMCOPredicted, &Lookahead{Unserved: []*podinfo.Pod{f.pods["granite-a"]}}
		}, outcome: OutcomeDefer, reason: StallLookaheadSkipped, inScope: true},
		{name: "look-ahead never takes the last slot", cfg: StallConfig{MaxInFlight: 2}, mutate: func(_ *fixture, w *Wave) {
			w.Drain.Trigger, w.Lookahead, w.InFlight = TriggerMCOPredicted, &Lookahead{}, 1
		}, outcome: OutcomeDefer, reason: StallLookaheadSkipped, detail: "last surge slot", inScope: true},
		{name: "look-ahead with spare room", cfg: StallConfig{MaxInFlight: 3}, mutate: func(_ *fixture, w *Wave) {
			w.Drain.Trigger, w.Lookahead, w.InFlight = TriggerMCOPredicted, &Lookahead{}, 1
		}, outcome: OutcomeSurge, inScope: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := gpuCluster(t)
			w := f.wave(f.stall("llama-a", "llama"))
			if tt.mutate != nil {
				tt.mutate(f, &w)
			}
			d := DecideStalls(tt.cfg, w)[0]
			if d.Outcome != tt.outcome || d.Reason != tt.reason || d.InScope != tt.inScope {
				t.Fatalf("decision = outcome %d reason %q inScope %v (%s), want outcome %d reason %q inScope %v",
					d.Outcome, d.Reason, d.InScope, d.Detail, tt.outcome, tt.reason, tt.inScope)
			}
			if !strings.Contains(d.Detail, tt.detail) {
				t.Errorf("detail %q does not say %q", d.Detail, tt.detail)
			}
			if d.Outcome == OutcomeDefer && d.Reason != StallUnknown && d.RetryAfter <= 0 {
				t.Error("a deferred stall must be looked at again")
			}
			if booked := len(w.Ledger.Booked()); (d.Outcome == OutcomeSurge) != (booked == int(d.Delta) && booked > 0) {
				t.Errorf("outcome %d booked %d replacement(s) for a delta of %d", d.Outcome, booked, d.Delta)
			}
		})
	}
}

func TestDecideStallsSurgePlan(t *testing.T) {
	f := gpuCluster(t)
	d := DecideStalls(StallConfig{}, f.wave(f.stall("llama-a", "llama")))[0]
	if d.Outcome != OutcomeSurge || d.Delta != 1 || len(d.Fields) != 1 || d.Fields[0].Path != "/spec/replicas" || d.Fields[0].Set != 2 {
		t.Fatalf("decision = %+v, want spec.replicas 1 → 2", d)
	}
	if d.Target == nil || d.Target.Ref.Name != "llama" || d.Regarding.Kind != "Deployment" {
		t.Errorf("decision regards %v (target %v), want Deployment llama", d.Regarding, d.Target)
	}
}

// Two stalls of one wave compete for w2's one free GPU: the first books it, the second is NoCapacity.
func TestDecideStallsBooksTheLedger(t *testing.T) {
	f := gpuCluster(t)
	ds := DecideStalls(StallConfig{}, f.wave(f.stall("llama-a", "llama"), f.stall("granite-a", "granite")))
	if ds[0].Outcome != OutcomeSurge || ds[1].Reason != StallNoCapacity {
		t.Fatalf("decisions = %v / %v, want a surge then NoCapacity", ds[0].Reason, ds[1].Reason)
	}
	// The ledger is shared by the waves of one sync: the next wave sees the booking too.
	w := f.wave(f.stall("granite-a", "granite"))
	w.Ledger.Book(f.pods["llama-a"], 1)
	if d := DecideStalls(StallConfig{}, w)[0]; d.Reason != StallNoCapacity {
		t.Fatalf("second wave: %v, want NoCapacity", d.Reason)
	}
}

// A stall whose replacements fit only in part books nothing (`check` used to book the part that fit):
// no Surge is made for it, so the room stays for the next stall.
func TestDecideStallsNoCapacityBooksNothing(t *testing.T) {
	f := gpuCluster(t)
	f.deployment("big", 1, 1)
	f.pdbs["big"].Spec.MinAvailable = ptr.To(intstr.FromInt32(2)) // a surge of 2, one of which fits
	ds := DecideStalls(StallConfig{}, f.wave(f.stall("big-a", "big"), f.stall("llama-a", "llama")))
	if ds[0].Reason != StallNoCapacity || ds[0].Missing.Name(gpu, resource.DecimalSI).Value() != 1 {
		t.Fatalf("big: %v missing %v, want NoCapacity missing 1 GPU", ds[0].Reason, ds[0].Missing)
	}
	if ds[1].Outcome != OutcomeSurge {
		t.Fatalf("llama: %v (%s), want a surge on the GPU big could not use", ds[1].Reason, ds[1].Detail)
	}
}

// Several blocked pods of one workload are one stall, decided by the first.
func TestDecideStallsOneDecisionPerWorkload(t *testing.T) {
	f := newFixture(t)
	f.node("w1", 8)
	f.node("w2", 8)
	f.deployment("web", 2, 1)
	ds := DecideStalls(StallConfig{MaxInFlight: 1}, f.wave(f.stall("web-a", "web"), f.stall("web-b", "web")))
	if ds[0].Outcome != OutcomeSurge || ds[0].SameAs != -1 || ds[1].SameAs != 0 || ds[1].Outcome != OutcomeSurge {
		t.Fatalf("decisions = %+v / %+v, want one surge repeated for the second pod", ds[0], ds[1])
	}
	if n := len(f.ledger().Booked()); n != 0 {
		t.Fatalf("a fresh ledger has %d bookings", n)
	}
}

func TestStallReasonNames(t *testing.T) {
	verdicts := map[string]bool{}
	for r := range reasonTable {
		if r.String() == "" || verdicts[r.String()] {
			t.Errorf("reason %d has no verdict of its own: %q", r, r.String())
		}
		verdicts[r.String()] = true
		if r.Unresolvable() && r.EventReason() == "" {
			t.Errorf("unresolvable reason %s has no Event reason", r)
		}
	}
	for r, want := range map[StallReason]string{StallMultiplePDBs: ReasonUnsatisfiable, StallMissingRBAC: ReasonUnsupported, StallNoCapacity: ReasonNoCapacity} {
		if r.EventReason() != want {
			t.Errorf("%s: Event %q, want %q", r, r.EventReason(), want)
		}
	}
	if StallUnknown.Unresolvable() {
		t.Error("an owner that could not be read is not unresolvable")
	}
}
