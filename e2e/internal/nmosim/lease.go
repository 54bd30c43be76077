package nmosim

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// alreadyHeldError says another holder has a valid Lease on the node
// (medik8s/common pkg/lease AlreadyHeldError).
type alreadyHeldError struct{ holder string }

func (e alreadyHeldError) Error() string {
	return fmt.Sprintf("can't update or invalidate the lease because it is held by different owner: %s", e.holder)
}

// requestLease takes or renews the node's Lease as medik8s/common's
// RequestLease does: create it; renew our own; take over one that expired;
// refuse one another holder still holds.
func (c *controller) requestLease(ctx context.Context, node *corev1.Node) error {
	leases := c.kube.CoordinationV1().Leases(LeaseNamespace)
	now := metav1.NowMicro()
	seconds := int32(c.timing.LeaseDuration.Seconds())
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
	lease, err := leases.Get(ctx, LeaseName(node.Name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: LeaseName(node.Name), Namespace: LeaseNamespace, OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(LeaseHolder), LeaseDurationSeconds: ptr.To(seconds),
				AcquireTime: &now, RenewTime: &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	ours := lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == LeaseHolder
	expired := lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil ||
		lease.Spec.RenewTime.Add(c.durationOf(lease)).Before(now.Time)
	switch {
	case ours:
		if expired && lease.Spec.AcquireTime == nil {
			lease.Spec.AcquireTime = &now
		}
	case !expired:
		holder := "unknown"
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		return alreadyHeldError{holder: holder}
	default:
		lease.Spec.AcquireTime = &now
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
		lease.OwnerReferences = []metav1.OwnerReference{owner}
	}
	lease.Spec.HolderIdentity = ptr.To(LeaseHolder)
	lease.Spec.LeaseDurationSeconds = ptr.To(seconds)
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

func (c *controller) durationOf(lease *coordinationv1.Lease) time.Duration {
	return time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
}

// invalidateLease deletes our Lease on the node; another holder's is left
// alone with an alreadyHeldError.
func (c *controller) invalidateLease(ctx context.Context, nodeName string) error {
	leases := c.kube.CoordinationV1().Leases(LeaseNamespace)
	lease, err := leases.Get(ctx, LeaseName(nodeName), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != LeaseHolder {
		return alreadyHeldError{holder: *lease.Spec.HolderIdentity}
	}
	err = leases.Delete(ctx, lease.Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
