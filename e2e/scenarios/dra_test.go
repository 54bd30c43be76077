package scenarios

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
)

// draTemplate is the ResourceClaimTemplate, one GPU of controlplane.GPUDeviceClass, the DRA models use.
const draTemplate = "one-gpu"

// draModels are four single-replica Deployments taking their GPU through draTemplate.
func draModels() []model {
	out := make([]model, 4)
	for i := range out {
		out[i] = model{name: fmt.Sprintf("m%d", i+1), kind: "Deployment", claimTemplate: draTemplate}
	}
	return out
}

// newDRAScenario is a pool of n nodes that advertise no nvidia.com/gpu: each has one GPU published
// as a DRA device (a ResourceSlice as the driver's kubelet plugin writes it, and the driver's
// DeviceClass), and the namespace has draTemplate.
func newDRAScenario(t *testing.T, name string, n int, models []model) *scenario {
	s := newScenario(t, name, gpuNodes(n, 0), "", selectors(models)...)
	if err := testBed.CP.CreateGPUDeviceClass(s.ctx); err != nil && !apierrors.IsAlreadyExists(err) {
		s.fatalf("%v", err)
	}
	for _, node := range s.nodes {
		if _, err := testBed.CP.PublishGPUDevices(s.ctx, node, 1); err != nil {
			s.fatalf("%v", err)
		}
	}
	tmpl := controlplane.GPUClaimTemplate(s.ns, draTemplate)
	if _, err := s.kube.ResourceV1().ResourceClaimTemplates(s.ns).Create(s.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating ResourceClaimTemplate: %v", err)
	}
	return s
}

// TestDRAOneSpareGPU: five nodes with one DRA GPU each, four models taking theirs through a
// ResourceClaimTemplate, one device free. The guardian counts the devices: every stall is surged
// onto the free one in turn, the pool is Updated with every model available throughout, and every
// count is restored.
func TestDRAOneSpareGPU(t *testing.T) {
	models := draModels()
	s := newDRAScenario(t, "dra-spare-gpu", 5, models)
	s.updateWithOneSpareGPU(models)
}

// TestDRANoSpareGPU: four such nodes for four models, no device free. Nothing is surged (a surge
// would leave a replacement Pending until --schedule-timeout), and NoCapacity names the DeviceClass.
func TestDRANoSpareGPU(t *testing.T) {
	models := draModels()
	s := newDRAScenario(t, "dra-no-spare-gpu", 4, models)
	for _, m := range models {
		s.createModel(m)
	}
	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	e := s.waitEvent(time.Minute, "NoCapacity", corev1.EventTypeWarning)
	if want := "missing 1 device of class " + controlplane.GPUDeviceClass; !strings.Contains(e.Message, want) {
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
