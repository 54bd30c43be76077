package scenarios

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/kservesim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// modelLabels are the pod labels of the plain Deployment and StatefulSet models.
var modelLabels = map[string]string{"app": "model"}

// loadingDelay is how long a new replica of a model takes to turn Ready (weights loading).
const loadingDelay = "3s"

// createDeployment creates the single-replica model Deployment with a minAvailable 1 PDB and waits
// until its pod is Ready and the PDB allows no disruption.
func (s *scenario) createDeployment(readyDelay string) *corev1.Pod {
	s.t.Helper()
	return s.createDeploymentWith(readyDelay, testbed.MinAvailablePDB(s.ns, "model", modelLabels), nil)
}

// createDeploymentWith is createDeployment with another PDB and a chance to change the pod spec.
func (s *scenario) createDeploymentWith(readyDelay string, pdb *policyv1.PodDisruptionBudget, mutate func(*corev1.PodSpec)) *corev1.Pod {
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
				Spec: testbed.ModelPodSpec(s.pool, modelLabels),
			},
		},
	}
	if mutate != nil {
		mutate(&d.Spec.Template.Spec)
	}
	if _, err := s.kube.AppsV1().Deployments(s.ns).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating deployment: %v", err)
	}
	pods := s.waitModelReady(selectorOf(modelLabels), 1)
	s.createModelPDB(pdb)
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
	if d := s.deployment("model"); *d.Spec.Replicas != 1 || s.hasSurge() {
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
	s.waitRestored(selectorOf(modelLabels), 1)
	s.assertAvailable()
	if d := s.deployment("model"); d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("deployment replicas %v after restore, want 1", d.Spec.Replicas)
	}
	s.requireEvents("SurgeStarted", "ReplacementReady", "StallResolved", "SurgeRestored")
	s.forbidEvents("SurgeFailed", "ExternalChange")
}

// testInferenceService runs a pool update under an InferenceService of the given autoscaler class
// and checks that its spec is restored byte for byte.
func testInferenceService(t *testing.T, name, class string) {
	isvc := "granite"
	app := map[string]string{"app": "isvc." + isvc + "-predictor"}
	s := newScenario(t, name, gpuNodes(3, 1), selectorOf(app))
	obj := testbed.InferenceService(s.ns, isvc, class, s.pool, loadingDelay)
	if _, err := testBed.CP.Dynamic().Resource(testbed.InferenceServices).Namespace(s.ns).Create(s.ctx, obj, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating InferenceService: %v", err)
	}
	s.waitModelReady(selectorOf(app), 1)
	s.createModelPDB(testbed.MinAvailablePDB(s.ns, isvc+"-predictor", app))
	before := specJSON(s.getUnstructured(testbed.InferenceServices, isvc))

	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	took := s.waitPoolUpdated()
	t.Logf("pool update took %v", took.Round(100*time.Millisecond))
	s.waitRestored(selectorOf(app), 1)
	s.assertAvailable()
	if after := specJSON(s.getUnstructured(testbed.InferenceServices, isvc)); after != before {
		t.Errorf("InferenceService spec not restored:\nbefore %s\nafter  %s", before, after)
	}
	if d := s.deployment(isvc + "-predictor"); d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("predictor replicas %v after restore, want 1", d.Spec.Replicas)
	}
	// Who evicts the blocked pod, the guardian or the MCO's next drain attempt (every 250 ms at this
	// time scale), is a race once the replacement is Ready; either way the drain went through.
	s.requireEvents("SurgeStarted", "ReplacementReady", "SurgeRestored")
	s.forbidEvents("SurgeFailed", "ExternalChange")
}

// TestInferenceServiceHPA: an InferenceService whose replicas an HPA owns (autoscaler class hpa)
// is surged through its minReplicas/maxReplicas.
func TestInferenceServiceHPA(t *testing.T) { testInferenceService(t, "isvc-hpa", "hpa") }

// TestInferenceServiceNone: with autoscaler class none, KServe writes minReplicas into the
// Deployment and reverts any other value, so only a surge of the InferenceService itself holds.
func TestInferenceServiceNone(t *testing.T) { testInferenceService(t, "isvc-none", "none") }

// waitSurged waits until the guardian has created a Surge in the scenario's namespace.
func (s *scenario) waitSurged(what string) {
	s.t.Helper()
	s.eventually(time.Minute, "the guardian to surge "+what, func() (bool, error) {
		return s.hasSurge(), nil
	})
}

