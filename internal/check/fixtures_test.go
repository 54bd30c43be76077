package check

import (
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	appslisters "k8s.io/client-go/listers/apps/v1"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

const (
	gpu     = corev1.ResourceName("nvidia.com/gpu")
	models  = "models"
	rollout = "Rollout"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// cluster builds a snapshot: nodes, pods, PDBs and namespaces, plus the workload objects the pods
// belong to (Deployments, ReplicaSets, StatefulSets, HPAs, unstructured KServe objects).
type cluster struct {
	t     *testing.T
	snap  Cluster
	ws    []any
	order int
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t}
	c.snap.Namespaces = []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: models, Labels: map[string]string{"team": "ai"}}}}
	return c
}

// node adds a Ready worker, running rendered-1, with gpus GPUs; nodes are created one minute apart
// in call order, which is the MCO's update order.
func (c *cluster) node(name string, gpus int64) *corev1.Node {
	c.order++
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(c.order) * time.Minute)),
			Labels: map[string]string{"node-role.kubernetes.io/worker": "", corev1.LabelHostname: name},
			Annotations: map[string]string{
				mco.CurrentConfigAnnotation: "rendered-1", mco.DesiredConfigAnnotation: "rendered-1", mco.StateAnnotation: mco.StateDone,
			}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"),
				gpu: *resource.NewQuantity(gpus, resource.DecimalSI),
			},
		},
	}
	c.snap.Nodes = append(c.snap.Nodes, n)
	return n
}

// pool adds the worker pool, Updated at rendered-1.
func (c *cluster) pool() *mcfgv1.MachineConfigPool {
	p := &mcfgv1.MachineConfigPool{
		ObjectMeta: metav1.ObjectMeta{Name: "worker", Labels: map[string]string{"pools.operator.machineconfiguration.openshift.io/worker": ""}},
		Spec: mcfgv1.MachineConfigPoolSpec{
			NodeSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"node-role.kubernetes.io/worker": ""}},
			Configuration: mcfgv1.MachineConfigPoolStatusConfiguration{ObjectReference: corev1.ObjectReference{Name: "rendered-1"}},
		},
	}
	c.snap.Pools = append(c.snap.Pools, p)
	return p
}

// pod adds a Ready, running pod labelled app=name on node, requesting gpus GPUs.
func (c *cluster) pod(name, node string, gpus int64, owner *metav1.OwnerReference) *podinfo.Pod {
	return c.labelledPod(name, node, gpus, owner, map[string]string{"app": name})
}

// labelledPod adds a Ready, running pod with labels on node, requesting gpus GPUs, as the informers
// cache it.
func (c *cluster) labelledPod(name, node string, gpus int64, owner *metav1.OwnerReference, labels map[string]string) *podinfo.Pod {
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	if gpus > 0 {
		requests[gpu] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: models, UID: types.UID(name + "-uid"), Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "server", Resources: corev1.ResourceRequirements{Requests: requests}}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	info := podinfo.From(p)
	c.snap.Pods = append(c.snap.Pods, info)
	return info
}

// pdb adds a PDB over app=app with minAvailable 1 (or the given spec) that allows no disruption: one
// healthy pod of one expected.
func (c *cluster) pdb(name, app string, minAvailable, maxUnavailable *intstr.IntOrString) *policyv1.PodDisruptionBudget {
	p := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: models},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: minAvailable, MaxUnavailable: maxUnavailable,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1},
	}
	if minAvailable == nil && maxUnavailable == nil {
		p.Spec.MinAvailable = ptr.To(intstr.FromInt32(1))
	}
	c.snap.PDBs = append(c.snap.PDBs, p)
	return p
}

func ctrl(apiVersion, kind, name string) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(name + "-uid"), Controller: ptr.To(true)}
}

// deployment adds a one-replica Deployment with its ReplicaSet and one pod on node, guarded by a
// minAvailable 1 PDB; owner, when set, controls the Deployment.
func (c *cluster) deployment(name, node string, gpus int64, owner *metav1.OwnerReference) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: models, UID: types.UID(name + "-uid")},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
		Status:     appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1},
	}
	if owner != nil {
		d.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name + "-5d9", Namespace: models, UID: types.UID(name + "-5d9-uid"),
		OwnerReferences: []metav1.OwnerReference{*ctrl("apps/v1", "Deployment", name)}}}
	c.ws = append(c.ws, d, rs)
	c.pod(name, node, gpus, ctrl("apps/v1", "ReplicaSet", name+"-5d9"))
	c.pdb(name, name, nil, nil)
	return d
}

