package workload

import (
	"fmt"

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

// Unsettled says how the owner is not at rest, "" when it is (see PodOwnerState.Unsettled): its pod
// owner runs what it asks for, and an HPA that owns the count is not scaling it (its current count is
// the desired one). A KServe object's Deployment is its pod owner. Only an owner read without error
// is judged.
func (o Owner) Unsettled() string {
	if o.Err != nil || o.PodOwner == nil {
		return ""
	}
	if why := o.PodOwner.Unsettled(); why != "" {
		return fmt.Sprintf("%s %s: %s", o.Target.PodOwner.Kind, o.Target.PodOwner.Name, why)
	}
	if o.Target.Ref.Kind == KindHPA && o.Object != nil {
		// An HPA the controller has not looked at yet has neither count: 0 = 0, at rest.
		current, _ := o.Object.Int(hpaCurrentPath)
		desired, _ := o.Object.Int(hpaDesiredPath)
		if current != desired {
			return fmt.Sprintf("HorizontalPodAutoscaler %s is scaling: %d replicas desired, %d current", o.Target.Ref.Name, desired, current)
		}
	}
	return ""
}
