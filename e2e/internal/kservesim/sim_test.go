//go:build e2e_sim

package kservesim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/kservesim"
)

// waitTimeout bounds every wait on the cluster; the HPA controller syncs
// every 15 s, so scaling through an HPA takes up to that long.
const waitTimeout = 90 * time.Second

var (
	isvcGVR   = schema.GroupVersionResource{Group: "serving.kserve.io", Version: "v1beta1", Resource: "inferenceservices"}
	llmGVRv1  = schema.GroupVersionResource{Group: "serving.kserve.io", Version: "v1alpha1", Resource: "llminferenceservices"}
	llmGVRv2  = schema.GroupVersionResource{Group: "serving.kserve.io", Version: "v1alpha2", Resource: "llminferenceservices"}
	otherUser = metav1.PatchOptions{FieldManager: "someone-else"}
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type env struct {
	cp  *controlplane.ControlPlane
	c   kubernetes.Interface
	dyn dynamic.Interface
}

// startSim runs the simulator until the returned stop function is called.
func startSim(t *testing.T, e *env, opts kservesim.Options) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- kservesim.Run(ctx, e.cp.RESTConfig(), opts) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// TestSimulator runs the simulator against a real API server, controller
// manager (with its HPA controller), scheduler and kwok nodes
// (go test -tags e2e_sim): the objects it creates, the edits it reverts and
// the writes the CRDs refuse.
func TestSimulator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), Out: logWriter{t}})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(cp.Stop)
	e := &env{cp: cp, c: cp.Client(), dyn: cp.Dynamic()}
	for i := range 2 {
		if _, err := cp.AddFakeNode(ctx, fmt.Sprintf("gpu-%d", i), nil, "", 8, "32", "128Gi"); err != nil {
			t.Fatal(err)
		}
	}

	stop := startSim(t, e, kservesim.Options{LLMNilKeepsCount: true})
	t.Run("InferenceServiceHPA", func(t *testing.T) { testInferenceServiceHPA(ctx, t, e) })
	t.Run("InferenceServiceNone", func(t *testing.T) { testInferenceServiceNone(ctx, t, e) })
	t.Run("InferenceServiceValidation", func(t *testing.T) { testInferenceServiceValidation(ctx, t, e) })
	t.Run("InferenceServiceForeignMetadata", func(t *testing.T) { testInferenceServiceForeignMetadata(ctx, t, e) })
	t.Run("InferenceServiceHPAWrites", func(t *testing.T) { testInferenceServiceHPAWrites(ctx, t, e) })
	t.Run("LLMInferenceServiceKeepsCount", func(t *testing.T) { testLLMKeepsCount(ctx, t, e) })
	t.Run("LLMInferenceServicePrefill", func(t *testing.T) { testLLMPrefill(ctx, t, e) })
	stop()

	// The 3.3 semantics: an absent spec.replicas means 1.
	stop = startSim(t, e, kservesim.Options{LLMNilKeepsCount: false})
	defer stop()
	t.Run("LLMInferenceServiceNilMeansOne", func(t *testing.T) { testLLMNilMeansOne(ctx, t, e) })
}

func namespace(ctx context.Context, t *testing.T, e *env, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := e.c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func create(ctx context.Context, t *testing.T, e *env, gvr schema.GroupVersionResource, ns, manifest string) {
	t.Helper()
	var m map[string]any
	if err := utiljson.Unmarshal([]byte(manifest), &m); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dyn.Resource(gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func patch(ctx context.Context, e *env, gvr schema.GroupVersionResource, ns, name, p string) error {
	_, err := e.dyn.Resource(gvr).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(p), otherUser)
	return err
}

// eventually polls cond until it holds or waitTimeout passes.
func eventually(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		ok, state := cond()
		last = state
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s; last state: %s", what, waitTimeout, last)
	}
}

func deploymentReplicas(ctx context.Context, e *env, ns, name string) (*appsv1.Deployment, string) {
	d, err := e.c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err.Error()
	}
	r := int32(-1)
	if d.Spec.Replicas != nil {
		r = *d.Spec.Replicas
	}
	return d, fmt.Sprintf("spec.replicas=%d ready=%d", r, d.Status.ReadyReplicas)
}

