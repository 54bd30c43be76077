package nmosim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drain-guardian/drain-guardian/e2e/internal/simfake"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// testScale makes a drain attempt last at most 0.3 s and the retry wait
// 0.05 s (kubectl's 5 s wait after a refused eviction is not scaled).
const testScale = 0.01

type fakeNMCluster struct {
	*simfake.Cluster
	dyn *dynamicfake.FakeDynamicClient
}

func newFakeNMCluster(t *testing.T, refuse func(int) error, objects ...runtime.Object) *fakeNMCluster {
	t.Helper()
	c := &fakeNMCluster{
		Cluster: simfake.New(refuse, objects...),
		dyn: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{NodeMaintenanceGVR: "NodeMaintenanceList"}),
	}
	// As the API server does, a write to the status subresource changes the
	// status only, and a write to the object everything but the status.
	c.dyn.PrependReactor("update", "nodemaintenances", func(action k8stesting.Action) (bool, runtime.Object, error) {
		update := action.(k8stesting.UpdateAction)
		written := update.GetObject().(*unstructured.Unstructured).DeepCopy()
		stored, err := c.dyn.Tracker().Get(NodeMaintenanceGVR, "", written.GetName())
		if err != nil {
			return true, nil, err
		}
		merged := stored.(*unstructured.Unstructured).DeepCopy()
		if update.GetSubresource() == "status" {
			merged.Object["status"] = written.Object["status"]
		} else {
			written.Object["status"] = merged.Object["status"]
			merged = written
		}
		return true, merged, c.dyn.Tracker().Update(NodeMaintenanceGVR, merged, "")
	})
	timing, err := ScaledTimings(testScale)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, c.Kube, c.dyn, timing) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not return after its context was cancelled")
		}
	})
	return c
}

func (c *fakeNMCluster) create(t *testing.T, name, node string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"nodeName": node, "reason": "replace a DIMM"},
	}}
	if _, err := c.dyn.Resource(NodeMaintenanceGVR).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// get returns the NodeMaintenance decoded.
func (c *fakeNMCluster) get(t *testing.T, name string) *nodeMaintenance {
	t.Helper()
	obj, err := c.dyn.Resource(NodeMaintenanceGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nm := &nodeMaintenance{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, nm); err != nil {
		t.Fatal(err)
	}
	return nm
}

// markDeleted does what the API server does on delete while a finalizer is
// set: it sets the deletion timestamp.
func (c *fakeNMCluster) markDeleted(t *testing.T, name string) {
	t.Helper()
	obj, err := c.dyn.Resource(NodeMaintenanceGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	obj.SetDeletionTimestamp(&now)
	if _, err := c.dyn.Resource(NodeMaintenanceGVR).Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *fakeNMCluster) lease(node string) (*coordinationv1.Lease, bool) {
	l, err := c.Kube.CoordinationV1().Leases(LeaseNamespace).Get(context.Background(), LeaseName(node), metav1.GetOptions{})
	return l, err == nil
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key && t.Effect == corev1.TaintEffectNoSchedule })
}

// TestMaintenanceRetriesUntilDrainedAndUndoesItOnDelete: the first
// evictions are refused (a PDB); the operator reports the failure in the
// status and retries until the pod is evicted, then Succeeded. Deleting the
// NodeMaintenance uncordons the node and undoes the rest.
func TestMaintenanceRetriesUntilDrainedAndUndoesItOnDelete(t *testing.T) {
	refuseTwice := func(n int) error {
		if n <= 2 {
			return simfake.PDBRefusal()
		}
		return nil
	}
	c := newFakeNMCluster(t, refuseTwice, simfake.Node("gpu-1", 1), simfake.Node("gpu-2", 1),
		simfake.Pod("models", "model", "gpu-1", 1), simfake.Pod("models", "other", "gpu-2", 1))
	c.create(t, "nm-gpu-1", "gpu-1")

	simfake.Eventually(t, 10*time.Second, "a failed attempt in the status", func() bool {
		s := c.get(t, "nm-gpu-1").Status
		return s.Phase == PhaseRunning && strings.Contains(s.LastError, `evicting pods/"model"`)
	})
	s := c.get(t, "nm-gpu-1").Status
	if !slices.Equal(s.PendingPods, []string{"model"}) || s.EvictionPods != 1 || s.TotalPods != 1 || s.DrainProgress != 0 {
		t.Errorf("status while blocked = %+v, want the model pending, progress 0", s)
	}
	n := c.Node(t, "gpu-1")
	if !n.Spec.Unschedulable || !hasTaint(n, DrainTaintKey) || !hasTaint(n, UnschedulableTaintKey) || n.Labels[ExcludeFromRemediationLabel] != "true" {
		t.Errorf("node under maintenance: unschedulable %v, taints %v, labels %v", n.Spec.Unschedulable, n.Spec.Taints, n.Labels)
	}
	if l, ok := c.lease("gpu-1"); !ok || ptr.Deref(l.Spec.HolderIdentity, "") != LeaseHolder || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) < 1 ||
		len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Kind != "Node" || l.OwnerReferences[0].Name != "gpu-1" {
		t.Errorf("lease = %+v, want one held by %s and owned by the node", l, LeaseHolder)
	}
	if nm := c.get(t, "nm-gpu-1"); !slices.Contains(nm.Finalizers, Finalizer) {
		t.Errorf("finalizers = %v", nm.Finalizers)
	}

	simfake.Eventually(t, 30*time.Second, "Succeeded", func() bool { return c.get(t, "nm-gpu-1").Status.Phase == PhaseSucceeded })
	s = c.get(t, "nm-gpu-1").Status
	if s.DrainProgress != 100 || len(s.PendingPods) != 0 {
		t.Errorf("status after the drain = %+v", s)
	}
	attempts, evicted, deletes := c.Evictions()
	if attempts != 3 || !slices.Equal(evicted, []string{"models/model"}) || deletes != 0 {
		t.Errorf("%d eviction attempts, evicted %v, %d plain deletions; want 3 attempts evicting models/model, no deletion",
			attempts, evicted, deletes)
	}
	if !c.Pod("models", "other") || c.Node(t, "gpu-2").Spec.Unschedulable {
		t.Error("the other node was touched")
	}

	c.markDeleted(t, "nm-gpu-1")
	simfake.Eventually(t, 10*time.Second, "the finalizer to go", func() bool {
		return !slices.Contains(c.get(t, "nm-gpu-1").Finalizers, Finalizer)
	})
	n = c.Node(t, "gpu-1")
	if n.Spec.Unschedulable || hasTaint(n, DrainTaintKey) || hasTaint(n, UnschedulableTaintKey) {
		t.Errorf("after the delete: unschedulable %v, taints %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	if _, labelled := n.Labels[ExcludeFromRemediationLabel]; labelled {
		t.Error("exclude-from-remediation label left behind")
	}
	if _, ok := c.lease("gpu-1"); ok {
		t.Error("lease left behind")
	}
}