// inferenceService adds an InferenceService whose predictor Deployment runs one pod on node.
func (c *cluster) inferenceService(name, node string, gpus int64) {
	c.ws = append(c.ws, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": workload.KServeGroup + "/v1beta1", "kind": "InferenceService",
		"metadata": map[string]any{"name": name, "namespace": models, "uid": name + "-uid"},
		"spec":     map[string]any{"predictor": map[string]any{"minReplicas": int64(1)}},
	}})
	c.deployment(name, node, gpus, ctrl(workload.KServeGroup+"/v1beta1", "InferenceService", name))
}

// statefulSet adds a one-replica StatefulSet with one pod on node.
func (c *cluster) statefulSet(name, node string) {
	c.ws = append(c.ws, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: models, UID: types.UID(name + "-uid")},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
		Status:     appsv1.StatefulSetStatus{Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1},
	})
	c.pod(name, node, 0, ctrl("apps/v1", "StatefulSet", name))
}

// build returns the snapshot with a workload store over the added objects. Owners of kind Rollout
// have a /scale subresource the guardian may not read.
func (c *cluster) build() Cluster {
	newIndexer := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	rs, deps, sss, hpas, isvcs := newIndexer(), newIndexer(), newIndexer(), newIndexer(), newIndexer()
	for _, o := range c.ws {
		var idx cache.Indexer
		switch o.(type) {
		case *appsv1.ReplicaSet:
			idx = rs
		case *appsv1.Deployment:
			idx = deps
		case *appsv1.StatefulSet:
			idx = sss
		case *autoscalingv2.HorizontalPodAutoscaler:
			idx = hpas
		case *unstructured.Unstructured:
			idx = isvcs
		}
		if err := idx.Add(o); err != nil {
			c.t.Fatal(err)
		}
	}
	store := &workload.Store{
		ReplicaSets:  workload.MetadataIndex{Indexer: rs, Resource: appsv1.Resource("replicasets")},
		Deployments:  appslisters.NewDeploymentLister(deps),
		StatefulSets: appslisters.NewStatefulSetLister(sss),
		HPAs:         autoscalinglisters.NewHorizontalPodAutoscalerLister(hpas),
		KServe: func(kind workload.Kind) (cache.GenericLister, schema.GroupVersionResource, bool) {
			gvr := schema.GroupVersionResource{Group: workload.KServeGroup, Version: "v1beta1", Resource: "inferenceservices"}
			return cache.NewGenericLister(isvcs, gvr.GroupResource()), gvr, kind == workload.KindInferenceService
		},
		Scalable: func(_, kind string) (string, bool, error) { return "rollouts", kind == rollout, nil },
	}
	snap := c.snap
	snap.Workloads = forbidScale{store}
	return snap
}

// forbidScale answers every /scale read with Forbidden, as the API server does without RBAC for it.
type forbidScale struct{ *workload.Store }

func (f forbidScale) Get(ref workload.Ref) (*workload.Object, error) {
	if ref.ViaScale() {
		return nil, apierrors.NewForbidden(schema.GroupResource{Group: "argoproj.io", Resource: ref.Resource + "/scale"}, ref.Name, nil)
	}
	return f.Store.Get(ref)
}

// mixed is a pool of three nodes with one pod of every verdict:
//
//   - gpu-a (2 GPUs, full): granite (InferenceService, 1 GPU) takes the one free GPU of gpu-b;
//     llama (Deployment, 1 GPU) finds none left in the same wave.
//   - gpu-b (2 GPUs, 1 free): mistral, opted out.
//   - cpu-c (no GPU): web (Deployment, cpu only), db (StatefulSet, PDB maxUnavailable 0), batch (bare
//     pod), shared (Deployment, two PDBs), canary (owned by a Rollout whose /scale the guardian may not use) and
//     web's second pod on the same node, served by web's surge.
func mixed(t *testing.T) *cluster {
	c := newCluster(t)
	c.pool()
	c.node("gpu-a", 2)
	c.node("gpu-b", 2)
	c.node("cpu-c", 0)
	c.inferenceService("granite", "gpu-a", 1)
	c.deployment("llama", "gpu-a", 1, nil)
	d := c.deployment("mistral", "gpu-b", 1, nil)
	d.Annotations = map[string]string{workload.IgnoreAnnotation: "true"}
	c.deployment("web", "cpu-c", 0, nil)
	c.labelledPod("web-2", "cpu-c", 0, ctrl("apps/v1", "ReplicaSet", "web-5d9"), map[string]string{"app": "web"})
	c.statefulSet("db", "cpu-c")
	c.pdb("db", "db", nil, ptr.To(intstr.FromInt32(0)))
	c.pod("batch", "cpu-c", 0, nil)
	c.pdb("batch", "batch", nil, nil)
	c.deployment("shared", "cpu-c", 0, nil)
	c.pdb("shared-extra", "shared", nil, nil)
	c.deployment("canary", "cpu-c", 0, ctrl("argoproj.io/v1alpha1", rollout, "canary"))
	return c
}
