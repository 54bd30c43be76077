package capacity

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

const gpu corev1.ResourceName = "nvidia.com/gpu"

func TestFitsElsewhere(t *testing.T) {
	tests := []struct {
		name       string
		pod        *corev1.Pod
		candidates []cand
		want       string // "" means no fit
	}{
		{
			name:       "GPU free on another node",
			pod:        gpuPod("blocked", "node-a", 1),
			candidates: []cand{{Node: readyNode("node-b", 1)}},
			want:       "node-b",
		},
		{
			name:       "GPU of the other node taken",
			pod:        gpuPod("blocked", "node-a", 1),
			candidates: []cand{{Node: readyNode("node-b", 1), Pods: []*corev1.Pod{gpuPod("other", "node-b", 1)}}},
		},
		{
			name:       "GPU held by a finished pod is free",
			pod:        gpuPod("blocked", "node-a", 1),
			candidates: []cand{{Node: readyNode("node-b", 1), Pods: []*corev1.Pod{withPhase(gpuPod("done", "node-b", 1), corev1.PodSucceeded)}}},
			want:       "node-b",
		},
		{
			name:       "two GPUs wanted, one free",
			pod:        gpuPod("blocked", "node-a", 2),
			candidates: []cand{{Node: readyNode("node-b", 2), Pods: []*corev1.Pod{gpuPod("other", "node-b", 1)}}},
		},
		{
			name:       "node without GPUs",
			pod:        gpuPod("blocked", "node-a", 1),
			candidates: []cand{{Node: readyNode("node-b", 0)}},
		},
		{
			name: "the pod's own node is excluded",
			pod:  gpuPod("blocked", "node-a", 1),
			candidates: []cand{
				{Node: readyNode("node-a", 4)},
			},
		},
		{
			name: "cordoned node skipped, next one fits",
			pod:  gpuPod("blocked", "node-a", 1),
			candidates: []cand{
				{Node: cordoned(readyNode("node-b", 1))},
				{Node: readyNode("node-c", 1)},
			},
			want: "node-c",
		},
		{
			name:       "cordoned node",
			pod:        gpuPod("blocked", "node-a", 1),
			candidates: []cand{{Node: cordoned(readyNode("node-b", 1))}},
		},
		{
			name:       "NotReady node",
			pod:        gpuPod("blocked", "node-a", 1),
			candidates: []cand{{Node: notReady(readyNode("node-b", 1))}},
		},
		{
			name:       "untolerated NoSchedule taint",
			pod:        gpuPod("blocked", "node-a", 1),
			candidates: []cand{{Node: tainted(readyNode("node-b", 1), corev1.TaintEffectNoSchedule)}},
		},
		{
			name:       "untolerated NoExecute taint",
			pod:        gpuPod("blocked", "node-a", 1),
			candidates: []cand{{Node: tainted(readyNode("node-b", 1), corev1.TaintEffectNoExecute)}},
		},
		{
			name:       "PreferNoSchedule taint does not exclude",
			pod:        gpuPod("blocked", "node-a", 1),
			candidates: []cand{{Node: tainted(readyNode("node-b", 1), corev1.TaintEffectPreferNoSchedule)}},
			want:       "node-b",
		},
		{
			name: "tolerated NoSchedule taint",
			pod: func() *corev1.Pod {
				p := gpuPod("blocked", "node-a", 1)
				p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
				return p
			}(),
			candidates: []cand{{Node: tainted(readyNode("node-b", 1), corev1.TaintEffectNoSchedule)}},
			want:       "node-b",
		},
		{
			name: "nodeSelector mismatch",
			pod: func() *corev1.Pod {
				p := gpuPod("blocked", "node-a", 1)
				p.Spec.NodeSelector = map[string]string{"gpu.model": "h100"}
				return p
			}(),
			candidates: []cand{{Node: labeled(readyNode("node-b", 1), "gpu.model", "a100")}},
		},
		{
			name: "nodeSelector match",
			pod: func() *corev1.Pod {
				p := gpuPod("blocked", "node-a", 1)
				p.Spec.NodeSelector = map[string]string{"gpu.model": "h100"}
				return p
			}(),
			candidates: []cand{
				{Node: labeled(readyNode("node-b", 1), "gpu.model", "a100")},
				{Node: labeled(readyNode("node-c", 1), "gpu.model", "h100")},
			},
			want: "node-c",
		},
		{
			name: "required node affinity mismatch",
			pod: func() *corev1.Pod {
				p := gpuPod("blocked", "node-a", 1)
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu.model", Operator: corev1.NodeSelectorOpIn, Values: []string{"h100"}}},
					}}},
				}}
				return p
			}(),
			candidates: []cand{{Node: labeled(readyNode("node-b", 1), "gpu.model", "a100")}},
		},
		{
			name:       "required anti-affinity on hostname: a replica already runs there",
			pod:        antiAffine(gpuPod("blocked", "node-a", 1), corev1.LabelHostname),
			candidates: []cand{{Node: readyNode("node-b", 2), Pods: []*corev1.Pod{gpuPod("sibling", "node-b", 1)}}},
		},
		{
			name: "required anti-affinity on hostname: the matching pod is in another namespace",
			pod:  antiAffine(gpuPod("blocked", "node-a", 1), corev1.LabelHostname),
			candidates: []cand{{Node: readyNode("node-b", 2), Pods: []*corev1.Pod{func() *corev1.Pod {
				p := gpuPod("sibling", "node-b", 1)
				p.Namespace = "elsewhere"
				return p
			}()}}},
			want: "node-b",
		},
		{
			name:       "required anti-affinity on hostname: no matching pod",
			pod:        antiAffine(gpuPod("blocked", "node-a", 1), corev1.LabelHostname),
			candidates: []cand{{Node: readyNode("node-b", 2), Pods: []*corev1.Pod{withLabels(gpuPod("other", "node-b", 1), map[string]string{"app": "other"})}}},
			want:       "node-b",
		},
		{
			name:       "anti-affinity on a zone is left to the scheduler",
			pod:        antiAffine(gpuPod("blocked", "node-a", 1), corev1.LabelTopologyZone),
			candidates: []cand{{Node: readyNode("node-b", 2), Pods: []*corev1.Pod{gpuPod("sibling", "node-b", 1)}}},
			want:       "node-b",
		},
		{
			name: "CPU exhausted",
			pod: func() *corev1.Pod {
				p := gpuPod("blocked", "node-a", 0)
				p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("3")
				return p
			}(),
			candidates: []cand{{Node: readyNode("node-b", 0), Pods: []*corev1.Pod{func() *corev1.Pod {
				p := gpuPod("other", "node-b", 0)
				p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2")
				return p
			}()}}},
		},
		{
			name:       "no candidates",
			pod:        gpuPod("blocked", "node-a", 1),
			candidates: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := New(candidates(tt.candidates), Standard(nil)...).FitsElsewhere(podinfo.From(tt.pod))
			if ok != (tt.want != "") || got != tt.want {
				t.Errorf("FitsElsewhere() = (%q, %v), want (%q, %v)", got, ok, tt.want, tt.want != "")
			}
		})
	}
}

