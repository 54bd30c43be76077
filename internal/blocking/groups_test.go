package blocking

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

const (
	zone                     = "topology.kubernetes.io/zone"
	gpu  corev1.ResourceName = "nvidia.com/gpu"
)

// infos is what the informers cache of the API pods.
func infos(pods ...*corev1.Pod) []*podinfo.Pod {
	out := make([]*podinfo.Pod, len(pods))
	for i, p := range pods {
		out[i] = podinfo.From(p)
	}
	return out
}

// member is a pod of group idx of the LeaderWorkerSet "big" on node, requesting 8 GPUs, Ready.
func member(name, node string, idx string) *corev1.Pod {
	p := gpuPod(name, node, 8)
	p.Labels = map[string]string{"leaderworkerset.sigs.k8s.io/name": "big", lwsGroupIndexLabel: idx, lwsGroupKeyLabel: "key-" + idx}
	return p
}

// gpuPod is a Ready pod of appLabels on node requesting n GPUs.
func gpuPod(name, node string, n int64) *corev1.Pod {
	p := readyPod(name)
	p.Spec.NodeName = node
	p.Spec.Containers = []corev1.Container{{Name: "server",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{gpu: *resource.NewQuantity(n, resource.DecimalSI)}}}}
	return p
}

// A group serves only complete: every pod bound, Ready, not being deleted.
func TestCompleteGroups(t *testing.T) {
	notReady := member("big-1-1", "n4", "1")
	notReady.Status.Conditions = nil
	deleting := member("big-2-1", "n4", "2")
	deleting.DeletionTimestamp = &metav1.Time{}
	pods := infos(member("big-0", "n1", "0"), member("big-0-1", "n2", "0"),
		member("big-1", "n3", "1"), notReady,
		member("big-2", "n3", "2"), deleting)
	got := CompleteGroups(pods, 2)
	if len(got) != 1 || len(got[0]) != 2 {
		t.Fatalf("CompleteGroups() = %v, want group 0 only", got)
	}
	if n := ReadyGroupsOff(pods, 2, "n1"); n != 0 {
		t.Errorf("ReadyGroupsOff(n1) = %d, want 0: group 0 has a pod on n1 and groups 1 and 2 are not complete", n)
	}
	if n := ReadyGroupsOff(pods, 2, "n9"); n != 1 {
		t.Errorf("ReadyGroupsOff(n9) = %d, want 1", n)
	}
}

// The group a surge adds is modelled on the blocked pod's own group, leader and workers; a group
// missing pods is completed with copies of the blocked one.
func TestGroupModel(t *testing.T) {
	leader, worker := member("big-0", "n1", "0"), member("big-0-1", "n2", "0")
	leader.Spec.Containers[0].Resources.Requests[gpu] = resource.MustParse("4")
	pods := infos(leader, worker, member("big-1", "n3", "1"))
	g := GroupModel(pods[1], pods, 2, zone)
	if len(g.Pods) != 2 || g.Pods[0].Name != "big-0" || g.Pods[1].Name != "big-0-1" || g.TopologyKey != zone {
		t.Fatalf("GroupModel() = %v, want big-0 and big-0-1", names(g.Pods))
	}
	// lws pins a worker of an exclusive group to its leader's zone: the new group is not.
	pinned := member("big-0-1", "n2", "0")
	pinned.Spec.NodeSelector = map[string]string{zone: "b", "pool": "gpu"}
	live := infos(leader, pinned)
	g = GroupModel(live[1], live, 2, zone)
	if sel := g.Pods[1].Spec.NodeSelector; sel[zone] != "" || sel["pool"] != "gpu" {
		t.Errorf("GroupModel() worker node selector = %v, want the zone pin dropped and the rest kept", sel)
	}
	if !g.Pods[1].Spec.MatchesNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n9", Labels: map[string]string{zone: "a", "pool": "gpu"}}}) {
		t.Error("the worker copy does not match a node of another zone")
	}
	if live[1].Spec.NodeSelector[zone] != "b" {
		t.Error("GroupModel changed the cached pod's node selector")
	}
	g = GroupModel(pods[2], pods, 3, "")
	if len(g.Pods) != 3 || g.Pods[1].Name != "big-1" || g.Pods[2].Name != "big-1" {
		t.Errorf("GroupModel(incomplete group) = %v, want big-1 three times", names(g.Pods))
	}
}

func names(pods []*podinfo.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return out
}

// Each replica of a LeaderWorkerSet adds a whole group of pods to what its PDB counts.
func TestSurgeNeededPerGroup(t *testing.T) {
	pdb := func(min intstr.IntOrString) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &min},
			Status: policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 2, ExpectedPods: 2}}
	}
	for _, tt := range []struct {
		min  intstr.IntOrString
		per  int32
		want int32
		why  string
	}{
		{intstr.FromInt32(2), 2, 1, ""},
		{intstr.FromInt32(3), 2, 1, ""},
		{intstr.FromInt32(3), 1, 2, ""},
		{intstr.FromInt32(7), 2, 3, ""},
		{intstr.FromString("75%"), 2, 1, ""},
		{intstr.FromString("100%"), 2, 0, ReasonFullMinAvailable},
	} {
		got, why := SurgeNeededPer(pdb(tt.min), tt.per)
		if got != tt.want || why != tt.why {
			t.Errorf("SurgeNeededPer(minAvailable %s, %d pods per replica) = %d %q, want %d %q", tt.min.String(), tt.per, got, why, tt.want, tt.why)
		}
	}
}
