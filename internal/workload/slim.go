package workload

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// annotationsRead are the only annotations the guardian reads on the objects it scales.
var annotationsRead = []string{IgnoreAnnotation, AutoscalerClassAnnotation}

// ReadAnnotations returns the annotations the guardian reads (the opt-out, KServe's autoscaler
// class) of a, or nil when it has none of them.
func ReadAnnotations(a map[string]string) map[string]string {
	var out map[string]string
	for _, k := range annotationsRead {
		if v, ok := a[k]; ok {
			if out == nil {
				out = make(map[string]string, 1)
			}
			out[k] = v
		}
	}
	return out
}

// SlimKServe returns what the guardian reads of a KServe object, for the informer's cache: its
// identity, the annotations it reads, and the spec fields its kind's handler reads (a field whose
// presence only is read is kept as an empty object). A tenant's InferenceService can carry a
// megabyte of spec, labels and annotations; the cache keeps a few hundred bytes of it. The guardian
// never writes a cached object back (its writes are JSON patches of the fields it surges, tested
// against the resourceVersion), so nothing dropped here is lost on the server. Objects of other
// kinds are returned as they are.
func SlimKServe(u *unstructured.Unstructured) *unstructured.Unstructured {
	k, ok := kinds[Kind(u.GetKind())].(kserveKind)
	if !ok {
		return u
	}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetGeneration(u.GetGeneration())
	if t := u.GetDeletionTimestamp(); t != nil {
		out.SetDeletionTimestamp(t)
	}
	if a := ReadAnnotations(u.GetAnnotations()); a != nil {
		out.SetAnnotations(a)
	}
	obj := &Object{Content: u.Object}
	values, present := k.reads()
	for _, p := range values {
		if v, ok := valueAt(u.Object, p); ok {
			setAt(out.Object, p, v)
		}
	}
	for _, p := range present {
		if obj.Has(p) {
			setAt(out.Object, p, map[string]any{})
		}
	}
	return out
}

// setAt sets the value at a JSON pointer, creating the objects on its way.
func setAt(m map[string]any, pointer string, v any) {
	toks := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	for _, tok := range toks[:len(toks)-1] {
		next, ok := m[tok].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[tok] = next
		}
		m = next
	}
	m[toks[len(toks)-1]] = v
}

// SlimMeta keeps, of a scaled object's metadata, what the guardian reads: identity, owners,
// lifecycle and the annotations it reads. Labels are not read.
func SlimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion, Generation: m.Generation,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp, OwnerReferences: m.OwnerReferences,
		Annotations: ReadAnnotations(m.Annotations),
	}
}
