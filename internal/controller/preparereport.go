package controller

import (
	"fmt"
	"strings"
	"sync"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/metrics"
)

// How a pool being prepared is counted and told: its workloads by state, its readiness Event, and
// the gauge of its prepared workloads.

// prepareCounts are the pool's workloads that would stall its next update, by state; the notes of
// those not prepared say why. A workload with a Surge is counted once, by its Surge's name.
type prepareCounts struct {
	byState map[string]int
	notes   map[string][]string
	surges  map[string]bool
}

func (pc *prepareCounts) add(state, note, surge string) {
	if surge != "" {
		if pc.surges[surge] {
			return
		}
		if pc.surges == nil {
			pc.surges = map[string]bool{}
		}
		pc.surges[surge] = true
	}
	if pc.byState == nil {
		pc.byState = map[string]int{}
		pc.notes = map[string][]string{}
	}
	pc.byState[state]++
	if note != "" {
		pc.notes[state] = append(pc.notes[state], note)
	}
}

// why says what the workloads not prepared wait for: the waiting ones first, then the unresolvable.
func (pc *prepareCounts) why() string {
	return strings.Join(append(append([]string{}, pc.notes[metrics.PreparedWaiting]...), pc.notes[metrics.PreparedUnresolvable]...), "; ")
}

// reportPrepared records the pool's readiness Event: PoolPrepared once every workload that would
// stall its update is prepared, PoolPreparing while some are being prepared, else PoolPartlyPrepared;
// with the counts and what waits.
func (r *poolReconciler) reportPrepared(pool *mcfgv1.MachineConfigPool, config string, pc prepareCounts) {
	total := 0
	for _, n := range pc.byState {
		total += n
	}
	ready := pc.byState[metrics.PreparedReady]
	if ready == total {
		r.reportPrepare(pool, corev1.EventTypeNormal, ReasonPoolPrepared,
			"Pool %s is prepared for %s: %d of %d workloads that would stall its update have a Ready extra replica", pool.Name, config, ready, total)
		return
	}
	eventType := corev1.EventTypeNormal
	if pc.byState[metrics.PreparedUnresolvable] > 0 {
		eventType = corev1.EventTypeWarning
	}
	if pc.byState[metrics.PreparedStarting] == 0 {
		r.reportPrepare(pool, eventType, ReasonPoolPartlyPrepared,
			"Pool %s is prepared for %s as far as it can be now: %d of %d workloads that would stall its update prepared, %d waiting, %d unresolvable: %s",
			pool.Name, config, ready, total, pc.byState[metrics.PreparedWaiting], pc.byState[metrics.PreparedUnresolvable], pc.why())
		return
	}
	r.reportPrepare(pool, eventType, ReasonPoolPreparing,
		"Pool %s prepares for %s: %d of %d workloads that would stall its update prepared, %d preparing, %d waiting, %d unresolvable: %s",
		pool.Name, config, ready, total, pc.byState[metrics.PreparedStarting], pc.byState[metrics.PreparedWaiting],
		pc.byState[metrics.PreparedUnresolvable], pc.why())
}

// reportPrepare records an Event on the pool when its note differs from the last one recorded.
func (r *poolReconciler) reportPrepare(pool *mcfgv1.MachineConfigPool, eventType, reason, format string, args ...any) {
	note := fmt.Sprintf(format, args...)
	if !r.preparations.changed(pool.Name, reason+note) {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: mcfgv1.GroupVersion.String(), Kind: "MachineConfigPool", Name: pool.Name, UID: pool.UID}
	r.event(ref, eventType, reason, actionPrepare, "%s", note)
}

// preparations remembers, per pool being prepared, the last Event recorded and the states gauged,
// so that an unchanged pool records nothing and a pool no longer prepared loses its series.
type preparations struct {
	mu     sync.Mutex
	last   map[string]string
	gauged map[string]bool
}

// changed records note as the pool's last and reports whether it differs from the one before.
func (p *preparations) changed(pool, note string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string]string{}
	}
	if p.last[pool] == note {
		return false
	}
	p.last[pool] = note
	return true
}

// set exports the pool's counts, every state included, so that a state emptied reads 0.
func (p *preparations) set(pool string, pc prepareCounts, m *metrics.Metrics) {
	p.mu.Lock()
	if p.gauged == nil {
		p.gauged = map[string]bool{}
	}
	p.gauged[pool] = true
	p.mu.Unlock()
	for _, s := range metrics.PreparedStates() {
		m.PreparedWorkloads.WithLabelValues(pool, s).Set(float64(pc.byState[s]))
	}
}

// forget drops a pool no longer prepared: its series and its last Event.
func (p *preparations) forget(pool string, m *metrics.Metrics) {
	p.mu.Lock()
	gauged := p.gauged[pool]
	delete(p.gauged, pool)
	delete(p.last, pool)
	p.mu.Unlock()
	if gauged {
		m.PreparedWorkloads.DeletePartialMatch(map[string]string{"pool": pool})
	}
}
