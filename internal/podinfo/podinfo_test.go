package podinfo

import (
	"reflect"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// replica is the name-th replica of a GPU model's ReplicaSet, as the API returns it.
func replica(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "models", UID: types.UID("uid-" + name), ResourceVersion: "7", CreationTimestamp: metav1.NewTime(t0),
			Labels:          map[string]string{"app": "llm", "pod-template-hash": "5d8f7"},
			Annotations:     map[string]string{DeletionCostAnnotation: "-1000", "openshift.io/scc": "restricted-v2"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "llm-5d8f7", UID: "rs", Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName:     node,
			NodeSelector: map[string]string{"gpu": "a100"},
			Tolerations:  []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			InitContainers: []corev1.Container{{Name: "fetch", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("8")}}}},
			Containers: []corev1.Container{{Name: "server", Image: "vllm:latest", Env: []corev1.EnvVar{{Name: "HF_TOKEN", Value: "secret"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("4")}}}},
			Overhead: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastProbeTime: metav1.NewTime(t0), LastTransitionTime: metav1.NewTime(t0)},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			},
			PodIP: "10.128.2.17",
		},
	}
}

func TestFromKeepsWhatDecisionsRead(t *testing.T) {
	full := replica("llm-0", "w1")
	p := From(full)
	if p.Name != "llm-0" || p.Namespace != "models" || p.UID != full.UID || p.ResourceVersion != "7" || !p.CreationTimestamp.Equal(&full.CreationTimestamp) {
		t.Errorf("identity changed: %+v", p.ObjectMeta)
	}
	if !reflect.DeepEqual(p.Labels, full.Labels) || !reflect.DeepEqual(p.OwnerReferences, full.OwnerReferences) {
		t.Errorf("labels %v or owners %v changed", p.Labels, p.OwnerReferences)
	}
	if want := map[string]string{DeletionCostAnnotation: "-1000"}; !reflect.DeepEqual(p.Annotations, want) {
		t.Errorf("annotations = %v, want only the deletion cost", p.Annotations)
	}
	// The scheduler's sum: the init container's 8 CPUs exceed the containers' 4; overhead is added.
	want := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	if len(p.Spec.Requests) != len(want) {
		t.Fatalf("requests = %v, want %v", p.Spec.Requests, want)
	}
	for name, q := range want {
		if got := p.Spec.Requests[name]; got.Cmp(q) != 0 {
			t.Errorf("requests[%s] = %s, want %s", name, got.String(), q.String())
		}
	}
	if p.Spec.NodeName != "w1" || !reflect.DeepEqual(p.Spec.NodeSelector, full.Spec.NodeSelector) || !reflect.DeepEqual(p.Spec.Tolerations, full.Spec.Tolerations) {
		t.Errorf("scheduling changed: %+v", p.Spec)
	}
	if !p.Ready() || p.Finished() || p.Status.Phase != corev1.PodRunning {
		t.Errorf("status: ready %v finished %v phase %s", p.Ready(), p.Finished(), p.Status.Phase)
	}
	if p.Status.Unschedulable {
		t.Error("a scheduled pod reads as Unschedulable")
	}
	pending := replica("llm-1", "")
	pending.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(t0.Add(time.Minute))}}}
	if q := From(pending); !q.Status.Unschedulable || !q.Status.UnschedulableSince.Equal(&metav1.Time{Time: t0.Add(time.Minute)}) || q.Ready() {
		t.Errorf("an Unschedulable pod: %+v", q.Status)
	}
	ref := p.Ref()
	if ref.Kind != "Pod" || ref.Name != "llm-0" || ref.Namespace != "models" || ref.UID != full.UID {
		t.Errorf("Ref() = %+v", ref)
	}
}

// A pod's device claims are kept: which ones a replacement gets anew from a template and which it
// shares. Replicas of one template share them; a pod naming another claim has its own.
func TestFromKeepsResourceClaims(t *testing.T) {
	withClaims := func(name, claim string) *corev1.Pod {
		p := replica(name, "w1")
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{
			{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")},
			{Name: "cache", ResourceClaimName: ptr.To(claim)},
		}
		return p
	}
	a, b, c := From(withClaims("llm-0", "shared")), From(withClaims("llm-1", "shared")), From(withClaims("llm-2", "other"))
	if want := withClaims("x", "shared").Spec.ResourceClaims; !reflect.DeepEqual(a.Spec.ResourceClaims, want) {
		t.Errorf("claims = %+v, want %+v", a.Spec.ResourceClaims, want)
	}
	if a.Spec.Scheduling != b.Spec.Scheduling || a.Spec.Scheduling == c.Spec.Scheduling {
		t.Error("replicas with the same claims do not share them, or pods with different claims do")
	}
}

func TestMatchesNode(t *testing.T) {
	p := From(replica("llm-0", "w1"))
	a100 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"gpu": "a100"}}}
	h100 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h", Labels: map[string]string{"gpu": "h100"}}}
	if !p.Spec.MatchesNode(a100) || p.Spec.MatchesNode(h100) {
		t.Error("node selector gpu=a100 not applied")
	}
	affine := replica("llm-1", "w1")
	affine.Spec.NodeSelector = nil
	affine.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"h100"}}}}}}}}
	if q := From(affine); q.Spec.MatchesNode(a100) || !q.Spec.MatchesNode(h100) {
		t.Error("required node affinity gpu in (h100) not applied")
	}
}

