package controller

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// richPod is a model server pod as the API returns it: everything the scheduler matches, plus the
// bulk (image, env, volumes, statuses, kubectl's last-applied copy) the guardian never reads.
func richPod() *corev1.Pod {
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("4")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "llm-0", Namespace: ns, UID: "llm-0-uid", ResourceVersion: "7", CreationTimestamp: metav1.NewTime(t0),
			Labels:          map[string]string{"app": "llm", appsv1.PodIndexLabel: "0"},
			Annotations:     map[string]string{podinfo.DeletionCostAnnotation: "-1000", lastAppliedAnnotation: `{"huge":"copy"}`, "example.com/team": "nlp"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "llm-rs", UID: "rs", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
		},
		Spec: corev1.PodSpec{
			NodeName:     "w1",
			NodeSelector: map[string]string{"gpu": "a100"},
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llm"}}, TopologyKey: corev1.LabelHostname,
			}}}},
			Tolerations:    []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Overhead:       corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
			InitContainers: []corev1.Container{{Name: "fetch", Image: "fetch:1", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}}},
			Containers: []corev1.Container{{
				Name: "server", Image: "vllm:latest", Command: []string{"serve"},
				Env:       []corev1.EnvVar{{Name: "HF_TOKEN", Value: "secret"}},
				Resources: corev1.ResourceRequirements{Requests: gpu, Limits: gpu},
			}},
			Volumes: []corev1.Volume{{Name: "cache"}},
		},
		Status: corev1.PodStatus{
			Phase:             corev1.PodRunning,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "server", Image: "vllm:latest", Ready: true}},
			PodIP:             "10.0.0.7",
		},
	}
}

// The informers cache a pod as the compact podinfo.Pod: the capacity check, the blocking decision and
// the survivor counts see what they read of the full pod (decisions take *podinfo.Pod, so one that
// needed a dropped field would not compile); kubectl's copy, other annotations and managedFields are
// gone.
func TestSlimKeepsWhatDecisionsRead(t *testing.T) {
	full := richPod()
	got, err := slim(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	p, ok := got.(*podinfo.Pod)
	if !ok {
		t.Fatalf("slim(pod) = %T, want *podinfo.Pod", got)
	}
	if want := resourcehelper.PodRequests(full, resourcehelper.PodResourcesOptions{}); !reflect.DeepEqual(p.Spec.Requests, want) {
		t.Errorf("requests %v, want %v", p.Spec.Requests, want)
	}
	if blocking.Skip(p) || !p.Ready() {
		t.Error("a Ready model pod is skipped or not Ready")
	}
	if ord, ok := ordinal(p); !ok || ord != 0 {
		t.Errorf("ordinal = %d, %v", ord, ok)
	}
	tainted := gpuNode("w2")
	tainted.Labels["gpu"] = "a100"
	tainted.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}
	wrongLabel := gpuNode("w3")
	// The node selector keeps w3 out; the toleration lets w2 in.
	if node, ok := capacity.New([]capacity.Candidate{{Node: wrongLabel}, {Node: tainted}}, capacity.Standard(nil)...).FitsElsewhere(p); node != "w2" || !ok {
		t.Errorf("FitsElsewhere = %q %v, want w2 (node selector and toleration kept)", node, ok)
	}
	// Anti-affinity: a node already running a pod of the model is no place for its replacement.
	withTwin := gpuNode("w4")
	withTwin.Labels["gpu"] = "a100"
	twin := richPod()
	twin.Spec.NodeName = "w4"
	if _, ok := capacity.New([]capacity.Candidate{{Node: withTwin, Pods: []*podinfo.Pod{podinfo.From(twin)}}}, capacity.Standard(nil)...).FitsElsewhere(p); ok {
		t.Error("the slimmed pod lost its anti-affinity")
	}
	if p.Annotations[podinfo.DeletionCostAnnotation] != "-1000" {
		t.Errorf("the deletion cost annotation was dropped: %v", p.Annotations)
	}
	mirror := richPod()
	mirror.Annotations[corev1.MirrorPodAnnotationKey] = "x"
	if sm, _ := slim(mirror); !blocking.Skip(sm.(*podinfo.Pod)) {
		t.Error("a mirror pod's annotation was dropped: it would be counted as blocking")
	}
	if len(p.Annotations) != 1 || p.ManagedFields != nil {
		t.Errorf("annotations %v (want only the deletion cost), managedFields %v", p.Annotations, p.ManagedFields)
	}
	if !reflect.DeepEqual(p.OwnerReferences, full.OwnerReferences) || !reflect.DeepEqual(p.Labels, full.Labels) || p.UID != full.UID || p.ResourceVersion != full.ResourceVersion {
		t.Error("identity, labels or owners changed")
	}
}

