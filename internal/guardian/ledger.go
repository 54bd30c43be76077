package guardian

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// Ledger is the capacity one sync (or one wave of a prediction) books surges against: every node
// with its pods, and the replacements the scheduler has still to place, which come first. A surge
// decided books its replacements, so the next stall of the same ledger cannot take the same room.
type Ledger struct {
	load       func() []capacity.Candidate
	candidates []capacity.Candidate
	// loadDevices lists the devices on first use, as load does the candidates; nil when the
	// cluster serves no Dynamic Resource Allocation.
	loadDevices func() *capacity.Devices
	devices     *capacity.Devices
	pending     []*podinfo.Pod
	booked      int
}

// NewLedger returns a ledger over the candidates, with the pending replacements placed first. It
// keeps both slices; the caller must not change them afterwards.
func NewLedger(candidates []capacity.Candidate, pending []*podinfo.Pod) *Ledger {
	return &Ledger{candidates: candidates, pending: pending[:len(pending):len(pending)]}
}

// NewLazyLedger is NewLedger with the candidates listed on first use: listing them reads every node
// and pod of the cluster, which a sync whose stalls need no placement never does.
func NewLazyLedger(candidates func() []capacity.Candidate, pending []*podinfo.Pod) *Ledger {
	return &Ledger{load: candidates, pending: pending[:len(pending):len(pending)]}
}

// WithDevices makes the ledger count the devices of Dynamic Resource Allocation too, listed on
// first use; it returns l.
func (l *Ledger) WithDevices(devices func() *capacity.Devices) *Ledger {
	l.loadDevices = devices
	return l
}

func (l *Ledger) nodes() []capacity.Candidate {
	if l.load != nil {
		l.candidates, l.load = l.load(), nil
	}
	if l.loadDevices != nil {
		l.devices, l.loadDevices = l.loadDevices(), nil
	}
	return l.candidates
}

// Fit places n replacements of pod after everything booked; it books nothing (see capacity.Fit).
func (l *Ledger) Fit(pod *podinfo.Pod, n int) (int, capacity.Shortfall) {
	cands := l.nodes()
	return capacity.Fit(pod, n, l.pending, cands, l.devices)
}

// FitWhere is Fit on the candidates keep accepts, with extra replacements placed before pod's.
func (l *Ledger) FitWhere(pod *podinfo.Pod, n int, keep func(*corev1.Node) bool, extra []*podinfo.Pod) (int, capacity.Shortfall) {
	var cands []capacity.Candidate
	for _, c := range l.nodes() {
		if keep == nil || keep(c.Node) {
			cands = append(cands, c)
		}
	}
	pending := append(append(make([]*podinfo.Pod, 0, len(l.pending)+len(extra)), l.pending...), extra...)
	return capacity.Fit(pod, n, pending, cands, l.devices)
}

// FitStall places n replacements of the stall's workload after everything booked, on the candidates
// keep accepts (nil: all), with extra replacements placed first: n pods like the blocked one, or,
// for a multi-node workload, n whole groups (see capacity.FitGroups). It books nothing.
func (l *Ledger) FitStall(st *Stall, n int, keep func(*corev1.Node) bool, extra []*podinfo.Pod) (int, capacity.Shortfall) {
	if st.Group == nil {
		if keep == nil && extra == nil {
			return l.Fit(st.Pod, n)
		}
		return l.FitWhere(st.Pod, n, keep, extra)
	}
	var cands []capacity.Candidate
	for _, c := range l.nodes() {
		if keep == nil || keep(c.Node) {
			cands = append(cands, c)
		}
	}
	pending := append(append(make([]*podinfo.Pod, 0, len(l.pending)+len(extra)), l.pending...), extra...)
	return capacity.FitGroups(st.Group, n, st.Pod.Spec.NodeName, pending, cands, l.devices)
}

// BookStall counts the n replacements of the stall's workload just decided as pending: n pods, or
// n groups of pods.
func (l *Ledger) BookStall(st *Stall, n int) {
	if st.Group == nil {
		l.Book(st.Pod, n)
		return
	}
	for range n {
		for _, p := range st.Group.Pods {
			l.Book(p, 1)
		}
	}
}

// Book counts n replacements of pod, just decided, as pending.
func (l *Ledger) Book(pod *podinfo.Pod, n int) {
	for range n {
		l.pending = append(l.pending, Replacement(pod))
		l.booked++
	}
}

// Booked returns the replacements booked on this ledger, in order.
func (l *Ledger) Booked() []*podinfo.Pod {
	return l.pending[len(l.pending)-l.booked:]
}

// Replacement is a stand-in for a replacement of pod the scheduler has still to place.
func Replacement(pod *podinfo.Pod) *podinfo.Pod {
	return pod.Unscheduled(pod.Name + "-replacement")
}
