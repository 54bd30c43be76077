package workload

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// lwsObject is a LeaderWorkerSet as the API server serves it: one group of size pods, at rest.
func lwsObject(name string, uid types.UID, size int64, owner *metav1.OwnerReference) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": LWSGroup + "/v1", "kind": "LeaderWorkerSet",
		"metadata": map[string]any{"name": name, "namespace": storeNS, "uid": string(uid), "resourceVersion": "7", "generation": int64(3)},
		"spec": map[string]any{"replicas": int64(1), "leaderWorkerTemplate": map[string]any{
			"size":           size,
			"workerTemplate": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": name}}},
		}},
		"status": map[string]any{"replicas": int64(1), "updatedReplicas": int64(1), "readyReplicas": int64(1)},
	}}
	if owner != nil {
		u.SetOwnerReferences([]metav1.OwnerReference{*owner})
	}
	return u
}

// lwsChain is the objects lws creates for one group: the leader StatefulSet (named as the set, owned
// by it), the leader pod <set>-0, the worker StatefulSet <set>-0 owned by that pod, and a worker.
type lwsChain struct {
	leaderSS, workerSS any
	leader, worker     *corev1.Pod
}

func newLWSChain(name string, lwsUID types.UID) lwsChain {
	leaderSS := statefulSet(name, "leader-ss-uid", ptrTo(ctrlRef(LWSGroup+"/v1", "LeaderWorkerSet", name, lwsUID)))
	leader := pod(name+"-0", ctrlRef("apps/v1", "StatefulSet", name, "leader-ss-uid"))
	leader.UID = "leader-uid"
	workerSS := statefulSet(name+"-0", "worker-ss-uid", ptrTo(ctrlRef("v1", "Pod", name+"-0", "leader-uid")))
	worker := pod(name+"-0-1", ctrlRef("apps/v1", "StatefulSet", name+"-0", "worker-ss-uid"))
	return lwsChain{leaderSS: leaderSS, workerSS: workerSS, leader: leader, worker: worker}
}

func ptrTo[T any](v T) *T { return &v }

func lwsDynamic(objects ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		lwsGVR: "LeaderWorkerSetList", llmGVR: "LLMInferenceServiceList",
	}, objects...)
}

