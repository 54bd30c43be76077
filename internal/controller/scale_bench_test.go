package controller

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	runtimepkg "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/internal/options"
)

// The size of a large OpenShift GPU fleet: 1,000 nodes, 30,000 pods, 3,000 PDBs.
const (
	scaleNodes      = 1000
	scaleNamespaces = 50
	// scaleModels single-replica GPU models (PDB minAvailable 1: blocking), one on each of the
	// first nodes; scaleApps services of scaleAppReplicas replicas (PDB allowing one disruption).
	scaleModels      = 300
	scaleApps        = 2700
	scaleAppReplicas = 11
)

// scaleCluster builds the large cluster: nodes with GPUs and an image list as kubelets report it;
// pods with realistic specs (image, env, volumes, probes, statuses); Deployments, ReplicaSets and
// PDBs; w0, w1 and w2 are being drained. Pod and PDB names are unique across namespaces.
func scaleCluster() []runtimepkg.Object {
	objs := []runtimepkg.Object{workerPool(true)}
	for i := range scaleNamespaces {
		objs = append(objs, namespace(fmt.Sprintf("ns-%d", i)))
	}
	images := make([]corev1.ContainerImage, 40)
	for i := range images {
		images[i] = corev1.ContainerImage{Names: []string{fmt.Sprintf("quay.io/example/image-%d@sha256:%064d", i, i)}, SizeBytes: 1 << 30}
	}
	for n := range scaleNodes {
		node := gpuNode(fmt.Sprintf("w%d", n))
		node.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("250")
		node.Status.Images = images
		if n < 3 {
			node = draining(node)
		}
		objs = append(objs, node)
	}
	pod := 0
	addApp := func(name string, replicas int, gpu, blocking bool) {
		nsName := fmt.Sprintf("ns-%d", pod%scaleNamespaces)
		labels := map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "fleet", "pod-template-hash": "5d8f7"}
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": name}}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsName, UID: types.UID(name + "-d"), ResourceVersion: "1"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(replicas)), Selector: sel, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: richPod().Spec}},
			Status: appsv1.DeploymentStatus{Replicas: int32(replicas), UpdatedReplicas: int32(replicas), ReadyReplicas: int32(replicas)}}
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name + "-5d8f7", Namespace: nsName, UID: types.UID(name + "-rs"), ResourceVersion: "1",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: d.UID, Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(replicas)), Selector: sel, Template: d.Spec.Template}}
		allowed := int32(1)
		if blocking {
			allowed = 0
		}
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsName, ResourceVersion: "1"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(int32(replicas) - allowed)), Selector: sel},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, CurrentHealthy: int32(replicas),
				DesiredHealthy: int32(replicas) - allowed, ExpectedPods: int32(replicas)}}
		objs = append(objs, d, rs, pdb)
		for r := range replicas {
			p := richPod()
			p.Name, p.Namespace, p.UID = fmt.Sprintf("%s-5d8f7-%d", name, r), nsName, types.UID(fmt.Sprintf("%s-%d", name, r))
			p.Labels = labels
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}
			p.Spec.NodeName = fmt.Sprintf("w%d", pod%scaleNodes)
			p.Spec.NodeSelector, p.Spec.Tolerations, p.Spec.InitContainers = nil, nil, nil
			p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector = sel
			if !gpu {
				p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}
			}
			objs = append(objs, p)
			pod++
		}
	}
	for m := range scaleModels {
		addApp(fmt.Sprintf("model-%d", m), 1, true, true)
	}
	for a := range scaleApps {
		addApp(fmt.Sprintf("svc-%d", a), scaleAppReplicas, false, false)
	}
	return objs
}

// scaleHarness is the large cluster in a dry-run guardian's caches.
func scaleHarness(b *testing.B) *harness {
	b.Helper()
	h := newHarness(&testing.T{}, func(o *options.Options) { o.DryRun = true }, scaleCluster()...)
	for _, n := range []string{"w0", "w1", "w2"} {
		if _, err := h.c.reconcile.node.sync(b.Context(), n); err != nil {
			b.Fatal(err)
		}
	}
	return h
}

