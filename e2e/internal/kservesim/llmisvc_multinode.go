package kservesim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The multi-node workload of an LLMInferenceService (spec.worker set): one LeaderWorkerSet, as
// KServe's LLMInferenceService reconciler writes it (kserve/kserve
// pkg/controller/v1alpha2/llmisvc/workload_multi_node.go, expectedMainMultiNodeLWS and
// expectedPrefillMultiNodeLWS; lifecycle_crud.go, Reconcile and Update).

// LeaderWorkerSets is the resource of the LeaderWorkerSet kind (kubernetes-sigs/lws).
var LeaderWorkerSets = schema.GroupVersionResource{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}

const (
	mainLWSSuffix    = "-kserve-mn"
	prefillLWSSuffix = "-kserve-mn-prefill"

	llmWorker        = "llminferenceservice-workload-worker"
	llmLeader        = "llminferenceservice-workload-leader"
	llmWorkerPrefill = "llminferenceservice-workload-worker-prefill"
	llmLeaderPrefill = "llminferenceservice-workload-leader-prefill"

	// multiNodeResync is how often a multi-node LLMInferenceService is reconciled again: the
	// simulator keeps no LeaderWorkerSet informer (the CRD is installed only by the scenarios that
	// run lws), so this stands in for KServe's watch of the sets it owns: a direct change of the set
	// is put back, and its availability reaches the status, within this period.
	multiNodeResync = 2 * time.Second
)

// MainLeaderWorkerSetName is the name of an LLMInferenceService's multi-node LeaderWorkerSet.
func MainLeaderWorkerSetName(llm string) string { return childName(llm, mainLWSSuffix) }

// PrefillLeaderWorkerSetName is the name of its multi-node prefill LeaderWorkerSet.
func PrefillLeaderWorkerSetName(llm string) string { return childName(llm, prefillLWSSuffix) }

// parallelism is the part of spec.parallelism that sizes a group (ParallelismSpec.GetSize).
type parallelism struct {
	Data      *int32 `json:"data"`
	DataLocal *int32 `json:"dataLocal"`
	Pipeline  *int32 `json:"pipeline"`
}

// size is KServe's group size: data/dataLocal under data parallelism, else the pipeline stages;
// nil leaves the set's size to its default.
func (p *parallelism) size() *int32 {
	switch {
	case p == nil:
		return nil
	case p.Data != nil && *p.Data > 0:
		d, l := max(*p.Data, 1), int32(1)
		if p.DataLocal != nil {
			l = max(*p.DataLocal, 1)
		}
		s := max(d/l, 1)
		return &s
	}
	return p.Pipeline
}

// multiNodeLWS is the LeaderWorkerSet KServe expects for one workload of an LLMInferenceService.
// Its count is the workload's replicas; when that is absent the set's current count is kept
// (PreserveLWSReplicas), which is how the guardian's surge and restore must reach it: through the
// LLMInferenceService. Labels are KServe's own; a leader template exists only with spec.template.
func multiNodeLWS(llm *unstructured.Unstructured, name string, w *workloadSpec, role string, current *int32) (*unstructured.Unstructured, error) {
	worker, leader := llmWorker, llmLeader
	if role == "prefill" {
		worker, leader = llmWorkerPrefill, llmLeaderPrefill
	}
	base := map[string]string{LLMNameLabel: llm.GetName(), LLMPartOfLabel: llmPartOf}
	workerLabels := maps.Clone(base)
	workerLabels[LLMComponentLabel] = worker
	leaderLabels := maps.Clone(base)
	leaderLabels[LLMComponentLabel] = leader
	leaderLabels[KServeComponent] = "workload"
	leaderLabels[llmRoleLabel] = role
	if w.Template == nil {
		// Without a leader template the workers serve, and join the inference pool's selector.
		workerLabels[KServeComponent] = "workload"
		workerLabels[llmRoleLabel] = role
	}
	maps.Copy(workerLabels, w.Labels)
	maps.Copy(leaderLabels, w.Labels)

	workerSpec, err := asMap(w.Worker)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	// spec.labels and spec.annotations reach both templates (PropagateMap).
	templateMeta := func(labels map[string]string) map[string]any {
		m := map[string]any{"labels": stringsAny(labels)}
		if len(w.Annotations) > 0 {
			m["annotations"] = stringsAny(w.Annotations)
		}
		return m
	}
	lwt := map[string]any{
		"workerTemplate": map[string]any{"metadata": templateMeta(workerLabels), "spec": workerSpec},
		"restartPolicy":  "RecreateGroupOnPodRestart",
	}
	if s := w.Parallelism.size(); s != nil {
		lwt["size"] = int64(*s)
	}
	if w.Template != nil {
		leaderSpec, err := asMap(w.Template)
		if err != nil {
			return nil, fmt.Errorf("template: %w", err)
		}
		lwt["leaderTemplate"] = map[string]any{"metadata": templateMeta(leaderLabels), "spec": leaderSpec}
	}
	spec := map[string]any{"leaderWorkerTemplate": lwt, "startupPolicy": "LeaderCreated"}
	switch {
	case w.Replicas != nil:
		spec["replicas"] = int64(*w.Replicas)
	case current != nil:
		spec["replicas"] = int64(*current)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": LeaderWorkerSets.GroupVersion().String(), "kind": "LeaderWorkerSet",
		"metadata": map[string]any{
			"name": name, "namespace": llm.GetNamespace(), "labels": stringsAny(workerLabels),
			"ownerReferences": []any{map[string]any{
				"apiVersion": GroupVersionLLMInferenceService.String(), "kind": "LLMInferenceService",
				"name": llm.GetName(), "uid": string(llm.GetUID()), "controller": true, "blockOwnerDeletion": true,
			}},
		},
		"spec": spec,
	}}
	return u, nil
}

