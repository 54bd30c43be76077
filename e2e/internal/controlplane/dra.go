package controlplane

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The DRA driver and DeviceClass the test bed's GPUs are published under: those of the NVIDIA DRA
// Driver for GPUs (NVIDIA/k8s-dra-driver-gpu), whose class selects the driver's devices of type gpu.
const (
	GPUDriver      = "gpu.nvidia.com"
	GPUDeviceClass = "gpu.nvidia.com"
)

// CreateGPUDeviceClass creates the DeviceClass GPUDeviceClass as the driver's Helm chart installs it.
func (cp *ControlPlane) CreateGPUDeviceClass(ctx context.Context) error {
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: GPUDeviceClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == 'gpu'", GPUDriver, GPUDriver),
		}}}},
	}
	if _, err := cp.client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating DeviceClass %s: %w", GPUDeviceClass, err)
	}
	return nil
}

// PublishGPUDevices creates the ResourceSlice a DRA driver's kubelet plugin publishes for a node
// with gpus whole GPUs: one slice in a pool named after the node, owned by the Node (so that it goes
// with it), devices gpu-0… with the attributes the class and typical request selectors read. The
// scheduler allocates claims from it; nothing prepares the devices, which kwok's pods do not need.
func (cp *ControlPlane) PublishGPUDevices(ctx context.Context, nodeName string, gpus int) (*resourcev1.ResourceSlice, error) {
	node, err := cp.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("publishing GPUs of node %s: %w", nodeName, err)
	}
	devices := make([]resourcev1.Device, gpus)
	for i := range devices {
		devices[i] = resourcev1.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type":        {StringValue: ptr.To("gpu")},
				"index":       {IntValue: ptr.To(int64(i))},
				"uuid":        {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", node.UID, i))},
				"productName": {StringValue: ptr.To("NVIDIA A100-SXM4-80GB")},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
		}
	}
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: nodeName + "-" + GPUDriver,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				Controller: ptr.To(true)}},
		},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   GPUDriver,
			NodeName: ptr.To(nodeName),
			Pool:     resourcev1.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
	out, err := cp.client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating ResourceSlice for node %s: %w", nodeName, err)
	}
	return out, nil
}

// GPUClaimTemplate is a ResourceClaimTemplate asking for one device of GPUDeviceClass: what a model
// whose pods take their GPU through DRA names in spec.resourceClaims.
func GPUClaimTemplate(namespace, name string) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: GPUDeviceClass}}},
		}}},
	}
}

// UseClaimTemplate makes a pod spec take a device through a claim made from the named template.
func UseClaimTemplate(spec *corev1.PodSpec, template string) {
	spec.ResourceClaims = append(spec.ResourceClaims, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)})
	for i := range spec.Containers {
		spec.Containers[i].Resources.Claims = append(spec.Containers[i].Resources.Claims, corev1.ResourceClaim{Name: "gpu"})
	}
}
