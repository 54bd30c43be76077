package controller

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
)

// A stall deferred for a slot queues for the next free one with the time it first waited; a stall
// no longer deferred, or not looked at again for a while (gone), leaves the queue.
func TestWaitingStallsQueueForSlots(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	f := newFlight(clk, newGauges(metrics.New()))
	f.wait("a", "team-a")
	clk.Step(guardian.DeferRetry)
	if since := f.wait("a", "team-a"); !since.Equal(t0) {
		t.Fatalf("a stall deferred again waits since %s, want since it first waited (%s)", since, t0)
	}
	f.wait("b", "team-b")
	if got := f.view(nil).waiting; len(got) != 2 {
		t.Fatalf("%d stalls waiting, want 2", len(got))
	}
	f.unwait("a")
	waiting := f.view(nil).waiting
	if len(waiting) != 1 || waiting[0].Namespace != "team-b" || !f.waitingSince("a").IsZero() {
		t.Fatalf("after the surge of a: waiting %+v, want only team-b's stall", waiting)
	}
	clk.Step(waitingTTL + time.Second)
	if got := f.view(nil).waiting; len(got) != 0 {
		t.Fatalf("a stall not deferred again for %s still waits: %+v", waitingTTL, got)
	}
}
