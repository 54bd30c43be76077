package blocking

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

func TestReplacements(t *testing.T) {
	standIn := func(p *podinfo.Pod) *podinfo.Pod { return p.Unscheduled(p.Name + "-standin") }
	unscheduled := func(name string) *corev1.Pod {
		p := gpuPod(name, "", 1)
		p.Status.Phase = corev1.PodPending
		return p
	}
	deleting := func(p *corev1.Pod) *corev1.Pod {
		p.DeletionTimestamp = &metav1.Time{}
		return p
	}
	tests := []struct {
		name  string
		pods  []*corev1.Pod
		want  int64
		delta int32
		// names of the pods listed, in order
		expect []string
	}{
		{
			name: "pending surge: one stand-in for the replica not created yet",
			pods: []*corev1.Pod{gpuPod("a", "w1", 1)}, want: 2, delta: 1,
			expect: []string{"a-standin"},
		},
		{
			name: "surged, replacement unscheduled: the pod itself",
			pods: []*corev1.Pod{gpuPod("a", "w1", 1), unscheduled("b")}, want: 2, delta: 1,
			expect: []string{"b"},
		},
		{
			name: "replacement placed: nothing pending",
			pods: []*corev1.Pod{gpuPod("a", "w1", 1), gpuPod("b", "w2", 1)}, want: 2, delta: 1,
		},
		{
			// A Deployment of two billion replicas held at one pod by a quota: the surge books what
			// it adds, not what the tenant asked for.
			name: "count far above the live pods: at most delta",
			pods: []*corev1.Pod{gpuPod("a", "w1", 1)}, want: 2_000_000_001, delta: 2,
			expect: []string{"a-standin", "a-standin"},
		},
		{
			name: "many unscheduled pods of the tenant: at most delta",
			pods: []*corev1.Pod{gpuPod("a", "w1", 1), unscheduled("b"), unscheduled("c"), unscheduled("d")}, want: 4, delta: 1,
			expect: []string{"b"},
		},
		{
			name: "stand-ins copy a live pod, never a finished one",
			pods: []*corev1.Pod{withPhase(gpuPod("done", "w1", 2), corev1.PodSucceeded), gpuPod("a", "w1", 1)}, want: 2, delta: 1,
			expect: []string{"a-standin"},
		},
		{
			name: "only finished and deleted pods: no model, nothing booked",
			pods: []*corev1.Pod{withPhase(gpuPod("done", "w1", 2), corev1.PodSucceeded), deleting(gpuPod("a", "w1", 1))}, want: 2, delta: 1,
		},
		{
			name: "no delta: nothing",
			pods: []*corev1.Pod{gpuPod("a", "w1", 1)}, want: 5, delta: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Replacements(infos(tc.pods...), tc.want, tc.delta, standIn)
			var names []string
			for _, p := range got {
				if p.Spec.NodeName != "" {
					t.Fatalf("%s is scheduled", p.Name)
				}
				names = append(names, p.Name)
			}
			if len(names) != len(tc.expect) {
				t.Fatalf("got %v, want %v", names, tc.expect)
			}
			for i := range names {
				if names[i] != tc.expect[i] {
					t.Fatalf("got %v, want %v", names, tc.expect)
				}
			}
		})
	}
}
