package workload

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// RecordAnnotation holds the surge record on the object the guardian scaled. Its presence is the
	// guardian's only state: a restarted or newly elected guardian resumes from it.
	RecordAnnotation = "drain-guardian.io/surge"
	// FailureAnnotation remembers the last stall whose surge failed, so that the same stall is not
	// surged again (by this or a restarted guardian) and its failure is not reported twice.
	FailureAnnotation = "drain-guardian.io/last-failure"
	// IgnoreAnnotation set to "true" on a workload, an InferenceService, an LLMInferenceService or a
	// Namespace keeps the guardian away from it.
	IgnoreAnnotation = "drain-guardian.io/ignore"

	// RecordVersion is the schema version of Record.
	RecordVersion = 1
)

// Field is one integer field the guardian changed, with what it was and what it was set to.
type Field struct {
	// Path is a JSON pointer into the object, e.g. /spec/replicas.
	Path string `json:"path"`
	// Original is the value before the surge; nil when the field was absent.
	Original *int64 `json:"original"`
	// Set is the value the guardian wrote.
	Set int64 `json:"set"`
	// ExplicitBeforeRemove, when set on an absent original, is written first on restore and the field
	// removed only once the workload has scaled down to it: for kinds where an absent field means "keep
	// the current count" (LLMInferenceService from OpenShift AI 3.4), removing it at once would keep
	// the surge forever.
	ExplicitBeforeRemove *int64 `json:"explicitBeforeRemove,omitempty"`
}

// Record is the persisted state of one surge.
type Record struct {
	Version int     `json:"version"`
	Fields  []Field `json:"fields"`
	// PodOwner is the Deployment or StatefulSet whose pods are the replicas.
	PodOwner Ref `json:"podOwner"`
	// Node is the node whose drain the surge serves; Pool its MachineConfigPool ("" for a plain cordon).
	Node string `json:"node"`
	Pool string `json:"pool,omitempty"`
	// Trigger says how the stall was seen: MCODrain, MCOTargeted or Cordoned.
	Trigger string `json:"trigger"`
	// Drain identifies the node's drain (the MCO's desired config, or "cordon"), so that a failure is
	// remembered for this drain only.
	Drain      string `json:"drain"`
	BlockedPod string `json:"blockedPod"`
	PDB        string `json:"pdb"`
	// Delta is the number of replicas added; ReadyBefore the Ready replicas off the node at surge time.
	Delta       int32       `json:"delta"`
	ReadyBefore int32       `json:"readyBefore"`
	StartTime   metav1.Time `json:"startTime"`
	// ReadyTime is when the replacement was first seen Ready; ResolvedTime when the blocked pods were
	// gone from the node.
	ReadyTime    *metav1.Time `json:"readyTime,omitempty"`
	ResolvedTime *metav1.Time `json:"resolvedTime,omitempty"`
	// Target is the object whose fields were changed, when it is not the object carrying the record:
	// an InferenceService copies its own annotations into its predictor's pod template, so a record
	// written on it would restart the model; its record lives on the predictor Deployment instead.
	Target *Ref `json:"target,omitempty"`
	// Pending is true from persisting a record on its carrier until the Target's fields are written:
	// two objects cannot be written atomically, so the record goes first and the surge completes (or
	// resumes after a crash) in the next steps.
	Pending bool `json:"pending,omitempty"`
	// Restoring is set while a multi-step restore is under way, with the reason of the restore.
	Restoring string `json:"restoring,omitempty"`
	// RestoreFailure is the failure reason when Restoring follows a failed surge ("" on success).
	RestoreFailure string `json:"restoreFailure,omitempty"`
}

// Failure is the FailureAnnotation's content.
type Failure struct {
	Node   string      `json:"node"`
	Drain  string      `json:"drain"`
	Reason string      `json:"reason"`
	Time   metav1.Time `json:"time"`
}

// Encode serializes the record for the annotation.
func (r *Record) Encode() string {
	b, err := json.Marshal(r)
	if err != nil {
		// A Record holds only plain values; Marshal cannot fail on it.
		panic(err)
	}
	return string(b)
}

// DecodeRecord parses an annotation value; a record of an unknown version or without fields is an error
// rather than a guess.
func DecodeRecord(s string) (*Record, error) {
	var r Record
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, fmt.Errorf("surge record is not valid JSON: %w", err)
	}
	if r.Version != RecordVersion {
		return nil, fmt.Errorf("surge record has version %d, this guardian understands %d", r.Version, RecordVersion)
	}
	if len(r.Fields) == 0 {
		return nil, fmt.Errorf("surge record lists no fields")
	}
	for _, f := range r.Fields {
		if f.Path == "" || f.Path[0] != '/' {
			return nil, fmt.Errorf("surge record has an invalid field path %q", f.Path)
		}
	}
	if r.Node == "" || r.PodOwner.Name == "" || r.StartTime.IsZero() {
		return nil, fmt.Errorf("surge record lacks node, pod owner or start time")
	}
	return &r, nil
}

// DecodeFailure parses the FailureAnnotation; an unreadable one counts as absent.
func DecodeFailure(s string) *Failure {
	var f Failure
	if s == "" || json.Unmarshal([]byte(s), &f) != nil {
		return nil
	}
	return &f
}

// Encode serializes the failure for the annotation.
func (f *Failure) Encode() string {
	b, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	return string(b)
}
