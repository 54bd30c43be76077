package controller

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

func TestOnlyTheLeaderReportsSurgeAndBlockedGauges(t *testing.T) {
	m := metrics.New()
	s := newState(m)
	ref := workload.Ref{Kind: workload.KindDeployment, Namespace: "ns", Name: "model"}
	s.track(trackedSurge{ref: ref, pool: "worker", start: t0})
	s.setNode("w1", &nodeStats{pool: "worker", blocked: 1})
	if n := testutil.CollectAndCount(m.SurgesActive) + testutil.CollectAndCount(m.BlockedPods) + testutil.CollectAndCount(m.SurgeStartTime); n != 0 {
		t.Fatalf("a standby replica exports %d surge/blocked series", n)
	}
	s.setLeading(true)
	if v := testutil.ToFloat64(m.SurgesActive.WithLabelValues("worker", "Deployment")); v != 1 {
		t.Fatalf("leader surges_active = %v", v)
	}
	if v := testutil.ToFloat64(m.SurgeStartTime.WithLabelValues("ns", "model", "Deployment")); v != float64(t0.Unix()) {
		t.Fatalf("leader surge_start_time_seconds = %v", v)
	}
	if v := testutil.ToFloat64(m.BlockedPods.WithLabelValues("worker")); v != 1 {
		t.Fatalf("leader blocked_pods = %v", v)
	}
	s.untrack(ref)
	if n := testutil.CollectAndCount(m.SurgeStartTime); n != 0 {
		t.Fatalf("surge_start_time_seconds kept %d series after the restore", n)
	}
	s.setLeading(false)
	if n := testutil.CollectAndCount(m.BlockedPods); n != 0 {
		t.Fatal("blocked_pods still exported after losing leadership")
	}
}
