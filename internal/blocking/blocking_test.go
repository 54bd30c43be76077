package blocking

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

const ns = "models"

var appLabels = map[string]string{"app": "llm"}

func TestFind(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name        string
		pod         *corev1.Pod
		pdb         *policyv1.PodDisruptionBudget
		wantBlocked bool
	}{
		{name: "ready pod, no disruption allowed", pod: readyPod("p"), pdb: pdb("pdb", 0, 1, 1), wantBlocked: true},
		{name: "ready pod, one disruption allowed", pod: readyPod("p"), pdb: pdb("pdb", 1, 2, 1)},
		{
			name: "DaemonSet pod is skipped",
			pod: withOwner(readyPod("p"), metav1.OwnerReference{
				APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "ds-uid", Controller: ptr.To(true),
			}),
			pdb: pdb("pdb", 0, 1, 1),
		},
		{
			name: "ReplicaSet pod is not skipped",
			pod: withOwner(readyPod("p"), metav1.OwnerReference{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: ptr.To(true),
			}),
			pdb:         pdb("pdb", 0, 1, 1),
			wantBlocked: true,
		},
		{
			name: "mirror pod is skipped",
			pod: func() *corev1.Pod {
				p := readyPod("p")
				p.Annotations = map[string]string{"kubernetes.io/config.mirror": "abc"}
				return p
			}(),
			pdb: pdb("pdb", 0, 1, 1),
		},
		{name: "succeeded pod is skipped", pod: withPhase(readyPod("p"), corev1.PodSucceeded), pdb: pdb("pdb", 0, 1, 1)},
		{name: "failed pod is skipped", pod: withPhase(readyPod("p"), corev1.PodFailed), pdb: pdb("pdb", 0, 1, 1)},
		{
			name: "deleting pod is skipped",
			pod: func() *corev1.Pod {
				p := readyPod("p")
				p.DeletionTimestamp = &now
				return p
			}(),
			pdb: pdb("pdb", 0, 1, 1),
		},
		{
			name: "unhealthy pod, AlwaysAllow policy",
			pod:  unreadyPod("p"),
			pdb: func() *policyv1.PodDisruptionBudget {
				b := pdb("pdb", 0, 0, 1)
				b.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.AlwaysAllow)
				return b
			}(),
		},
		{name: "unhealthy pod, budget otherwise met (IfHealthyBudget default)", pod: unreadyPod("p"), pdb: pdb("pdb", 0, 2, 2)},
		{
			name: "unhealthy pod, explicit IfHealthyBudget and budget not met",
			pod:  unreadyPod("p"),
			pdb: func() *policyv1.PodDisruptionBudget {
				b := pdb("pdb", 0, 0, 1)
				b.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.IfHealthyBudget)
				return b
			}(),
			wantBlocked: true,
		},
		{name: "unhealthy pod, budget not met", pod: unreadyPod("p"), pdb: pdb("pdb", 0, 0, 1), wantBlocked: true},
		{
			name: "stale observedGeneration blocks even with disruptions allowed",
			pod:  readyPod("p"),
			pdb: func() *policyv1.PodDisruptionBudget {
				b := pdb("pdb", 1, 2, 1)
				b.Generation = 3
				b.Status.ObservedGeneration = 2
				return b
			}(),
			wantBlocked: true,
		},
		{
			name: "nil selector selects nothing",
			pod:  readyPod("p"),
			pdb: func() *policyv1.PodDisruptionBudget {
				b := pdb("pdb", 0, 1, 1)
				b.Spec.Selector = nil
				return b
			}(),
		},
		{
			name: "empty selector selects every pod of the namespace",
			pod:  readyPod("p"),
			pdb: func() *policyv1.PodDisruptionBudget {
				b := pdb("pdb", 0, 1, 1)
				b.Spec.Selector = &metav1.LabelSelector{}
				return b
			}(),
			wantBlocked: true,
		},
		{
			name: "selector not matching",
			pod:  readyPod("p"),
			pdb: func() *policyv1.PodDisruptionBudget {
				b := pdb("pdb", 0, 1, 1)
				b.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}
				return b
			}(),
		},
		{
			name: "PDB of another namespace",
			pod:  readyPod("p"),
			pdb: func() *policyv1.PodDisruptionBudget {
				b := pdb("pdb", 0, 1, 1)
				b.Namespace = "elsewhere"
				b.Spec.Selector = &metav1.LabelSelector{}
				return b
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Find(infos(tt.pod), []*policyv1.PodDisruptionBudget{tt.pdb})
			if !tt.wantBlocked {
				if len(got) != 0 {
					t.Fatalf("Find() = %d blocked pods, want none", len(got))
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("Find() = %d blocked pods, want 1", len(got))
			}
			if got[0].Pod.UID != tt.pod.UID || got[0].Pod.Name != tt.pod.Name || got[0].PDB != tt.pdb {
				t.Errorf("Find() = {%s, %s}, want {%s, %s}", got[0].Pod.Name, got[0].PDB.Name, tt.pod.Name, tt.pdb.Name)
			}
		})
	}
}

// The Eviction API refuses a pod selected by more than one PDB whatever the budgets allow: such a pod
// is reported as blocked, flagged so that nobody surges for it, even when one of its PDBs allows it.
func TestFindPodUnderSeveralPDBs(t *testing.T) {
	allowing := pdb("allowing", 1, 2, 1)
	blocking1 := pdb("blocking-1", 0, 1, 1)
	p1 := readyPod("p1")
	got := Find(infos(p1), []*policyv1.PodDisruptionBudget{allowing, blocking1})
	if len(got) != 1 || got[0].Pod.Name != p1.Name || !got[0].MultiplePDBs {
		t.Fatalf("Find() = %+v, want p1 flagged MultiplePDBs", got)
	}
	if got := Find(infos(p1), []*policyv1.PodDisruptionBudget{allowing}); len(got) != 0 {
		t.Fatalf("Find() with one allowing PDB = %+v, want none", got)
	}
}