// TestNoFreeGPU: every other node's GPU is taken, so a replacement cannot run anywhere. The
// guardian says so (Warning NoCapacity) and leaves the workload alone rather than adding a replica
// that would stay Pending; the drain stays blocked, as it must.
func TestNoFreeGPU(t *testing.T) {
	s := newScenario(t, "no-gpu", gpuNodes(2, 1), selectorOf(modelLabels))
	pod := s.createDeployment(loadingDelay)
	other := s.nodes[0]
	if other == pod.Spec.NodeName {
		other = s.nodes[1]
	}
	// The other GPU goes to a per-node agent (a DaemonSet pod: drains leave it in place, so the GPU
	// stays taken for the whole update).
	agent := map[string]string{"app": "gpu-agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-agent", Namespace: s.ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: agent},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: agent},
				Spec:       testbed.ModelPodSpec(s.pool, agent),
			},
		},
	}
	ds.Spec.Template.Spec.NodeSelector[corev1.LabelHostname] = other
	if _, err := s.kube.AppsV1().DaemonSets(s.ns).Create(s.ctx, ds, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating daemonset: %v", err)
	}
	s.waitModelReadyOn(selectorOf(agent), other)

	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	s.assertReportedNotSurged("NoCapacity")
}

// assertRestoredOnce waits until the model Deployment's one surge is restored to one replica, and
// checks it stayed available throughout.
func (s *scenario) assertRestoredOnce() {
	s.t.Helper()
	s.waitRestored(selectorOf(modelLabels), 1)
	s.assertAvailable()
	if d := s.deployment("model"); *d.Spec.Replicas != 1 {
		s.t.Errorf("replicas %d after restore, want 1", *d.Spec.Replicas)
	}
	s.requireEvents("SurgeStarted", "StallResolved", "SurgeRestored")
	s.requireSingleSurge()
}

// assertReportedNotSurged waits for the Warning Event with reason, then checks for a while that the
// model Deployment is not surged, and that it stayed available.
func (s *scenario) assertReportedNotSurged(reason string) {
	s.t.Helper()
	s.waitEvent(time.Minute, reason, corev1.EventTypeWarning)
	s.holds(5*time.Second, "the deployment is not surged", func() error {
		if d := s.deployment("model"); *d.Spec.Replicas != 1 || s.hasSurge() {
			return fmt.Errorf("replicas %d, annotations %v", *d.Spec.Replicas, d.Annotations)
		}
		return nil
	})
	s.forbidEvents("SurgeStarted")
	s.assertAvailable()
}

