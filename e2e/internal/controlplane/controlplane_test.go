package controlplane_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/e2e/internal/build"
	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
)

// waitTimeout bounds every wait on the cluster after it has started.
const waitTimeout = 90 * time.Second

// logWriter sends the control plane's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Without its binaries, Start fails at once and says how to build them: a suite that starts a
// control plane never builds inside its deadline.
func TestStartWithoutBinariesSaysToBuildFirst(t *testing.T) {
	root := t.TempDir()
	for _, mod := range []string{"e2e", "e2e/tools/kwok"} {
		if err := os.MkdirAll(filepath.Join(root, mod), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, mod, "go.sum"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := controlplane.Start(t.Context(), controlplane.Options{Dir: t.TempDir(), RepoRoot: root})
	if !errors.Is(err, build.ErrNotBuilt) || !strings.Contains(err.Error(), "make controlplane") {
		t.Fatalf("Start without binaries = %v, want build.ErrNotBuilt saying to run make controlplane", err)
	}
}

func TestControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	// The binaries are built before the suite (make controlplane): Start only starts them.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), Out: logWriter{t}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(cp.Stop)
	c := cp.Client()

	for i, zone := range []string{"zone-a", "zone-b"} {
		name := fmt.Sprintf("gpu-%d", i)
		node, err := cp.AddFakeNode(ctx, name, map[string]string{"node-role.kubernetes.io/worker": ""}, zone, 1, "16", "64Gi")
		if err != nil {
			t.Fatalf("AddFakeNode(%s): %v", name, err)
		}
		if got := node.Status.Allocatable[controlplane.GPUResource]; got.Value() != 1 {
			t.Fatalf("node %s allocatable %s = %s, want 1", name, controlplane.GPUResource, got.String())
		}
		if got := node.Labels["topology.kubernetes.io/zone"]; got != zone {
			t.Fatalf("node %s zone label = %q, want %q", name, got, zone)
		}
	}

	t.Run("CRDsInstalled", func(t *testing.T) {
		for _, gvr := range []schema.GroupVersionResource{
			{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigpools"},
			{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfignodes"},
			{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigs"},
			{Group: "operator.openshift.io", Version: "v1", Resource: "machineconfigurations"},
		} {
			if _, err := cp.Dynamic().Resource(gvr).List(ctx, metav1.ListOptions{}); err != nil {
				t.Errorf("listing %s: %v", gvr.Resource, err)
			}
		}
	})

	t.Run("PDBBlocksEvictionUntilSurge", func(t *testing.T) {
		ns := createNamespace(ctx, t, c, "pdb")
		labels := map[string]string{"app": "model"}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
							RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
								LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
								TopologyKey:   corev1.LabelHostname,
							}},
						}},
						Containers: []corev1.Container{{
							Name:  "server",
							Image: "example.invalid/model-server:1",
							Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
								controlplane.GPUResource: resource.MustParse("1"),
							}},
						}},
					},
				},
			},
		}
		if _, err := c.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: ns},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: ptr.To(intstr.FromInt32(1)),
				Selector:     &metav1.LabelSelector{MatchLabels: labels},
			},
		}
		if _, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		first := waitReadyPods(ctx, t, c, ns, "app=model", 1)[0]
		waitPDB(ctx, t, c, ns, "model", 1, 0)

		err := evict(ctx, c, first)
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("evicting the only replica: got %v, want 429 Too Many Requests", err)
		}

		scale, err := c.AppsV1().Deployments(ns).GetScale(ctx, "model", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		scale.Spec.Replicas = 2
		if _, err := c.AppsV1().Deployments(ns).UpdateScale(ctx, "model", scale, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		pods := waitReadyPods(ctx, t, c, ns, "app=model", 2)
		for _, p := range pods {
			if p.Name != first.Name && p.Spec.NodeName == first.Spec.NodeName {
				t.Fatalf("replacement %s landed on %s, the node of %s; anti-affinity requires another node", p.Name, p.Spec.NodeName, first.Name)
			}
		}
		waitPDB(ctx, t, c, ns, "model", 2, 1)

		if err := evict(ctx, c, first); err != nil {
			t.Fatalf("evicting with a Ready replacement: %v", err)
		}
		waitGone(ctx, t, c, ns, first.Name)
	})

	t.Run("ReadyDelayAnnotation", func(t *testing.T) {
		ns := createNamespace(ctx, t, c, "delay")
		const delay = 5 * time.Second
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:        "loading",
				Namespace:   ns,
				Annotations: map[string]string{controlplane.ReadyDelayAnnotation: delay.String()},
			},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Image: "example.invalid/model-server:1"}}},
		}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var sawLoading bool
		var got *corev1.Pod
		pollT(ctx, t, "pod loading to become Ready", func() (bool, error) {
			p, err := c.CoreV1().Pods(ns).Get(ctx, "loading", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Status.Phase == corev1.PodRunning && !podReady(p) {
				sawLoading = true
			}
			got = p
			return podReady(p), nil
		})
		if !sawLoading {
			t.Errorf("pod was never seen Running but not Ready")
		}
		start := got.Status.StartTime.Time
		for _, cond := range got.Status.Conditions {
			if cond.Type == corev1.PodReady {
				// Condition times have a one-second resolution.
				if waited := cond.LastTransitionTime.Sub(start); waited < delay-time.Second {
					t.Errorf("pod became Ready %s after it started, want at least %s", waited, delay)
				}
			}
		}
	})

	t.Run("GuardianRBAC", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", cp.GuardianKubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		g := kubernetes.NewForConfigOrDie(cfg)
		if _, err := g.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("guardian listing nodes: %v, want allowed", err)
		}
		ns := createNamespace(ctx, t, c, "rbac")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app:1"}}},
		}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = g.CoreV1().Pods(ns).Delete(ctx, "victim", metav1.DeleteOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("guardian deleting a pod: got %v, want Forbidden", err)
		}
		if _, err := c.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{}); err != nil {
			t.Errorf("pod after the refused delete: %v", err)
		}
	})

	// The shipped ValidatingAdmissionPolicy: the guardian's ServiceAccount may change replica counts
	// and pod deletion costs, nothing else, and nothing in the platform's namespaces.
	t.Run("GuardianAdmissionPolicy", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", cp.GuardianKubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		g := kubernetes.NewForConfigOrDie(cfg)
		ns := createNamespace(ctx, t, c, "vap")
		platform := "openshift-vap-test"
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: platform}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{"app": "vap"}
		for _, n := range []string{ns, platform} {
			dep := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: n},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/model:1"}}}}},
			}
			if _, err := c.AppsV1().Deployments(n).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/model:1"}}}}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		patch := func(n, resource, name, body string) error {
			var err error
			if resource == "pods" {
				_, err = g.CoreV1().Pods(n).Patch(ctx, name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{FieldManager: "drain-guardian"})
			} else {
				_, err = g.AppsV1().Deployments(n).Patch(ctx, name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{FieldManager: "drain-guardian"})
			}
			return err
		}
		image := `{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"example.invalid/stolen:1"}]}}}}`
		// The policy is enforced once the API server's informer has it: wait for the first refusal.
		pollT(ctx, t, "the ValidatingAdmissionPolicy to refuse an image change by the guardian", func() (bool, error) {
			err := patch(ns, "deployments", "model", image)
			if err == nil {
				// Put the image back so the next attempt is a change again.
				_, err = c.AppsV1().Deployments(ns).Patch(ctx, "model", types.StrategicMergePatchType,
					[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"example.invalid/model:1"}]}}}}`), metav1.PatchOptions{})
				return false, err
			}
			return true, nil
		})
		for _, tc := range []struct {
			name, ns, resource, target, body string
			allowed                          bool
		}{
			{"deployment image", ns, "deployments", "model", image, false},
			{"deployment label", ns, "deployments", "model", `{"metadata":{"labels":{"stolen":"true"}}}`, false},
			{"deployment replicas together with an annotation", ns, "deployments", "model", `{"metadata":{"annotations":{"x":"y"}},"spec":{"replicas":1}}`, false},
			{"deployment replicas", ns, "deployments", "model", `{"spec":{"replicas":1}}`, true},
			// The counts are bounded: never below 1, never changed by more than --max-surge-replicas.
			{"deployment replicas raised by 5", ns, "deployments", "model", `{"spec":{"replicas":6}}`, false},
			{"deployment replicas to 0", ns, "deployments", "model", `{"spec":{"replicas":0}}`, false},
			{"deployment replicas raised by 2", ns, "deployments", "model", `{"spec":{"replicas":3}}`, true},
			{"deployment replicas in a platform namespace", platform, "deployments", "model", `{"spec":{"replicas":1}}`, false},
			{"pod labels", ns, "pods", "p", `{"metadata":{"labels":{"app":"other"}}}`, false},
			{"pod image", ns, "pods", "p", `{"spec":{"containers":[{"name":"c","image":"example.invalid/stolen:1"}]}}`, false},
			{"pod deletion cost", ns, "pods", "p", `{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"-1000"}}}`, true},
		} {
			err := patch(tc.ns, tc.resource, tc.target, tc.body)
			switch {
			case tc.allowed && err != nil:
				t.Errorf("%s: refused (%v), want allowed", tc.name, err)
			case !tc.allowed && err == nil:
				t.Errorf("%s: allowed, want refused by the policy", tc.name)
			case !tc.allowed && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "drain-guardian-writes") ||
				strings.Contains(err.Error(), "resulted in error")):
				// An expression that errors refuses too (failurePolicy Fail), but for the wrong reason.
				t.Errorf("%s: %v, want refused by the ValidatingAdmissionPolicy drain-guardian-writes", tc.name, err)
			}
		}
		d, err := c.AppsV1().Deployments(ns).Get(ctx, "model", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Spec.Template.Spec.Containers[0].Image; got != "example.invalid/model:1" || d.Labels["stolen"] != "" {
			t.Errorf("after the refused patches: image %s, labels %v", got, d.Labels)
		}

		// The bound is the policy's parameter, the settings ConfigMap the daemon's
		// --max-surge-replicas comes from: raising the setting lets a larger change through.
		settings := func(value string) {
			t.Helper()
			body := fmt.Sprintf(`{"data":{"max-surge-replicas":%q}}`, value)
			if _, err := c.CoreV1().ConfigMaps(controlplane.GuardianNamespace).Patch(ctx, "drain-guardian-settings",
				types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		replicas := func() int32 {
			t.Helper()
			d, err := c.AppsV1().Deployments(ns).Get(ctx, "model", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return *d.Spec.Replicas
		}
		settings("5")
		pollT(ctx, t, "the policy to admit a change by 5 once the settings say 5", func() (bool, error) {
			return patch(ns, "deployments", "model", fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas()+5)) == nil, nil
		})
		if err := patch(ns, "deployments", "model", fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas()+6)); err == nil {
			t.Error("a change by 6 is admitted with the settings at 5")
		}
		settings("2")
		pollT(ctx, t, "the policy to refuse a change by 3 again once the settings say 2", func() (bool, error) {
			return patch(ns, "deployments", "model", fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas()+3)) != nil, nil
		})

		// Without the settings the API server skips the binding that passes them (Allow), and the
		// binding without a parameter still holds the ceiling of 10; nobody else is refused (Deny
		// would refuse every user's matched writes).
		saved, err := c.CoreV1().ConfigMaps(controlplane.GuardianNamespace).Get(ctx, "drain-guardian-settings", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CoreV1().ConfigMaps(controlplane.GuardianNamespace).Delete(ctx, saved.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		pollT(ctx, t, "a change by 3 to be admitted under the ceiling once the settings are gone", func() (bool, error) {
			return patch(ns, "deployments", "model", fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas()+3)) == nil, nil
		})
		if err := patch(ns, "deployments", "model", fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas()+11)); err == nil {
			t.Error("a change by 11 is admitted without the settings: the ceiling of 10 does not hold")
		}
		if err := patch(ns, "deployments", "model", image); err == nil {
			t.Error("an image change by the guardian is admitted without the settings")
		}
		if _, err := c.AppsV1().Deployments(ns).Patch(ctx, "model", types.StrategicMergePatchType,
			[]byte(`{"spec":{"replicas":40}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("an admin's write is refused while the guardian's settings are missing: %v", err)
		}
		saved.ResourceVersion = ""
		if _, err := c.CoreV1().ConfigMaps(controlplane.GuardianNamespace).Create(ctx, saved, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pollT(ctx, t, "a change by 3 to be refused again with the settings back", func() (bool, error) {
			return patch(ns, "deployments", "model", fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas()+3)) != nil, nil
		})
	})

	// Last: the other subtests must not see the restarts.
	t.Run("RestartKeepsState", func(t *testing.T) {
		ns := createNamespace(ctx, t, c, "restart")
		for _, name := range []string{build.Etcd, build.KubeAPIServer} {
			start := time.Now()
			if err := cp.Restart(ctx, name); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s restarted in %v", name, time.Since(start).Round(100*time.Millisecond))
			pollT(ctx, t, "the namespace to be served again after the restart of "+name, func() (bool, error) {
				_, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
				return err == nil, nil
			})
		}
		if err := cp.Restart(ctx, "no-such-component"); err == nil {
			t.Error("restarting an unknown component succeeded")
		}
	})
}

