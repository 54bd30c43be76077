package controlplane_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
)

// The test bed's Kubernetes 1.34 serves resource.k8s.io/v1 and its scheduler allocates DRA devices:
// a pod taking its GPU through a ResourceClaimTemplate gets a claim allocated from the ResourceSlice
// published for its kwok node, a second such pod stays Pending once no device is free, and runs
// once another node's slice offers one.
func TestDRAAllocatesFromPublishedSlices(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), Out: logWriter{t}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(cp.Stop)
	c := cp.Client()

	// No nvidia.com/gpu in allocatable: the node's only GPU is the DRA device.
	if _, err := cp.AddFakeNode(ctx, "dra-0", map[string]string{"node-role.kubernetes.io/worker": ""}, "zone-a", 0, "16", "64Gi"); err != nil {
		t.Fatal(err)
	}
	if err := cp.CreateGPUDeviceClass(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.PublishGPUDevices(ctx, "dra-0", 1); err != nil {
		t.Fatal(err)
	}
	ns := createNamespace(ctx, t, c, "dra")
	if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, controlplane.GPUClaimTemplate(ns, "one-gpu"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	first := createGPUPod(ctx, t, c, ns, "model-0")
	var running *corev1.Pod
	pollT(ctx, t, "pod model-0 to run on dra-0", func() (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		running = p
		return err == nil && p.Spec.NodeName == "dra-0" && p.Status.Phase == corev1.PodRunning, err
	})
	if len(running.Status.ResourceClaimStatuses) != 1 || running.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod's claim statuses = %+v, want the claim generated from the template", running.Status.ResourceClaimStatuses)
	}
	claim, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, *running.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := claim.Status.Allocation; a == nil || len(a.Devices.Results) != 1 || a.Devices.Results[0].Request != "gpu" ||
		a.Devices.Results[0].Driver != controlplane.GPUDriver || a.Devices.Results[0].Pool != "dra-0" || a.Devices.Results[0].Device != "gpu-0" {
		t.Fatalf("claim %s allocation = %+v, want gpu-0 of pool dra-0", claim.Name, claim.Status.Allocation)
	}
	if len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].UID != running.UID {
		t.Errorf("claim %s reserved for %+v, want pod %s", claim.Name, claim.Status.ReservedFor, running.Name)
	}

	second := createGPUPod(ctx, t, c, ns, "model-1")
	var cond corev1.PodCondition
	pollT(ctx, t, "pod model-1 to be reported Unschedulable", func() (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, second.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("pod model-1 was bound to %s although the only device is allocated", p.Spec.NodeName)
		}
		for _, pc := range p.Status.Conditions {
			if pc.Type == corev1.PodScheduled && pc.Status == corev1.ConditionFalse && pc.Reason == corev1.PodReasonUnschedulable {
				cond = pc
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("model-1: %s", cond.Message)
	// Its claim exists (the controller made it from the template) but holds no device.
	pollT(ctx, t, "model-1's claim to be created", func() (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, second.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ResourceClaimStatuses) == 0 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			return false, err
		}
		cl, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if cl.Status.Allocation != nil {
			t.Fatalf("model-1's claim was allocated %+v although no device is free", cl.Status.Allocation)
		}
		return true, nil
	})

	// A second node's driver publishes its GPU: the scheduler retries model-1 on the slice's arrival.
	if _, err := cp.AddFakeNode(ctx, "dra-1", map[string]string{"node-role.kubernetes.io/worker": ""}, "zone-b", 0, "16", "64Gi"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.PublishGPUDevices(ctx, "dra-1", 1); err != nil {
		t.Fatal(err)
	}
	pollT(ctx, t, "pod model-1 to run on dra-1", func() (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, second.Name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == "dra-1" && p.Status.Phase == corev1.PodRunning, err
	})
}

func createGPUPod(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "model"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Image: "example.invalid/model-server:1"}}},
	}
	controlplane.UseClaimTemplate(&pod.Spec, "one-gpu")
	out, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