// BenchmarkScaleSyncDrainingNode: one reconcile of a draining node (30 pods, one of them a blocked
// single-replica GPU model) at 1,000 nodes and 30,000 pods: PDB matching, owner chain, and the
// capacity check over every node, in dry-run. This runs on every pod event on the node.
func BenchmarkScaleSyncDrainingNode(b *testing.B) {
	h := scaleHarness(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := h.c.reconcile.node.sync(b.Context(), "w0"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScaleCapacitySnapshot: building the capacity ledger's view of 1,000 nodes and 30,000 pods,
// once per node sync that has a stall to check.
func BenchmarkScaleCapacitySnapshot(b *testing.B) {
	h := scaleHarness(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if len(h.c.candidates()) != scaleNodes {
			b.Fatal("wrong node count")
		}
	}
}

// BenchmarkScalePDBEvent: the fan-out of one PDB status change (the most frequent event of a large
// cluster) with three nodes under drain.
func BenchmarkScalePDBEvent(b *testing.B) {
	h := scaleHarness(b)
	// svc-7's namespace follows from the order scaleCluster creates pods in: look it up.
	all, err := h.c.pdbs.List(labels.Everything())
	if err != nil {
		b.Fatal(err)
	}
	var budget *policyv1.PodDisruptionBudget
	for _, p := range all {
		if p.Name == "svc-7" {
			budget = p
		}
	}
	if budget == nil {
		b.Fatal("no PDB svc-7 in the scale cluster")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		h.c.onPDB(budget)
	}
	b.StopTimer()
	for h.c.queue.Len() > 0 {
		k, _ := h.c.queue.Get()
		h.c.queue.Done(k)
	}
}

// BenchmarkCacheBytes reports the heap one cached object takes, as the API returns it (managedFields
// stripped, as before) and slimmed by the informers' transform: pods are the largest share of the
// guardian's memory on a large cluster, then ReplicaSets (every revision is kept). Objects are
// decoded from JSON, as an informer decodes them, so that every string is the object's own. It
// measures memory, not time.
func BenchmarkCacheBytes(b *testing.B) {
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "llm-5d8f7", Namespace: ns, Labels: map[string]string{"app": "llm", "pod-template-hash": "5d8f7"},
		Annotations:     map[string]string{"deployment.kubernetes.io/desired-replicas": "1", "deployment.kubernetes.io/max-replicas": "2", "deployment.kubernetes.io/revision": "3"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "llm", UID: "d", Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(1)), Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "llm"}}, Spec: servingPod().Spec}}}
	node := gpuNode("w1")
	for i := range 40 {
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{Names: []string{
			fmt.Sprintf("quay.io/example/image-%d@sha256:%064d", i, i), fmt.Sprintf("quay.io/example/image-%d:v1.%d", i, i)}, SizeBytes: 1 << 30})
	}
	node.Status.NodeInfo = corev1.NodeSystemInfo{KernelVersion: "5.14.0-427.el9.x86_64", OSImage: "Red Hat Enterprise Linux CoreOS", ContainerRuntimeVersion: "cri-o://1.31.0"}
	for _, tc := range []struct {
		kind   string
		obj    runtimepkg.Object
		decode func([]byte) (runtimepkg.Object, error)
	}{
		{"pod", servingPod(), func(raw []byte) (runtimepkg.Object, error) { var o corev1.Pod; return &o, json.Unmarshal(raw, &o) }},
		{"node", node, func(raw []byte) (runtimepkg.Object, error) { var o corev1.Node; return &o, json.Unmarshal(raw, &o) }},
		{"replicaset", rs, func(raw []byte) (runtimepkg.Object, error) {
			var o appsv1.ReplicaSet
			return &o, json.Unmarshal(raw, &o)
		}},
	} {
		raw, err := json.Marshal(tc.obj)
		if err != nil {
			b.Fatal(err)
		}
		for _, variant := range []string{"full", "slim"} {
			b.Run(tc.kind+"/"+variant, func(b *testing.B) {
				const n = 3000
				for range b.N {
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
					for i := range n {
						o, err := tc.decode(raw)
						if err != nil {
							b.Fatal(err)
						}
						m, _ := meta.Accessor(o)
						m.SetName(fmt.Sprintf("o-%d", i))
						var stored any
						if variant == "slim" {
							stored, _ = slim(o)
						} else {
							stored, _ = stripManagedFields(o)
						}
						if err := idx.Add(stored); err != nil {
							b.Fatal(err)
						}
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/object")
					runtime.KeepAlive(idx)
				}
			})
		}
	}
}