// reconcileLeaderWorkerSet creates the set, or replaces it with a full update when what KServe sets
// differs from what it finds (semanticLWSIsEqual): the spec fields it sets, its labels. The update
// carries only KServe's own metadata, so labels and annotations others put on the set are dropped,
// as with the real controller. It returns the set as it is now (nil when it could not be written).
func (c *controller) reconcileLeaderWorkerSet(ctx context.Context, want *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri := c.dyn.Resource(LeaderWorkerSets).Namespace(want.GetNamespace())
	curr, err := ri.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		created, err := ri.Create(ctx, want, metav1.CreateOptions{FieldManager: FieldManager})
		if err != nil {
			return nil, fmt.Errorf("creating LeaderWorkerSet %s: %w", want.GetName(), err)
		}
		return created, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading LeaderWorkerSet %s: %w", want.GetName(), err)
	}
	if !controlledBy(curr, ownerUID(want)) {
		return nil, fmt.Errorf("LeaderWorkerSet %s is not controlled by its LLMInferenceService", want.GetName())
	}
	if lwsDerivative(want, curr) {
		return curr, nil
	}
	want.SetResourceVersion(curr.GetResourceVersion())
	updated, err := ri.Update(ctx, want, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("updating LeaderWorkerSet %s: %w", want.GetName(), err)
	}
	return updated, nil
}

// lwsDerivative reports whether curr already holds everything want sets (Semantic.DeepDerivative
// of the spec and the labels, as semanticLWSIsEqual does): defaults the API server and lws's
// webhook added are not a difference.
func lwsDerivative(want, curr *unstructured.Unstructured) bool {
	ws, _, _ := unstructured.NestedMap(want.Object, "spec")
	cs, _, _ := unstructured.NestedMap(curr.Object, "spec")
	return equality.Semantic.DeepDerivative(ws, cs) && equality.Semantic.DeepDerivative(want.GetLabels(), curr.GetLabels())
}

// ownerUID returns the UID of the owner the set is expected to have.
func ownerUID(want *unstructured.Unstructured) types.UID {
	if refs := want.GetOwnerReferences(); len(refs) > 0 {
		return refs[0].UID
	}
	return ""
}

// lwsCondition mirrors a LeaderWorkerSet's Available condition (propagateLeaderWorkerSetStatus).
func lwsCondition(typ string, set *unstructured.Unstructured) condition {
	if set == nil {
		return condition{Type: typ, Status: corev1.ConditionUnknown, Reason: "LeaderWorkerSetPending", Message: "the LeaderWorkerSet does not exist yet"}
	}
	conds, _, _ := unstructured.NestedSlice(set.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" {
			st, _ := m["status"].(string)
			reason, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return condition{Type: typ, Status: corev1.ConditionStatus(st), Reason: reason, Message: msg}
		}
	}
	return condition{Type: typ, Status: corev1.ConditionFalse, Reason: "Progressing", Message: "LWS is progressing"}
}

// asMap turns a decoded part of the spec into the map an unstructured object holds; nil stays an
// empty map.
func asMap(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if string(raw) == "null" {
		return out, nil
	}
	return out, json.Unmarshal(raw, &out)
}

func stringsAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