// lwsStore is a store whose pod cache holds the given pods and whose API serves the given sets.
func lwsStore(t *testing.T, served map[Kind]bool, cached []any, pods []*corev1.Pod, sets ...runtime.Object) *Store {
	t.Helper()
	s := newTestStore(t, served, cached...)
	s.Dynamic = lwsDynamic(sets...)
	byName := map[string]*corev1.Pod{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	s.Pods = func(namespace, name string) (metav1.Object, error) {
		if p, ok := byName[name]; ok && namespace == storeNS {
			return p, nil
		}
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return s
}

func lwsRef(name string, uid types.UID) Ref {
	return Ref{Kind: KindLeaderWorkerSet, Namespace: storeNS, Name: name, UID: uid}
}

// Both the leader and the workers of a group resolve, link by link and UID by UID, to the set that
// owns the group count; never to the StatefulSets lws manages.
func TestResolveLeaderWorkerSet(t *testing.T) {
	set := lwsRef("big", "lws-uid")
	c := newLWSChain("big", "lws-uid")
	llmOwner := ctrlRef(KServeGroup+"/v1alpha2", "LLMInferenceService", "deepseek", "llm-uid")
	prefill := lwsObject("big", "lws-uid", 2, &llmOwner)
	_ = unstructured.SetNestedStringMap(prefill.Object, map[string]string{ComponentLabel: leaderPrefillTemplate},
		"spec", "leaderWorkerTemplate", "leaderTemplate", "metadata", "labels")
	foreign := ctrlRef("example.io/v1", "Trainer", "t", "t-uid")
	replacedLeader := *c.leader
	replacedLeader.UID = "new-leader-uid"

	tests := []struct {
		name                              string
		set                               *unstructured.Unstructured
		served                            map[Kind]bool
		extra                             []any
		leaderPod                         *corev1.Pod
		pod                               *corev1.Pod
		want                              *Target
		wantUnsupported, wantNotServed, e bool
	}{
		{name: "leader pod", set: lwsObject("big", "lws-uid", 2, nil), pod: c.leader, want: &Target{Ref: set, PodOwner: set}},
		{name: "worker pod, through its group's leader pod", set: lwsObject("big", "lws-uid", 2, nil), pod: c.worker, want: &Target{Ref: set, PodOwner: set}},
		{name: "worker whose leader pod was replaced: not in cache yet", set: lwsObject("big", "lws-uid", 2, nil), leaderPod: &replacedLeader, pod: c.worker, e: true},
		{name: "multi-node LLMInferenceService: surged through it", set: lwsObject("big", "lws-uid", 2, &llmOwner), served: map[Kind]bool{KindLLMInferenceService: true},
			pod: c.worker, want: &Target{Ref: Ref{Kind: KindLLMInferenceService, Namespace: storeNS, Name: "deepseek", UID: "llm-uid"}, PodOwner: set, Component: ComponentMain}},
		{name: "prefill LeaderWorkerSet of an LLMInferenceService", set: prefill, served: map[Kind]bool{KindLLMInferenceService: true},
			pod: c.leader, want: &Target{Ref: Ref{Kind: KindLLMInferenceService, Namespace: storeNS, Name: "deepseek", UID: "llm-uid"}, PodOwner: set, Component: ComponentPrefill}},
		{name: "LLMInferenceService not served", set: lwsObject("big", "lws-uid", 2, &llmOwner), pod: c.leader, wantNotServed: true},
		{name: "set controlled by another kind", set: lwsObject("big", "lws-uid", 2, &foreign), pod: c.leader, wantUnsupported: true},
		{name: "set scaled by an HPA", set: lwsObject("big", "lws-uid", 2, nil), extra: []any{hpa("big-hpa", LWSGroup+"/v1", "LeaderWorkerSet", "big")},
			pod: c.leader, wantUnsupported: true},
		{name: "set replaced by a namesake", set: lwsObject("big", "other-uid", 2, nil), pod: c.leader, e: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leader := c.leader
			if tt.leaderPod != nil {
				leader = tt.leaderPod
			}
			s := lwsStore(t, tt.served, append([]any{c.leaderSS, c.workerSS}, tt.extra...), []*corev1.Pod{leader}, tt.set)
			got, err := s.Resolve(tt.pod)
			if tt.name == "set replaced by a namesake" {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("Resolve() = %+v, %v; want NotFound", got, err)
				}
				return
			}
			checkResolved(t, "Resolve()", got, err, tt.want, tt.wantUnsupported, tt.wantNotServed, tt.e)
		})
	}
}

// Only pods whose controller chain leads to the set count as its pods: a pod that merely carries
// the set's name label (a decoy) is neither counted Ready nor evicted.
func TestOwnsLeaderWorkerSetPods(t *testing.T) {
	c := newLWSChain("big", "lws-uid")
	decoy := pod("big-9", ctrlRef("apps/v1", "StatefulSet", "decoy", "decoy-uid"))
	decoy.Labels = map[string]string{LWSSetNameLabel: "big", LWSGroupIndexLabel: "0"}
	s := lwsStore(t, nil, []any{c.leaderSS, c.workerSS, statefulSet("decoy", "decoy-uid", nil)}, []*corev1.Pod{c.leader}, lwsObject("big", "lws-uid", 2, nil))
	for _, tt := range []struct {
		pod  *corev1.Pod
		uid  types.UID
		want bool
	}{
		{c.leader, "lws-uid", true},
		{c.worker, "lws-uid", true},
		{c.worker, "other-lws-uid", false},
		{decoy, "lws-uid", false},
	} {
		if got := s.Owns(KindLeaderWorkerSet, tt.uid, tt.pod); got != tt.want {
			t.Errorf("Owns(LeaderWorkerSet %s, %s) = %v, want %v", tt.uid, tt.pod.Name, got, tt.want)
		}
	}
}

