// Package podinfo is the guardian's compact copy of a pod: what its blocking, capacity and surge
// decisions read, and nothing else.
//
// On a large cluster pods are most of what the guardian caches (30,000 on a 1,000-node fleet). A
// *corev1.Pod costs more than a kilobyte before any field is set, and the parts a decision reads (the
// owner, the labels, what the pod requests, its node selector, affinity and tolerations) are the
// same for every replica of a workload. A Pod here is a few hundred bytes of its own; those shared
// parts are interned, one copy for all the replicas that have them.
//
// Cached Pods are read-only: interned parts are shared between pods, so a caller that wants to change
// one (the look-ahead's stand-in for an unscheduled replacement) changes a copy (see Unscheduled).
package podinfo

import (
	"encoding/json"
	"unique"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Annotations a decision reads; every other pod annotation is dropped.
const (
	// MirrorAnnotation marks a static pod's mirror in the API: the Eviction API cannot remove it.
	MirrorAnnotation = corev1.MirrorPodAnnotationKey
	// DeletionCostAnnotation ranks a ReplicaSet's pods for scale-down (the guardian sets it on the
	// replica to keep when it restores a count).
	DeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"
)

// Pod is a pod as the guardian caches it. ObjectMeta keeps the identity, resourceVersion, creation
// and deletion timestamps, labels, owner references and the two annotations above; Labels and
// OwnerReferences are shared with the pod's sibling replicas and must not be changed.
type Pod struct {
	metav1.ObjectMeta
	Spec   Spec
	Status Status
}

// Spec is the node the pod is bound to and how the scheduler places it.
type Spec struct {
	NodeName string
	// Scheduling is never nil on a Pod made by From; it is shared with sibling replicas.
	*Scheduling
}

// Scheduling is what the scheduler matches a pod against: shared by every pod with the same
// node selector, affinity, tolerations, priority and requests.
type Scheduling struct {
	NodeSelector      map[string]string
	Affinity          *corev1.Affinity
	Tolerations       []corev1.Toleration
	Priority          *int32
	PriorityClassName string
	// Requests is what the pod requests as the scheduler adds it up: init containers, sidecars and
	// overhead folded in (k8s.io/component-helpers/resource.PodRequests).
	Requests corev1.ResourceList
	// ResourceClaims are the pod's claims for devices of Dynamic Resource Allocation
	// (spec.resourceClaims): which a replacement gets anew from a template, which it shares.
	ResourceClaims []corev1.PodResourceClaim

	// nodeAffinity is the required node affinity and node selector, parsed once.
	nodeAffinity nodeaffinity.RequiredNodeAffinity
}

// MatchesNode reports whether the node passes the pod's node selector and required node affinity.
func (s *Scheduling) MatchesNode(n *corev1.Node) bool {
	ok, err := s.nodeAffinity.Match(n)
	return err == nil && ok
}

// Status is the pod's phase and what its Ready and PodScheduled conditions say.
type Status struct {
	Phase corev1.PodPhase
	// Ready: the Ready condition is True.
	Ready bool
	// Unschedulable: the PodScheduled condition is False for reason Unschedulable, since
	// UnschedulableSince (the condition's transition; zero when the kubelet did not set it).
	Unschedulable      bool
	UnschedulableSince metav1.Time
}

// From makes the compact copy of p. It does not keep a reference to p or to anything p holds but
// the strings and the maps and slices it interns, which it never changes.
func From(p *corev1.Pod) *Pod {
	out := &Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: unique.Make(p.Namespace).Value(), UID: p.UID, ResourceVersion: p.ResourceVersion,
			Generation: p.Generation, CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
			DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds,
		},
		Spec: Spec{NodeName: unique.Make(p.Spec.NodeName).Value(), Scheduling: scheduling(p)},
	}
	out.Labels, out.OwnerReferences = owners(p)
	for _, k := range [...]string{MirrorAnnotation, DeletionCostAnnotation} {
		if v, ok := p.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = make(map[string]string, 1)
			}
			out.Annotations[k] = v
		}
	}
	out.Status.Phase = p.Status.Phase
	for _, c := range p.Status.Conditions {
		switch {
		case c.Type == corev1.PodReady:
			out.Status.Ready = c.Status == corev1.ConditionTrue
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable:
			out.Status.Unschedulable, out.Status.UnschedulableSince = true, c.LastTransitionTime
		}
	}
	return out
}

