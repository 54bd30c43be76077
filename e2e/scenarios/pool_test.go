package scenarios

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// poolTimeout bounds a whole pool update of the pool scenarios: five nodes, four of them stalled.
const poolTimeout = 4 * time.Minute

// model is one model of a pool scenario: single-replica unless replicas says otherwise.
type model struct {
	name string
	kind string // Deployment, InferenceService or LLMInferenceService
	// readyDelay is how long a new pod takes to turn Ready (loadingDelay when empty); replicas is
	// the Deployment's count (1 when 0).
	readyDelay string
	replicas   int32
	// claimTemplate: the Deployment's pods take their GPU through a claim made from this
	// ResourceClaimTemplate (Dynamic Resource Allocation) instead of requesting nvidia.com/gpu.
	claimTemplate string
}

// selector selects the model's pods.
func (m model) selector() string {
	switch m.kind {
	case "InferenceService":
		return selectorOf(map[string]string{"app": "isvc." + m.name + "-predictor"})
	case "LLMInferenceService":
		return selectorOf(map[string]string{"app.kubernetes.io/name": m.name, "kserve.io/component": "workload"})
	}
	return selectorOf(map[string]string{"app": m.name})
}

func selectors(models []model) []string {
	out := make([]string, len(models))
	for i, m := range models {
		out[i] = m.selector()
	}
	return out
}

// createModel creates the model with a minAvailable 1 PDB and waits until its pod is Ready.
func (s *scenario) createModel(m model) {
	s.t.Helper()
	dyn := testBed.CP.Dynamic()
	delay := m.readyDelay
	if delay == "" {
		delay = loadingDelay
	}
	replicas := max(m.replicas, 1)
	switch m.kind {
	case "InferenceService":
		obj := testbed.InferenceService(s.ns, m.name, "hpa", s.pool, delay)
		if _, err := dyn.Resource(testbed.InferenceServices).Namespace(s.ns).Create(s.ctx, obj, metav1.CreateOptions{}); err != nil {
			s.fatalf("creating InferenceService %s: %v", m.name, err)
		}
		s.waitModelReady(m.selector(), 1)
		s.createModelPDB(testbed.MinAvailablePDB(s.ns, m.name, map[string]string{"app": "isvc." + m.name + "-predictor"}))
	case "LLMInferenceService":
		app := map[string]string{"app.kubernetes.io/name": m.name, "kserve.io/component": "workload"}
		spec := testbed.ModelPodSpec(s.pool, app)
		template, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
		if err != nil {
			s.fatalf("%v", err)
		}
		llm := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": testbed.LLMInferenceServices.GroupVersion().String(),
			"kind":       "LLMInferenceService",
			"metadata":   map[string]any{"name": m.name, "namespace": s.ns},
			"spec": map[string]any{
				"model":       map[string]any{"uri": "hf://ibm-granite/granite-3.3-8b-instruct", "name": m.name},
				"annotations": map[string]any{controlplane.ReadyDelayAnnotation: delay},
				"template":    template,
			},
		}}
		if _, err := dyn.Resource(testbed.LLMInferenceServices).Namespace(s.ns).Create(s.ctx, llm, metav1.CreateOptions{}); err != nil {
			s.fatalf("creating LLMInferenceService %s: %v", m.name, err)
		}
		s.waitModelReady(m.selector(), 1)
		s.createModelPDB(testbed.MinAvailablePDB(s.ns, m.name, app))
	default:
		labels := map[string]string{"app": m.name}
		spec := testbed.ModelPodSpec(s.pool, labels)
		if m.claimTemplate != "" {
			spec.Containers[0].Resources = corev1.ResourceRequirements{}
			controlplane.UseClaimTemplate(&spec, m.claimTemplate)
		}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: m.name, Namespace: s.ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(replicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{controlplane.ReadyDelayAnnotation: delay}},
					Spec:       spec,
				},
			},
		}
		if _, err := s.kube.AppsV1().Deployments(s.ns).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
			s.fatalf("creating deployment %s: %v", m.name, err)
		}
		s.waitModelReady(m.selector(), int(replicas))
		// minAvailable 1: a single replica blocks every eviction, two allow one.
		s.createPDBAllowing(testbed.MinAvailablePDB(s.ns, m.name, labels), replicas-1)
	}
}

