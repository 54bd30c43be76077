package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
)

// A Pending Surge's fields are written, the stall ends, and the informer has not delivered the write
// yet: the cached Deployment still says 1. Taking that for "never written" would drop the Surge and
// leave the count at 2 with nothing to restore it. The Surge must stay until the cache shows the
// write, then be restored like any surge whose stall is over.
func TestPendingSurgeIsNotDroppedWhileTheCacheLagsItsOwnWrite(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.syncNode("w1")
	h.refresh()
	h.syncSurge(depSurge)
	if h.replicas() != 2 || h.phase(depSurge) != v1alpha1.PhasePending {
		t.Fatalf("after the write: replicas %d, phase %q; want 2, Pending", h.replicas(), h.phase(depSurge))
	}
	// The node's drain ends; only the node reaches the cache, the Deployment there is the old one.
	h.updateNode("w1", nodeUpdated)
	n, err := h.kube.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slimmed, err := slim(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.c.informers.kubeFactory.Core().V1().Nodes().Informer().GetIndexer().Update(slimmed.(*corev1.Node)); err != nil {
		t.Fatal(err)
	}
	h.syncSurge(depSurge)
	if h.surge(depSurge) == nil {
		t.Fatalf("the Surge was dropped while the Deployment runs at %d replicas", h.replicas())
	}
	// Once the cache shows the write, the surge is known as written: its lifecycle (Surged, then
	// Ready or a failure) ends in a restore.
	h.refresh()
	h.settle(depSurge)
	if p := h.phase(depSurge); p != v1alpha1.PhaseSurged {
		t.Fatalf("after the cache caught up: Surge phase %q, replicas %d; want Surged", p, h.replicas())
	}
}
