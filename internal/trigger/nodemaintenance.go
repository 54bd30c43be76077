package trigger

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The NodeMaintenance kinds, read through the dynamic client.
var (
	// Medik8sNodeMaintenanceGVR is the medik8s Node Maintenance Operator's cluster-scoped request
	// (medik8s/node-maintenance-operator api/v1beta1/nodemaintenance_types.go), used by OpenShift
	// Virtualization and node remediation.
	Medik8sNodeMaintenanceGVR = schema.GroupVersionResource{Group: "nodemaintenance.medik8s.io", Version: "v1beta1", Resource: "nodemaintenances"}
	// NVIDIANodeMaintenanceGVR is NVIDIA's maintenance operator's namespaced request
	// (Mellanox/maintenance-operator api/v1alpha1/nodemaintenance_types.go), which the GPU
	// Operator's requestor mode creates.
	NVIDIANodeMaintenanceGVR = schema.GroupVersionResource{Group: "maintenance.nvidia.com", Version: "v1alpha1", Resource: "nodemaintenances"}
)

// Values of the medik8s status.phase (api/v1beta1: MaintenanceRunning, MaintenanceSucceeded,
// MaintenanceFailed). The operator writes Running before its first drain attempt and keeps it
// while attempts fail, every 5 s, for as long as the object exists
// (internal/controller/nodemaintenance_controller.go).
const (
	Medik8sPhaseRunning   = "Running"
	Medik8sPhaseSucceeded = "Succeeded"
	Medik8sPhaseFailed    = "Failed"
)

// medik8sPhases maps status.phase to the drain's phase. A new object without a phase yet is about
// to be cordoned and drained: Targeted. Failed means the operator lost the node's Lease, or the
// node does not exist; it uncordons the node, and a later reconcile may try again.
var medik8sPhases = map[string]Phase{
	"":                    PhaseTargeted,
	Medik8sPhaseRunning:   PhaseDraining,
	Medik8sPhaseSucceeded: PhaseDrained,
	Medik8sPhaseFailed:    PhaseFailed,
}

// Reasons of the NVIDIA NodeMaintenance's Ready condition, the phase of its request
// (api/v1alpha1: ConditionReason*), in the order the operator walks them
// (internal/controller/nodemaintenance_controller.go; the scheduler moves Pending to Scheduled
// within maxParallelOperations and maxUnavailable).
const (
	NVIDIAReasonPending              = "Pending"
	NVIDIAReasonScheduled            = "Scheduled"
	NVIDIAReasonCordon               = "Cordon"
	NVIDIAReasonWaitForPodCompletion = "WaitForPodCompletion"
	NVIDIAReasonDraining             = "Draining"
	NVIDIAReasonReady                = "Ready"
	NVIDIAReasonRequestorFailed      = "RequestorFailed"
)

// nvidiaPhases maps the Ready condition's reason to the drain's phase. A drain that fails or times
// out is retried for as long as the object exists, so the operator itself never fails a drain;
// RequestorFailed is the requestor saying its maintenance failed, which keeps the node cordoned.
var nvidiaPhases = map[string]Phase{
	"":                               PhasePredicted,
	NVIDIAReasonPending:              PhasePredicted,
	NVIDIAReasonScheduled:            PhaseTargeted,
	NVIDIAReasonCordon:               PhaseTargeted,
	NVIDIAReasonWaitForPodCompletion: PhaseTargeted,
	NVIDIAReasonDraining:             PhaseDraining,
	NVIDIAReasonReady:                PhaseDrained,
	NVIDIAReasonRequestorFailed:      PhaseFailed,
}

// Maintenance is one NodeMaintenance object, of either kind, as the guardian reads it.
type Maintenance struct {
	// ID names the object for drain ids and messages: <name>/<uid>, or <namespace>/<name>/<uid>.
	ID string
	// NodeName is spec.nodeName.
	NodeName string
	// Phase is the drain's phase, from the object's own phase.
	Phase Phase
	// Status is the object's own word for its phase: the medik8s status.phase or the NVIDIA Ready
	// condition's reason.
	Status string
	// LastError is the medik8s status.lastError (why the last drain attempt failed), "" otherwise.
	LastError string
}

// ReadMedik8sNodeMaintenance reads a nodemaintenance.medik8s.io NodeMaintenance. An object being
// deleted is PhaseOver: the operator uncordons the node before it lets the object go.
func ReadMedik8sNodeMaintenance(obj *unstructured.Unstructured) (Maintenance, error) {
	m, err := readMaintenance(obj)
	if err != nil {
		return m, err
	}
	m.Status, _, err = unstructured.NestedString(obj.Object, "status", "phase")
	if err != nil {
		return m, fmt.Errorf("NodeMaintenance %s: status.phase: %w", obj.GetName(), err)
	}
	m.LastError, _, _ = unstructured.NestedString(obj.Object, "status", "lastError")
	m.Phase = phaseOf(obj, medik8sPhases, m.Status)
	return m, nil
}