func TestSlimNodeAndWorkloads(t *testing.T) {
	n := gpuNode("w1")
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"vllm:latest"}, SizeBytes: 1 << 34}}
	n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	got, _ := slim(n.DeepCopy())
	sn := got.(*corev1.Node)
	if sn.Status.Images != nil || !reflect.DeepEqual(sn.Status.Allocatable, n.Status.Allocatable) ||
		!reflect.DeepEqual(sn.Status.Conditions, n.Status.Conditions) || !reflect.DeepEqual(sn.Spec, n.Spec) ||
		!reflect.DeepEqual(sn.Annotations, n.Annotations) {
		t.Errorf("node slimmed wrongly: %+v", sn)
	}

	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "llm", Annotations: map[string]string{
		lastAppliedAnnotation: `{"kind":"Deployment"}`, workload.IgnoreAnnotation: "true"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/component": "llminferenceservice-workload-prefill"}},
			Spec:       richPod().Spec,
		}},
		Status: appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, ObservedGeneration: 2,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Message: "Deployment has minimum availability."}}}}
	got, _ = slim(d)
	sd := got.(*appsv1.Deployment)
	if sd.Spec.Template.Labels["app.kubernetes.io/component"] == "" || len(sd.Spec.Template.Spec.Containers) != 0 || *sd.Spec.Replicas != 1 {
		t.Errorf("deployment slimmed wrongly: %+v", sd.Spec)
	}
	if want := map[string]string{workload.IgnoreAnnotation: "true"}; !reflect.DeepEqual(sd.Annotations, want) || sd.Status.Conditions != nil ||
		sd.Status.Replicas != 1 || sd.Status.UpdatedReplicas != 1 || sd.Status.ObservedGeneration != 2 {
		t.Errorf("deployment metadata or status slimmed wrongly: %v %+v", sd.Annotations, sd.Status)
	}
	// The ReplicaFailure condition says why a surge's replacements are not created: it is kept.
	refused := appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: "exceeded quota"}
	d.Status.Conditions = append(d.Status.Conditions, refused)
	got, _ = slim(d)
	if sd := got.(*appsv1.Deployment); !reflect.DeepEqual(sd.Status.Conditions, []appsv1.DeploymentCondition{refused}) {
		t.Errorf("deployment conditions slimmed to %+v, want the ReplicaFailure one", sd.Status.Conditions)
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "d-5d8f7", Namespace: ns, UID: "rs", ResourceVersion: "3",
		Labels: map[string]string{"app": "llm"}, Annotations: map[string]string{"deployment.kubernetes.io/revision": "3"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "d"}}},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: richPod().Spec}}}
	got, _ = slim(rs)
	srs, ok := got.(*metav1.PartialObjectMetadata)
	if !ok {
		t.Fatalf("slim(replicaset) = %T, want its metadata", got)
	}
	want := metav1.ObjectMeta{Name: rs.Name, Namespace: ns, UID: "rs", ResourceVersion: "3", OwnerReferences: rs.OwnerReferences}
	if !reflect.DeepEqual(srs.ObjectMeta, want) || srs.Kind != "ReplicaSet" {
		t.Errorf("replicaset slimmed to %+v, want %+v", srs, want)
	}
}

// A PDB event re-examines only the nodes under drain that run a pod it selects.
func TestPDBEventEnqueuesOnlyNodesWithSelectedPods(t *testing.T) {
	objs := stalled()
	other := draining(gpuNode("w4"))
	objs = append(objs, other)
	objs = append(objs, otherModel("w4")...)
	h := newHarness(t, nil, objs...)
	h.syncNode("w1")
	h.syncNode("w4")
	for h.c.queue.Len() > 0 {
		k, _ := h.c.queue.Get()
		h.c.queue.Done(k)
	}
	h.c.onPDB(pdb(0, 1, 1))
	var queued []string
	for h.c.queue.Len() > 0 {
		k, _ := h.c.queue.Get()
		queued = append(queued, k.Node)
		h.c.queue.Done(k)
	}
	if !reflect.DeepEqual(queued, []string{"w1"}) {
		t.Fatalf("the model's PDB event queued %v, want only w1 (w4 runs another model)", queued)
	}
}

