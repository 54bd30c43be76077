package trigger

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kinds is the table of the drain sources other than the MCO, in the fixed order their signals are
// weighed (trigger.Dominant breaks ties by order). The daemon, its look-ahead, its restore and
// `check` iterate this table and name no source: adding a source is one file that declares its
// Kind, plus one line here.
//
// The MCO is the primary source and stays apart (package mco and guardian.NodeTrigger): its drains
// come with MachineConfigPools, an update order and restore modes of their own.
var Kinds = []Kind{
	GPUDriverUpgradeKind,
	NodeMaintenanceKind,
	NodeLifecycleKind,
}

// Kind is one drain source: what it reads, and how it answers for a node. Every function reads
// only the View and is pure; nil functions mean the source has nothing to say there.
type Kind struct {
	Name Name
	// Noun names the source's drain in Events ("driver upgrade"): "blocks the <Noun> of node w1".
	Noun string
	// Next names a node the source is predicted to drain ("the GPU Operator's next pick"); empty
	// when its predictions read like its picks ("would block the coming <Noun> of node w1").
	Next string
	// Flag is the daemon's flag that switches the source (on by default), with its help text.
	Flag, Usage string
	// Resources are the APIs the source reads besides nodes, watched when the cluster serves them.
	Resources []Resource
	// Signal is the source's view of node. With predict false no prediction is made (a cheaper
	// read for callers that only ask what is under way).
	Signal func(v View, node *corev1.Node, predict bool) Signal
	// Upcoming names the nodes whose prediction may move when node changes (a node finishing frees
	// a slot for the next pick); nil when the source predicts nothing.
	Upcoming func(v View, node *corev1.Node) []string
	// WillDrain reports whether the source is still to drain the node in its current rollout
	// (waiting to be picked, planned, picked, draining): no place for a replacement, nor for the
	// survivors of a restore.
	WillDrain func(v View, node *corev1.Node) bool
	// DrainingNow lists the nodes the source is draining now: their stalls come before any surge
	// ahead of the source (the look-ahead's "unserved" stalls).
	DrainingNow func(v View) []*corev1.Node
	// RolloutOver reports whether the rollout has no node left to drain (what --restore=pool waits
	// for); nil means each drain is a rollout of its own.
	RolloutOver func(v View) bool
	// Rollout is the rollout `check` predicts for the source (its pseudo-pool), ok false when
	// there is none; nil when the source is not predicted ahead.
	Rollout func(v View) (r Rollout, ok bool)
}

// KindOf is the table's entry of the named source.
func KindOf(name Name) (Kind, bool) {
	for _, k := range Kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// Resource is an API a source reads through the dynamic client.
type Resource struct {
	GVR schema.GroupVersionResource
	// NodeOf names the node an object concerns ("" for none): the view indexes the objects by it,
	// and an object's change re-examines that node and the Surges made for it.
	NodeOf func(*unstructured.Unstructured) string
	// Affects names the nodes to re-examine when an object without a node changes (nil: none).
	Affects func(v View, obj *unstructured.Unstructured) []string
	// Slim keeps, of a cached object, what the source reads (nil: the whole object minus
	// managedFields).
	Slim func(*unstructured.Unstructured)
}

// View is the read-only snapshot the sources read: the informers' caches.
type View interface {
	// Nodes lists every node.
	Nodes() []*corev1.Node
	// Objects lists the cached objects of one of the source's resources; nil when not served.
	Objects(gvr schema.GroupVersionResource) []*unstructured.Unstructured
	// ObjectsOn lists those whose Resource.NodeOf is node.
	ObjectsOn(gvr schema.GroupVersionResource, node string) []*unstructured.Unstructured
	// Lookahead is --lookahead: how many upcoming nodes a source may predict (0: none).
	Lookahead() int
	// Logf reports an object a source could not read and skipped.
	Logf(format string, args ...any)
}

// Rollout is a source's drains as `check` predicts them: nodes in the order they will be drained,
// Width at a time, each drain named Drain (the id the daemon's Surges carry).
type Rollout struct {
	Name  string
	Drain string
	Width int
	Order []*corev1.Node
}

// NodeName is the NodeOf of resources whose spec.nodeName names their node.
func NodeName(u *unstructured.Unstructured) string {
	node, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName")
	return node
}