// The set is read as the owner of its pods: counts are groups, the group size and exclusive topology
// come along, and a size no surge should place is refused with the reason.
func TestStorePodOwnerLeaderWorkerSet(t *testing.T) {
	set := lwsObject("big", "lws-uid", 4, nil)
	set.SetAnnotations(map[string]string{LWSExclusiveTopologyAnnotation: "topology.kubernetes.io/zone"})
	_ = unstructured.SetNestedField(set.Object, int64(0), "status", "readyReplicas")
	huge := lwsObject("huge", "huge-uid", 100000, nil)
	s := lwsStore(t, nil, nil, nil, set, huge)

	st, err := s.PodOwner(lwsRef("big", "lws-uid"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Replicas != 1 || st.StatusReplicas != 1 || st.UpdatedReplicas != 1 || st.ReadyReplicas != 0 || st.GroupSize != 4 ||
		st.TopologyKey != "topology.kubernetes.io/zone" || st.UID != "lws-uid" {
		t.Errorf("PodOwner(LeaderWorkerSet) = %+v, want 1 group of 4 pods, none Ready, exclusive per zone", *st)
	}
	if why := st.Unsettled(); why == "" {
		t.Error("a set whose only group is not Ready is at rest; want NotSteady")
	}
	if !st.Selector.Matches(labels.Set{LWSSetNameLabel: "big"}) || st.Selector.Matches(labels.Set{LWSSetNameLabel: "other"}) {
		t.Errorf("PodOwner() selector = %s, want the set's name label", st.Selector)
	}
	_, err = s.PodOwner(lwsRef("huge", "huge-uid"))
	var unsup *UnsupportedError
	if !errors.As(err, &unsup) {
		t.Errorf("PodOwner(size 100000) error = %v, want UnsupportedError: the guardian must not place 100000 pods", err)
	}
	if _, err := s.PodOwner(lwsRef("big", "old-uid")); !apierrors.IsNotFound(err) {
		t.Errorf("PodOwner(replaced set) error = %v, want NotFound", err)
	}
}

// A cluster that does not serve LeaderWorkerSets answers 404 for the resource, not for the object:
// that is no proof the set is gone, and a Surge on it must be kept.
func TestGetLeaderWorkerSetNotServed(t *testing.T) {
	s := lwsStore(t, nil, nil, nil)
	s.Dynamic.(*dynamicfake.FakeDynamicClient).PrependReactor("get", "leaderworkersets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewGenericServerResponse(404, "get", lwsGVR.GroupResource(), "", "the server could not find the requested resource", 0, false)
	})
	_, err := s.Get(lwsRef("big", "lws-uid"))
	var notServed *NotServedError
	if !errors.As(err, &notServed) {
		t.Errorf("Get() error = %v, want NotServedError", err)
	}
	s = lwsStore(t, nil, nil, nil)
	if _, err := s.Get(lwsRef("big", "lws-uid")); !apierrors.IsNotFound(err) || errors.As(err, &notServed) {
		t.Errorf("Get(deleted set) error = %v, want NotFound", err)
	}
}

// The surge adds groups through spec.replicas of the set, or of the LLMInferenceService that owns it,
// and names no other field.
func TestPlanSurgeLeaderWorkerSet(t *testing.T) {
	s := lwsStore(t, nil, nil, nil, lwsObject("big", "lws-uid", 2, nil))
	obj, err := s.Get(lwsRef("big", "lws-uid"))
	if err != nil {
		t.Fatal(err)
	}
	set := lwsRef("big", "lws-uid")
	fields, err := PlanSurge(obj, &Target{Ref: set, PodOwner: set}, 1, 1, false)
	if err != nil || len(fields) != 1 || fields[0].Path != "/spec/replicas" || fields[0].Set != 2 || fields[0].Original == nil || *fields[0].Original != 1 {
		t.Fatalf("PlanSurge(LeaderWorkerSet) = %+v, %v; want spec.replicas 1 -> 2", fields, err)
	}
	if err := CheckPaths(&Target{Ref: set}, []Field{{Path: "/spec/leaderWorkerTemplate/size", Set: 9}}); err == nil {
		t.Error("CheckPaths accepted a Surge naming the group size")
	}

	llm := &Object{Ref: Ref{Kind: KindLLMInferenceService, Name: "deepseek"}, Meta: &metav1.ObjectMeta{}, Content: map[string]any{
		"spec": map[string]any{"replicas": int64(1), "worker": map[string]any{}}}}
	target := &Target{Ref: llm.Ref, PodOwner: set, Component: ComponentMain}
	fields, err = PlanSurge(llm, target, 1, 1, false)
	if err != nil || len(fields) != 1 || fields[0].Path != llmMainPath || fields[0].Set != 2 {
		t.Errorf("PlanSurge(multi-node LLMInferenceService) = %+v, %v; want spec.replicas 1 -> 2", fields, err)
	}
	target.PodOwner = deploymentRef("deepseek-kserve", "d-uid")
	if _, err := PlanSurge(llm, target, 1, 1, false); err == nil {
		t.Error("PlanSurge of an LLMInferenceService with spec.worker whose pods a Deployment runs: want unsupported")
	}
}