func waitReplicas(ctx context.Context, t *testing.T, e *env, ns, name string, want int32) {
	t.Helper()
	eventually(ctx, t, fmt.Sprintf("Deployment %s at %d replicas", name, want), func() (bool, string) {
		d, state := deploymentReplicas(ctx, e, ns, name)
		return d != nil && d.Spec.Replicas != nil && *d.Spec.Replicas == want, state
	})
}

func waitCondition(ctx context.Context, t *testing.T, e *env, gvr schema.GroupVersionResource, ns, name, typ, want string) {
	t.Helper()
	eventually(ctx, t, fmt.Sprintf("%s %s=%s", name, typ, want), func() (bool, string) {
		u, err := e.dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m := c.(map[string]any); m["type"] == typ {
				return m["status"] == want, fmt.Sprint(m)
			}
		}
		return false, fmt.Sprint(conds)
	})
}

func scaleDeployment(ctx context.Context, t *testing.T, e *env, ns, name string, n int32) {
	t.Helper()
	s := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}
	if _, err := e.c.AppsV1().Deployments(ns).UpdateScale(ctx, name, s, metav1.UpdateOptions{FieldManager: "someone-else"}); err != nil {
		t.Fatal(err)
	}
}

const isvcManifest = `{"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
  "metadata": {"name": "granite", "annotations": ANNOTATIONS},
  "spec": {"predictor": {"minReplicas": 1,
    "annotations": {"e2e.drain-guardian.io/ready-delay": "1s"},
    "model": {"modelFormat": {"name": "vLLM"},
              "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "1", "nvidia.com/gpu": 1}}}}}}`

func testInferenceServiceHPA(ctx context.Context, t *testing.T, e *env) {
	ns := namespace(ctx, t, e, "isvc-hpa")
	create(ctx, t, e, isvcGVR, ns, strings.Replace(isvcManifest, "ANNOTATIONS", `{}`, 1))

	waitCondition(ctx, t, e, isvcGVR, ns, "granite", kservesim.ConditionReady, "True")
	d, err := e.c.AppsV1().Deployments(ns).Get(ctx, "granite-predictor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(d); ref == nil || ref.Kind != "InferenceService" || ref.Name != "granite" {
		t.Errorf("Deployment controller = %+v, want the InferenceService", ref)
	}
	hpaBounds := func() (int32, int32, string) {
		h, err := e.c.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "granite-predictor", metav1.GetOptions{})
		if err != nil {
			return 0, 0, err.Error()
		}
		return *h.Spec.MinReplicas, h.Spec.MaxReplicas, fmt.Sprintf("min=%d max=%d", *h.Spec.MinReplicas, h.Spec.MaxReplicas)
	}
	waitBounds := func(lo, hi int32) {
		t.Helper()
		eventually(ctx, t, fmt.Sprintf("HPA bounds %d..%d", lo, hi), func() (bool, string) {
			a, b, s := hpaBounds()
			return a == lo && b == hi, s
		})
	}
	waitBounds(1, 1)
	// (What happens to direct edits of the HPA: testInferenceServiceHPAWrites.)

	// Scaling through the InferenceService moves the HPA, and the real HPA
	// controller scales the Deployment up to its new minimum.
	if err := patch(ctx, e, isvcGVR, ns, "granite", `{"spec": {"predictor": {"minReplicas": 2, "maxReplicas": 2}}}`); err != nil {
		t.Fatal(err)
	}
	waitBounds(2, 2)
	waitReplicas(ctx, t, e, ns, "granite-predictor", 2)

	// Switching the class away from hpa removes the HPA.
	if err := patch(ctx, e, isvcGVR, ns, "granite", `{"metadata": {"annotations": {"serving.kserve.io/autoscalerClass": "external"}}}`); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "HPA deleted", func() (bool, string) {
		_, err := e.c.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "granite-predictor", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func testInferenceServiceNone(ctx context.Context, t *testing.T, e *env) {
	ns := namespace(ctx, t, e, "isvc-none")
	create(ctx, t, e, isvcGVR, ns, strings.Replace(isvcManifest, "ANNOTATIONS", `{"serving.kserve.io/autoscalerClass": "none"}`, 1))
	waitReplicas(ctx, t, e, ns, "granite-predictor", 1)
	waitCondition(ctx, t, e, isvcGVR, ns, "granite", kservesim.ConditionPredictorReady, "True")

	// A direct scale of the Deployment is reverted to minReplicas.
	scaleDeployment(ctx, t, e, ns, "granite-predictor", 3)
	waitReplicas(ctx, t, e, ns, "granite-predictor", 1)

	if err := patch(ctx, e, isvcGVR, ns, "granite", `{"spec": {"predictor": {"minReplicas": 2, "maxReplicas": 2}}}`); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, e, ns, "granite-predictor", 2)
	if _, err := e.c.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "granite-predictor", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("HPA for autoscaler class none: %v", err)
	}
}