// ReadNVIDIANodeMaintenance reads a maintenance.nvidia.com NodeMaintenance. Its phase is the reason
// of its Ready condition; an object being deleted is PhaseOver (the operator uncordons the node in
// its finalizer).
func ReadNVIDIANodeMaintenance(obj *unstructured.Unstructured) (Maintenance, error) {
	m, err := readMaintenance(obj)
	if err != nil {
		return m, err
	}
	conditions, _, err := unstructured.NestedSlice(obj.Object, "status", "conditions")
	if err != nil {
		return m, fmt.Errorf("NodeMaintenance %s/%s: status.conditions: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	for _, c := range conditions {
		cond, ok := c.(map[string]any)
		if !ok || cond["type"] != "Ready" {
			continue
		}
		m.Status, _ = cond["reason"].(string)
	}
	m.Phase = phaseOf(obj, nvidiaPhases, m.Status)
	return m, nil
}

func readMaintenance(obj *unstructured.Unstructured) (Maintenance, error) {
	node, _, err := unstructured.NestedString(obj.Object, "spec", "nodeName")
	if err != nil || node == "" {
		return Maintenance{}, fmt.Errorf("NodeMaintenance %s: no spec.nodeName", obj.GetName())
	}
	id := obj.GetName() + "/" + string(obj.GetUID())
	if obj.GetNamespace() != "" {
		id = obj.GetNamespace() + "/" + id
	}
	return Maintenance{ID: id, NodeName: node}, nil
}

// phaseOf maps status through phases; a status this version does not know is PhaseNone (the
// guardian does nothing it cannot explain), an object being deleted PhaseOver.
func phaseOf(obj *unstructured.Unstructured, phases map[string]Phase, status string) Phase {
	if obj.GetDeletionTimestamp() != nil {
		return PhaseOver
	}
	phase, known := phases[status]
	if !known {
		return PhaseNone
	}
	return phase
}

// NodeMaintenances reads the NodeMaintenance objects of both kinds, for one analysis pass.
type NodeMaintenances struct {
	byNode map[string][]Maintenance
}

// NewNodeMaintenances indexes maintenances by node, each node's in ID order.
func NewNodeMaintenances(maintenances []Maintenance) NodeMaintenances {
	byNode := make(map[string][]Maintenance, len(maintenances))
	for _, m := range maintenances {
		byNode[m.NodeName] = append(byNode[m.NodeName], m)
	}
	for _, ms := range byNode {
		sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	}
	return NodeMaintenances{byNode: byNode}
}

// maxDetail bounds the text a Signal carries from a status other parties write.
const maxDetail = 256

// Signal is the dominant phase of the node's NodeMaintenance objects; several can name one node (a
// medik8s one and an NVIDIA one, or NVIDIA ones of several requestors). A node without any is
// PhaseNone, so the end of a maintenance shows as PhaseOver while the object is being deleted,
// then as PhaseNone with an empty drain id.
func (n NodeMaintenances) Signal(node *corev1.Node) Signal {
	ms := n.byNode[node.Name]
	if len(ms) == 0 {
		return newSignal(NodeMaintenance, PhaseNone, "", "", node)
	}
	signals := make([]Signal, 0, len(ms))
	for _, m := range ms {
		detail := m.Status
		if m.LastError != "" {
			detail += ": " + m.LastError
		}
		if len(detail) > maxDetail {
			detail = strings.ToValidUTF8(detail[:maxDetail], "")
		}
		signals = append(signals, newSignal(NodeMaintenance, m.Phase, "nodemaintenance/"+m.ID, detail, node))
	}
	return Dominant(signals...)
}

// NodeMaintenanceKind registers the NodeMaintenance objects of both kinds in Kinds, each read when
// the cluster serves it. An object that cannot be read is skipped (and logged): the guardian acts
// on nothing it cannot explain.
var NodeMaintenanceKind = Kind{
	Name:  NodeMaintenance,
	Noun:  "maintenance drain",
	Flag:  "node-maintenance",
	Usage: "Treat NodeMaintenance objects (nodemaintenance.medik8s.io, maintenance.nvidia.com) as drains of their node, when the cluster serves them.",
	Resources: []Resource{
		{GVR: Medik8sNodeMaintenanceGVR, NodeOf: NodeName},
		{GVR: NVIDIANodeMaintenanceGVR, NodeOf: NodeName},
	},
	Signal: func(v View, node *corev1.Node, _ bool) Signal {
		return NewNodeMaintenances(maintenancesOf(v, node.Name)).Signal(node)
	},
	WillDrain: func(v View, node *corev1.Node) bool {
		return NewNodeMaintenances(maintenancesOf(v, node.Name)).Signal(node).Active()
	},
	DrainingNow: func(v View) []*corev1.Node {
		var out []*corev1.Node
		for _, n := range v.Nodes() {
			if NewNodeMaintenances(maintenancesOf(v, n.Name)).Signal(n).Phase == PhaseDraining {
				out = append(out, n)
			}
		}
		return out
	},
}

// maintenanceReaders reads each NodeMaintenance kind.
var maintenanceReaders = []struct {
	gvr  schema.GroupVersionResource
	read func(*unstructured.Unstructured) (Maintenance, error)
}{
	{Medik8sNodeMaintenanceGVR, ReadMedik8sNodeMaintenance},
	{NVIDIANodeMaintenanceGVR, ReadNVIDIANodeMaintenance},
}

// maintenancesOf reads the NodeMaintenance objects of every kind served that name the node.
func maintenancesOf(v View, node string) []Maintenance {
	var out []Maintenance
	for _, k := range maintenanceReaders {
		for _, u := range v.ObjectsOn(k.gvr, node) {
			m, err := k.read(u)
			if err != nil {
				v.Logf("skipping a NodeMaintenance: %v", err)
				continue
			}
			out = append(out, m)
		}
	}
	return out
}
