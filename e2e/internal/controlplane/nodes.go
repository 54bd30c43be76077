package controlplane

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeReadyTimeout bounds how long kwok may take to make a new Node Ready.
const nodeReadyTimeout = time.Minute

// AddFakeNode creates a Node that kwok manages and waits until it is Ready. labels are added to the
// usual kubernetes.io/hostname, kubernetes.io/os and kubernetes.io/arch; a non-empty zone sets
// topology.kubernetes.io/zone. cpu and memory are quantities ("8", "64Gi") used as both capacity and
// allocatable, with gpus of nvidia.com/gpu when gpus > 0.
func (cp *ControlPlane) AddFakeNode(ctx context.Context, name string, labels map[string]string, zone string, gpus int, cpu, memory string) (*corev1.Node, error) {
	cpuQ, err := resource.ParseQuantity(cpu)
	if err != nil {
		return nil, fmt.Errorf("node %s: cpu %q: %w", name, cpu, err)
	}
	memQ, err := resource.ParseQuantity(memory)
	if err != nil {
		return nil, fmt.Errorf("node %s: memory %q: %w", name, memory, err)
	}
	l := map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
	}
	if zone != "" {
		l[corev1.LabelTopologyZone] = zone
	}
	maps.Copy(l, labels)
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    cpuQ,
		corev1.ResourceMemory: memQ,
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if gpus > 0 {
		resources[GPUResource] = resource.MustParse(strconv.Itoa(gpus))
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      l,
			Annotations: map[string]string{FakeNodeAnnotation: "fake"},
		},
		// The apiserver keeps the status of a Node on create; kwok fills in the rest (conditions,
		// addresses, daemon endpoints) and keeps capacity and allocatable as given.
		Status: corev1.NodeStatus{Capacity: resources, Allocatable: resources.DeepCopy()},
	}
	if _, err := cp.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating node %s: %w", name, err)
	}
	var ready *corev1.Node
	err = poll(ctx, nodeReadyTimeout, "node "+name+" to be Ready", func(ctx context.Context) (bool, error) {
		n, err := cp.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = n
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return ready, nil
}