func testInferenceServiceValidation(ctx context.Context, t *testing.T, e *env) {
	ns := namespace(ctx, t, e, "isvc-validation")
	create(ctx, t, e, isvcGVR, ns, strings.Replace(isvcManifest, "ANNOTATIONS", `{}`, 1))
	for _, tc := range []struct{ patch, wantErr string }{
		{`{"spec": {"predictor": {"minReplicas": "two"}}}`, "minReplicas"},
		{`{"spec": {"predictor": {"minReplicas": 3, "maxReplicas": 2}}}`, "MinReplicas cannot be greater than MaxReplicas"},
	} {
		err := patch(ctx, e, isvcGVR, ns, "granite", tc.patch)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("patch %s: error %v, want one about %q", tc.patch, err, tc.wantErr)
		}
	}
}

// cpuISVC is an InferenceService of the given class whose pods need no GPU,
// so that the tests of the write pattern leave the GPUs to the others.
func cpuISVC(name, annotations, replicas string) string {
	return strings.NewReplacer("NAME", name, "ANNOTATIONS", annotations, "REPLICAS", replicas).Replace(
		`{"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
  "metadata": {"name": "NAME", "annotations": ANNOTATIONS},
  "spec": {"predictor": {REPLICAS,
    "annotations": {"e2e.drain-guardian.io/ready-delay": "1s"},
    "model": {"modelFormat": {"name": "sklearn"}, "resources": {"requests": {"cpu": "100m"}}}}}}`)
}

// startBarrier creates the namespace's barrier: an InferenceService of class
// none at 0 replicas, whose Deployment barrier() scales.
func startBarrier(ctx context.Context, t *testing.T, e *env, ns string) {
	t.Helper()
	create(ctx, t, e, isvcGVR, ns, cpuISVC("barrier", `{"serving.kserve.io/autoscalerClass": "none"}`, `"minReplicas": 0`))
	waitReplicas(ctx, t, e, ns, "barrier-predictor", 0)
}

// barrier returns once the simulator has handled every Deployment event that
// happened before the call: it scales the barrier's Deployment, which the
// simulator puts back at once. One watch brings the simulator all Deployment
// events in order, so by then it has queued the reconciles of every earlier
// event.
func barrier(ctx context.Context, t *testing.T, e *env, ns string) {
	t.Helper()
	scaleDeployment(ctx, t, e, ns, "barrier-predictor", 1)
	waitReplicas(ctx, t, e, ns, "barrier-predictor", 0)
}

// reconciled makes the simulator reconcile the InferenceService once more and
// returns when that reconcile is done: it resets status.observedGeneration,
// which the simulator writes back as the last step of a reconcile, after the
// Deployment and the HPA.
func reconciled(ctx context.Context, t *testing.T, e *env, ns, name string) {
	t.Helper()
	_, err := e.dyn.Resource(isvcGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType,
		[]byte(`{"status": {"observedGeneration": 0}}`), otherUser, "status")
	if err != nil {
		t.Fatal(err)
	}
	waitObservedGeneration(ctx, t, e, isvcGVR, ns, name)
}

