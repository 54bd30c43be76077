package testbed

import (
	"context"
	"fmt"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
)

// PoolLabel is set to the pool name on a test pool's MachineConfigPool (for the guardian's
// --pool-selector) and on its nodes (the pool's nodeSelector), so that pools never share nodes.
const PoolLabel = "e2e.drain-guardian.io/pool"

// NodeSpec describes one fake node of a pool.
type NodeSpec struct {
	Name string
	Zone string
	GPUs int
}

// CreatePool adds the nodes, labelled PoolLabel=name, and a MachineConfigPool selecting them with
// target config, then waits until the MCO simulator has adopted the nodes and reports the pool
// Updated.
func (tb *TestBed) CreatePool(ctx context.Context, name, config string, nodes []NodeSpec) error {
	sel := map[string]string{PoolLabel: name}
	for _, n := range nodes {
		l := map[string]string{PoolLabel: name, "node-role.kubernetes.io/" + name: ""}
		if _, err := tb.CP.AddFakeNode(ctx, n.Name, l, n.Zone, n.GPUs, "16", "128Gi"); err != nil {
			return err
		}
	}
	pool := &mcfgv1.MachineConfigPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: sel},
		Spec:       mcfgv1.MachineConfigPoolSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: sel}},
	}
	pool.Spec.Configuration.Name = config
	if _, err := tb.MCFG.MachineconfigurationV1().MachineConfigPools().Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pool %s: %w", name, err)
	}
	return tb.WaitPool(ctx, name, 2*time.Minute, func(p *mcfgv1.MachineConfigPool) bool {
		return mcosim.PoolUpdated(p) && int(p.Status.MachineCount) == len(nodes)
	})
}

// UpdatePool starts a rollout by changing the pool's target rendered config.
func (tb *TestBed) UpdatePool(ctx context.Context, name, config string) error {
	patch := fmt.Appendf(nil, `{"spec":{"configuration":{"name":%q}}}`, config)
	_, err := tb.MCFG.MachineconfigurationV1().MachineConfigPools().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// Pool returns the pool.
func (tb *TestBed) Pool(ctx context.Context, name string) (*mcfgv1.MachineConfigPool, error) {
	return tb.MCFG.MachineconfigurationV1().MachineConfigPools().Get(ctx, name, metav1.GetOptions{})
}

// WaitPool polls the pool until cond holds.
func (tb *TestBed) WaitPool(ctx context.Context, name string, timeout time.Duration, cond func(*mcfgv1.MachineConfigPool) bool) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := tb.Pool(ctx, name)
		if err != nil {
			return false, nil
		}
		return cond(p), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for pool %s: %w", name, err)
	}
	return nil
}

// DeletePool removes the pool and its nodes (a scenario's clean-up).
func (tb *TestBed) DeletePool(ctx context.Context, name string) {
	_ = tb.MCFG.MachineconfigurationV1().MachineConfigPools().Delete(ctx, name, metav1.DeleteOptions{})
	_ = tb.CP.Client().CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: PoolLabel + "=" + name})
}

// CreateNamespace creates a namespace.
func (tb *TestBed) CreateNamespace(ctx context.Context, name string) error {
	_, err := tb.CP.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

// ModelPodSpec is the pod of a single-GPU model server confined to a pool: it requests one
// nvidia.com/gpu and has a required anti-affinity on the hostname against its own replicas
// (matchLabels), as model servers commonly do.
func ModelPodSpec(pool string, matchLabels map[string]string) corev1.PodSpec {
	gpu := corev1.ResourceList{controlplane.GPUResource: resource.MustParse("1")}
	return corev1.PodSpec{
		NodeSelector: map[string]string{PoolLabel: pool},
		Containers: []corev1.Container{{
			Name:      "kserve-container",
			Image:     "registry.example.com/models/granite:1.0",
			Resources: corev1.ResourceRequirements{Requests: gpu, Limits: gpu},
		}},
		Affinity: AntiAffinity(matchLabels),
	}
}

// AntiAffinity keeps two pods matching matchLabels off the same node.
func AntiAffinity(matchLabels map[string]string) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: matchLabels},
			TopologyKey:   corev1.LabelHostname,
		}},
	}}
}

// MinAvailablePDB is a PodDisruptionBudget with minAvailable 1 over matchLabels: with one replica
// it allows no eviction.
func MinAvailablePDB(ns, name string, matchLabels map[string]string) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: matchLabels},
		},
	}
}

// InferenceService returns a RawDeployment InferenceService with one GPU model server confined to
// pool, minReplicas 1, the given autoscaler class, required anti-affinity between its replicas and,
// when readyDelay is set, pods that take that long to turn Ready (a model loading).
func InferenceService(ns, name, class, pool, readyDelay string) *unstructured.Unstructured {
	annotations := map[string]any{
		"serving.kserve.io/deploymentMode":  "RawDeployment",
		"serving.kserve.io/autoscalerClass": class,
	}
	predictor := map[string]any{
		"minReplicas":  int64(1),
		"nodeSelector": map[string]any{PoolLabel: pool},
		"affinity": map[string]any{"podAntiAffinity": map[string]any{
			"requiredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{
				"labelSelector": map[string]any{"matchLabels": map[string]any{"app": "isvc." + name + "-predictor"}},
				"topologyKey":   corev1.LabelHostname,
			}},
		}},
		"model": map[string]any{
			"modelFormat": map[string]any{"name": "vLLM"},
			"storageUri":  "oci://registry.example.com/models/granite:1.0",
			"resources": map[string]any{
				"requests": map[string]any{string(controlplane.GPUResource): "1"},
				"limits":   map[string]any{string(controlplane.GPUResource): "1"},
			},
		},
	}
	if readyDelay != "" {
		predictor["annotations"] = map[string]any{controlplane.ReadyDelayAnnotation: readyDelay}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": InferenceServices.GroupVersion().String(),
		"kind":       "InferenceService",
		"metadata":   map[string]any{"name": name, "namespace": ns, "annotations": annotations},
		"spec":       map[string]any{"predictor": predictor},
	}}
}
