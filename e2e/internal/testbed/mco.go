package testbed

import (
	"context"
	"fmt"

	opv1 "github.com/openshift/api/operator/v1"
	opclientset "github.com/openshift/client-go/operator/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
)

// UpdatePoolWithChange starts a rollout whose drain the MCO simulator decides as the real
// machine-config-daemon does: it writes the rendered MachineConfigs from (base) and to (base with
// changes applied in order), then moves the pool's target to `to`, as UpdatePool does. The pool's
// nodes must run `from` (create the pool with CreatePool(ctx, name, from, nodes)), and
// MachineConfiguration cluster must hold the node disruption policies (SetNodeDisruptionPolicies)
// before the nodes are targeted; otherwise every node drains, as with UpdatePool.
//
// MachineConfigs are cluster-scoped and the scenarios share one cluster: name them after the
// pool, e.g. "rendered-"+pool+"-1". A pool updated with UpdatePool to configs that do not exist
// keeps draining every node.
func (tb *TestBed) UpdatePoolWithChange(ctx context.Context, name, from, to string, base mcosim.RenderedConfig, changes ...mcosim.ConfigChange) error {
	if err := tb.ApplyRenderedConfig(ctx, from, base); err != nil {
		return err
	}
	if err := tb.ApplyRenderedConfig(ctx, to, base.With(changes...)); err != nil {
		return err
	}
	return tb.UpdatePool(ctx, name, to)
}

// ApplyRenderedConfig creates or replaces the rendered MachineConfig name.
func (tb *TestBed) ApplyRenderedConfig(ctx context.Context, name string, cfg mcosim.RenderedConfig) error {
	return mcosim.ApplyRenderedConfig(ctx, tb.MCFG, name, cfg)
}

// SetNodeDisruptionPolicies creates or updates MachineConfiguration cluster with the admin's node
// disruption policies and, as the machine-config-operator would, the merged status (the MCO's
// defaults plus admin's, observedGeneration = generation) that the simulated daemon reads. With an
// empty config the MCO's defaults apply: SSH keys and the pull secret need no drain,
// registries.conf drains unless only digest-only mirrors are added, any other file, unit, kernel
// argument or OS change drains. The policies are cluster-wide: scenarios running at the same time
// share them, so an admin policy should name paths only its own scenario writes.
func (tb *TestBed) SetNodeDisruptionPolicies(ctx context.Context, admin opv1.NodeDisruptionPolicyConfig) error {
	op, err := opclientset.NewForConfig(tb.CP.RESTConfig())
	if err != nil {
		return err
	}
	return mcosim.ApplyNodeDisruptionPolicies(ctx, op, admin)
}

// Node lifecycle condition types (KEP-5683, alpha in Kubernetes 1.37 behind NodeLifecycleConditions),
// set on a node by admins or maintenance controllers. Conditions are free-form, so the test bed's
// API server stores them whatever its version.
const (
	NodeMaintenancePlanned         corev1.NodeConditionType = "MaintenancePlanned"
	NodeMaintenanceInProgress      corev1.NodeConditionType = "MaintenanceInProgress"
	NodeDrainInProgress            corev1.NodeConditionType = "DrainInProgress"
	NodeDrained                    corev1.NodeConditionType = "Drained"
	NodeGracefulShutdownInProgress corev1.NodeConditionType = "GracefulNodeShutdownInProgress"
)

// NodeLifecycleCondition returns a node condition of type t with status, reason and message; an
// empty reason is "Test".
func NodeLifecycleCondition(t corev1.NodeConditionType, status corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
	if reason == "" {
		reason = "Test"
	}
	return corev1.NodeCondition{Type: t, Status: status, Reason: reason, Message: message}
}

// SetNodeConditions sets conditions on the node with a status update: each replaces the node's
// condition of its type, or is added. The transition time is now when the status changes (kept
// otherwise), the heartbeat always now. Ready and the other kubelet conditions are left alone.
func (tb *TestBed) SetNodeConditions(ctx context.Context, node string, conditions ...corev1.NodeCondition) error {
	nodes := tb.CP.Client().CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		n, err := nodes.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		for _, c := range conditions {
			c.LastHeartbeatTime = now
			c.LastTransitionTime = now
			replaced := false
			for i, old := range n.Status.Conditions {
				if old.Type != c.Type {
					continue
				}
				if old.Status == c.Status {
					c.LastTransitionTime = old.LastTransitionTime
				}
				n.Status.Conditions[i], replaced = c, true
				break
			}
			if !replaced {
				n.Status.Conditions = append(n.Status.Conditions, c)
			}
		}
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("setting conditions of node %s: %w", node, err)
	}
	return nil
}
