package scenarios

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// prepareAnnotation is the daemon's guardian.PrepareAnnotation, written as an admin would.
const prepareAnnotation = "drain-guardian.io/prepare"

// prepareTimeout bounds the preparation: every model's extra replica loading once.
const prepareTimeout = 2 * time.Minute

// TestPrepareBeforeTheWindow is the window workflow on four two-GPU nodes carrying three
// single-replica models (GPUs to spare): the pool is paused, its new config rendered, then prepared.
// Once the pool's PoolPrepared Event says every model is prepared (a Surge with trigger Prepared,
// Ready), it is unpaused: the pool updates, every model keeps a Ready replica at every 100 ms sample,
// and every count is back to one with no Surge left once the pool is Updated.
func TestPrepareBeforeTheWindow(t *testing.T) {
	models := []model{{name: "m1", kind: "Deployment"}, {name: "m2", kind: "Deployment"}, {name: "m3", kind: "Deployment"}}
	s := newScenario(t, "prepare", gpuNodes(4, 2), "", selectors(models)...)
	for _, m := range models {
		s.createModel(m)
	}
	s.startGuardian()
	s.obs.StartSampling()
	e := s.pauseAndPrepare()
	if want := fmt.Sprintf("%d of %d workloads", len(models), len(models)); !strings.Contains(e.Message, want) {
		t.Fatalf("PoolPrepared %q does not say %q", e.Message, want)
	}
	if p := s.getPool(); p.Status.Configuration.Name == nextConfig {
		t.Fatal("the paused pool updated before its window")
	}
	for _, u := range s.surges() {
		if trigger := u.Object["spec"].(map[string]any)["trigger"]; trigger != "Prepared" {
			t.Errorf("Surge %s has trigger %v, want Prepared", u.GetName(), trigger)
		}
	}
	for _, m := range models {
		if d := s.deployment(m.name); *d.Spec.Replicas != 2 {
			t.Errorf("%s has %d replicas once prepared, want 2", m.name, *d.Spec.Replicas)
		}
	}

	start := time.Now()
	s.unpause()
	s.waitPoolUpdated()
	t.Logf("pool update from the unpause took %v", time.Since(start).Round(100*time.Millisecond))
	for _, m := range models {
		s.waitModelBack(m)
	}
	s.assertAvailable()
	s.forbidEvents("SurgeFailed", "NoCapacity")
}

// pauseAndPrepare pauses the pool, renders its new config (pending while paused) and asks the
// guardian to prepare it; it returns the pool's PoolPrepared Event.
func (s *scenario) pauseAndPrepare() corev1.Event {
	s.t.Helper()
	s.patchPool(`{"spec":{"paused":true}}`)
	s.updatePool()
	s.patchPool(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, prepareAnnotation))
	return s.waitPoolEvent(prepareTimeout, "PoolPrepared")
}

// unpause opens the window: the MCO rolls the pending config out.
func (s *scenario) unpause() {
	s.t.Helper()
	s.note("window: unpausing the pool")
	s.patchPool(`{"spec":{"paused":false}}`)
}

// prepareWindow is the bench's window workflow: pause, prepare, wait until prepared as far as the
// spare capacity allows (on the one-spare-GPU pool only one model can be), unpause.
func (s *scenario) prepareWindow() {
	s.t.Helper()
	s.patchPool(`{"spec":{"paused":true}}`)
	s.updatePool()
	s.patchPool(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, prepareAnnotation))
	s.waitPoolEventMatching(prepareTimeout, "prepared as far as capacity allows", func(e corev1.Event) bool {
		return e.Reason == "PoolPrepared" || e.Reason == "PoolPartlyPrepared" && !strings.Contains(e.Message, ": 0 of ")
	})
	s.unpause()
}

// patchPool merge-patches the scenario's pool as the admin.
func (s *scenario) patchPool(patch string) {
	s.t.Helper()
	s.note("pool patch %s", patch)
	if _, err := testBed.MCFG.MachineconfigurationV1().MachineConfigPools().Patch(s.ctx, s.pool, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		s.fatalf("patching pool %s: %v", s.pool, err)
	}
}

// waitPoolEvent waits for an Event with reason on the scenario's pool.
func (s *scenario) waitPoolEvent(timeout time.Duration, reason string) corev1.Event {
	s.t.Helper()
	return s.waitPoolEventMatching(timeout, "Event "+reason, func(e corev1.Event) bool { return e.Reason == reason })
}

// waitPoolEventMatching waits for an Event on the scenario's pool (a cluster-scoped object: its
// Events are in namespace default) that match accepts.
func (s *scenario) waitPoolEventMatching(timeout time.Duration, what string, match func(corev1.Event) bool) corev1.Event {
	s.t.Helper()
	var found corev1.Event
	s.eventually(timeout, what+" on pool "+s.pool, func() (bool, error) {
		list, err := s.kube.CoreV1().Events(metav1.NamespaceDefault).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "MachineConfigPool" && e.InvolvedObject.Name == s.pool && match(e) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	return found
}