// Replicas of one ReplicaSet share their labels, owners and scheduling; a replica that differs in
// any of them has its own.
func TestReplicasShare(t *testing.T) {
	a, b := From(replica("llm-0", "w1")), From(replica("llm-1", "w2"))
	if a.Spec.Scheduling != b.Spec.Scheduling {
		t.Error("two replicas of one template hold two Scheduling copies")
	}
	if reflect.ValueOf(a.Labels).UnsafePointer() != reflect.ValueOf(b.Labels).UnsafePointer() || &a.OwnerReferences[0] != &b.OwnerReferences[0] {
		t.Error("two replicas of one ReplicaSet hold two copies of their labels and owners")
	}
	other := replica("llm-2", "w3")
	other.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("2")
	c := From(other)
	if c.Spec.Scheduling == a.Spec.Scheduling {
		t.Error("a replica requesting 2 GPUs shares the Scheduling of one requesting 1")
	}
	if g := c.Spec.Requests["nvidia.com/gpu"]; g.Value() != 2 {
		t.Errorf("requests = %v", c.Spec.Requests)
	}
	relabelled := replica("llm-3", "w3")
	relabelled.Labels = map[string]string{"app": "llm", "pod-template-hash": "6f9c2"}
	if d := From(relabelled); d.Labels["pod-template-hash"] != "6f9c2" || a.Labels["pod-template-hash"] != "5d8f7" {
		t.Errorf("labels mixed up: %v and %v", d.Labels, a.Labels)
	}
}

// The table of shared values does not outlive the pods: once no pod refers to a value, its entry
// goes.
func TestInternedValuesGoWithThePods(t *testing.T) {
	in := newInterner[Scheduling]()
	keep := in.intern([]byte("a"), func() *Scheduling { return &Scheduling{PriorityClassName: "a"} })
	for i := range 100 {
		in.intern([]byte{byte(i), 'x'}, func() *Scheduling { return &Scheduling{PriorityClassName: "gone"} })
	}
	deadline := time.Now().Add(10 * time.Second)
	for in.len() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries left after their values were collected, want 1", in.len())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := in.intern([]byte("a"), func() *Scheduling { return &Scheduling{} }); got != keep {
		t.Error("a value still referred to was made again")
	}
	runtime.KeepAlive(keep)
}

func TestUnscheduledIsACopy(t *testing.T) {
	p := From(replica("llm-0", "w1"))
	r := p.Unscheduled("llm-0-replacement")
	if r.Name != "llm-0-replacement" || r.UID != "" || r.Spec.NodeName != "" || r.Status.Phase != corev1.PodPending || r.Ready() {
		t.Errorf("Unscheduled() = %+v", r)
	}
	r.Labels["app"] = "changed"
	if p.Labels["app"] != "llm" || p.Name != "llm-0" || p.Spec.NodeName != "w1" {
		t.Error("changing the copy changed the cached pod")
	}
	if r.Spec.Scheduling != p.Spec.Scheduling {
		t.Error("the copy does not share the (read-only) scheduling")
	}
}

func TestLister(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range []*corev1.Pod{replica("llm-0", "w1"), replica("llm-1", "w2")} {
		if err := idx.Add(From(p)); err != nil {
			t.Fatal(err)
		}
	}
	other := replica("web-0", "w1")
	other.Namespace, other.Labels = "web", map[string]string{"app": "web"}
	if err := idx.Add(From(other)); err != nil {
		t.Fatal(err)
	}
	l := Lister{Indexer: idx}
	if all, _ := l.List(labels.Everything()); len(all) != 3 {
		t.Errorf("List() = %d pods, want 3", len(all))
	}
	if llm, _ := l.Pods("models").List(labels.SelectorFromSet(labels.Set{"app": "llm"})); len(llm) != 2 {
		t.Errorf("Pods(models).List(app=llm) = %d pods, want 2", len(llm))
	}
	if web, _ := l.Pods("web").List(labels.SelectorFromSet(labels.Set{"app": "llm"})); len(web) != 0 {
		t.Errorf("Pods(web).List(app=llm) = %d pods, want 0", len(web))
	}
	if p, err := l.Pods("models").Get("llm-1"); err != nil || p.Spec.NodeName != "w2" {
		t.Errorf("Get(llm-1) = %v, %v", p, err)
	}
	if _, err := l.Pods("web").Get("llm-1"); err == nil {
		t.Error("Get of a pod of another namespace found it")
	}
}