// gpuPod is a Ready pod of appLabels on node requesting n GPUs and one CPU.
func gpuPod(name, node string, n int64) *corev1.Pod {
	p := readyPod(name)
	p.Spec.NodeName = node
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	if n > 0 {
		req[gpu] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	p.Spec.Containers = []corev1.Container{{Name: "server", Resources: corev1.ResourceRequirements{Requests: req}}}
	return p
}

// readyNode is a Ready, schedulable node with 4 CPUs, 16Gi and gpus GPUs (none advertised when 0).
func readyNode(name string, gpus int64) *corev1.Node {
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if gpus > 0 {
		alloc[gpu] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			Allocatable: alloc,
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

func cordoned(n *corev1.Node) *corev1.Node {
	n.Spec.Unschedulable = true
	return n
}

func notReady(n *corev1.Node) *corev1.Node {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	return n
}

func tainted(n *corev1.Node, effect corev1.TaintEffect) *corev1.Node {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: effect})
	return n
}

func labeled(n *corev1.Node, key, value string) *corev1.Node {
	n.Labels[key] = value
	return n
}

func withLabels(p *corev1.Pod, l map[string]string) *corev1.Pod {
	p.Labels = l
	return p
}

// antiAffine gives the pod a required anti-affinity against its own app on topologyKey.
func antiAffine(p *corev1.Pod, topologyKey string) *corev1.Pod {
	p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: appLabels},
			TopologyKey:   topologyKey,
		}},
	}}
	return p
}