func createNamespace(ctx context.Context, t *testing.T, c kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func evict(ctx context.Context, c kubernetes.Interface, pod corev1.Pod) error {
	return c.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
	})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitReadyPods waits until exactly n pods match selector, none terminating, all Ready.
func waitReadyPods(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, selector string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	pollT(ctx, t, fmt.Sprintf("%d Ready pods %s", n, selector), func() (bool, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = list.Items
		if len(pods) != n {
			return false, nil
		}
		for i := range pods {
			if pods[i].DeletionTimestamp != nil || !podReady(&pods[i]) {
				return false, nil
			}
		}
		return true, nil
	})
	return pods
}

// waitPDB waits until the disruption controller has observed the PDB's current generation with
// the given healthy count and allowed disruptions.
func waitPDB(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string, healthy, allowed int32) {
	t.Helper()
	var last policyv1.PodDisruptionBudgetStatus
	pollT(ctx, t, fmt.Sprintf("PDB %s to report %d healthy, %d disruptions allowed", name, healthy, allowed), func() (bool, error) {
		pdb, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = pdb.Status
		return pdb.Status.ObservedGeneration == pdb.Generation &&
			pdb.Status.CurrentHealthy == healthy && pdb.Status.DisruptionsAllowed == allowed, nil
	})
	t.Logf("PDB %s: %d healthy, %d disruptions allowed", name, last.CurrentHealthy, last.DisruptionsAllowed)
}

func waitGone(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	pollT(ctx, t, "pod "+name+" to be deleted", func() (bool, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// pollT calls cond every 200ms until it returns true, failing the test on an error or once
// waitTimeout has passed.
func pollT(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
