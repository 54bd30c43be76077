package controller

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// The tests of this file are the ways a tenant with edit in its own namespace could crash, hold or
// borrow the guardian that serves every tenant.

// A Deployment of two billion replicas held at one pod (by a ResourceQuota, say) is surged like any
// other; what the guardian books for it is the one replica the surge adds. One stand-in pod per
// missing replica would need terabytes: the guardian would crash-loop for everyone.
func TestHugeReplicaCountBooksOnlyWhatTheSurgeAdds(t *testing.T) {
	objs := stalled()
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			d.Spec.Replicas = ptr.To(int32(2_000_000_000))
		}
	}
	h := newHarness(t, nil, objs...)
	h.surgeNode("w1", depSurge)
	s := h.mustSurge(depSurge)
	if s.PhaseOf() != v1alpha1.PhaseSurged || s.Spec.Replicas != 2_000_000_000 {
		t.Fatalf("Surge %s with replicas %d, want Surged with 2000000000", s.PhaseOf(), s.Spec.Replicas)
	}
	pending := h.c.pendingReplacements()
	if len(pending) != int(s.Spec.Delta) {
		t.Fatalf("%d replacements booked for a surge of %d", len(pending), s.Spec.Delta)
	}
	if pending[0].Spec.NodeName != "" || pending[0].Namespace != ns {
		t.Fatalf("booked %s/%s on %q, want an unscheduled copy of the model's pod", pending[0].Namespace, pending[0].Name, pending[0].Spec.NodeName)
	}
}

// A Surge the guardian no longer acts on (the workload opted out after the surge) serves no stall:
// it books no capacity, whichever pod (a finished one requesting GPUs) its selector lists first.
func TestRejectedSurgeBooksNoCapacity(t *testing.T) {
	done := modelPod("model-abc-done", "w2", false)
	done.Status.Phase = corev1.PodSucceeded
	done.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = gpuNode("w2").Status.Allocatable["nvidia.com/gpu"]
	h := newHarness(t, nil, append([]runtime.Object{done}, stalled()...)...)
	h.surgeNode("w1", depSurge)
	if n := len(h.c.pendingReplacements()); n != 1 {
		t.Fatalf("a trusted surge in flight books %d replacements, want 1", n)
	}
	d := h.deployment(ns, "model")
	d.Annotations = map[string]string{workload.IgnoreAnnotation: "true"}
	if _, err := h.kube.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.syncSurge(depSurge)
	requireEvent(t, h.events(), "Warning", ReasonUntrustedSurge, "OptedOut")
	if got := h.c.pendingReplacements(); len(got) != 0 {
		t.Fatalf("a rejected Surge books %d replacements (%s)", len(got), got[0].Name)
	}
}