// TestBlockedMaintenanceRetriesForAsLongAsItExists: with every eviction
// refused, the operator never gives up.
func TestBlockedMaintenanceRetriesForAsLongAsItExists(t *testing.T) {
	c := newFakeNMCluster(t, simfake.RefuseAll, simfake.Node("gpu-1", 1), simfake.Pod("models", "model", "gpu-1", 1))
	c.create(t, "nm-gpu-1", "gpu-1")
	// kubectl waits 5 s after each refusal: three attempts take 10 s or more.
	simfake.Eventually(t, 30*time.Second, "three refused evictions", func() bool {
		attempts, _, _ := c.Evictions()
		return attempts >= 3
	})
	s := c.get(t, "nm-gpu-1").Status
	// kubectl's drain reports the refused eviction as a timeout of the attempt.
	if s.Phase != PhaseRunning || !strings.Contains(s.LastError, "global timeout reached") || !slices.Equal(s.PendingPods, []string{"model"}) {
		t.Errorf("status = %+v, want Running, the timed-out eviction as lastError, the model pending", s)
	}
	if _, _, deletes := c.Evictions(); deletes != 0 || !c.Pod("models", "model") || !c.Node(t, "gpu-1").Spec.Unschedulable {
		t.Errorf("%d plain deletions; pod there %v; node cordoned %v", deletes, c.Pod("models", "model"), c.Node(t, "gpu-1").Spec.Unschedulable)
	}
}

// TestLeaseHeldByAnotherHolder: while node remediation holds the node's
// Lease, the operator neither cordons nor drains.
func TestLeaseHeldByAnotherHolder(t *testing.T) {
	now := metav1.NowMicro()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: LeaseName("gpu-1"), Namespace: LeaseNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("self-node-remediation"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &now, RenewTime: &now},
	}
	c := newFakeNMCluster(t, simfake.AllowAll, simfake.Node("gpu-1", 1), simfake.Pod("models", "model", "gpu-1", 1), lease)
	c.create(t, "nm-gpu-1", "gpu-1")
	simfake.Eventually(t, 10*time.Second, "the lease error in the status", func() bool {
		return strings.Contains(c.get(t, "nm-gpu-1").Status.LastError, "self-node-remediation")
	})
	time.Sleep(500 * time.Millisecond)
	if c.Node(t, "gpu-1").Spec.Unschedulable || !c.Pod("models", "model") {
		t.Error("node cordoned or drained without the lease")
	}
	if got := c.get(t, "nm-gpu-1").Status.ErrorOnLeaseCount; got != 0 {
		t.Errorf("errorOnLeaseCount = %d, want 0 before any drain progress", got)
	}
}

func TestMissingNodeFailsTheMaintenance(t *testing.T) {
	c := newFakeNMCluster(t, simfake.AllowAll)
	c.create(t, "nm-ghost", "ghost")
	simfake.Eventually(t, 10*time.Second, "Failed", func() bool { return c.get(t, "nm-ghost").Status.Phase == PhaseFailed })
	if s := c.get(t, "nm-ghost").Status; !strings.Contains(s.LastError, "ghost") {
		t.Errorf("lastError = %q", s.LastError)
	}
}