// waitModelReadyOn waits until a Ready pod matching selector runs on node.
func (s *scenario) waitModelReadyOn(selector, node string) {
	s.t.Helper()
	s.eventually(time.Minute, "a Ready pod "+selector+" on "+node, func() (bool, error) {
		pods, err := s.kube.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		for i := range pods.Items {
			if pods.Items[i].Spec.NodeName == node && testbed.PodReady(&pods.Items[i]) {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestUnschedulableReplacementRolledBack: the replacement fits by the guardian's capacity check but
// the scheduler refuses it (a zone anti-affinity, and both nodes are in one zone). After
// --schedule-timeout the guardian rolls the surge back (Warning SurgeFailed) and does not retry
// the same drain.
func TestUnschedulableReplacementRolledBack(t *testing.T) {
	nodes := gpuNodes(2, 1)
	for i := range nodes {
		nodes[i].Zone = "zone-a"
	}
	s := newScenario(t, "unschedulable", nodes, selectorOf(modelLabels))
	s.createDeploymentWith(loadingDelay, testbed.MinAvailablePDB(s.ns, "model", modelLabels), func(spec *corev1.PodSpec) {
		terms := &spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		*terms = append(*terms, corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: modelLabels},
			TopologyKey:   corev1.LabelTopologyZone,
		})
	})
	const scheduleTimeout = 10 * time.Second
	s.startGuardian("--schedule-timeout=" + scheduleTimeout.String())
	s.obs.StartSampling()
	s.updatePool()
	s.waitSurged("the deployment")
	surged := time.Now()
	s.waitEvent(scheduleTimeout+30*time.Second, "SurgeFailed", corev1.EventTypeWarning)
	t.Logf("surge rolled back %v after it started (schedule timeout %v)", time.Since(surged).Round(100*time.Millisecond), scheduleTimeout)
	s.eventually(30*time.Second, "the deployment back to 1 replica, its Surge kept as Failed", func() (bool, error) {
		d := s.deployment("model")
		return *d.Spec.Replicas == 1 && !s.hasSurge() && d.Status.Replicas == 1, nil
	})
	if surges := s.surges(); len(surges) != 1 {
		t.Errorf("%d Surges after the failure, want the one Failed Surge", len(surges))
	} else if reason, _, _ := unstructured.NestedString(surges[0].Object, "status", "reason"); reason != "Unschedulable" {
		t.Errorf("Failed Surge reason %q, want Unschedulable", reason)
	}
	s.holds(5*time.Second, "the guardian does not surge the same drain again", func() error {
		if d := s.deployment("model"); *d.Spec.Replicas != 1 || s.hasSurge() {
			return fmt.Errorf("replicas %d, annotations %v", *d.Spec.Replicas, d.Annotations)
		}
		return nil
	})
	s.assertAvailable()
}

// TestExternalChangeKept: someone scales the Deployment while it is surged; the guardian keeps
// their value instead of restoring its own, and says so (Event ExternalChange).
func TestExternalChangeKept(t *testing.T) {
	s := newScenario(t, "external", gpuNodes(4, 1), selectorOf(modelLabels))
	// A slow model: the surge lasts long enough to be changed by hand.
	s.createDeployment("10s")
	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	s.waitSurged("the deployment")
	s.note("an operator scales the deployment to 3")
	if _, err := s.kube.AppsV1().Deployments(s.ns).Patch(s.ctx, "model", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
		s.fatalf("scaling: %v", err)
	}
	s.waitPoolUpdated()
	s.eventually(time.Minute, "the surge record to be gone", func() (bool, error) {
		return !s.hasSurge(), nil
	})
	if d := s.deployment("model"); *d.Spec.Replicas != 3 {
		t.Errorf("replicas %d after the surge ended, want the operator's 3", *d.Spec.Replicas)
	}
	s.waitEvent(10*time.Second, "ExternalChange", "")
	s.assertAvailable()
}

// TestUnsatisfiablePDB: a PDB with maxUnavailable 0 forbids every eviction whatever the replica
// count, so a surge cannot help: the guardian reports it (Event UnsatisfiablePDB) and changes
// nothing.
func TestUnsatisfiablePDB(t *testing.T) {
	s := newScenario(t, "unsatisfiable", gpuNodes(2, 1), selectorOf(modelLabels))
	pdb := testbed.MinAvailablePDB(s.ns, "model", modelLabels)
	pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable = nil, ptr.To(intstr.FromInt32(0))
	s.createDeploymentWith(loadingDelay, pdb, nil)
	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	s.assertReportedNotSurged("UnsatisfiablePDB")
}

// TestGuardianKilledMidSurge: the guardian is SIGKILLed while a surge waits for its replacement; a
// new process finds the surge record on the Deployment, finishes the surge and restores it.
func TestGuardianKilledMidSurge(t *testing.T) {
	s := newScenario(t, "killed", gpuNodes(3, 1), selectorOf(modelLabels))
	s.createDeployment("10s")
	g := s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	s.waitSurged("the deployment")
	s.note("SIGKILL guardian (pid %d)", g.Pid())
	g.Kill()
	s.startGuardian()
	s.waitPoolUpdated()
	s.assertRestoredOnce()
}

// TestLLMInferenceServiceReplicasUnset: an LLMInferenceService without spec.replicas (one replica
// on this KServe release) is surged by setting the field, and restored by removing it again.
func TestLLMInferenceServiceReplicasUnset(t *testing.T) {
	name := "llama"
	app := map[string]string{"app.kubernetes.io/name": name, "kserve.io/component": "workload"}
	s := newScenario(t, "llmisvc", gpuNodes(3, 1), selectorOf(app))
	spec := testbed.ModelPodSpec(s.pool, app)
	template, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		t.Fatal(err)
	}
	llm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": testbed.LLMInferenceServices.GroupVersion().String(),
		"kind":       "LLMInferenceService",
		"metadata":   map[string]any{"name": name, "namespace": s.ns},
		"spec": map[string]any{
			"model":       map[string]any{"uri": "hf://meta-llama/Llama-3.1-8B-Instruct", "name": "llama"},
			"annotations": map[string]any{controlplane.ReadyDelayAnnotation: loadingDelay},
			"template":    template,
		},
	}}
	if _, err := testBed.CP.Dynamic().Resource(testbed.LLMInferenceServices).Namespace(s.ns).Create(s.ctx, llm, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating LLMInferenceService: %v", err)
	}
	s.waitModelReady(selectorOf(app), 1)
	s.createModelPDB(testbed.MinAvailablePDB(s.ns, name, app))
	before := specJSON(s.getUnstructured(testbed.LLMInferenceServices, name))

	// Up to OpenShift AI 3.3 the guardian must be told; from 3.4 it sees v1alpha2 served and knows.
	semantics := "--kserve-llm-nil-semantics=one"
	if llmNilKeepsCount {
		semantics = "--kserve-llm-nil-semantics=auto"
	}
	s.startGuardian(semantics)
	s.obs.StartSampling()
	s.updatePool()
	s.waitPoolUpdated()
	s.waitRestored(selectorOf(app), 1)
	s.assertAvailable()
	after := s.getUnstructured(testbed.LLMInferenceServices, name)
	if _, found, _ := unstructured.NestedFieldNoCopy(after.Object, "spec", "replicas"); found {
		t.Errorf("spec.replicas is set after restore, want it absent again")
	}
	if got := specJSON(after); got != before {
		t.Errorf("LLMInferenceService spec not restored:\nbefore %s\nafter  %s", before, got)
	}
	s.requireEvents("SurgeStarted", "StallResolved", "SurgeRestored")
	if llmNilKeepsCount {
		// 3.4: removing the field at once would have kept two replicas; the restore first wrote the
		// original count, waited for the scale-down, then removed it.
		dep := s.deployment(kservesim.MainDeploymentName(name))
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 1 {
			t.Errorf("workload Deployment has %v replicas after restore, want 1", dep.Spec.Replicas)
		}
	}
}