func TestFit(t *testing.T) {
	// pending is a replacement another surge waits for: not scheduled yet, requesting gpus GPUs.
	pending := func(name string, gpus int64) *corev1.Pod {
		p := withLabels(gpuPod(name, "", gpus), map[string]string{"app": "other"})
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = nil
		return p
	}
	blocked := gpuPod("blocked", "node-a", 1)
	tests := []struct {
		name        string
		pod         *corev1.Pod
		n           int
		pending     []*corev1.Pod
		candidates  []cand
		wantPlaced  int
		wantMissing int64 // GPUs missing; the other requests scale with it
	}{
		{
			name:       "one copy on a free GPU",
			pod:        blocked,
			n:          1,
			candidates: []cand{{Node: readyNode("node-b", 1)}},
			wantPlaced: 1,
		},
		{
			name:        "two copies, one free GPU",
			pod:         blocked,
			n:           2,
			candidates:  []cand{{Node: readyNode("node-b", 1)}},
			wantPlaced:  1,
			wantMissing: 1,
		},
		{
			name:        "two copies, no free GPU",
			pod:         blocked,
			n:           2,
			candidates:  []cand{{Node: readyNode("node-b", 1), Pods: []*corev1.Pod{gpuPod("other", "node-b", 1)}}},
			wantMissing: 2,
		},
		{
			name:        "earlier copies take what they use",
			pod:         blocked,
			n:           3,
			candidates:  []cand{{Node: readyNode("node-b", 2)}},
			wantPlaced:  2,
			wantMissing: 1,
		},
		{
			name:        "a pending replacement of another surge takes the free GPU first",
			pod:         blocked,
			n:           1,
			pending:     []*corev1.Pod{pending("other-replacement", 1)},
			candidates:  []cand{{Node: readyNode("node-b", 1)}},
			wantMissing: 1,
		},
		{
			name:       "a pending replacement takes one node, the copy the next",
			pod:        blocked,
			n:          1,
			pending:    []*corev1.Pod{pending("other-replacement", 1)},
			candidates: []cand{{Node: readyNode("node-b", 1)}, {Node: readyNode("node-c", 1)}},
			wantPlaced: 1,
		},
		{
			name:       "a pending pod that fits nowhere takes nothing",
			pod:        blocked,
			n:          1,
			pending:    []*corev1.Pod{pending("huge", 8)},
			candidates: []cand{{Node: readyNode("node-b", 1)}},
			wantPlaced: 1,
		},
		{
			name:        "the pod's own node is never used",
			pod:         blocked,
			n:           1,
			candidates:  []cand{{Node: readyNode("node-a", 4)}},
			wantMissing: 1,
		},
		{
			name:       "the pod's own node is skipped, another one used",
			pod:        blocked,
			n:          1,
			candidates: []cand{{Node: readyNode("node-a", 4)}, {Node: readyNode("node-b", 1)}},
			wantPlaced: 1,
		},
		{
			name:        "hostname anti-affinity: the first copy excludes its node for the second",
			pod:         antiAffine(gpuPod("blocked", "node-a", 1), corev1.LabelHostname),
			n:           2,
			candidates:  []cand{{Node: readyNode("node-b", 2)}},
			wantPlaced:  1,
			wantMissing: 1,
		},
		{
			name:       "hostname anti-affinity: one copy per node",
			pod:        antiAffine(gpuPod("blocked", "node-a", 1), corev1.LabelHostname),
			n:          2,
			candidates: []cand{{Node: readyNode("node-b", 2)}, {Node: readyNode("node-c", 2)}},
			wantPlaced: 2,
		},
		{
			name:       "without anti-affinity both copies share a node",
			pod:        blocked,
			n:          2,
			candidates: []cand{{Node: readyNode("node-b", 2)}},
			wantPlaced: 2,
		},
		{
			name: "cordoned and NotReady nodes skipped",
			pod:  blocked,
			n:    2,
			candidates: []cand{
				{Node: cordoned(readyNode("node-b", 4))},
				{Node: notReady(readyNode("node-c", 4))},
				{Node: readyNode("node-d", 1)},
			},
			wantPlaced:  1,
			wantMissing: 1,
		},
		{
			name:       "no copy asked",
			pod:        blocked,
			n:          0,
			candidates: []cand{{Node: readyNode("node-b", 1)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := candidates(tt.candidates)
			before := podCounts(cands)
			placed, short := New(cands, Standard(nil)...).Fit(podinfo.From(tt.pod), tt.n, infos(tt.pending...))
			missing := short.Resources
			if placed != tt.wantPlaced {
				t.Errorf("Fit() placed %d, want %d", placed, tt.wantPlaced)
			}
			want := corev1.ResourceList{}
			for name, q := range podinfo.From(tt.pod).Spec.Requests {
				total := q.DeepCopy()
				total.Set(q.Value() * tt.wantMissing)
				if tt.wantMissing > 0 {
					want[name] = total
				}
			}
			if !sameResources(missing, want) {
				t.Errorf("Fit() missing %v, want %v", missing, want)
			}
			if g := missing[gpu]; g.Value() != tt.wantMissing {
				t.Errorf("Fit() missing %s = %s, want %d", gpu, g.String(), tt.wantMissing)
			}
			if after := podCounts(cands); !equalInts(before, after) {
				t.Errorf("Fit() changed the candidates' pods: %v before, %v after", before, after)
			}
		})
	}
}

// The candidates come from the listers and are reused for the next stall: what Fit places is
// hypothetical and must not leak into them, even when a pod slice has spare capacity.
func TestFitDoesNotModifyCandidates(t *testing.T) {
	pods := make([]*podinfo.Pod, 0, 8)
	pods = append(pods, podinfo.From(gpuPod("other", "node-b", 1)))
	candidates := []Candidate{{Node: readyNode("node-b", 3), Pods: pods}}
	first, _ := New(candidates, Standard(nil)...).Fit(podinfo.From(gpuPod("blocked", "node-a", 1)), 2, nil)
	second, _ := New(candidates, Standard(nil)...).Fit(podinfo.From(gpuPod("blocked", "node-a", 1)), 2, nil)
	if first != 2 || second != 2 {
		t.Errorf("Fit() placed %d then %d on the same candidates, want 2 both times", first, second)
	}
	if len(candidates[0].Pods) != 1 || candidates[0].Pods[:cap(pods)][1] != nil {
		t.Error("Fit() wrote into the candidates' pod slice")
	}
}

func podCounts(cs []Candidate) []int {
	out := make([]int, len(cs))
	for i, c := range cs {
		out[i] = len(c.Pods)
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sameResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		w, ok := b[name]
		if !ok || q.Cmp(w) != 0 {
			return false
		}
	}
	return true
}
