// Package simfake is a fake API server for the unit tests of the operator
// simulators that drain nodes with kubectl's drain helper: it filters pod
// lists by spec.nodeName as the real API server does, serves the Eviction API
// (asking a function whether to refuse each attempt, as a PDB would), and
// counts plain pod deletions, which a simulator of a drainer must never make.
package simfake

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// Cluster is the fake API server.
type Cluster struct {
	Kube *fake.Clientset

	mu sync.Mutex
	// refuse returns the error for the n-th eviction attempt (from 1), or
	// nil to evict.
	refuse     func(n int) error
	attempts   int
	evicted    []string
	evictedAt  time.Time
	podDeletes int
}

var podsResource = corev1.SchemeGroupVersion.WithResource("pods")

// PDBRefusal is the Eviction API's answer when a PDB allows no disruption.
func PDBRefusal() error {
	return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
}

// RefuseAll refuses every eviction, as a minAvailable: 1 PDB over a single
// replica does.
func RefuseAll(int) error { return PDBRefusal() }

// AllowAll allows every eviction.
func AllowAll(int) error { return nil }

// New returns a fake cluster holding objects.
func New(refuse func(n int) error, objects ...runtime.Object) *Cluster {
	c := &Cluster{Kube: fake.NewClientset(objects...), refuse: refuse}
	// kubectl's drain helper looks up the Eviction subresource in discovery;
	// without it, it would fall back to deleting pods.
	c.Kube.Resources = []*metav1.APIResourceList{{
		GroupVersion: "v1",
		APIResources: []metav1.APIResource{
			{Name: "pods", Kind: "Pod", Namespaced: true},
			{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1", Namespaced: true},
		},
	}}
	c.Kube.PrependReactor("list", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		restrictions := action.(k8stesting.ListAction).GetListRestrictions()
		if restrictions.Fields == nil || restrictions.Fields.Empty() {
			return false, nil, nil
		}
		obj, err := c.Kube.Tracker().List(podsResource, corev1.SchemeGroupVersion.WithKind("Pod"), action.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		all := obj.(*corev1.PodList)
		filtered := &corev1.PodList{ListMeta: all.ListMeta}
		for _, p := range all.Items {
			if restrictions.Fields.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName}) {
				filtered.Items = append(filtered.Items, p)
			}
		}
		return true, filtered, nil
	})
	c.Kube.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		eviction := action.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.attempts++
		if err := c.refuse(c.attempts); err != nil {
			return true, nil, err
		}
		if err := c.Kube.Tracker().Delete(podsResource, eviction.Namespace, eviction.Name); err != nil {
			return true, nil, err
		}
		c.evicted = append(c.evicted, eviction.Namespace+"/"+eviction.Name)
		c.evictedAt = time.Now()
		return true, nil, nil
	})
	c.Kube.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		c.mu.Lock()
		c.podDeletes++
		c.mu.Unlock()
		return false, nil, nil
	})
	return c
}

// SetRefuse replaces the eviction policy.
func (c *Cluster) SetRefuse(refuse func(n int) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuse = refuse
}

// Evictions returns the number of eviction attempts, the pods evicted
// (namespace/name) and the number of plain pod deletions.
func (c *Cluster) Evictions() (attempts int, evicted []string, podDeletes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts, append([]string{}, c.evicted...), c.podDeletes
}

// LastEviction returns when the last pod was evicted (zero before any).
func (c *Cluster) LastEviction() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.evictedAt
}

// Node returns the node, failing the test if it cannot.
func (c *Cluster) Node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := c.Kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Pod returns whether the pod still exists.
func (c *Cluster) Pod(namespace, name string) bool {
	_, err := c.Kube.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	return err == nil
}

// Node is a Ready node with gpus nvidia.com/gpu.
func Node(name string, gpus int64) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Capacity:   corev1.ResourceList{},
		},
	}
	if gpus > 0 {
		n.Status.Capacity["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return n
}

// Pod is a Running pod of a ReplicaSet on node, using gpus nvidia.com/gpu.
func Pod(namespace, name, node string, gpus int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-rs", UID: "rs-uid", Controller: ptr.To(true),
			}},
		},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if gpus > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	return p
}

// Eventually polls cond every 10ms until it holds or the timeout passes.
func Eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