// settle returns once the simulator has handled every event so far that
// concerns the InferenceService, including those of its Deployment: the
// reconcile that reconciled() waits for comes after the reconciles those
// events queued, and reads a cache that holds them.
func settle(ctx context.Context, t *testing.T, e *env, ns, name string) {
	t.Helper()
	barrier(ctx, t, e, ns)
	reconciled(ctx, t, e, ns, name)
}

func getDeployment(ctx context.Context, t *testing.T, e *env, ns, name string) *appsv1.Deployment {
	t.Helper()
	d, err := e.c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

const (
	foreignAnnotation = "someone.example/note"
	foreignLabel      = "someone.example/label"
)

// addForeignMetadata puts an annotation and a label the simulator does not
// set on a Deployment and returns the Deployment's generation after that.
func addForeignMetadata(ctx context.Context, t *testing.T, e *env, ns, name string) int64 {
	t.Helper()
	p := fmt.Sprintf(`{"metadata": {"annotations": {%q: "keep me"}, "labels": {%q: "keep-me"}}}`, foreignAnnotation, foreignLabel)
	d, err := e.c.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, []byte(p), otherUser)
	if err != nil {
		t.Fatal(err)
	}
	return d.Generation
}

// foreignMetadata reports whether the annotation and the label of
// addForeignMetadata are on d.
func foreignMetadata(d *appsv1.Deployment) (annotation, label bool) {
	_, annotation = d.Annotations[foreignAnnotation]
	_, label = d.Labels[foreignLabel]
	return annotation, label
}

// testInferenceServiceForeignMetadata: the predictor Deployment of class
// none keeps the annotations and labels others put on it until KServe
// changes its spec, and the InferenceService's annotations reach the
// Deployment and its pods.
func testInferenceServiceForeignMetadata(ctx context.Context, t *testing.T, e *env) {
	ns := namespace(ctx, t, e, "isvc-metadata")
	startBarrier(ctx, t, e, ns)
	create(ctx, t, e, isvcGVR, ns, cpuISVC("granite",
		`{"serving.kserve.io/autoscalerClass": "none", "e2e.drain-guardian.io/owner": "team-a"}`, `"minReplicas": 1`))
	waitReplicas(ctx, t, e, ns, "granite-predictor", 1)
	waitCondition(ctx, t, e, isvcGVR, ns, "granite", kservesim.ConditionPredictorReady, "True")

	d := getDeployment(ctx, t, e, ns, "granite-predictor")
	for k, v := range map[string]string{
		"serving.kserve.io/autoscalerClass": "none", "e2e.drain-guardian.io/owner": "team-a", // the InferenceService's
		"e2e.drain-guardian.io/ready-delay": "1s", // the predictor's
	} {
		if d.Annotations[k] != v || d.Spec.Template.Annotations[k] != v {
			t.Errorf("annotation %s: %q on the Deployment, %q on its pods, want %q on both", k, d.Annotations[k], d.Spec.Template.Annotations[k], v)
		}
	}
	if ref := metav1.GetControllerOf(d); ref == nil || ref.Kind != "InferenceService" || ref.Name != "granite" {
		t.Errorf("Deployment controller = %+v, want the InferenceService", ref)
	}

	// While the spec is what KServe wants, it writes nothing: foreign
	// metadata survives a reconcile.
	gen := addForeignMetadata(ctx, t, e, ns, "granite-predictor")
	settle(ctx, t, e, ns, "granite")
	d = getDeployment(ctx, t, e, ns, "granite-predictor")
	if a, l := foreignMetadata(d); !a || !l {
		t.Errorf("equal spec: foreign annotation kept %v, label kept %v; want both kept (annotations %v, labels %v)", a, l, d.Annotations, d.Labels)
	}
	if d.Generation != gen {
		t.Errorf("equal spec: generation %d, want %d (no write)", d.Generation, gen)
	}

	// A direct scale is a spec change KServe reverts at once, and its patch
	// deletes the foreign metadata.
	scaleDeployment(ctx, t, e, ns, "granite-predictor", 3)
	waitReplicas(ctx, t, e, ns, "granite-predictor", 1)
	d = getDeployment(ctx, t, e, ns, "granite-predictor")
	if a, l := foreignMetadata(d); a || l {
		t.Errorf("after reverting replicas: foreign annotation kept %v, label kept %v; want both deleted", a, l)
	}
	if d.Annotations["e2e.drain-guardian.io/owner"] != "team-a" || d.Labels["serving.kserve.io/inferenceservice"] != "granite" {
		t.Errorf("after reverting replicas: KServe's own metadata lost: annotations %v, labels %v", d.Annotations, d.Labels)
	}
	if ref := metav1.GetControllerOf(d); ref == nil || ref.Name != "granite" {
		t.Errorf("after reverting replicas: controller = %+v", ref)
	}

	// Raising minReplicas changes the wanted spec: the patch that sets the
	// new count deletes the foreign metadata too.
	addForeignMetadata(ctx, t, e, ns, "granite-predictor")
	settle(ctx, t, e, ns, "granite")
	if a, l := foreignMetadata(getDeployment(ctx, t, e, ns, "granite-predictor")); !a || !l {
		t.Fatalf("foreign metadata lost before the spec change: annotation %v, label %v", a, l)
	}
	if err := patch(ctx, e, isvcGVR, ns, "granite", `{"spec": {"predictor": {"minReplicas": 2, "maxReplicas": 2}}}`); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, e, ns, "granite-predictor", 2)
	if a, l := foreignMetadata(getDeployment(ctx, t, e, ns, "granite-predictor")); a || l {
		t.Errorf("after raising minReplicas: foreign annotation kept %v, label kept %v; want both deleted", a, l)
	}

	// Annotating the InferenceService changes the pod template: the pods
	// roll.
	if err := patch(ctx, e, isvcGVR, ns, "granite", `{"metadata": {"annotations": {"e2e.drain-guardian.io/owner": "team-b"}}}`); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "the new annotation on the Deployment and its pods", func() (bool, string) {
		d, err := e.c.AppsV1().Deployments(ns).Get(ctx, "granite-predictor", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		const k = "e2e.drain-guardian.io/owner"
		return d.Annotations[k] == "team-b" && d.Spec.Template.Annotations[k] == "team-b",
			fmt.Sprintf("Deployment %q, pods %q", d.Annotations[k], d.Spec.Template.Annotations[k])
	})
	if d := getDeployment(ctx, t, e, ns, "granite-predictor"); *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d after the annotation, want 2", *d.Spec.Replicas)
	}
}

