// Package workload finds the object that owns a blocked pod's replica count, plans how to surge it and
// builds the patches that surge and restore it. Kind-specific knowledge sits behind one small interface
// (kindHandler), one file per kind, registered in kinds.go.
package workload

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// IgnoreAnnotation set to "true" on a workload, an InferenceService, an LLMInferenceService or a
// Namespace keeps the guardian away from it.
const IgnoreAnnotation = "drain-guardian.io/ignore"

// Kind names a kind the guardian can scale.
type Kind string

// The kinds the guardian scales.
const (
	KindDeployment          Kind = "Deployment"
	KindStatefulSet         Kind = "StatefulSet"
	KindHPA                 Kind = "HorizontalPodAutoscaler"
	KindInferenceService    Kind = "InferenceService"
	KindLLMInferenceService Kind = "LLMInferenceService"
	KindLeaderWorkerSet     Kind = "LeaderWorkerSet"
)

// KServeGroup is the API group of both KServe kinds.
const KServeGroup = "serving.kserve.io"

// Ref names one object of a known kind.
type Ref struct {
	Kind      Kind      `json:"kind"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid,omitempty"`
	// APIVersion and Resource name an owner of any other kind, scaled through its /scale subresource.
	APIVersion string `json:"apiVersion,omitempty"`
	Resource   string `json:"resource,omitempty"`
}

// apiVersions are the versions Events name the known kinds by.
var apiVersions = map[Kind]string{
	KindDeployment: "apps/v1", KindStatefulSet: "apps/v1", KindHPA: "autoscaling/v2",
	KindInferenceService: KServeGroup + "/v1beta1", KindLLMInferenceService: KServeGroup + "/v1alpha1",
	KindLeaderWorkerSet: LWSGroup + "/v1",
}

// ObjectReference is the reference Events about the object are recorded against, also once it is gone.
func (r Ref) ObjectReference() *corev1.ObjectReference {
	apiVersion := r.APIVersion
	if apiVersion == "" {
		apiVersion = apiVersions[r.Kind]
	}
	return &corev1.ObjectReference{Kind: string(r.Kind), APIVersion: apiVersion, Namespace: r.Namespace, Name: r.Name, UID: r.UID}
}

// ViaScale reports whether the object is scaled through its /scale subresource.
func (r Ref) ViaScale() bool { return r.Resource != "" }

func (r Ref) String() string { return fmt.Sprintf("%s %s/%s", r.Kind, r.Namespace, r.Name) }

// Object is a read-only view of one scalable object, typed or not.
type Object struct {
	Ref        Ref
	APIVersion string
	Meta       metav1.Object
	// Content is the object as JSON-compatible maps, for reading fields by path.
	Content map[string]any
}

// newObject builds the view of a typed or unstructured object from a lister. It does not modify obj.
func newObject(kind Kind, gv schema.GroupVersion, obj runtime.Object) (*Object, error) {
	meta, err := metav1Accessor(obj)
	if err != nil {
		return nil, err
	}
	var content map[string]any
	if u, ok := obj.(*unstructured.Unstructured); ok {
		content = u.Object
	} else if content, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
		return nil, err
	}
	return &Object{
		Ref:        Ref{Kind: kind, Namespace: meta.GetNamespace(), Name: meta.GetName(), UID: meta.GetUID()},
		APIVersion: gv.String(),
		Meta:       meta,
		Content:    content,
	}, nil
}

func metav1Accessor(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

// ObjectReference is the reference Events on this object are recorded against.
func (o *Object) ObjectReference() *corev1.ObjectReference {
	ref := o.Ref.ObjectReference()
	ref.APIVersion, ref.ResourceVersion = o.APIVersion, o.Meta.GetResourceVersion()
	return ref
}

// Int reads the integer at a JSON pointer; ok is false when it is absent or not an integer.
func (o *Object) Int(pointer string) (int64, bool) {
	return intAt(o.Content, pointer)
}

// Has reports whether the JSON pointer names a present, non-null value.
func (o *Object) Has(pointer string) bool {
	_, ok := valueAt(o.Content, pointer)
	return ok
}

// Ignored reports whether the object carries the opt-out annotation.
func (o *Object) Ignored() bool { return IgnoredByAnnotation(o.Meta.GetAnnotations()) }

// IgnoredByAnnotation reports whether annotations opt the object out.
func IgnoredByAnnotation(a map[string]string) bool {
	v, err := strconv.ParseBool(a[IgnoreAnnotation])
	return err == nil && v
}

func valueAt(m map[string]any, pointer string) (any, bool) {
	var cur any = m
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[tok]; !ok || cur == nil {
			return nil, false
		}
	}
	return cur, true
}

func intAt(m map[string]any, pointer string) (int64, bool) {
	v, ok := valueAt(m, pointer)
	if !ok {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int:
		return int64(n), true
	case float64:
		if n == float64(int64(n)) {
			return int64(n), true
		}
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}
