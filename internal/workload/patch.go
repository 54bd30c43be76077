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
// succeeds only against the exact object the decision was made on, and fails with 409 Conflict
// otherwise, without a read-modify-write of the whole object (which could drop fields this client's
// types do not know).
type patch struct {
	obj *Object
	ops []op
}

func newPatch(obj *Object) *patch {
	return &patch{obj: obj, ops: []op{{Op: "test", Path: "/metadata/resourceVersion", Value: obj.Meta.GetResourceVersion()}}}
}

// setAnnotation adds or replaces an annotation, creating the annotations map when the object has none.
func (p *patch) setAnnotation(key, value string) {
	if p.obj.Meta.GetAnnotations() == nil && !p.hasAnnotationsOp() {
		p.ops = append(p.ops, op{Op: "add", Path: "/metadata/annotations", Value: map[string]string{key: value}})
		return
	}
	p.ops = append(p.ops, op{Op: "add", Path: "/metadata/annotations/" + escape(key), Value: value})
}

func (p *patch) hasAnnotationsOp() bool {
	for _, o := range p.ops {
		if o.Path == "/metadata/annotations" {
			return true
		}
	}
	return false
}

// removeAnnotation removes an annotation if the object has it.
func (p *patch) removeAnnotation(key string) {
	if _, ok := p.obj.Meta.GetAnnotations()[key]; ok {
		p.ops = append(p.ops, op{Op: "remove", Path: "/metadata/annotations/" + escape(key)})
	}
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

func (p *patch) bytes() []byte {
	b, err := json.Marshal(p.ops)
	if err != nil {
		panic(err)
	}
	return b
}

// SurgePatch writes the record and the surged fields in one atomic write, so that no state exists in
// which the object is scaled without a record saying how to undo it. It also drops a remembered failure.
func SurgePatch(obj *Object, rec *Record) []byte {
	p := newPatch(obj)
	p.setAnnotation(RecordAnnotation, rec.Encode())
	p.removeAnnotation(FailureAnnotation)
	for _, f := range rec.Fields {
		p.setInt(f.Path, f.Set)
	}
	return p.bytes()
}

// RecordPatch replaces the record, leaving every field alone.
func RecordPatch(obj *Object, rec *Record) []byte {
	p := newPatch(obj)
	p.setAnnotation(RecordAnnotation, rec.Encode())
	return p.bytes()
}

// RestoreStep is what one restore write does.
type RestoreStep struct {
	Patch []byte
	// Done is true when the patch removes the record; false when a two-step restore wrote an explicit
	// count first and must be called again once the workload scaled down.
	Done bool
	// Kept lists the fields someone else changed during the surge: their value stays.
	Kept []Field
}

// PlanRestore builds the write that undoes rec on obj. A field whose current value differs from what
// the guardian set was changed by someone else (GitOps, a person, an operator): it keeps that value and
// is reported in Kept. reason is kept in the record between the two steps of a two-step restore;
// failure, when not nil, is remembered on the object.
func PlanRestore(obj *Object, rec *Record, reason string, failure *Failure) RestoreStep {
	p := newPatch(obj)
	step := RestoreStep{Done: true}
	for _, f := range rec.Fields {
		cur, present := obj.Int(f.Path)
		if rec.Restoring != "" {
			// Second step of a two-step restore: the first step restored every other field and wrote
			// the explicit count; remove that field unless someone changed it since.
			if f.Original == nil && f.ExplicitBeforeRemove != nil {
				if present && cur == *f.ExplicitBeforeRemove {
					p.removeField(f.Path)
				} else {
					step.Kept = append(step.Kept, f)
				}
			}
			continue
		}
		switch {
		case !present || cur != f.Set:
			step.Kept = append(step.Kept, f)
		case f.Original != nil:
			p.setInt(f.Path, *f.Original)
		case f.ExplicitBeforeRemove != nil:
			p.setInt(f.Path, *f.ExplicitBeforeRemove)
			step.Done = false
		default:
			p.removeField(f.Path)
		}
	}
	if !step.Done {
		next := *rec
		next.Restoring = reason
		if failure != nil {
			next.RestoreFailure = failure.Reason
		}
		p.setAnnotation(RecordAnnotation, next.Encode())
	} else {
		p.removeAnnotation(RecordAnnotation)
		if failure != nil {
			p.setAnnotation(FailureAnnotation, failure.Encode())
		}
	}
	step.Patch = p.bytes()
	return step
}

// The patches below serve surges whose record lives on another object than the fields they change
// (Record.Target). Each write is one level-driven step; a crash between two steps is resumed from the
// record.

// StartRecordPatch persists a new (pending) record on its carrier and drops a remembered failure.
func StartRecordPatch(carrier *Object, rec *Record) []byte {
	p := newPatch(carrier)
	p.setAnnotation(RecordAnnotation, rec.Encode())
	p.removeAnnotation(FailureAnnotation)
	return p.bytes()
}

// FieldsPatch writes the surged values of fields on target.
func FieldsPatch(target *Object, fields []Field) []byte {
	p := newPatch(target)
	for _, f := range fields {
		p.setInt(f.Path, f.Set)
	}
	return p.bytes()
}

// FieldsAt says where a target's fields stand relative to a record.
type FieldsAt int

const (
	// AtOriginal: every field still has its original value (absent ones absent): the surge is not written.
	AtOriginal FieldsAt = iota
	// AtSet: every field has the surged value.
	AtSet
	// Changed: some field has another value: someone else changed it.
	Changed
)

// FieldsState compares target's fields with the record.
func FieldsState(target *Object, rec *Record) FieldsAt {
	set, orig := true, true
	for _, f := range rec.Fields {
		cur, present := target.Int(f.Path)
		set = set && present && cur == f.Set
		orig = orig && atOriginal(f, cur, present)
	}
	switch {
	case set:
		return AtSet
	case orig:
		return AtOriginal
	}
	return Changed
}

func atOriginal(f Field, cur int64, present bool) bool {
	if f.Original == nil {
		return !present
	}
	return present && cur == *f.Original
}

// RestoreFieldsPatch restores target's fields in one step. Fields already back at their original
// value (a restore resumed after a crash) are left alone; fields someone else changed are kept and
// returned. The patch is nil when there is nothing to write.
func RestoreFieldsPatch(target *Object, rec *Record) ([]byte, []Field) {
	p := newPatch(target)
	var kept []Field
	for _, f := range rec.Fields {
		cur, present := target.Int(f.Path)
		switch {
		case atOriginal(f, cur, present):
		case !present || cur != f.Set:
			kept = append(kept, f)
		case f.Original != nil:
			p.setInt(f.Path, *f.Original)
		default:
			p.removeField(f.Path)
		}
	}
	if len(p.ops) == 1 {
		return nil, kept
	}
	return p.bytes(), kept
}

// FinishPatch removes the record from its carrier, remembering failure when not nil.
func FinishPatch(carrier *Object, failure *Failure) []byte {
	p := newPatch(carrier)
	p.removeAnnotation(RecordAnnotation)
	if failure != nil {
		p.setAnnotation(FailureAnnotation, failure.Encode())
	}
	return p.bytes()
}
