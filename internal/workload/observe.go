package workload

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reader is what a stall decision reads about a blocked pod's owner; *Store implements it.
type Reader interface {
	Resolve(pod metav1.Object) (*Target, error)
	Get(ref Ref) (*Object, error)
	PodOwner(ref Ref) (*PodOwnerState, error)
}

// Owner is what Observe read about a pod's owner: the target whose replicas a surge raises, its
// object and its pod owner, or the first error met reading them (with the target when it was resolved).
type Owner struct {
	Target   *Target
	Object   *Object
	PodOwner *PodOwnerState
	Err      error
}

// Observe reads the pod's owner chain; the stall decision classifies any error.
func Observe(r Reader, pod metav1.Object) Owner {
	var o Owner
	if o.Target, o.Err = r.Resolve(pod); o.Err != nil {
		return o
	}
	if o.Object, o.Err = r.Get(o.Target.Ref); o.Err != nil {
		return o
	}
	o.PodOwner, o.Err = r.PodOwner(o.Target.PodOwner)
	return o
}
