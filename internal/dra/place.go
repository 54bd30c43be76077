package dra

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// place finds devices for need on node without booking them: every request in order, each from the
// first of its alternatives that fits (firstAvailable), a device taken by an earlier request not
// offered to a later one.
func (inv *Inventory) place(node *corev1.Node, need Need) (Result, []*device) {
	r := Result{Verdict: Fits}
	if need.Unresolved != "" {
		return Result{Verdict: DoesNotFit, Reason: need.Unresolved}, nil
	}
	for _, sel := range need.Pinned {
		if ok, err := nodeaffinity.NewLazyErrorNodeSelector(sel).Match(node); err != nil || !ok {
			return Result{Verdict: DoesNotFit, Reason: "a shared ResourceClaim is allocated to devices this node cannot reach"}, nil
		}
	}
	if len(need.Requests) == 0 {
		return r, nil
	}
	devs := inv.reachable(node)
	inTrial := map[*device]bool{}
	var took []*device
	var reasons []string
	for _, req := range need.Requests {
		got, v, why := inv.request(devs, inTrial, req)
		for _, d := range got {
			inTrial[d] = true
		}
		took = append(took, got...)
		switch v {
		case DoesNotFit:
			a := req.Alternatives[0]
			if r.Missing == nil {
				r.Missing = map[string]int64{}
			}
			r.Missing[a.Class] += why.missing
			r.Verdict = DoesNotFit
		case Unknown:
			if r.Verdict == Fits {
				r.Verdict = Unknown
			}
			reasons = append(reasons, why.reason)
		}
	}
	if need.Constrained && r.Verdict == Fits {
		r.Verdict = Unknown
		reasons = append(reasons, "constraints between the devices of a claim")
	}
	if r.Verdict == Unknown {
		r.Reason = strings.Join(dedupe(reasons), ", ")
	}
	if r.Verdict == DoesNotFit {
		return r, nil
	}
	for _, d := range took {
		r.Devices = append(r.Devices, d.id)
	}
	return r, took
}

type shortfall struct {
	missing int64
	reason  string
}

// request satisfies one request from the free devices: its first alternative that Fits, else its
// first that is Unknown, else DoesNotFit with the first alternative's shortfall.
func (inv *Inventory) request(devs []*device, inTrial map[*device]bool, req Request) ([]*device, Verdict, shortfall) {
	var unknown []*device
	var unknownWhy, first shortfall
	found := false
	for i, a := range req.Alternatives {
		got, v, why := inv.alternative(devs, inTrial, a)
		switch {
		case v == Fits:
			return got, Fits, shortfall{}
		case v == Unknown && !found:
			unknown, unknownWhy, found = got, why, true
		case i == 0:
			first = why
		}
	}
	if found {
		return unknown, Unknown, unknownWhy
	}
	return nil, DoesNotFit, first
}

// alternative picks devices for one alternative: Count free matching devices, those the count is
// sure of first; or, for All, every matching device reachable from the node, all of which must be
// free (the scheduler allocates All only when none of them is in use).
func (inv *Inventory) alternative(devs []*device, inTrial map[*device]bool, a Alternative) ([]*device, Verdict, shortfall) {
	var sure, maybe []*device
	reasons := []string{}
	if a.Capacity {
		reasons = append(reasons, "consumable capacity requested")
	}
	busy := false
	for _, d := range devs {
		if a.All && d.incomplete {
			return nil, DoesNotFit, shortfall{missing: 1}
		}
		inUse := inv.taken[d.index] || inTrial[d]
		// A device in use matters only to All (which it defeats when it matches): the CEL
		// evaluation is skipped for the others.
		if (inUse && !a.All) || !inv.match(d, a) {
			continue
		}
		if inUse {
			busy = true
			continue
		}
		if d.unsure == "" && !a.Capacity {
			sure = append(sure, d)
		} else {
			maybe = append(maybe, d)
			reasons = append(reasons, d.unsure)
		}
	}
	if a.All {
		switch {
		case busy || len(sure)+len(maybe) == 0:
			return nil, DoesNotFit, shortfall{missing: 1}
		case len(maybe) > 0:
			return append(sure, maybe...), Unknown, shortfall{reason: strings.Join(dedupe(reasons), ", ")}
		}
		return sure, Fits, shortfall{}
	}
	switch {
	case int64(len(sure)) >= a.Count:
		return sure[:a.Count], Fits, shortfall{}
	case int64(len(sure)+len(maybe)) >= a.Count:
		all := append(sure, maybe...)
		return all[:a.Count], Unknown, shortfall{reason: strings.Join(dedupe(reasons), ", ")}
	}
	return nil, DoesNotFit, shortfall{missing: a.Count - int64(len(sure)+len(maybe))}
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	out := in[:0:0]
	for _, s := range in {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