// waitDeploymentSettled waits until the Deployment controller is done with
// the Deployment's current generation and all its pods are available, so
// that no more Deployment events (which reconcile the InferenceService)
// follow on their own.
func waitDeploymentSettled(ctx context.Context, t *testing.T, e *env, ns, name string, replicas int32) {
	t.Helper()
	eventually(ctx, t, fmt.Sprintf("Deployment %s settled at %d", name, replicas), func() (bool, string) {
		d, err := e.c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := d.Status
		return d.Spec.Replicas != nil && *d.Spec.Replicas == replicas && s.ObservedGeneration == d.Generation &&
				s.Replicas == replicas && s.UpdatedReplicas == replicas && s.ReadyReplicas == replicas && s.AvailableReplicas == replicas,
			fmt.Sprintf("generation %d, status %+v", d.Generation, s)
	})
}

// testInferenceServiceHPAWrites: with class hpa the replica count belongs to
// the HPA, and KServe rewrites the HPA only when the InferenceService is
// reconciled.
func testInferenceServiceHPAWrites(ctx context.Context, t *testing.T, e *env) {
	ns := namespace(ctx, t, e, "isvc-hpa-writes")
	startBarrier(ctx, t, e, ns)
	create(ctx, t, e, isvcGVR, ns, cpuISVC("granite", `{}`, `"minReplicas": 1, "maxReplicas": 3`))
	waitCondition(ctx, t, e, isvcGVR, ns, "granite", kservesim.ConditionReady, "True")
	hpas := e.c.AutoscalingV2().HorizontalPodAutoscalers(ns)
	hpaState := func() (int32, int32, bool, string) {
		h, err := hpas.Get(ctx, "granite-predictor", metav1.GetOptions{})
		if err != nil {
			return 0, 0, false, err.Error()
		}
		_, foreign := h.Annotations[foreignAnnotation]
		return *h.Spec.MinReplicas, h.Spec.MaxReplicas, foreign,
			fmt.Sprintf("min=%d max=%d foreign annotation %v", *h.Spec.MinReplicas, h.Spec.MaxReplicas, foreign)
	}
	waitBounds := func(lo, hi int32) {
		t.Helper()
		eventually(ctx, t, fmt.Sprintf("HPA bounds %d..%d", lo, hi), func() (bool, string) {
			a, b, _, s := hpaState()
			return a == lo && b == hi, s
		})
	}
	waitBounds(1, 3)
	waitDeploymentSettled(ctx, t, e, ns, "granite-predictor", 1)

	// A direct scale within the HPA's bounds stays: KServe ignores
	// .spec.replicas with an HPA, and the HPA controller, without metrics,
	// keeps a count within the bounds. The spec is otherwise equal, so
	// foreign metadata stays too.
	scaleDeployment(ctx, t, e, ns, "granite-predictor", 2)
	gen := addForeignMetadata(ctx, t, e, ns, "granite-predictor")
	settle(ctx, t, e, ns, "granite")
	d := getDeployment(ctx, t, e, ns, "granite-predictor")
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d after a direct scale to 2 and a reconcile, want 2 kept", *d.Spec.Replicas)
	}
	if a, l := foreignMetadata(d); !a || !l {
		t.Errorf("equal spec: foreign annotation kept %v, label kept %v; want both kept", a, l)
	}
	if d.Generation != gen {
		t.Errorf("generation %d after a reconcile, want %d (no write)", d.Generation, gen)
	}

	// A direct edit of the HPA stays while nothing reconciles the
	// InferenceService (the Deployment, at 2 already, gives the HPA
	// controller nothing to do) ...
	waitDeploymentSettled(ctx, t, e, ns, "granite-predictor", 2)
	settle(ctx, t, e, ns, "granite")
	_, err := hpas.Patch(ctx, "granite-predictor", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata": {"annotations": {%q: "x"}}, "spec": {"minReplicas": 2}}`, foreignAnnotation)), otherUser)
	if err != nil {
		t.Fatal(err)
	}
	barrier(ctx, t, e, ns)
	if lo, hi, foreign, s := hpaState(); lo != 2 || hi != 3 || !foreign {
		t.Errorf("HPA edit reverted without a reconcile of the InferenceService: %s, want min=2 max=3 with the annotation", s)
	}
	// ... and is overwritten, metadata included, by the next reconcile.
	reconciled(ctx, t, e, ns, "granite")
	if lo, hi, foreign, s := hpaState(); lo != 1 || hi != 3 || foreign {
		t.Errorf("after a reconcile: HPA %s, want min=1 max=3 without the foreign annotation", s)
	}
	if d := getDeployment(ctx, t, e, ns, "granite-predictor"); *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d after the HPA was put back, want 2", *d.Spec.Replicas)
	}

	// On a cluster the next reconcile often follows from the edit itself:
	// the HPA controller acts on the raised minimum (so the edit lasted until
	// then), and its scale of the Deployment reconciles the
	// InferenceService, which puts the HPA back; the count stays.
	if _, err := hpas.Patch(ctx, "granite-predictor", types.MergePatchType, []byte(`{"spec": {"minReplicas": 3}}`), otherUser); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, e, ns, "granite-predictor", 3)
	waitBounds(1, 3)
	settle(ctx, t, e, ns, "granite")
	if d := getDeployment(ctx, t, e, ns, "granite-predictor"); *d.Spec.Replicas != 3 {
		t.Errorf("replicas = %d after the HPA was put back, want 3", *d.Spec.Replicas)
	}
}

