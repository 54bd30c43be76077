package guardian

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// Ledger is the capacity one sync (or one wave of a prediction) books surges against: every node
// with its pods, as the capacity sources count them, and the replacements the scheduler has still to
// place, which come first. A surge decided books its replacements, so the next stall of the same
// ledger cannot take the same room.
type Ledger struct {
	load     func() *capacity.Capacity
	capacity *capacity.Capacity
	pending  []*podinfo.Pod
	booked   int
}

// NewLedger returns a ledger over the capacity, with the pending replacements placed first. It keeps
// the pending slice; the caller must not change it afterwards.
func NewLedger(c *capacity.Capacity, pending []*podinfo.Pod) *Ledger {
	return &Ledger{capacity: c, pending: pending[:len(pending):len(pending)]}
}

// NewLazyLedger is NewLedger with the capacity read on first use: reading it lists every node and
// pod of the cluster, and the devices of Dynamic Resource Allocation, which a sync whose stalls need
// no placement never does.
func NewLazyLedger(c func() *capacity.Capacity, pending []*podinfo.Pod) *Ledger {
	return &Ledger{load: c, pending: pending[:len(pending):len(pending)]}
}

func (l *Ledger) room() *capacity.Capacity {
	if l.load != nil {
		l.capacity, l.load = l.load(), nil
	}
	return l.capacity
}

// Fit places n replacements of pod after everything booked; it books nothing (see capacity.Capacity.Fit).
func (l *Ledger) Fit(pod *podinfo.Pod, n int) (int, capacity.Shortfall) {
	return l.room().Fit(pod, n, l.pending)
}

// FitWhere is Fit on the candidates keep accepts, with extra replacements placed before pod's.
func (l *Ledger) FitWhere(pod *podinfo.Pod, n int, keep func(*corev1.Node) bool, extra []*podinfo.Pod) (int, capacity.Shortfall) {
	return l.room().Where(keep).Fit(pod, n, l.with(extra))
}

// FitStall places n replacements of the stall's workload after everything booked, on the candidates
// keep accepts (nil: all), with extra replacements placed first: n pods like the blocked one, or,
// for a multi-node workload, n whole groups (see capacity.Capacity.FitGroups). It books nothing.
func (l *Ledger) FitStall(st *Stall, n int, keep func(*corev1.Node) bool, extra []*podinfo.Pod) (int, capacity.Shortfall) {
	if st.Group == nil {
		if keep == nil && extra == nil {
			return l.Fit(st.Pod, n)
		}
		return l.FitWhere(st.Pod, n, keep, extra)
	}
	return l.room().Where(keep).FitGroups(st.Group, n, st.Pod.Spec.NodeName, l.with(extra))
}

// with returns the pending replacements followed by extra, in a slice of its own.
func (l *Ledger) with(extra []*podinfo.Pod) []*podinfo.Pod {
	return append(append(make([]*podinfo.Pod, 0, len(l.pending)+len(extra)), l.pending...), extra...)
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
