package workload

import (
	"context"
	"fmt"
	"math"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
)

// kindHandler is what the surge lifecycle needs to know of one kind of scaled object. Each kind has a
// file of its own, and a line in kinds.
type kindHandler interface {
	// get reads the object (from its lister, or live for kinds the guardian keeps no informer for).
	get(s *Store, ref Ref) (*Object, error)
	// patch applies a JSON patch to the object.
	patch(ctx context.Context, s *Store, ref Ref, data []byte) error
	// plan returns the fields to write on obj so that the pod owner, which wants current replicas now,
	// gets delta more.
	plan(obj *Object, t *Target, current, delta int32, nilKeepsCount bool) ([]Field, error)
	// paths lists every JSON pointer plan may name for the target: a Surge naming any other path was
	// not written by this code and is never acted on.
	paths(t *Target) []string
}

// kserveKind is a kindHandler for a KServe kind: an object of KServe's group that controls the
// Deployment running its pods. The controller watches it (KServeKinds), and Resolve makes it the
// target of that Deployment's pods.
type kserveKind interface {
	kindHandler
	// api is how to watch the kind.
	api() KServeAPI
	// component names the kind's workload that the Deployment runs ("" for a kind that has one).
	component(d *appsv1.Deployment) string
	// reads lists the JSON pointers under spec that plan and the lifecycle read: values whose
	// value is read, present whose presence only (see SlimKServe).
	reads() (values, present []string)
}

// KServeAPI says how to watch a KServe kind.
type KServeAPI struct {
	// Resource is the kind's plural resource name.
	Resource string
	// Versions lists the versions to watch, in order of preference: owners are matched by group and
	// kind, so any served version will do.
	Versions []string
}

// kinds is the registry of the objects a surge can raise, one line per kind: adding a kind of surge
// target is its handler's file and one line here (a KServe kind implements kserveKind, and is then
// watched and resolved from its Deployment too). Owners of other kinds with a /scale subresource need
// no line: scaleKind serves them. The pod owners themselves (Deployment, StatefulSet) are read by
// Resolve and PodOwner.
var kinds = map[Kind]kindHandler{
	KindDeployment:          deploymentKind{},
	KindStatefulSet:         statefulSetKind{},
	KindHPA:                 hpaKind{},
	KindInferenceService:    inferenceServiceKind{},
	KindLLMInferenceService: llmInferenceServiceKind{},
	KindLeaderWorkerSet:     leaderWorkerSetKind{},
}

// handlerFor returns the handler of the target's kind.
func handlerFor(ref Ref) (kindHandler, error) {
	if ref.ViaScale() {
		return scaleKind{}, nil
	}
	if h, ok := kinds[ref.Kind]; ok {
		return h, nil
	}
	return nil, fmt.Errorf("unknown kind %q", ref.Kind)
}

// KServeKinds lists the KServe kinds of the registry, by name.
func KServeKinds() []Kind {
	var out []Kind
	for kind, h := range kinds {
		if _, ok := h.(kserveKind); ok {
			out = append(out, kind)
		}
	}
	slices.Sort(out)
	return out
}

// KServeAPIOf returns how to watch a KServe kind; ok is false for any other kind.
func KServeAPIOf(kind Kind) (api KServeAPI, ok bool) {
	k, ok := kinds[kind].(kserveKind)
	if !ok {
		return KServeAPI{}, false
	}
	return k.api(), true
}

// Get returns the current object; a NotFound error when it is gone or was replaced by a namesake
// (different UID, when the ref has one); a *NotServedError while its API is not served or not synced.
func (s *Store) Get(ref Ref) (*Object, error) {
	h, err := handlerFor(ref)
	if err != nil {
		return nil, err
	}
	obj, err := h.get(s, ref)
	if err != nil {
		return nil, err
	}
	if ref.UID != "" && obj.Ref.UID != ref.UID {
		return nil, notFound(ref)
	}
	return obj, nil
}

// Patch applies a JSON patch to the object with the guardian's field manager.
func (s *Store) Patch(ctx context.Context, ref Ref, data []byte) error {
	h, err := handlerFor(ref)
	if err != nil {
		return err
	}
	return h.patch(ctx, s, ref, data)
}

// PlanSurge returns the fields to write on obj to add delta replicas to the target's pod owner, which
// currently wants `current` replicas. nilKeepsCount selects OpenShift AI 3.4+ semantics, where an
// absent LLMInferenceService replica field keeps the Deployment's count instead of meaning one.
func PlanSurge(obj *Object, t *Target, current, delta int32, nilKeepsCount bool) ([]Field, error) {
	if delta < 1 {
		return nil, fmt.Errorf("surge of %d replicas", delta)
	}
	h, err := handlerFor(t.Ref)
	if err != nil {
		return nil, unsupported("kind %s cannot be surged", t.Ref.Kind)
	}
	fields, err := h.plan(obj, t, current, delta, nilKeepsCount)
	if err != nil {
		return nil, err
	}
	for _, f := range fields {
		// A tenant's count at the int32 limit: the API server would refuse the write for a minute.
		if f.Set > math.MaxInt32 {
			return nil, unsupported("raising %s to %d would exceed the largest replica count", f.Path, f.Set)
		}
	}
	return fields, nil
}

// CheckPaths reports an error unless every field is one the target's kind writes.
func CheckPaths(t *Target, fields []Field) error {
	h, err := handlerFor(t.Ref)
	if err != nil {
		return err
	}
	allowed := h.paths(t)
	seen := map[string]bool{}
	for _, f := range fields {
		if !slices.Contains(allowed, f.Path) {
			return fmt.Errorf("field %s is not one the guardian writes on a %s", f.Path, t.Ref.Kind)
		}
		if seen[f.Path] {
			return fmt.Errorf("field %s is listed twice", f.Path)
		}
		seen[f.Path] = true
	}
	return nil
}
