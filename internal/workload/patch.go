package workload

import (
	"encoding/json"
)

// op is one JSON-patch (RFC 6902) operation.
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// patch builds a JSON patch whose first operation tests the object's resourceVersion: the write
// succeeds only against the exact object the decision was made on (the API server answers a failed
// test with 422, a stale resourceVersion elsewhere with 409), without a read-modify-write of the whole
// object, which could drop fields this client's types do not know.
type patch struct {
	obj *Object
	ops []op
}

func newPatch(obj *Object) *patch {
	return &patch{obj: obj, ops: []op{{Op: "test", Path: "/metadata/resourceVersion", Value: obj.Meta.GetResourceVersion()}}}
}

// setInt adds or replaces an integer field ("add" replaces an existing member).
func (p *patch) setInt(pointer string, v int64) {
	p.ops = append(p.ops, op{Op: "add", Path: pointer, Value: v})
}

// removeField removes a field if present.
func (p *patch) removeField(pointer string) {
	if p.obj.Has(pointer) {
		p.ops = append(p.ops, op{Op: "remove", Path: pointer})
	}
}

// empty reports whether the patch changes nothing beyond its test.
func (p *patch) empty() bool { return len(p.ops) == 1 }

func (p *patch) bytes() []byte {
	b, err := json.Marshal(p.ops)
	if err != nil {
		panic(err)
	}
	return b
}

// FieldState says where one of a Surge's fields stands on the live target.
type FieldState int

const (
	// FieldAtOriginal: the field has its original value (or is absent, if it was).
	FieldAtOriginal FieldState = iota
	// FieldAtSet: the field has the value the guardian wrote.
	FieldAtSet
	// FieldAtExplicit: the first step of a two-step restore is written (see Field.ExplicitBeforeRemove).
	FieldAtExplicit
	// FieldChanged: the field has some other value: someone else changed it.
	FieldChanged
)

// StateOf compares one field of the target with what the Surge says of it.
func StateOf(target *Object, f Field) FieldState {
	cur, present := target.Int(f.Path)
	switch {
	case f.Original == nil && !present, f.Original != nil && present && cur == *f.Original:
		return FieldAtOriginal
	case present && cur == f.Set:
		return FieldAtSet
	case f.Original == nil && f.ExplicitBeforeRemove != nil && present && cur == *f.ExplicitBeforeRemove:
		return FieldAtExplicit
	}
	return FieldChanged
}

// States returns the state of every field, in order.
func States(target *Object, fields []Field) []FieldState {
	out := make([]FieldState, len(fields))
	for i, f := range fields {
		out[i] = StateOf(target, f)
	}
	return out
}

// SurgePatch writes the surged values of fields on target.
func SurgePatch(target *Object, fields []Field) []byte {
	p := newPatch(target)
	for _, f := range fields {
		p.setInt(f.Path, f.Set)
	}
	return p.bytes()
}

// RestorePatch undoes the surge on target, one step: every field still at its surged value goes back
// to its original (or, for a field with ExplicitBeforeRemove, to that explicit count first); with
// removeExplicit, fields at their explicit count are removed. Fields someone else changed keep their
// value. The patch is nil when there is nothing to write.
func RestorePatch(target *Object, fields []Field, removeExplicit bool) []byte {
	p := newPatch(target)
	for _, f := range fields {
		switch StateOf(target, f) {
		case FieldAtSet:
			switch {
			case f.Original != nil:
				p.setInt(f.Path, *f.Original)
			case f.ExplicitBeforeRemove != nil:
				p.setInt(f.Path, *f.ExplicitBeforeRemove)
			default:
				p.removeField(f.Path)
			}
		case FieldAtExplicit:
			if removeExplicit {
				p.removeField(f.Path)
			}
		}
	}
	if p.empty() {
		return nil
	}
	return p.bytes()
}
