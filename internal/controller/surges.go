package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// surgeLister reads Surges from the dynamic informer's cache as typed objects. Each read converts a
// fresh copy, so callers may modify what they get.
type surgeLister struct {
	indexer cache.Indexer
}

func toSurge(obj any) (*v1alpha1.Surge, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T in the Surge cache", obj)
	}
	var s v1alpha1.Surge
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s); err != nil {
		return nil, fmt.Errorf("surge %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &s, nil
}

// Get returns one Surge, or a NotFound error.
func (l *surgeLister) Get(namespace, name string) (*v1alpha1.Surge, error) {
	obj, ok, err := l.indexer.GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apierrors.NewNotFound(v1alpha1.SurgesResource.GroupResource(), name)
	}
	return toSurge(obj)
}

// List returns every Surge that can be read; unreadable ones are skipped (the API server validates
// Surges against their schema, so only a newer guardian's could be).
func (l *surgeLister) List() []*v1alpha1.Surge {
	return l.convert(l.indexer.List())
}

// InNamespace returns the namespace's Surges.
func (l *surgeLister) InNamespace(namespace string) []*v1alpha1.Surge {
	objs, err := l.indexer.ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		return nil
	}
	return l.convert(objs)
}

func (l *surgeLister) convert(objs []any) []*v1alpha1.Surge {
	out := make([]*v1alpha1.Surge, 0, len(objs))
	for _, o := range objs {
		if s, err := toSurge(o); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// surgeObject turns a Surge into the unstructured form the dynamic client writes.
func surgeObject(s *v1alpha1.Surge) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
	u.SetKind("Surge")
	return u, nil
}

// maxNameLength is the longest object name the API server accepts (a DNS subdomain).
const maxNameLength = 253

// surgeName is the one name a Surge of this target can have, so that the API server itself refuses a
// second Surge of one workload. It is <kind>-<name> for the common case, readable in `oc get surges`;
// an LLMInferenceService's prefill component, or a name too long for that, gets
// <kind>-<name, cut>[-prefill]-<hash> instead, the hash over everything that identifies the target. The two forms cannot meet: a name that would read as
// the second form (it ends in -<16 hex digits>) takes the second form too. Without that, the prefill
// of LLMInferenceService m and the main component of m-prefill, or a long name and a workload named
// after its hash, would share one Surge. (Two /scale kinds of one name in different API groups still
// could: surgeOf checks the target, so such a stall waits rather than being taken as covered.)
func surgeName(t *workload.Target) string {
	kind := strings.ToLower(string(t.Ref.Kind))
	readable := kind + "-" + t.Ref.Name
	if t.Component != workload.ComponentPrefill && len(readable) <= maxNameLength && !hashSuffixed(readable) {
		return readable
	}
	group, _, grouped := strings.Cut(t.Ref.APIVersion, "/")
	if !grouped {
		group = ""
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{group, t.Ref.Resource, string(t.Ref.Kind), t.Ref.Name, t.Component}, "/")))
	suffix := "-" + hex.EncodeToString(sum[:])[:hashLength]
	if t.Component == workload.ComponentPrefill {
		readable += "-" + workload.ComponentPrefill
	}
	if len(readable) > maxNameLength-len(suffix) {
		readable = strings.TrimRight(readable[:maxNameLength-len(suffix)], "-.")
	}
	return readable + suffix
}

// hashLength is the number of hex digits of a Surge name's hash.
const hashLength = 16

// hashSuffixed reports whether a name ends in -<hashLength hex digits>, as hashed Surge names do.
func hashSuffixed(name string) bool {
	i := len(name) - hashLength - 1
	if i < 0 || name[i] != '-' {
		return false
	}
	for _, r := range name[i+1:] {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}

// surgeOf returns the Surge of the target, of any phase, or nil. It is found by what it names (the
// object, by UID, and the component), not by its name: a Surge under the target's name may be
// another object's (one deleted since, whose Surge the garbage collector has yet to remove), and a
// Surge made by an older guardian may carry a name of its time.
func (v *view) surgeOf(t *workload.Target) *v1alpha1.Surge {
	if s, err := v.surges.Get(t.Ref.Namespace, surgeName(t)); err == nil && sameTarget(s, t) {
		return s
	}
	for _, s := range v.surges.InNamespace(t.Ref.Namespace) {
		if sameTarget(s, t) {
			return s
		}
	}
	return nil
}

func sameTarget(s *v1alpha1.Surge, t *workload.Target) bool {
	return s.Spec.Target.UID == t.Ref.UID && s.Spec.Target.Kind == string(t.Ref.Kind) && s.Spec.Component == t.Component
}

// newSurge builds the Surge of a stall, owned by the target so that deleting the workload removes it.
func newSurge(t *workload.Target, target *workload.Object, spec v1alpha1.SurgeSpec) *v1alpha1.Surge {
	s := &v1alpha1.Surge{
		ObjectMeta: metav1.ObjectMeta{
			Name: surgeName(t), Namespace: t.Ref.Namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": FieldManager},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: target.APIVersion, Kind: string(t.Ref.Kind), Name: t.Ref.Name, UID: t.Ref.UID,
			}},
		},
		Spec: spec,
	}
	s.Spec.Target = objectRef(t.Ref, target.APIVersion)
	s.Spec.PodOwner = objectRef(t.PodOwner, t.PodOwner.ObjectReference().APIVersion)
	s.Spec.Component = t.Component
	return s
}

func objectRef(r workload.Ref, apiVersion string) v1alpha1.ObjectReference {
	return v1alpha1.ObjectReference{APIVersion: apiVersion, Kind: string(r.Kind), Name: r.Name, UID: r.UID, Resource: r.Resource}
}

// targetOf rebuilds the workload references a Surge names. Nothing is trusted yet: verify checks them
// against the live objects.
func targetOf(s *v1alpha1.Surge) *workload.Target {
	t := s.Spec.Target
	ref := workload.Ref{Kind: workload.Kind(t.Kind), Namespace: s.Namespace, Name: t.Name, UID: t.UID}
	if t.Resource != "" {
		ref.APIVersion, ref.Resource = t.APIVersion, t.Resource
	}
	po := s.Spec.PodOwner
	return &workload.Target{
		Ref:       ref,
		PodOwner:  workload.Ref{Kind: workload.Kind(po.Kind), Namespace: s.Namespace, Name: po.Name, UID: po.UID},
		Component: s.Spec.Component,
	}
}

func keyOfObject(u *unstructured.Unstructured) types.NamespacedName {
	return types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}
}