// A Ready Surge whose eviction the budget refused is woken by its PDB's next status change, so the
// pod is evicted as soon as the budget allows, not on the next retry; another model's PDB wakes it not.
func TestPDBEventWakesTheReadySurgeItBlocks(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.refuseEvictions()
	h.readySurge()
	if p := h.phase(depSurge); p != v1alpha1.PhaseReady {
		t.Fatalf("Surge %s, want Ready with its eviction refused", p)
	}
	queued := func(budget *policyv1.PodDisruptionBudget) bool {
		for h.c.queue.Len() > 0 {
			k, _ := h.c.queue.Get()
			h.c.queue.Done(k)
			h.c.queue.Forget(k)
		}
		h.c.onPDB(budget)
		found := false
		for h.c.queue.Len() > 0 {
			k, _ := h.c.queue.Get()
			found = found || k.Surge.Name == depSurge
			h.c.queue.Done(k)
		}
		return found
	}
	other := pdb(1, 1, 1)
	other.Name, other.Spec.Selector.MatchLabels = "other", map[string]string{"app": "other"}
	if queued(other) {
		t.Error("another model's PDB woke the Surge")
	}
	if !queued(pdb(1, 2, 2)) {
		t.Error("the model's PDB allowing a disruption did not wake its Ready Surge")
	}
}

// A node that only reported in (heartbeat times and resourceVersion moved) is no change and
// re-plans nothing; a cordon, a label or a condition turning is one; a resync is always one.
func TestNodeHeartbeatIsNoChange(t *testing.T) {
	base := gpuNode("w1")
	base.ResourceVersion = "10"
	base.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastHeartbeatTime: metav1.NewTime(t0), LastTransitionTime: metav1.NewTime(t0)}}
	cached := slimNode(base.DeepCopy())
	next := func(mutate func(*corev1.Node)) *corev1.Node {
		n := base.DeepCopy()
		n.ResourceVersion = "11"
		n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0.Add(time.Minute))
		mutate(n)
		return slimNode(n)
	}
	if changed(cached, next(func(*corev1.Node) {})) {
		t.Error("a heartbeat counts as a change")
	}
	for what, mutate := range map[string]func(*corev1.Node){
		"cordon":    func(n *corev1.Node) { n.Spec.Unschedulable = true },
		"label":     func(n *corev1.Node) { n.Labels["node-role.kubernetes.io/infra"] = "" },
		"not ready": func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse },
		"MCO state": func(n *corev1.Node) {
			n.Annotations = map[string]string{"machineconfiguration.openshift.io/state": "Working"}
		},
	} {
		if !changed(cached, next(mutate)) {
			t.Errorf("%s is no change", what)
		}
	}
	if !changed(cached, cached) {
		t.Error("a resync (same resourceVersion) is no change")
	}
}

// A pod status write that touches only what the transform drops (container statuses, IPs) is no
// change; the pod turning not Ready, or being deleted, is one.
func TestPodStatusNoiseIsNoChange(t *testing.T) {
	base := richPod()
	base.ResourceVersion = "10"
	cached := podinfo.From(base.DeepCopy())
	next := func(mutate func(*corev1.Pod)) *podinfo.Pod {
		p := base.DeepCopy()
		p.ResourceVersion = "11"
		p.Status.PodIP = "10.128.0.99"
		mutate(p)
		return podinfo.From(p)
	}
	if changed(cached, next(func(p *corev1.Pod) { p.Status.ContainerStatuses = nil })) {
		t.Error("a status write of dropped fields counts as a change")
	}
	for what, mutate := range map[string]func(*corev1.Pod){
		"not ready": func(p *corev1.Pod) {
			for i := range p.Status.Conditions {
				if p.Status.Conditions[i].Type == corev1.PodReady {
					p.Status.Conditions[i].Status = corev1.ConditionFalse
				}
			}
		},
		"deleted":    func(p *corev1.Pod) { now := metav1.NewTime(t0); p.DeletionTimestamp = &now },
		"bound":      func(p *corev1.Pod) { p.Spec.NodeName = "w9" },
		"relabelled": func(p *corev1.Pod) { p.Labels = map[string]string{"app": "other"} },
		"requests":   func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests = nil },
	} {
		if !changed(cached, next(mutate)) {
			t.Errorf("%s is no change", what)
		}
	}
	if !changed(&policyv1.PodDisruptionBudget{}, &policyv1.PodDisruptionBudget{}) {
		t.Error("a PDB update is no change")
	}
}

