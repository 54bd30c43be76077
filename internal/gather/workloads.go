package gather

import (
	"context"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/check"
)

// resources maps the kinds the guardian surges or whose pods it sees to their resource names; a
// Surge of another kind (a /scale owner) carries its resource itself.
var resources = map[string]string{
	"Deployment":              "deployments",
	"StatefulSet":             "statefulsets",
	"HorizontalPodAutoscaler": "horizontalpodautoscalers",
	"InferenceService":        "inferenceservices",
	"LLMInferenceService":     "llminferenceservices",
	"LeaderWorkerSet":         "leaderworkersets",
	"PodDisruptionBudget":     "poddisruptionbudgets",
}

// ref names one object gather copies.
type ref struct {
	gvr             schema.GroupVersionResource
	kind            string
	namespace, name string
}

func (r ref) file() string {
	return "workloads/" + r.namespace + "/" + strings.ToLower(r.kind) + "_" + r.name + ".yaml"
}

func (r ref) String() string { return r.kind + " " + r.namespace + "/" + r.name }

// newRef resolves a reference; ok is false for a kind whose resource gather cannot know, and for a
// name that cannot name a file.
func newRef(apiVersion, kind, resource, namespace, name string) (ref, bool) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || !safeName(name) || !safeName(namespace) {
		return ref{}, false
	}
	if resource == "" {
		resource = resources[kind]
	}
	if resource == "" {
		return ref{}, false
	}
	return ref{gvr: gv.WithResource(resource), kind: kind, namespace: namespace, name: name}, true
}

func pdbRef(namespace, name string) (ref, bool) {
	return newRef("policy/v1", "PodDisruptionBudget", "", namespace, name)
}

// References lists, without duplicates, the workloads and PDBs that the Surges and check's blocked
// pods name, in a stable order; unknown lists what cannot be resolved to a resource.
func References(surges []v1alpha1.Surge, report *check.Report) (refs []ref, unknown []string) {
	seen := map[ref]bool{}
	add := func(r ref, ok bool, what string) {
		switch {
		case !ok:
			unknown = append(unknown, what)
		case !seen[r]:
			seen[r] = true
			refs = append(refs, r)
		}
	}
	for _, s := range surges {
		t, o := s.Spec.Target, s.Spec.PodOwner
		r, ok := newRef(t.APIVersion, t.Kind, t.Resource, s.Namespace, t.Name)
		add(r, ok, fmt.Sprintf("%s %s/%s of Surge %s", t.Kind, s.Namespace, t.Name, s.Name))
		r, ok = newRef(o.APIVersion, o.Kind, o.Resource, s.Namespace, o.Name)
		add(r, ok, fmt.Sprintf("%s %s/%s of Surge %s", o.Kind, s.Namespace, o.Name, s.Name))
		r, ok = pdbRef(s.Namespace, s.Spec.PDB)
		add(r, ok, fmt.Sprintf("PDB %q of Surge %s/%s", s.Spec.PDB, s.Namespace, s.Name))
	}
	if report != nil {
		for _, p := range report.Pools {
			for _, n := range p.Nodes {
				for _, b := range n.Blocks {
					if reg := b.Regarding; reg != nil && reg.Kind != "Pod" {
						r, ok := newRef(reg.APIVersion, reg.Kind, "", reg.Namespace, reg.Name)
						add(r, ok, fmt.Sprintf("%s %s/%s blocked pod %s", reg.Kind, reg.Namespace, reg.Name, b.Pod))
					}
					r, ok := pdbRef(b.Namespace, b.PDB)
					add(r, ok, fmt.Sprintf("PDB %q of blocked pod %s/%s", b.PDB, b.Namespace, b.Pod))
				}
			}
		}
	}
	return refs, unknown
}

// workloads copies, redacted, every object References names (at most maxWorkloads) and returns the
// serving state of the surged models for the summary.
func (g *gatherer) workloads(ctx context.Context, surges []v1alpha1.Surge, report *check.Report) ([]ModelState, error) {
	refs, unknown := References(surges, report)
	for _, u := range unknown {
		g.problem("not copied, kind unknown to gather: %s", u)
	}
	if len(refs) > maxWorkloads {
		g.problem("workloads: %d named, only the first %d copied", len(refs), maxWorkloads)
		refs = refs[:maxWorkloads]
	}
	got := map[ref]*unstructured.Unstructured{}
	for _, r := range refs {
		obj, err := g.src.Dynamic.Resource(r.gvr).Namespace(r.namespace).Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			g.problem("%s: %v", r, err)
			continue
		}
		got[r] = obj
		if err := g.writeObjects(r.file(), []map[string]any{obj.Object}); err != nil {
			return nil, err
		}
	}
	var models []ModelState
	for _, s := range surges {
		t, o := s.Spec.Target, s.Spec.PodOwner
		if t.Kind != "InferenceService" && t.Kind != "LLMInferenceService" {
			continue
		}
		// A LeaderWorkerSet's status.readyReplicas counts whole Ready groups (a multi-node model).
		m := ModelState{Surge: s.Namespace + "/" + s.Name, Model: t.Kind + " " + s.Namespace + "/" + t.Name, Phase: phase(s),
			PodOwner: o.Kind + " " + o.Name, Groups: o.Kind == "LeaderWorkerSet"}
		if r, ok := newRef(t.APIVersion, t.Kind, t.Resource, s.Namespace, t.Name); ok && got[r] != nil {
			m.Conditions = modelConditions(got[r])
		}
		if r, ok := newRef(o.APIVersion, o.Kind, o.Resource, s.Namespace, o.Name); ok && got[r] != nil {
			ready, found, err := unstructured.NestedInt64(got[r].Object, "status", "readyReplicas")
			m.ReadyPods, m.ReadyPodsKnown = ready, err == nil
			_ = found // absent readyReplicas means none Ready
		}
		models = append(models, m)
	}
	sort.Slice(models, func(i, j int) bool { return models[i].Surge < models[j].Surge })
	return models, nil
}

func phase(s v1alpha1.Surge) string {
	if s.Status.Phase == "" {
		return string(v1alpha1.PhasePending)
	}
	return string(s.Status.Phase)
}

// modelConditions returns the conditions support asks about: Ready, and an InferenceService's
// PredictorReady, as "Type=Status (Reason)".
func modelConditions(obj *unstructured.Unstructured) []string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var out []string
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		t, _ := m["type"].(string)
		if t != "Ready" && t != "PredictorReady" {
			continue
		}
		status, _ := m["status"].(string)
		s := t + "=" + status
		if reason, _ := m["reason"].(string); reason != "" {
			s += " (" + reason + ")"
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
