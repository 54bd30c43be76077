package capacity

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// The tests build pods as the API returns them and decide on what the informers cache of them.

func infos(pods ...*corev1.Pod) []*podinfo.Pod {
	out := make([]*podinfo.Pod, len(pods))
	for i, p := range pods {
		out[i] = podinfo.From(p)
	}
	return out
}

// cand is a Candidate whose pods are API pods.
type cand struct {
	Node *corev1.Node
	Pods []*corev1.Pod
}

func candidates(cs []cand) []Candidate {
	out := make([]Candidate, len(cs))
	for i, c := range cs {
		out[i] = Candidate{Node: c.Node, Pods: infos(c.Pods...)}
	}
	return out
}

var appLabels = map[string]string{"app": "llm"}

// readyPod is a Running, Ready pod of appLabels in namespace models.
func readyPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "models", Labels: appLabels},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func withPhase(p *corev1.Pod, phase corev1.PodPhase) *corev1.Pod {
	p.Status.Phase = phase
	return p
}