// BenchmarkNodeHeartbeat: what the guardian spends on a node status report that changes nothing it
// caches, the most frequent event of a large cluster (kubelets report every node's status every few
// minutes; the node and prediction handlers both ask).
func BenchmarkNodeHeartbeat(b *testing.B) {
	n := gpuNode("w1")
	for i := range 20 {
		n.Labels[fmt.Sprintf("feature.node.kubernetes.io/cpu-cpuid.%d", i)] = "true"
	}
	n.Status.Capacity = n.Status.Allocatable.DeepCopy()
	n.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse,
			Reason: "KubeletHasSufficient" + string(t), Message: "kubelet has sufficient resources", LastTransitionTime: metav1.NewTime(t0)})
	}
	old := slimNode(n)
	n.ResourceVersion = "2"
	cur := slimNode(n)
	b.ReportAllocs()
	for range b.N {
		if changed(old, cur) {
			b.Fatal("a heartbeat counts as a change")
		}
	}
}

// oversizedPDB is a tenant's PDB as the API returns it: about a megabyte of annotations, thousands of
// labels and a selector of thousands of values, selecting nothing.
func oversizedPDB(i int) *policyv1.PodDisruptionBudget {
	big := strings.Repeat("x", 1<<20)
	labels := make(map[string]string, 2000)
	for j := range 2000 {
		labels[fmt.Sprintf("tenant.example.com/label-%04d", j)] = fmt.Sprintf("value-%04d", j)
	}
	values := make([]string, 5000)
	for j := range values {
		values[j] = fmt.Sprintf("nothing-%05d", j)
	}
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i), Namespace: "tenant-a", UID: types.UID(fmt.Sprintf("big-%d", i)),
			ResourceVersion: "1", Generation: 1, Labels: labels, Annotations: map[string]string{"example.com/blob": big},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: values}}}},
		Status: policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1,
			DisruptedPods: map[string]metav1.Time{"p": metav1.NewTime(t0)},
			Conditions:    []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition, Message: big[:1000]}}},
	}
}

// A PDB keeps its identity, selector, budget and status counts; labels, annotations, the per-pod
// disruption map and conditions go. The decisions read the same of it before and after.
func TestSlimPDBKeepsWhatDecisionsRead(t *testing.T) {
	full := oversizedPDB(0)
	full.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.AlwaysAllow)
	got, _ := slim(full.DeepCopy())
	p := got.(*policyv1.PodDisruptionBudget)
	if p.Labels != nil || p.Annotations != nil || p.ManagedFields != nil || p.Status.DisruptedPods != nil || p.Status.Conditions != nil {
		t.Errorf("PDB kept what nothing reads: %+v", p.ObjectMeta)
	}
	if !reflect.DeepEqual(p.Spec, full.Spec) || p.UID != full.UID || p.ResourceVersion != full.ResourceVersion || p.Generation != full.Generation ||
		p.Status.ObservedGeneration != 1 || p.Status.CurrentHealthy != 1 || p.Status.DesiredHealthy != 1 || p.Status.ExpectedPods != 1 {
		t.Errorf("PDB slimmed to %+v, want the spec and status counts of %+v", p, full)
	}
	d1, w1 := blocking.SurgeNeeded(full)
	d2, w2 := blocking.SurgeNeeded(p)
	if d1 != d2 || w1 != w2 {
		t.Errorf("SurgeNeeded = %d %q after slim, %d %q before", d2, w2, d1, w1)
	}
}

// An HPA keeps its target, counts and scaling state, and the opt-out annotation.
func TestSlimHPAKeepsWhatSurgesRead(t *testing.T) {
	h := hpaFor(ptr.To(int32(1)), 3)
	h.Annotations = map[string]string{workload.IgnoreAnnotation: "true", lastAppliedAnnotation: "{}"}
	h.Labels = map[string]string{"team": "nlp"}
	h.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType}}
	h.Status.CurrentReplicas, h.Status.DesiredReplicas = 1, 2
	got, _ := slim(h.DeepCopy())
	s := got.(*autoscalingv2.HorizontalPodAutoscaler)
	if !reflect.DeepEqual(s.Annotations, map[string]string{workload.IgnoreAnnotation: "true"}) || s.Labels != nil || s.Spec.Metrics != nil {
		t.Errorf("HPA kept %v %v %v", s.Annotations, s.Labels, s.Spec.Metrics)
	}
	if s.Spec.ScaleTargetRef != h.Spec.ScaleTargetRef || *s.Spec.MinReplicas != 1 || s.Spec.MaxReplicas != 3 ||
		s.Status.CurrentReplicas != 1 || s.Status.DesiredReplicas != 2 || s.UID != h.UID || s.ResourceVersion != h.ResourceVersion {
		t.Errorf("HPA slimmed to %+v", s)
	}
}