// testOneSpareGPU runs a whole pool update on five one-GPU nodes carrying four single-replica models,
// so exactly one GPU is free, with the guardian's default flags: the pool must finish, every model
// keep a Ready replica at every observation, and every model end at its original count with no Surge
// left.
func testOneSpareGPU(t *testing.T, name string, models []model) {
	s := newScenario(t, name, gpuNodes(5, 1), "", selectors(models)...)
	s.updateWithOneSpareGPU(models)
}

// updateWithOneSpareGPU creates the models on the scenario's pool, which has one GPU more than they
// take, and runs the pool's update with the guardian's default flags (see testOneSpareGPU).
func (s *scenario) updateWithOneSpareGPU(models []model) {
	t := s.t
	for _, m := range models {
		s.createModel(m)
	}
	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	start := time.Now()
	s.eventually(poolTimeout, "the pool to be Updated", func() (bool, error) {
		p, err := testBed.Pool(s.ctx, s.pool)
		if err != nil {
			return false, nil
		}
		return p.Spec.Configuration.Name == nextConfig && int(p.Status.UpdatedMachineCount) == len(s.nodes) &&
			p.Status.Configuration.Name == nextConfig, nil
	})
	t.Logf("pool update with one spare GPU took %v", time.Since(start).Round(100*time.Millisecond))
	for _, m := range models {
		s.waitModelBack(m)
	}
	s.assertAvailable()
	s.requireEvents("SurgeStarted", "StallResolved", "SurgeRestored")
	s.forbidEvents("SurgeFailed")
	if started := len(s.events()["SurgeStarted"]); started < len(models) {
		t.Errorf("%d surges for %d stalled models", started, len(models))
	}
}

// waitModelBack waits until no Surge is left in the namespace and the model runs exactly one Ready pod.
func (s *scenario) waitModelBack(m model) {
	s.t.Helper()
	s.waitRestored(m.selector(), 1)
}

// TestOneSpareGPUFourDeployments: four single-replica Deployments, one free GPU.
func TestOneSpareGPUFourDeployments(t *testing.T) {
	testOneSpareGPU(t, "spare-gpu", []model{{name: "m1", kind: "Deployment"}, {name: "m2", kind: "Deployment"}, {name: "m3", kind: "Deployment"}, {name: "m4", kind: "Deployment"}})
}

// TestOneSpareGPUMixedKinds: the same with a Deployment, an InferenceService, an LLMInferenceService
// and another Deployment.
func TestOneSpareGPUMixedKinds(t *testing.T) {
	testOneSpareGPU(t, "spare-gpu-mixed", []model{{name: "d1", kind: "Deployment"}, {name: "isvc1", kind: "InferenceService"}, {name: "llm1", kind: "LLMInferenceService"}, {name: "d2", kind: "Deployment"}})
}

// TestNoSpareGPU: four one-GPU nodes, four models: no replacement can run anywhere. Nothing is
// surged, the stall is reported as NoCapacity with what is missing, and nothing is changed.
func TestNoSpareGPU(t *testing.T) {
	models := []model{{name: "m1", kind: "Deployment"}, {name: "m2", kind: "Deployment"}, {name: "m3", kind: "Deployment"}, {name: "m4", kind: "Deployment"}}
	s := newScenario(t, "no-spare-gpu", gpuNodes(4, 1), "", selectors(models)...)
	for _, m := range models {
		s.createModel(m)
	}
	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	e := s.waitEvent(time.Minute, "NoCapacity", corev1.EventTypeWarning)
	if want := "missing 1 nvidia.com/gpu"; !strings.Contains(e.Message, want) {
		t.Errorf("NoCapacity Event %q does not say %q", e.Message, want)
	}
	s.holds(5*time.Second, "no model is surged", func() error {
		for _, m := range models {
			if d := s.deployment(m.name); *d.Spec.Replicas != 1 {
				return fmt.Errorf("%s has %d replicas", m.name, *d.Spec.Replicas)
			}
		}
		if s.hasSurge() {
			return fmt.Errorf("a Surge exists")
		}
		return nil
	})
	s.forbidEvents("SurgeStarted")
	s.assertAvailable()
}
