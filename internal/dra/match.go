package dra

import (
	"context"
	"strings"

	dracel "k8s.io/dynamic-resource-allocation/cel"
)

// matcher evaluates the CEL selectors of classes and requests against devices with the library the
// scheduler uses (k8s.io/dynamic-resource-allocation/cel) and its default cost limit, so that a
// tenant's expression costs the guardian no more than it costs the scheduler. Programs and verdicts
// are remembered for the Inventory's life: an analysis asks about the same devices many times.
type matcher struct {
	programs map[string]dracel.CompilationResult
	verdicts map[matchKey]bool
}

type matchKey struct {
	d         *device
	selectors string
}

func newMatcher() *matcher {
	return &matcher{programs: map[string]dracel.CompilationResult{}, verdicts: map[matchKey]bool{}}
}

// match reports whether the device is of the alternative's class and passes its selectors. A class
// that does not exist, an expression that does not compile or fails to evaluate matches nothing: the
// scheduler fails such a claim too.
func (inv *Inventory) match(d *device, a Alternative) bool {
	class, ok := inv.classes[a.Class]
	if !ok {
		return false
	}
	exprs := make([]string, 0, len(class.Spec.Selectors)+len(a.Selectors))
	for _, s := range class.Spec.Selectors {
		if s.CEL != nil {
			exprs = append(exprs, s.CEL.Expression)
		}
	}
	exprs = append(exprs, a.Selectors...)
	key := matchKey{d, strings.Join(exprs, "\x00")}
	if v, ok := inv.matcher.verdicts[key]; ok {
		return v
	}
	v := true
	for _, e := range exprs {
		if !inv.matcher.eval(e, d) {
			v = false
			break
		}
	}
	inv.matcher.verdicts[key] = v
	return v
}

func (m *matcher) eval(expr string, d *device) bool {
	p, ok := m.programs[expr]
	if !ok {
		p = dracel.GetCompiler(dracel.Features{}).CompileCELExpression(expr, dracel.Options{})
		m.programs[expr] = p
	}
	if p.Error != nil {
		return false
	}
	ok, _, err := p.DeviceMatches(context.Background(), dracel.Device{
		Driver: d.id.Driver, AllowMultipleAllocations: d.api.AllowMultipleAllocations,
		Attributes: d.api.Attributes, Capacity: d.api.Capacity,
	})
	return err == nil && ok
}
