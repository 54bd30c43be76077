package scenarios

import (
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// TestSurgeIsTheLiveViewAndTenantsCannotWriteIt: during a stall `oc get surges` shows the Surge's
// phase moving; a tenant ServiceAccount bound to edit in its namespace can list the Surge but is
// Forbidden to create or patch one (only the guardian's ServiceAccount writes Surges).
func TestSurgeIsTheLiveViewAndTenantsCannotWriteIt(t *testing.T) {
	s := newScenario(t, "surge-view", gpuNodes(3, 1), selectorOf(modelLabels))
	s.createDeployment("6s")
	tenant := s.tenantClient()
	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()

	seen, checked := false, false
	s.eventually(rolloutTimeout, "a Surge to appear and be deleted after its restore", func() (bool, error) {
		items := s.surges()
		if len(items) > 1 {
			s.fatalf("%d Surges for one workload", len(items))
		}
		if len(items) == 1 && !checked {
			checked = true
			s.note("oc get surges: %s", testbed.SurgeSummary(&items[0]))
			s.tenantChecks(tenant, items[0].DeepCopy())
		}
		seen = seen || len(items) == 1
		return seen && len(items) == 0, nil
	})
	// Every change of the Surge, as a watch (oc get surges -w) delivers it.
	var phases []string
	for _, e := range s.obs.Timeline() {
		if e.Source != "Surge" {
			continue
		}
		for _, p := range []string{"Pending", "Surged", "Ready", "Resolved", "Restoring"} {
			if strings.Contains(e.What, "phase "+p) && (len(phases) == 0 || phases[len(phases)-1] != p) {
				phases = append(phases, p)
			}
		}
	}
	t.Logf("Surge phases seen: %v", phases)
	for _, want := range []string{"Pending", "Surged", "Ready", "Resolved", "Restoring"} {
		if !slices.Contains(phases, want) {
			t.Errorf("phase %s never seen (saw %v)", want, phases)
		}
	}
	order := map[string]int{"Pending": 0, "Surged": 1, "Ready": 2, "Resolved": 3, "Restoring": 4}
	for i := 1; i < len(phases); i++ {
		if order[phases[i]] < order[phases[i-1]] {
			t.Errorf("phases went backwards: %v", phases)
		}
	}
	s.waitPoolUpdated()
	s.waitRestored(selectorOf(modelLabels), 1)
	s.assertAvailable()
}

// tenantClient returns a dynamic client acting as a ServiceAccount bound to the edit ClusterRole in
// the scenario's namespace.
func (s *scenario) tenantClient() dynamic.Interface {
	s.t.Helper()
	token := s.serviceAccountToken(s.ns, "tenant")
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit", Namespace: s.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "tenant", Namespace: s.ns}},
	}
	if _, err := s.kube.RbacV1().RoleBindings(s.ns).Create(s.ctx, rb, metav1.CreateOptions{}); err != nil {
		s.fatalf("binding edit: %v", err)
	}
	cfg := testBed.CP.RESTConfig()
	cfg = &rest.Config{Host: cfg.Host, TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData, CAFile: cfg.CAFile, Insecure: cfg.Insecure}, BearerToken: token}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		s.fatalf("tenant client: %v", err)
	}
	return client
}

// tenantChecks asserts what a namespace editor may do with the guardian's Surge.
func (s *scenario) tenantChecks(tenant dynamic.Interface, surge *unstructured.Unstructured) {
	s.t.Helper()
	surges := tenant.Resource(testbed.Surges).Namespace(s.ns)
	// RBAC needs a moment to see the new RoleBinding.
	s.eventually(30*time.Second, "the tenant to list Surges", func() (bool, error) {
		_, err := surges.List(s.ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	forged := surge.DeepCopy()
	forged.SetName("forged")
	forged.SetResourceVersion("")
	forged.SetUID("")
	if _, err := surges.Create(s.ctx, forged, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		s.t.Errorf("tenant creating a Surge: %v, want Forbidden", err)
	}
	patch := []byte(`{"status":{"phase":"Restoring"}}`)
	if _, err := surges.Patch(s.ctx, surge.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) {
		s.t.Errorf("tenant patching a Surge's status: %v, want Forbidden", err)
	}
	if _, err := surges.Patch(s.ctx, surge.GetName(), types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		s.t.Errorf("tenant patching a Surge: %v, want Forbidden", err)
	}
	if err := surges.Delete(s.ctx, surge.GetName(), metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		s.t.Errorf("tenant deleting a Surge: %v, want Forbidden", err)
	}
}

// TestGuardianKilledInEveryPhase: the guardian is SIGKILLed the first time the Surge is seen in each
// phase, and a new process takes over every time. With --evict=false the replacement stays Ready
// until the MCO's own next drain attempt, and with --restore=pool the surge stays Resolved until the
// pool is Updated, so Surged, Ready and Resolved each last long enough to be hit; Pending and Restoring last one write and are hit when the timing allows (the unit tests crash
// between every pair of writes). The surge must still happen exactly once, never go above two
// replicas, keep the model available, and end restored with no Surge left.
func TestGuardianKilledInEveryPhase(t *testing.T) {
	s := newScenario(t, "killed-phases", gpuNodes(3, 1), selectorOf(modelLabels))
	s.createDeployment("8s")
	flags := []string{"--evict=false", "--restore=pool"}
	g := s.startGuardian(flags...)
	s.obs.StartSampling()
	s.updatePool()
	killed := map[string]bool{}
	var peak int32
	s.eventually(rolloutTimeout, "the pool update to finish while the guardian is killed in every phase", func() (bool, error) {
		items := s.surges()
		if len(items) > 1 {
			s.fatalf("%d Surges for one workload", len(items))
		}
		peak = max(peak, *s.deployment("model").Spec.Replicas)
		if len(items) == 1 {
			phase, _, _ := unstructured.NestedString(items[0].Object, "status", "phase")
			if phase == "" {
				phase = "Pending"
			}
			if !killed[phase] {
				killed[phase] = true
				s.note("SIGKILL guardian (pid %d) with the Surge in phase %s", g.Pid(), phase)
				g.Kill()
				g = s.startGuardian(flags...)
			}
		}
		p, err := testBed.Pool(s.ctx, s.pool)
		if err != nil {
			return false, nil
		}
		return len(items) == 0 && p.Spec.Configuration.Name == nextConfig && p.Status.Configuration.Name == nextConfig &&
			int(p.Status.UpdatedMachineCount) == len(s.nodes), nil
	})
	t.Logf("guardian killed in phases %v", killed)
	for _, want := range []string{"Surged", "Ready", "Resolved"} {
		if !killed[want] {
			t.Errorf("the guardian was never killed in phase %s (killed in %v)", want, killed)
		}
	}
	if peak != 2 {
		t.Errorf("replicas peaked at %d, want exactly one surge to 2", peak)
	}
	// The MCO evicts the blocked pod (--evict=false): no PodEvicted Event of the guardian's.
	s.waitRestored(selectorOf(modelLabels), 1)
	s.assertAvailable()
	if d := s.deployment("model"); *d.Spec.Replicas != 1 {
		t.Errorf("replicas %d after restore, want 1", *d.Spec.Replicas)
	}
	if killed["Restoring"] {
		// The kill may land between the Surge's deletion and the flush of the SurgeRestored Event,
		// which the Event broadcaster sends asynchronously: an Event in flight dies with the process
		// (Events are best effort). The restore itself is checked above.
		s.requireEvents("SurgeStarted", "ReplacementReady")
	} else {
		s.requireEvents("SurgeStarted", "ReplacementReady", "SurgeRestored")
	}
	s.requireSingleSurge()
}
