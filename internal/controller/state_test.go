package controller

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/utils/clock"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
)

func TestOnlyTheLeaderReportsSurgeAndBlockedGauges(t *testing.T) {
	m := metrics.New()
	g := newGauges(m)
	f, d := newFlight(clock.RealClock{}, g), newDrains(clock.RealClock{}, g)
	sg := &v1alpha1.Surge{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "model", UID: "u1"},
		Spec:   v1alpha1.SurgeSpec{Pool: "worker", Target: v1alpha1.ObjectReference{Kind: "Deployment"}, StartTime: metav1.NewTime(t0)},
		Status: v1alpha1.SurgeStatus{Phase: v1alpha1.PhaseSurged}}
	f.verified(sg)
	d.setNode("w1", &nodeStats{pool: "worker", blocked: 1}, nil)
	if n := testutil.CollectAndCount(m.SurgesActive) + testutil.CollectAndCount(m.BlockedPods) + testutil.CollectAndCount(m.SurgeStartTime) + testutil.CollectAndCount(m.Surges); n != 0 {
		t.Fatalf("a standby replica exports %d surge/blocked series", n)
	}
	g.setLeading(true)
	if v := testutil.ToFloat64(m.SurgesActive.WithLabelValues("worker", "Deployment")); v != 1 {
		t.Fatalf("leader surges_active = %v", v)
	}
	if v := testutil.ToFloat64(m.SurgeStartTime.WithLabelValues("ns", "model", "Deployment")); v != float64(t0.Unix()) {
		t.Fatalf("leader surge_start_time_seconds = %v", v)
	}
	if v := testutil.ToFloat64(m.BlockedPods.WithLabelValues("worker")); v != 1 {
		t.Fatalf("leader blocked_pods = %v", v)
	}
	if v := testutil.ToFloat64(m.Surges.WithLabelValues("Surged")); v != 1 {
		t.Fatalf("leader surges{phase=Surged} = %v", v)
	}
	f.forget(types.NamespacedName{Namespace: "ns", Name: "model"})
	if n := testutil.CollectAndCount(m.SurgeStartTime); n != 0 {
		t.Fatalf("surge_start_time_seconds kept %d series after the restore", n)
	}
	g.setLeading(false)
	if n := testutil.CollectAndCount(m.BlockedPods); n != 0 {
		t.Fatal("blocked_pods still exported after losing leadership")
	}
}

// Reports tied to no node (a rejected Surge version, a dry-run write) are remembered, but never
// more than maxUnboundReports of them: a guardian running for months keeps bounded memory.
func TestUnboundReportsAreBounded(t *testing.T) {
	s := newReports(clock.RealClock{})
	if !s.once("", "UntrustedSurge/u1/1") || s.once("", "UntrustedSurge/u1/1") {
		t.Fatal("a node-less report is not made exactly once")
	}
	for i := range 3 * maxUnboundReports {
		s.once("", fmt.Sprintf("DryRun/%d", i))
	}
	if n := len(s.unbound); n > maxUnboundReports {
		t.Fatalf("%d node-less report keys kept, want at most %d", n, maxUnboundReports)
	}
	// Node keys are still forgotten with their node's drain.
	s.once("w1", "NoCapacity/p/w1/rendered-2")
	s.forgetNode("w1")
	if !s.once("w1", "NoCapacity/p/w1/rendered-2") {
		t.Fatal("a report of a drain that ended was not forgotten")
	}
}