// A KServe object keeps the spec fields its kind's handler reads: the surge planned on the cached
// object is the one planned on the full object.
func TestSlimKServeKeepsWhatSurgesRead(t *testing.T) {
	full := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": workload.KServeGroup + "/v1beta1", "kind": "InferenceService",
		"metadata": map[string]any{"name": "granite", "namespace": ns, "uid": "isvc-uid", "resourceVersion": "4",
			"labels":      map[string]any{"team": "nlp"},
			"annotations": map[string]any{workload.AutoscalerClassAnnotation: "hpa", lastAppliedAnnotation: strings.Repeat("x", 4096)}},
		"spec": map[string]any{"predictor": map[string]any{"minReplicas": int64(1), "maxReplicas": int64(1),
			"model": map[string]any{"storageUri": "s3://models/granite", "args": []any{"--big"}}}},
		"status": map[string]any{"url": "http://granite"},
	}}
	got, _ := slimKServe(full.DeepCopy())
	u := got.(*unstructured.Unstructured)
	want := map[string]any{"predictor": map[string]any{"minReplicas": int64(1), "maxReplicas": int64(1)}}
	if !reflect.DeepEqual(u.Object["spec"], want) || u.Object["status"] != nil || u.GetLabels() != nil {
		t.Errorf("InferenceService slimmed to %v", u.Object)
	}
	if !reflect.DeepEqual(u.GetAnnotations(), map[string]string{workload.AutoscalerClassAnnotation: "hpa"}) || u.GetUID() != "isvc-uid" || u.GetResourceVersion() != "4" {
		t.Errorf("InferenceService metadata slimmed to %v", u.Object["metadata"])
	}
	// A multi-node predictor is kept as such (its presence is all that is read).
	_ = unstructured.SetNestedField(full.Object, map[string]any{"tensorParallelSize": int64(8)}, "spec", "predictor", "workerSpec")
	got, _ = slimKServe(full.DeepCopy())
	if _, found, _ := unstructured.NestedMap(got.(*unstructured.Unstructured).Object, "spec", "predictor", "workerSpec"); !found {
		t.Error("the workerSpec marker was dropped: a multi-node predictor would be surged")
	}
}

// typicalPDB is a PDB as a Helm chart writes it: a few labels, kubectl's last-applied copy.
func typicalPDB(i int) *policyv1.PodDisruptionBudget {
	p := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("llm-%d", i), Namespace: "models", UID: types.UID(fmt.Sprintf("llm-%d", i)),
			ResourceVersion: "1", Generation: 1, Labels: map[string]string{"app.kubernetes.io/name": "llm", "app.kubernetes.io/managed-by": "Helm"}},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"app.kubernetes.io/name": fmt.Sprintf("llm-%d", i)}}},
		Status: policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1,
			Conditions: []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse, Reason: "InsufficientPods",
				LastTransitionTime: metav1.NewTime(t0)}}},
	}
	applied, _ := json.Marshal(p.Spec)
	p.Annotations = map[string]string{lastAppliedAnnotation: string(applied)}
	return p
}

// BenchmarkPDBCacheOversized reports the bytes the PDB cache keeps per PDB, as decoded by the
// informer (raw) and after the transform with its parsed selector (slim), for a tenant's oversized
// PDB (see oversizedPDB) and a typical one: the rows of docs/benchmarks.md.
func BenchmarkPDBCacheOversized(b *testing.B) {
	b.Run("oversized", func(b *testing.B) { benchPDBCache(b, 20, oversizedPDB) })
	b.Run("typical", func(b *testing.B) { benchPDBCache(b, 3000, typicalPDB) })
}

func benchPDBCache(b *testing.B, n int, build func(int) *policyv1.PodDisruptionBudget) {
	encoded := make([][]byte, n)
	for i := range encoded {
		var err error
		if encoded[i], err = json.Marshal(build(i)); err != nil {
			b.Fatal(err)
		}
	}
	decode := func(i int) *policyv1.PodDisruptionBudget {
		var p policyv1.PodDisruptionBudget
		if err := json.Unmarshal(encoded[i], &p); err != nil {
			b.Fatal(err)
		}
		return &p
	}
	for _, mode := range []string{"raw", "slim"} {
		b.Run(mode, func(b *testing.B) {
			var kept float64
			for b.Loop() {
				before := heapInUse()
				cache := make([]any, n)
				selectors := blocking.NewSelectorCache()
				for i := range n {
					p := decode(i)
					p.ManagedFields = nil
					cache[i] = p
					if mode == "slim" {
						o, _ := slim(p)
						cache[i] = o
						selectors.Matcher(o.(*policyv1.PodDisruptionBudget))
					}
				}
				kept = float64(heapInUse()-before) / float64(n)
				runtime.KeepAlive(cache)
				runtime.KeepAlive(selectors)
			}
			b.ReportMetric(kept, "bytes/PDB")
		})
	}
}

// heapInUse is the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
