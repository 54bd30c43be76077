package capacity

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// Source is one kind of capacity a replacement takes on a node: node allocatable (Allocatable), the
// devices of Dynamic Resource Allocation (Devices). A replacement fits on a node when it may run
// there (readiness, taints, affinity: see Fit) and every source says what it counts fits; placing it
// books on every source. A new source is a type implementing Source and its line in Standard.
type Source interface {
	// Open starts one placement run (one Fit or FitGroups): the Book it returns holds what the run's
	// placements take. The source itself never changes: the next run starts over from it.
	Open() Book
	// Asks adds to into what one replacement of pod asks of the source, named as a Shortfall lists
	// it: what a replacement that fits nowhere misses.
	Asks(pod *podinfo.Pod, into corev1.ResourceList)
	// Free adds to into, per countable resource (an extended resource, the devices of a DeviceClass
	// as DeviceClassResource), what the candidates have free: the sum a prediction's plan compares
	// its surges with. A source that counts nothing of the kind adds nothing.
	Free(candidates []Candidate, into map[string]int64)
}

// Book is what one source counts during one placement run.
type Book interface {
	// Ask returns what pod asks of the source, worked out once for every node it is tried on.
	Ask(pod *podinfo.Pod) Ask
	// Mark starts a transaction: undo takes back every Take since (a group placed whole or not at all).
	Mark() (undo func())
	// Forget drops the reasons gathered so far: only a pod's own placements explain its shortfall.
	Forget()
	// Reasons says why placements were refused for a reason other than what the source lacks: unsure,
	// what the source cannot judge; refused, anything else. "" when none.
	Reasons() (unsure, refused string)
}

// Ask is what one pod asks of a source, tried on one node after the other. For each node the
// placement calls Claim on every source in list order, then Fits in list order until one refuses,
// then, when none did, Take on every source.
type Ask interface {
	// Claim returns requests, the pod's requests the sources before it left, without those this
	// source counts itself on node (DRA serves an extended resource no device plugin lists there).
	// The requests no source claims are node allocatable's: they are added to the candidate's Used.
	Claim(node *corev1.Node, requests corev1.ResourceList) corev1.ResourceList
	// Fits reports whether what the pod asks of the source fits on c after the run's bookings;
	// unclaimed are the requests no source claimed on c's node. It books nothing.
	Fits(c *Candidate, unclaimed corev1.ResourceList) bool
	// Take books on c what Fits accepted.
	Take(c *Candidate)
}

// Sources is the list of capacity sources a placement counts, in the order they are asked.
type Sources []Source

// Standard is the list the guardian counts: node allocatable, then, when the cluster serves
// Dynamic Resource Allocation, its devices (nil: none). The cheapest come first: a node whose
// allocatable refuses the pod costs no device placement, and says nothing about its devices in a
// shortfall. A new source is one more line here.
func Standard(devices *Devices) Sources {
	return Sources{
		Allocatable{},
		devices,
	}
}

// Asks is what one replacement of pod asks of every source: its requests and, per DeviceClass, the
// devices its claims ask anew.
func (s Sources) Asks(pod *podinfo.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, src := range s {
		src.Asks(pod, out)
	}
	return out
}

// Free counts, per countable resource, what the candidates have free (see Source.Free).
func (s Sources) Free(candidates []Candidate) map[string]int64 {
	out := map[string]int64{}
	for _, src := range s {
		src.Free(candidates, out)
	}
	return out
}

// books is one placement run's Book of every source, in the sources' order.
type books []Book

func (s Sources) open() books {
	out := make(books, len(s))
	for i, src := range s {
		out[i] = src.Open()
	}
	return out
}

// asks returns what pod asks of every source.
func (b books) asks(pod *podinfo.Pod) []Ask {
	out := make([]Ask, len(b))
	for i, book := range b {
		out[i] = book.Ask(pod)
	}
	return out
}

func (b books) mark() (undo func()) {
	undos := make([]func(), len(b))
	for i, book := range b {
		undos[i] = book.Mark()
	}
	return func() {
		for _, u := range undos {
			u()
		}
	}
}

func (b books) forget() {
	for _, book := range b {
		book.Forget()
	}
}

// reasons joins the sources' reasons, in the sources' order.
func (b books) reasons() (unsure, refused string) {
	var u, r []string
	for _, book := range b {
		bu, br := book.Reasons()
		if bu != "" {
			u = append(u, bu)
		}
		if br != "" {
			r = append(r, br)
		}
	}
	return strings.Join(u, ", "), strings.Join(r, ", ")
}

// none is the Book and Ask of a source that counts nothing in a run (Devices without DRA).
type none struct{}

func (none) Ask(*podinfo.Pod) Ask { return none{} }
func (none) Mark() func()         { return func() {} }
func (none) Forget()              {}
func (none) Reasons() (string, string) {
	return "", ""
}
func (none) Claim(_ *corev1.Node, requests corev1.ResourceList) corev1.ResourceList { return requests }
func (none) Fits(*Candidate, corev1.ResourceList) bool                              { return true }
func (none) Take(*Candidate)                                                        {}