// TestStatefulSet: a single-replica StatefulSet is surged to two ordinals; its pod 0 is evicted,
// comes back on another node, and the StatefulSet returns to one replica.
func TestStatefulSet(t *testing.T) {
	s := newScenario(t, "sts", gpuNodes(3, 1), selectorOf(modelLabels))
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: s.ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](1),
			ServiceName: "model",
			Selector:    &metav1.LabelSelector{MatchLabels: modelLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      modelLabels,
					Annotations: map[string]string{controlplane.ReadyDelayAnnotation: loadingDelay},
				},
				Spec: testbed.ModelPodSpec(s.pool, modelLabels),
			},
		},
	}
	if _, err := s.kube.AppsV1().StatefulSets(s.ns).Create(s.ctx, sts, metav1.CreateOptions{}); err != nil {
		s.fatalf("creating statefulset: %v", err)
	}
	s.waitModelReady(selectorOf(modelLabels), 1)
	s.createModelPDB(testbed.MinAvailablePDB(s.ns, "model", modelLabels))
	get := func() *appsv1.StatefulSet {
		got, err := s.kube.AppsV1().StatefulSets(s.ns).Get(s.ctx, "model", metav1.GetOptions{})
		if err != nil {
			s.fatalf("getting statefulset: %v", err)
		}
		return got
	}
	s.startGuardian()
	s.obs.StartSampling()
	s.updatePool()
	s.waitPoolUpdated()
	s.waitRestored(selectorOf(modelLabels), 1)
	s.assertAvailable()
	if got := get(); *got.Spec.Replicas != 1 {
		t.Errorf("statefulset replicas %d after restore, want 1", *got.Spec.Replicas)
	}
	s.requireEvents("SurgeStarted", "StallResolved", "SurgeRestored")
}

// TestLeaderKilled: two guardians elect a leader; the leader is SIGKILLed in the middle of a surge
// and the other takes over once the Lease expires, then finishes and restores the surge.
func TestLeaderKilled(t *testing.T) {
	s := newScenario(t, "leader", gpuNodes(3, 1), selectorOf(modelLabels))
	s.createDeployment("10s")
	election := []string{
		"--leader-elect=true",
		"--leader-election-namespace=" + controlplane.GuardianNamespace,
		"--leader-election-id=e2e-" + s.name,
		"--lease-duration=4s", "--renew-deadline=3s", "--retry-period=500ms",
	}
	a, b := s.spawnGuardian(election...), s.spawnGuardian(election...)
	var leader, standby *testbed.Guardian
	s.eventually(30*time.Second, "one guardian to lead", func() (bool, error) {
		ma, _ := a.Metrics(s.ctx)
		mb, _ := b.Metrics(s.ctx)
		switch la, lb := testbed.IsLeader(ma), testbed.IsLeader(mb); {
		case la && lb:
			return false, fmt.Errorf("both guardians lead")
		case la:
			leader, standby = a, b
		case lb:
			leader, standby = b, a
		}
		return leader != nil, nil
	})
	s.obs.StartSampling()
	s.updatePool()
	s.waitSurged("the deployment")
	s.note("SIGKILL the leader (pid %d)", leader.Pid())
	leader.Kill()
	if err := standby.WaitLeader(s.ctx, 30*time.Second); err != nil {
		s.fatalf("%v", err)
	}
	s.note("the standby (pid %d) leads", standby.Pid())
	s.waitPoolUpdated()
	s.assertRestoredOnce()
}

// requireSingleSurge fails unless exactly one surge was started: a guardian that takes over (after
// a crash or a failover) must resume the recorded surge, not start another.
func (s *scenario) requireSingleSurge() {
	s.t.Helper()
	if started := s.events()["SurgeStarted"]; len(started) != 1 {
		for _, e := range started {
			s.t.Logf("SurgeStarted at %v: %s", e.FirstTimestamp.Time, e.Message)
		}
		s.t.Errorf("%d SurgeStarted Events, want exactly 1", len(started))
	}
}