// A Pending pod is evicted without consulting PDBs: it never blocks a drain.
func TestFindPendingPodIsNotBlocked(t *testing.T) {
	p := readyPod("p")
	p.Status.Phase = corev1.PodPending
	p.Status.Conditions = nil
	if got := Find(infos(p), []*policyv1.PodDisruptionBudget{pdb("b", 0, 0, 1)}); len(got) != 0 {
		t.Fatalf("Find() = %+v, want a Pending pod not blocked", got)
	}
}

func TestSurgeNeeded(t *testing.T) {
	tests := []struct {
		name            string
		minAvailable    *intstr.IntOrString
		maxUnavailable  *intstr.IntOrString
		healthy, expect int32
		want            int32
		wantReason      string
	}{
		{name: "minAvailable 1, one replica", minAvailable: ptr.To(intstr.FromInt32(1)), healthy: 1, expect: 1, want: 1},
		{name: "minAvailable 2, two replicas", minAvailable: ptr.To(intstr.FromInt32(2)), healthy: 2, expect: 2, want: 1},
		{name: "minAvailable 2, one of two replicas healthy", minAvailable: ptr.To(intstr.FromInt32(2)), healthy: 1, expect: 2, want: 2},
		{name: "minAvailable 3, one replica", minAvailable: ptr.To(intstr.FromInt32(3)), healthy: 1, expect: 1, want: 3},
		{name: "neither field set defaults to minAvailable 1", healthy: 1, expect: 1, want: 1},
		{name: "minAvailable 50%, one replica", minAvailable: ptr.To(intstr.FromString("50%")), healthy: 1, expect: 1, want: 1},
		{name: "minAvailable 60%, one replica: rounded up, one added is not enough", minAvailable: ptr.To(intstr.FromString("60%")), healthy: 1, expect: 1, want: 2},
		{name: "minAvailable 60%, two replicas", minAvailable: ptr.To(intstr.FromString("60%")), healthy: 2, expect: 2, want: 1},
		{name: "minAvailable 100%", minAvailable: ptr.To(intstr.FromString("100%")), healthy: 1, expect: 1, wantReason: ReasonFullMinAvailable},
		{name: "maxUnavailable 0", maxUnavailable: ptr.To(intstr.FromInt32(0)), healthy: 1, expect: 1, wantReason: ReasonMaxUnavailable},
		{name: "maxUnavailable 1 with an unhealthy pod", maxUnavailable: ptr.To(intstr.FromInt32(1)), healthy: 1, expect: 2, wantReason: ReasonMaxUnavailable},
		{name: "minAvailable beyond the surge cap", minAvailable: ptr.To(intstr.FromInt32(MaxSurge + 2)), healthy: 1, expect: 1, wantReason: ReasonTooManyReplicas},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := pdb("pdb", 0, tt.healthy, 0)
			b.Spec.MinAvailable = tt.minAvailable
			b.Spec.MaxUnavailable = tt.maxUnavailable
			b.Status.ExpectedPods = tt.expect
			got, reason := SurgeNeeded(b)
			if got != tt.want || reason != tt.wantReason {
				t.Errorf("SurgeNeeded() = (%d, %q), want (%d, %q)", got, reason, tt.want, tt.wantReason)
			}
		})
	}
}

func readyPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: appLabels},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

func unreadyPod(name string) *corev1.Pod {
	p := readyPod(name)
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	return p
}

func withPhase(p *corev1.Pod, phase corev1.PodPhase) *corev1.Pod {
	p.Status.Phase = phase
	return p
}

func withOwner(p *corev1.Pod, ref metav1.OwnerReference) *corev1.Pod {
	p.OwnerReferences = []metav1.OwnerReference{ref}
	return p
}

// pdb returns a processed PDB selecting appLabels with the given status.
func pdb(name string, allowed, currentHealthy, desiredHealthy int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Generation: 1},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: appLabels},
		},
		Status: policyv1.PodDisruptionBudgetStatus{
			ObservedGeneration: 1,
			DisruptionsAllowed: allowed,
			CurrentHealthy:     currentHealthy,
			DesiredHealthy:     desiredHealthy,
			ExpectedPods:       currentHealthy,
		},
	}
}

func TestStatusBehind(t *testing.T) {
	ready := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	notReady := ready("loading")
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	leaving := ready("leaving")
	leaving.DeletionTimestamp = &metav1.Time{}
	pdb := &policyv1.PodDisruptionBudget{Status: policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 1}}
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want bool
	}{
		{"status counts every Ready pod", []*corev1.Pod{ready("a"), notReady}, false},
		{"a second pod turned Ready since the status was written", []*corev1.Pod{ready("a"), ready("b")}, true},
		{"a pod being deleted is not healthy", []*corev1.Pod{ready("a"), leaving}, false},
		{"fewer Ready pods than the status says (a pod left): not behind, the budget only gets stricter", []*corev1.Pod{notReady}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StatusBehind(pdb, infos(tc.pods...)); got != tc.want {
				t.Fatalf("StatusBehind = %v, want %v", got, tc.want)
			}
		})
	}
}
