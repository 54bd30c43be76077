package scenarios

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/demo"
	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
)

// modelLabels are the pod labels of the plain Deployment and StatefulSet models.
var modelLabels = map[string]string{"app": "model"}

// loadingDelay is how long a new replica of a model takes to turn Ready (weights loading).
const loadingDelay = "3s"

// createDeployment creates the single-replica model Deployment and waits until its pod is Ready.
func (s *scenario) createDeployment(readyDelay string) *corev1.Pod {
	s.t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: s.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: modelLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      modelLabels,
					Annotations: map[string]string{controlplane.ReadyDelayAnnotation: readyDelay},
				},
				Spec: demo.ModelPodSpec(s.pool, modelLabels),
			},
		},
	}
	if _, err := s.kube.AppsV1().Deployments(s.ns).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating deployment: %v", err)
	}
	pods := s.waitModelReady(selectorOf(modelLabels), 1)
	s.createModelPDB(demo.MinAvailablePDB(s.ns, "model", modelLabels))
	return &pods[0]
}

// TestControlWithoutGuardian shows the problem the guardian solves: without it, a single-replica
// model with a minAvailable 1 PDB blocks the drain of its node, and so the pool update, for good.
func TestControlWithoutGuardian(t *testing.T) {
	s := newScenario(t, "control", gpuNodes(2, 1), selectorOf(modelLabels))
	pod := s.createDeployment(loadingDelay)
	s.obs.StartSampling()
	s.updatePool()

	s.eventually(time.Minute, "the MCO to cordon and drain node "+pod.Spec.NodeName, func() (bool, error) {
		n := s.getNode(pod.Spec.NodeName)
		return mcosim.DrainInProgress(n) && n.Spec.Unschedulable, nil
	})
	// The Eviction API refuses the model's pod: that is what the MCO's drain keeps hitting.
	if err := evict(s.ctx, s.kube, pod); !isTooManyRequests(err) {
		s.fatalf("evicting %s: got %v, want 429 Too Many Requests", pod.Name, err)
	}
	// 15 s is five of the MCO's drain retries at this time scale (five minutes of a real cluster).
	s.holds(15*time.Second, "the drain stays blocked and the model stays on its node", func() error {
		n := s.getNode(pod.Spec.NodeName)
		if !mcosim.DrainInProgress(n) || !n.Spec.Unschedulable {
			return fmt.Errorf("node %s is no longer being drained: %v", n.Name, n.Annotations)
		}
		if _, err := s.kube.CoreV1().Pods(s.ns).Get(s.ctx, pod.Name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("pod %s: %v", pod.Name, err)
		}
		if mcosim.PoolUpdated(s.getPool()) {
			return fmt.Errorf("pool Updated although a node cannot be drained")
		}
		return nil
	})
	if d := s.deployment("model"); *d.Spec.Replicas != 1 || hasSurgeRecord(d.Annotations) {
		t.Errorf("without a guardian the deployment changed: replicas %d, annotations %v", *d.Spec.Replicas, d.Annotations)
	}
	s.assertAvailable()
}

// TestDeployment: the guardian surges a plain Deployment, the pool update completes without the
// model ever losing its last Ready replica, and the Deployment is restored.
func TestDeployment(t *testing.T) {
	s := newScenario(t, "deploy", gpuNodes(3, 1), selectorOf(modelLabels))
	s.createDeployment(loadingDelay)
	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	took := s.waitPoolUpdated()
	t.Logf("pool update took %v", took.Round(100*time.Millisecond))
	s.waitRestored(func() (bool, error) { return hasSurgeRecord(s.deployment("model").Annotations), nil }, selectorOf(modelLabels), 1)
	s.assertAvailable()
	if d := s.deployment("model"); d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("deployment replicas %v after restore, want 1", d.Spec.Replicas)
	}
	s.requireEvents("SurgeStarted", "ReplacementReady", "SurgeRestored")
	s.forbidEvents("SurgeFailed", "ExternalChange")
}

// testInferenceService runs a pool update under an InferenceService of the given autoscaler class
// and checks that its spec is restored byte for byte.
func testInferenceService(t *testing.T, name, class string) {
	isvc := "granite"
	app := map[string]string{"app": "isvc." + isvc + "-predictor"}
	s := newScenario(t, name, gpuNodes(3, 1), selectorOf(app))
	obj := demo.InferenceService(s.ns, isvc, class, s.pool, loadingDelay)
	if _, err := testBed.CP.Dynamic().Resource(demo.InferenceServices).Namespace(s.ns).Create(s.ctx, obj, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating InferenceService: %v", err)
	}
	s.waitModelReady(selectorOf(app), 1)
	s.createModelPDB(demo.MinAvailablePDB(s.ns, isvc+"-predictor", app))
	before := specJSON(s.getUnstructured(demo.InferenceServices, isvc))

	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	took := s.waitPoolUpdated()
	t.Logf("pool update took %v", took.Round(100*time.Millisecond))
	s.waitRestored(func() (bool, error) {
		return hasSurgeRecord(s.getUnstructured(demo.InferenceServices, isvc).GetAnnotations()), nil
	}, selectorOf(app), 1)
	s.assertAvailable()
	if after := specJSON(s.getUnstructured(demo.InferenceServices, isvc)); after != before {
		t.Errorf("InferenceService spec not restored:\nbefore %s\nafter  %s", before, after)
	}
	if d := s.deployment(isvc + "-predictor"); d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("predictor replicas %v after restore, want 1", d.Spec.Replicas)
	}
	s.requireEvents("SurgeStarted", "ReplacementReady", "SurgeRestored")
	s.forbidEvents("SurgeFailed", "ExternalChange")
}

// TestInferenceServiceHPA: an InferenceService whose replicas an HPA owns (autoscaler class hpa)
// is surged through its minReplicas/maxReplicas.
func TestInferenceServiceHPA(t *testing.T) { testInferenceService(t, "isvc-hpa", "hpa") }

// TestInferenceServiceNone: with autoscaler class none, KServe writes minReplicas into the
// Deployment and reverts any other value, so only a surge of the InferenceService itself holds.
func TestInferenceServiceNone(t *testing.T) { testInferenceService(t, "isvc-none", "none") }

var _ = unstructured.Unstructured{}