const llmManifest = `{"apiVersion": "serving.kserve.io/VERSION", "kind": "LLMInferenceService",
  "metadata": {"name": "chat"},
  "spec": {"model": {"uri": "hf://org/chat"}, REPLICAS
    "annotations": {"e2e.drain-guardian.io/ready-delay": "1s"},
    "template": {"containers": [{"name": "main", "image": "vllm",
      "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}}`

func llm(version, replicas string) string {
	return strings.NewReplacer("VERSION", version, "REPLICAS", replicas).Replace(llmManifest)
}

func testLLMKeepsCount(ctx context.Context, t *testing.T, e *env) {
	ns := namespace(ctx, t, e, "llm-keep")
	// Created through the older served version; the simulator reads v1alpha2.
	create(ctx, t, e, llmGVRv1, ns, llm("v1alpha1", ``))
	waitReplicas(ctx, t, e, ns, "chat-kserve", 1)
	waitCondition(ctx, t, e, llmGVRv2, ns, "chat", kservesim.ConditionReady, "True")

	if err := patch(ctx, e, llmGVRv2, ns, "chat", `{"spec": {"replicas": 2}}`); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, e, ns, "chat-kserve", 2)
	// With the field set, a direct scale is reverted.
	scaleDeployment(ctx, t, e, ns, "chat-kserve", 3)
	waitReplicas(ctx, t, e, ns, "chat-kserve", 2)

	// Removing the field keeps the count: restoring "absent" needs an
	// explicit value first.
	if err := patch(ctx, e, llmGVRv2, ns, "chat", `{"spec": {"replicas": null}}`); err != nil {
		t.Fatal(err)
	}
	waitObservedGeneration(ctx, t, e, llmGVRv2, ns, "chat")
	if d, state := deploymentReplicas(ctx, e, ns, "chat-kserve"); d == nil || *d.Spec.Replicas != 2 {
		t.Errorf("after removing spec.replicas: %s, want 2 kept", state)
	}
	if err := patch(ctx, e, llmGVRv2, ns, "chat", `{"spec": {"replicas": 1}}`); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, e, ns, "chat-kserve", 1)
}

