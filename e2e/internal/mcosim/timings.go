package mcosim

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Timings are the MCO's delays. RealTimings holds the values of
// machine-config-controller and machine-config-daemon; ScaledTimings
// multiplies them all.
type Timings struct {
	// UpdateDelay is how long the node and drain controllers wait after a
	// change before they act on it (machine-config-controller's updateDelay).
	UpdateDelay time.Duration
	// DrainHelperTimeout bounds one drain attempt (kubectl drain's Timeout).
	DrainHelperTimeout time.Duration
	// DrainRequeueDelay is the wait after a failed attempt.
	DrainRequeueDelay time.Duration
	// DrainRequeueFailingThreshold is how long a drain may fail before the
	// controller slows down to DrainRequeueFailingDelay and emits
	// DrainThresholdExceeded on every failure.
	DrainRequeueFailingThreshold time.Duration
	// DrainRequeueFailingDelay is the wait after a failed attempt once the
	// threshold has passed.
	DrainRequeueFailingDelay time.Duration
	// DrainTimeout is how long a drain may fail before every further attempt
	// emits DrainFailed. The controller keeps retrying forever.
	DrainTimeout time.Duration
	// DaemonDrainTimeout is how long the daemon waits for lastAppliedDrain
	// before it marks the node Degraded (it keeps waiting afterwards).
	DaemonDrainTimeout time.Duration
	// Reboot is how long the node takes to reboot into the new config; it
	// stays cordoned meanwhile.
	Reboot time.Duration
	// PrepareUpdate is how long the daemon takes from seeing its node
	// targeted to deciding the update (reading both rendered
	// MachineConfigs and the node disruption policies) and writing the
	// MachineConfigNode's UpdatePrepared condition: within about a second
	// on a real cluster.
	PrepareUpdate time.Duration
	// ApplyInPlace is how long an update without a reboot takes to write
	// its files and run its post-config actions before the daemon asks for
	// uncordon-<config>. With PrepareUpdate it puts that request 2 to 2.5 s
	// after targeting, as measured for updates that need no drain.
	ApplyInPlace time.Duration
	// CordonBackoff paces retries of a failed cordon or uncordon.
	CordonBackoff wait.Backoff
}

// RealTimings returns the MCO's own delays.
func RealTimings() Timings {
	return Timings{
		UpdateDelay:                  5 * time.Second,
		DrainHelperTimeout:           90 * time.Second,
		DrainRequeueDelay:            time.Minute,
		DrainRequeueFailingThreshold: 10 * time.Minute,
		DrainRequeueFailingDelay:     5 * time.Minute,
		DrainTimeout:                 time.Hour,
		DaemonDrainTimeout:           time.Hour,
		Reboot:                       time.Minute,
		PrepareUpdate:                time.Second,
		ApplyInPlace:                 1250 * time.Millisecond,
		CordonBackoff:                wait.Backoff{Steps: 5, Duration: 10 * time.Second, Factor: 2},
	}
}

// minDelay keeps every scaled delay positive: kubectl drain reads a zero
// timeout as "no timeout".
const minDelay = time.Millisecond

// ScaledTimings returns RealTimings with every delay multiplied by scale
// (1.0 = real MCO timings, 0.05 = 20 times faster).
//
// One delay cannot be scaled: inside a drain attempt, kubectl's drain helper
// waits a fixed 5 s before it retries an eviction refused with 429, so an
// attempt whose pod stays blocked lasts at least 5 s however small scale is.
func ScaledTimings(scale float64) (Timings, error) {
	if math.IsNaN(scale) || math.IsInf(scale, 0) || scale <= 0 {
		return Timings{}, fmt.Errorf("time scale must be a positive number, got %v", scale)
	}
	s := func(d time.Duration) time.Duration {
		return max(time.Duration(float64(d)*scale), minDelay)
	}
	t := RealTimings()
	return Timings{
		UpdateDelay:                  s(t.UpdateDelay),
		DrainHelperTimeout:           s(t.DrainHelperTimeout),
		DrainRequeueDelay:            s(t.DrainRequeueDelay),
		DrainRequeueFailingThreshold: s(t.DrainRequeueFailingThreshold),
		DrainRequeueFailingDelay:     s(t.DrainRequeueFailingDelay),
		DrainTimeout:                 s(t.DrainTimeout),
		DaemonDrainTimeout:           s(t.DaemonDrainTimeout),
		Reboot:                       s(t.Reboot),
		PrepareUpdate:                s(t.PrepareUpdate),
		ApplyInPlace:                 s(t.ApplyInPlace),
		CordonBackoff: wait.Backoff{
			Steps:    t.CordonBackoff.Steps,
			Duration: s(t.CordonBackoff.Duration),
			Factor:   t.CordonBackoff.Factor,
		},
	}, nil
}

// drainRetry is what the drain controller does after a failed attempt.
type drainRetry struct {
	// after is the delay before the next attempt.
	after time.Duration
	// thresholdExceeded: emit DrainThresholdExceeded with this failure.
	thresholdExceeded bool
}

// nextDrainRetry decides the requeue after a failed drain attempt. failingFor
// is how long the node had been draining when the attempt started (zero for
// the first attempt after a cordon), as in the MCO.
func nextDrainRetry(failingFor time.Duration, t Timings) drainRetry {
	if failingFor > t.DrainRequeueFailingThreshold {
		return drainRetry{after: t.DrainRequeueFailingDelay, thresholdExceeded: true}
	}
	return drainRetry{after: t.DrainRequeueDelay}
}

// drainTimedOut reports whether an attempt that starts after the node has
// been draining for failingFor emits DrainFailed.
func drainTimedOut(failingFor time.Duration, t Timings) bool {
	return failingFor > t.DrainTimeout
}