var (
	schedulings = newInterner[Scheduling]()
	ownerships  = newInterner[ownership]()
)

// ownership is the labels and owner references of a pod: the same for the replicas of a ReplicaSet.
type ownership struct {
	labels map[string]string
	owners []metav1.OwnerReference
}

func owners(p *corev1.Pod) (map[string]string, []metav1.OwnerReference) {
	if len(p.Labels) == 0 && len(p.OwnerReferences) == 0 {
		return nil, nil
	}
	key, err := json.Marshal(struct {
		L map[string]string
		O []metav1.OwnerReference
	}{p.Labels, p.OwnerReferences})
	if err != nil {
		return p.Labels, p.OwnerReferences
	}
	o := ownerships.intern(key, func() *ownership {
		return &ownership{labels: p.Labels, owners: p.OwnerReferences}
	})
	return o.labels, o.owners
}

func scheduling(p *corev1.Pod) *Scheduling {
	s := Scheduling{
		NodeSelector: p.Spec.NodeSelector, Affinity: p.Spec.Affinity, Tolerations: p.Spec.Tolerations,
		Priority: p.Spec.Priority, PriorityClassName: p.Spec.PriorityClassName,
		Requests:       resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}),
		ResourceClaims: p.Spec.ResourceClaims,
	}
	key, err := json.Marshal(&s)
	if err != nil {
		// Not reached for API objects; such a pod keeps a copy of its own.
		key = []byte(p.Namespace + "/" + p.Name + "/" + string(p.UID))
	}
	return schedulings.intern(key, func() *Scheduling {
		s.nodeAffinity = nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: corev1.PodSpec{NodeSelector: s.NodeSelector, Affinity: s.Affinity}})
		return &s
	})
}

// WithoutNodeSelector returns a copy of p whose node selector does not name key, or p itself when it
// does not. lws pins the workers of a group with exclusive placement to their leader's topology
// domain by node selector: a new group's workers follow their own leader, wherever it goes.
func (p *Pod) WithoutNodeSelector(key string) *Pod {
	if _, ok := p.Spec.NodeSelector[key]; !ok {
		return p
	}
	s := *p.Spec.Scheduling
	s.NodeSelector = make(map[string]string, len(p.Spec.NodeSelector)-1)
	for k, v := range p.Spec.NodeSelector {
		if k != key {
			s.NodeSelector[k] = v
		}
	}
	s.nodeAffinity = nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: corev1.PodSpec{NodeSelector: s.NodeSelector, Affinity: s.Affinity}})
	cp := *p
	cp.Spec.Scheduling = &s
	return &cp
}

// Ready reports whether the pod's Ready condition is True.
func (p *Pod) Ready() bool { return p.Status.Ready }

// Finished reports whether the pod has run to completion (Succeeded or Failed).
func (p *Pod) Finished() bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// Unscheduled returns a copy of p as a replacement the scheduler has still to place: no node, Pending,
// named name. Its shared parts stay shared.
func (p *Pod) Unscheduled(name string) *Pod {
	cp := *p
	cp.ObjectMeta = *p.DeepCopy() // ObjectMeta's: the copy's labels are its own
	cp.Name, cp.UID, cp.ResourceVersion = name, "", ""
	cp.Spec.NodeName = ""
	cp.Status = Status{Phase: corev1.PodPending}
	return &cp
}

// Ref refers to the pod, for Events about it.
func (p *Pod) Ref() *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion}
}

// EqualButVersion reports whether a and b are the same but for their resourceVersions: an update
// that changed only what From drops. Shared parts compare by identity: equal contents are one
// interned value as long as either pod holds it.
func EqualButVersion(a, b *Pod) bool {
	am, bm := a.ObjectMeta, b.ObjectMeta
	am.ResourceVersion, bm.ResourceVersion = "", ""
	return a.Spec.NodeName == b.Spec.NodeName && a.Spec.Scheduling == b.Spec.Scheduling &&
		equality.Semantic.DeepEqual(am, bm) && equality.Semantic.DeepEqual(a.Status, b.Status)
}
