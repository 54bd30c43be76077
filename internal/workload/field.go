package workload

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
)

// Field is one integer field the guardian changes, with its original value; it is stored as is in
// the Surge.
type Field = v1alpha1.Field

// UnsupportedError says why a workload is reported instead of surged.
type UnsupportedError struct {
	// Detail is a human sentence for the Event.
	Detail string
}

func (e *UnsupportedError) Error() string { return e.Detail }

func unsupported(format string, args ...any) error {
	return &UnsupportedError{Detail: fmt.Sprintf(format, args...)}
}

// NotServedError says that the API of a kind is not served, or its cache not synced yet: the object
// may well exist, so nothing may be concluded from its absence.
type NotServedError struct{ Kind Kind }

func (e *NotServedError) Error() string {
	return fmt.Sprintf("%s is not served by this cluster, or its cache has not synced yet", e.Kind)
}

func notFound(ref Ref) error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: string(ref.Kind)}, ref.Name)
}

// raise plans field = max(its value, current) + delta, where an absent field counts as absentMeans.
func raise(obj *Object, path string, absentMeans int64, current, delta int32) Field {
	f := Field{Path: path}
	base := absentMeans
	if v, ok := obj.Int(path); ok {
		f.Original = &v
		base = v
	}
	base = max(base, int64(current))
	f.Set = base + int64(delta)
	return f
}

// withMax adds the maximum field when it would otherwise be below the raised minimum: the HPA and
// KServe's validation both reject min > max. An absent or zero KServe maxReplicas sets no bound;
// an HPA's maxReplicas is required.
func withMax(obj *Object, path string, min Field, required bool) []Field {
	fields := []Field{min}
	v, ok := obj.Int(path)
	if !ok && !required {
		return fields
	}
	if !required && v == 0 {
		return fields
	}
	if v < min.Set {
		orig := v
		f := Field{Path: path, Set: min.Set}
		if ok {
			f.Original = &orig
		}
		fields = append(fields, f)
	}
	return fields
}