// waitObservedGeneration waits until the simulator has reconciled the
// object's current generation.
func waitObservedGeneration(ctx context.Context, t *testing.T, e *env, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	eventually(ctx, t, name+" reconciled", func() (bool, string) {
		u, err := e.dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		seen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return seen == u.GetGeneration(), fmt.Sprintf("generation %d, observed %d", u.GetGeneration(), seen)
	})
}

func testLLMPrefill(ctx context.Context, t *testing.T, e *env) {
	ns := namespace(ctx, t, e, "llm-prefill")
	m := llm("v1alpha2", `"replicas": 1, "prefill": {"replicas": 1, "template": {"containers": [{"name": "main", "image": "vllm"}]}},`)
	create(ctx, t, e, llmGVRv2, ns, m)
	waitReplicas(ctx, t, e, ns, "chat-kserve", 1)
	waitReplicas(ctx, t, e, ns, "chat-kserve-prefill", 1)
	waitCondition(ctx, t, e, llmGVRv2, ns, "chat", kservesim.ConditionPrefillWorkloadReady, "True")

	if err := patch(ctx, e, llmGVRv2, ns, "chat", `{"spec": {"prefill": {"replicas": 2}}}`); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, e, ns, "chat-kserve-prefill", 2)

	if err := patch(ctx, e, llmGVRv2, ns, "chat", `{"spec": {"prefill": null}}`); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "prefill Deployment deleted", func() (bool, string) {
		d, err := e.c.AppsV1().Deployments(ns).Get(ctx, "chat-kserve-prefill", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return d.DeletionTimestamp != nil, "still there"
	})
}

func testLLMNilMeansOne(ctx context.Context, t *testing.T, e *env) {
	ns := namespace(ctx, t, e, "llm-nil")
	create(ctx, t, e, llmGVRv2, ns, llm("v1alpha2", `"replicas": 2,`))
	waitReplicas(ctx, t, e, ns, "chat-kserve", 2)
	if err := patch(ctx, e, llmGVRv2, ns, "chat", `{"spec": {"replicas": null}}`); err != nil {
		t.Fatal(err)
	}
	waitReplicas(ctx, t, e, ns, "chat-kserve", 1)
	// And a direct scale is reverted to 1.
	scaleDeployment(ctx, t, e, ns, "chat-kserve", 2)
	waitReplicas(ctx, t, e, ns, "chat-kserve", 1)
}