// servingPod is a model server pod as a real cluster stores it: OpenShift's service-account token
// volume, env, probes, security context, managed fields, kubectl's last-applied copy and a full
// status.
func servingPod() *corev1.Pod {
	p := richPod()
	c := &p.Spec.Containers[0]
	for i := range 20 {
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("VLLM_SETTING_%d", i), Value: fmt.Sprintf("value-%d-for-the-model-server", i)})
	}
	c.Args = []string{"--model", "/mnt/models", "--port", "8080", "--served-model-name", "granite-3.3-8b-instruct", "--max-model-len", "8192"}
	c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 10}
	c.ReadinessProbe, c.LivenessProbe, c.StartupProbe = probe, probe, probe
	c.VolumeMounts = []corev1.VolumeMount{{Name: "models", MountPath: "/mnt/models"}, {Name: "shm", MountPath: "/dev/shm"},
		{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}
	c.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	p.Spec.Volumes = []corev1.Volume{
		{Name: "models", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "granite-models"}}},
		{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3607))}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "openshift-service-ca.crt"}, Items: []corev1.KeyToPath{{Key: "service-ca.crt", Path: "service-ca.crt"}}}},
		}}}},
	}
	p.Spec.ServiceAccountName, p.Spec.SchedulerName, p.Spec.DNSPolicy = "default", "default-scheduler", corev1.DNSClusterFirst
	p.Annotations[lastAppliedAnnotation] = `{"apiVersion":"v1","kind":"Pod","metadata":{"labels":{"app":"llm"},"name":"llm-0"},"spec":{"containers":[{"image":"vllm:latest","name":"server"}]}}`
	p.Annotations["k8s.ovn.org/pod-networks"] = `{"default":{"ip_addresses":["10.128.2.17/23"],"mac_address":"0a:58:0a:80:02:11","gateway_ips":["10.128.2.1"],"role":"primary"}}`
	p.Annotations["openshift.io/scc"] = "restricted-v2"
	for i, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodScheduled} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(time.Duration(i) * time.Second))})
	}
	p.Status.ContainerStatuses[0].ImageID = "quay.io/vllm/vllm-openai@sha256:4f4d0ab9c2dbd7b1a2c1f9c9e9e4b7a5d3c2b1a0f9e8d7c6b5a4938271605f4e"
	p.Status.ContainerStatuses[0].ContainerID = "cri-o://9b1c6a7e4f2d3b5a6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b"
	p.Status.HostIP, p.Status.PodIPs = "10.0.0.12", []corev1.PodIP{{IP: "10.128.2.17"}}
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}},"f:ownerReferences":{}},"f:spec":{"f:containers":{"k:{\"name\":\"server\"}":{".":{},"f:env":{},"f:image":{},"f:resources":{}}}}}`)}}}
	return p
}

// BenchmarkScalePredict: one prediction of the next update of every pool (the analysis behind
// drain_guardian_predicted_blocks), at 1,000 nodes, 30,000 pods and 3,000 PDBs: the daemon renews it
// on a timer and after changes.
func BenchmarkScalePredict(b *testing.B) {
	h := scaleHarness(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := h.c.reconcile.pool.predict(PredictOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScaleNodeChange: what one node change costs the next sync during a pool update, at 1,000
// nodes: the change clears the pools' predicted update order and the collected machine-config daemon
// answers (onNode), and the next node sync that reads a node's drain rebuilds both, reading every
// node (mco.PredictTargets, mco.CollectAnswers). The node read is not targeted yet, so its answer is
// another node's on the same update.
func BenchmarkScaleNodeChange(b *testing.B) {
	h := scaleHarness(b)
	node, err := h.c.nodes.Get("w500")
	if err != nil {
		b.Fatal(err)
	}
	pool := h.c.poolFor(node)
	if pool == nil {
		b.Fatal("w500 is in no pool")
	}
	r := h.c.reconcile.node
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		h.c.plans.invalidate()
		h.c.answers.invalidate()
		r.nodeDrain(node, pool, r.predicted(node, pool), t0)
	}
}
