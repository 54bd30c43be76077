package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Phase is where a Surge is in its life.
// +kubebuilder:validation:Enum=Pending;Surged;Ready;Resolved;Restoring;Failed
type Phase string

// The phases of a Surge, in order. A successful surge is deleted once its fields are restored; a failed
// one stays in PhaseFailed, fields restored, as the memory that this drain of this node was tried.
const (
	// PhasePending: the Surge is persisted; the target's fields are not written yet.
	PhasePending Phase = "Pending"
	// PhaseSurged: the target's fields carry the surged values; the replacement is on its way.
	PhaseSurged Phase = "Surged"
	// PhaseReady: the replacement replicas are Ready off the drained node.
	PhaseReady Phase = "Ready"
	// PhaseResolved: no pod of the workload is left on the drained node; the surge is held.
	PhaseResolved Phase = "Resolved"
	// PhaseRestoring: the fields are being put back (status.reason says why).
	PhaseRestoring Phase = "Restoring"
	// PhaseFailed: the surge did not help and was restored; kept so the same stall is not surged again.
	PhaseFailed Phase = "Failed"
)

// ObjectReference names the object the guardian changed, or the one owning the pods.
type ObjectReference struct {
	// APIVersion of the object, e.g. apps/v1 or serving.kserve.io/v1beta1.
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// Kind of the object.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Name of the object, in the Surge's namespace.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// UID of the object the surge was made on: a namesake created later is not this object.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	UID types.UID `json:"uid"`
	// Resource is set for an owner of a kind the guardian does not know, scaled through its /scale
	// subresource.
	// +optional
	Resource string `json:"resource,omitempty"`
}

// Field is one integer field the guardian changed.
type Field struct {
	// Path is a JSON pointer into the target, e.g. /spec/replicas. The guardian writes only paths its
	// own code names for the target's kind and ignores a Surge naming any other.
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9]+)+$`
	Path string `json:"path"`
	// Original is the value before the surge; absent when the field was absent. Every field the
	// guardian writes is a replica count: an int32 on the API server, never negative.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	Original *int64 `json:"original,omitempty"`
	// Set is the value the guardian wrote.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	Set int64 `json:"set"`
	// ExplicitBeforeRemove, on a field that was absent, is written first on restore; the field is removed
	// once the workload has scaled down to it. For kinds where an absent field keeps the current count
	// (LLMInferenceService from OpenShift AI 3.4), removing it at once would keep the surge forever.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	ExplicitBeforeRemove *int64 `json:"explicitBeforeRemove,omitempty"`
}

// SurgeSpec is what the guardian did, fixed when the Surge is created.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
type SurgeSpec struct {
	// Target is the object whose fields were raised.
	Target ObjectReference `json:"target"`
	// PodOwner is the Deployment or StatefulSet whose pods are the replicas.
	PodOwner ObjectReference `json:"podOwner"`
	// Component is "main" or "prefill" for an LLMInferenceService.
	// +optional
	Component string `json:"component,omitempty"`
	// Fields lists every field the guardian changed, with its original value.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +listType=atomic
	Fields []Field `json:"fields"`
	// Node is the node whose drain the surge serves.
	// +kubebuilder:validation:MinLength=1
	Node string `json:"node"`
	// Pool is the node's MachineConfigPool; empty for a plain cordon.
	// +optional
	Pool string `json:"pool,omitempty"`
	// Trigger says how the stall was seen: MCODrain, MCOTargeted, MCOPredicted (look-ahead), Cordoned,
	// Prepared (surged ahead of the pool's update at the admin's request, held until it is Updated),
	// or the name of another drain source (GPUDriverUpgrade, NodeMaintenance, NodeLifecycle, ...: the
	// table of drain sources names them, so the schema takes any such name rather than a list that
	// each new source would have to change).
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z]*$`
	// +kubebuilder:validation:MaxLength=63
	Trigger string `json:"trigger"`
	// Drain identifies this drain of the node: the config it updates to, or the cordon time.
	Drain string `json:"drain"`
	// PDB is the PodDisruptionBudget that blocked the drain.
	PDB string `json:"pdb"`
	// BlockedPod is the pod that blocked the drain.
	BlockedPod string `json:"blockedPod"`
	// Delta is the number of replicas added, at most blocking.MaxSurge: everything the guardian
	// computes for a surge is proportional to it.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Delta int32 `json:"delta"`
	// Replicas is the pod owner's desired replica count when the surge started: the restore waits for
	// that many Ready pods on nodes the update will not drain again (--restore=auto). It is copied
	// from the tenant's workload: nothing the guardian computes is proportional to it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	Replicas int32 `json:"replicas"`
	// ReadyBefore counts the workload's Ready replicas off the node when the surge started.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	ReadyBefore int32 `json:"readyBefore"`
	// StartTime is when the stall was detected.
	StartTime metav1.Time `json:"startTime"`
}

// SurgeStatus is where the surge stands.
type SurgeStatus struct {
	// Phase is where the surge is in its life; empty means Pending.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Reason is a CamelCase word: why the surge is being (or was) restored, or why it failed.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Failed is true when the restore undoes a surge that did not help.
	// +optional
	Failed bool `json:"failed,omitempty"`
	// Message says in a sentence what the guardian is doing and why.
	// +optional
	Message string `json:"message,omitempty"`
	// ObservedGeneration is the generation of the Surge the status was written for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ReadyTime is when the replacement was first seen Ready.
	// +optional
	ReadyTime *metav1.Time `json:"readyTime,omitempty"`
	// ResolvedTime is when no pod of the workload was left on the node.
	// +optional
	ResolvedTime *metav1.Time `json:"resolvedTime,omitempty"`
	// RestoreTime is when the restore started.
	// +optional
	RestoreTime *metav1.Time `json:"restoreTime,omitempty"`
	// Conditions: Surged, ReplacementReady, DrainUnblocked and Restored, each set once it happens;
	// EvictionDue when the node of a Ready surge is being drained (--evict-timeout runs from then).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Surge records one workload the guardian scaled up so that a drain can proceed, and how to undo it.
// It lives in the workload's namespace, owned by the surged object: deleting the workload removes it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories=drain-guardian
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.target.kind`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.target.name`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Surge struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SurgeSpec   `json:"spec"`
	Status SurgeStatus `json:"status,omitempty"`
}

// SurgeList is a list of Surges.
//
// +kubebuilder:object:root=true
type SurgeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Surge `json:"items"`
}

// PhaseOf returns the Surge's phase, Pending when none was written yet.
func (s *Surge) PhaseOf() Phase {
	if s.Status.Phase == "" {
		return PhasePending
	}
	return s.Status.Phase
}
