package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgfake "github.com/openshift/client-go/machineconfiguration/clientset/versioned/fake"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/dra"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/trigger"
)

// harness runs the controller's sync functions against fake clientsets. The informer caches are filled
// by hand from the fake clientsets (refresh), so each step sees exactly the objects the test expects,
// as an informer would after delivering the writes.
type harness struct {
	t    *testing.T
	c    *Controller
	kube *fake.Clientset
	mco  *mcfgfake.Clientset
	// dyn serves the Surges (the guardian's own state).
	dyn *dynamicfake.FakeDynamicClient
	// kserveServed turns the fake KServe API on and off (see withInferenceService).
	kserveServed func(bool)
	recorder     *events.FakeRecorder
	metrics      *metrics.Metrics
	clock        *clocktesting.FakeClock
}

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func newHarness(t *testing.T, mutate func(*options.Options), objs ...runtime.Object) *harness {
	t.Helper()
	return newHarnessServing(t, mutate, nil, objs...)
}

// newHarnessServing is newHarness on a cluster that also serves the APIs listed.
func newHarnessServing(t *testing.T, mutate func(*options.Options), apis []*metav1.APIResourceList, objs ...runtime.Object) *harness {
	t.Helper()
	var kubeObjs, mcoObjs []runtime.Object
	for _, o := range objs {
		switch o.(type) {
		case *mcfgv1.MachineConfigPool, *mcfgv1.MachineConfigNode, *mcfgv1.MachineConfig:
			mcoObjs = append(mcoObjs, o)
		default:
			kubeObjs = append(kubeObjs, o)
		}
	}
	kube := fake.NewClientset(kubeObjs...)
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: "machineconfiguration.openshift.io/v1",
		APIResources: []metav1.APIResource{{Name: "machineconfigpools", Kind: "MachineConfigPool"}, {Name: "machineconfignodes", Kind: "MachineConfigNode"}},
	}, surgeAPI, medik8sAPI}
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = append(kube.Discovery().(*fakediscovery.FakeDiscovery).Resources, apis...)
	return restart(t, mutate, kube, mcfgfake.NewClientset(mcoObjs...), newSurgeClient())
}

// surgeAPI is the discovery entry of the Surge CRD.
var surgeAPI = &metav1.APIResourceList{
	GroupVersion: v1alpha1.SchemeGroupVersion.String(),
	APIResources: []metav1.APIResource{{Name: "surges", Kind: "Surge", Namespaced: true}, {Name: "surges/status", Kind: "Surge", Namespaced: true}},
}

// medik8sAPI is the discovery entry of the medik8s NodeMaintenance CRD.
var medik8sAPI = &metav1.APIResourceList{
	GroupVersion: trigger.Medik8sNodeMaintenanceGVR.GroupVersion().String(),
	APIResources: []metav1.APIResource{{Name: "nodemaintenances", Kind: "NodeMaintenance"}},
}

func newSurgeClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{
			v1alpha1.SurgesResource: "SurgeList", trigger.Medik8sNodeMaintenanceGVR: "NodeMaintenanceList", machineConfigurationGVR: "MachineConfigurationList",
		}, objs...)
}

// restart builds a guardian with empty memory over existing clientsets: a crash and restart.
func restart(t *testing.T, mutate func(*options.Options), kube *fake.Clientset, mcoClient *mcfgfake.Clientset, dyn *dynamicfake.FakeDynamicClient) *harness {
	t.Helper()
	opts := options.NewOptions()
	opts.LeaderElect = false
	if mutate != nil {
		mutate(opts)
	}
	m := metrics.New()
	rec := events.NewFakeRecorder(100)
	clk := clocktesting.NewFakeClock(t0)
	clients := Clients{Kube: kube, MCO: mcoClient, Dynamic: dyn, Discovery: kube.Discovery()}
	inf, err := newInformers(opts, clients, zap.NewNop(), clk)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newController(inf, clients, rec, m, zap.NewNop(), clk)
	if err != nil {
		t.Fatal(err)
	}
	// The tests play the leader: Run would set this.
	c.gauges.setLeading(true)
	h := &harness{t: t, c: c, kube: kube, mco: mcoClient, dyn: dyn, recorder: rec, metrics: m, clock: clk}
	h.refresh()
	return h
}

// refresh copies every object from the fake clientsets into the informer caches.
func (h *harness) refresh() {
	h.t.Helper()
	ctx := context.Background()
	f := h.c.informers.kubeFactory
	transform := slim
	fill := func(idx cache.Indexer, items []runtime.Object) {
		if err := idx.Replace(nil, ""); err != nil {
			h.t.Fatal(err)
		}
		for _, o := range items {
			// The caches hold what the informers' transform keeps: a decision that reads a
			// dropped field fails these tests.
			slimmed, err := transform(o.DeepCopyObject())
			if err != nil {
				h.t.Fatal(err)
			}
			if err := idx.Add(slimmed); err != nil {
				h.t.Fatal(err)
			}
		}
	}
	// The informers' node and pool events clear the predicted plans.
	h.c.plans.invalidate()
	h.c.answers.invalidate()
	nodes, _ := h.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	fill(f.Core().V1().Nodes().Informer().GetIndexer(), toObjs(nodes.Items))
	pods, _ := h.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	fill(f.Core().V1().Pods().Informer().GetIndexer(), toObjs(pods.Items))
	pdbs, _ := h.kube.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	fill(f.Policy().V1().PodDisruptionBudgets().Informer().GetIndexer(), toObjs(pdbs.Items))
	nss, _ := h.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	fill(f.Core().V1().Namespaces().Informer().GetIndexer(), toObjs(nss.Items))
	rss, _ := h.kube.AppsV1().ReplicaSets("").List(ctx, metav1.ListOptions{})
	fill(f.Apps().V1().ReplicaSets().Informer().GetIndexer(), toObjs(rss.Items))
	deps, _ := h.kube.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	fill(f.Apps().V1().Deployments().Informer().GetIndexer(), toObjs(deps.Items))
	sss, _ := h.kube.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{})
	fill(f.Apps().V1().StatefulSets().Informer().GetIndexer(), toObjs(sss.Items))
	hpas, _ := h.kube.AutoscalingV2().HorizontalPodAutoscalers("").List(ctx, metav1.ListOptions{})
	fill(f.Autoscaling().V2().HorizontalPodAutoscalers().Informer().GetIndexer(), toObjs(hpas.Items))
	if h.c.informers.mcoFactory != nil {
		pools, _ := h.mco.MachineconfigurationV1().MachineConfigPools().List(ctx, metav1.ListOptions{})
		fill(h.c.informers.mcoFactory.Machineconfiguration().V1().MachineConfigPools().Informer().GetIndexer(), toObjs(pools.Items))
		mcns, _ := h.mco.MachineconfigurationV1().MachineConfigNodes().List(ctx, metav1.ListOptions{})
		fill(h.c.informers.mcoFactory.Machineconfiguration().V1().MachineConfigNodes().Informer().GetIndexer(), toObjs(mcns.Items))
		if rc := h.c.answers.rendered; rc != nil {
			h.fillRendered(rc)
		}
	}
	if r := h.c.informers.draFactory; r != nil {
		transform = dra.Slim
		slices, _ := h.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		fill(r.Resource().V1().ResourceSlices().Informer().GetIndexer(), toObjs(slices.Items))
		claims, _ := h.kube.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
		fill(r.Resource().V1().ResourceClaims().Informer().GetIndexer(), toObjs(claims.Items))
		templates, _ := h.kube.ResourceV1().ResourceClaimTemplates("").List(ctx, metav1.ListOptions{})
		fill(r.Resource().V1().ResourceClaimTemplates().Informer().GetIndexer(), toObjs(templates.Items))
		classes, _ := h.kube.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
		fill(r.Resource().V1().DeviceClasses().Informer().GetIndexer(), toObjs(classes.Items))
		transform = slim
	}
	surges, err := h.dyn.Resource(v1alpha1.SurgesResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var items []runtime.Object
	for i := range surges.Items {
		items = append(items, &surges.Items[i])
	}
	fill(h.c.surges.indexer, items)
	for gvr, idx := range h.c.sources.view.indexers {
		list, err := h.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			h.t.Fatal(err)
		}
		var objs []any
		for i := range list.Items {
			slimmed, _ := slimSource(sourceResource(gvr))(&list.Items[i])
			objs = append(objs, slimmed)
		}
		if err := idx.Replace(objs, ""); err != nil {
			h.t.Fatal(err)
		}
	}
}

// sourceResource is the table's entry of a source's resource.
func sourceResource(gvr schema.GroupVersionResource) trigger.Resource {
	for _, k := range trigger.Kinds {
		for _, r := range k.Resources {
			if r.GVR == gvr {
				return r
			}
		}
	}
	return trigger.Resource{GVR: gvr}
}

func toObjs[T any, PT interface {
	*T
	runtime.Object
}](items []T) []runtime.Object {
	out := make([]runtime.Object, 0, len(items))
	for i := range items {
		out = append(out, PT(&items[i]))
	}
	return out
}

func (h *harness) syncNode(name string) time.Duration {
	h.t.Helper()
	after, err := h.c.reconcile.node.sync(context.Background(), name)
	if err != nil && !errors.Is(err, errDryRun) && !errors.Is(err, errSurgeGone) {
		h.t.Fatalf("syncNode(%s): %v", name, err)
	}
	return after
}

// syncSurge runs one sync of the Surge (one decision, at most one write).
func (h *harness) syncSurge(name string) time.Duration {
	h.t.Helper()
	after, err := h.c.reconcile.surge.sync(context.Background(), types.NamespacedName{Namespace: ns, Name: name})
	if err != nil && !errors.Is(err, errDryRun) && !errors.Is(err, errSurgeGone) {
		h.t.Fatalf("syncSurge(%s): %v", name, err)
	}
	return after
}

// settle syncs the Surge, refreshing the caches after each write as the informers would, until a
// sync writes nothing; it returns the last requeue delay.
func (h *harness) settle(name string) time.Duration {
	h.t.Helper()
	// An eviction the fake API accepts leaves the pod in place (there is no kubelet): it is no step.
	steps := func() int {
		n := 0
		for _, w := range h.writes() {
			if w != "create pods/eviction" {
				n++
			}
		}
		return n
	}
	for range 12 {
		before := steps()
		after := h.syncSurge(name)
		h.refresh()
		if steps() == before {
			return after
		}
	}
	h.t.Fatalf("Surge %s keeps writing: %v", name, h.writes())
	return 0
}

// surge returns the Surge, or nil when there is none.
func (h *harness) surge(name string) *v1alpha1.Surge {
	h.t.Helper()
	u, err := h.dyn.Resource(v1alpha1.SurgesResource).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	s, err := toSurge(u)
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// phase returns the Surge's phase, or "" when there is none.
func (h *harness) phase(name string) v1alpha1.Phase {
	h.t.Helper()
	if s := h.surge(name); s != nil {
		return s.PhaseOf()
	}
	return ""
}

// events drains the recorded Events as "Type Reason Note" strings.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// requireEvent fails unless one of evs has the type and reason and contains every fragment.
func requireEvent(t *testing.T, evs []string, typ, reason string, fragments ...string) {
	t.Helper()
	for _, e := range evs {
		if !strings.HasPrefix(e, typ+" "+reason+" ") {
			continue
		}
		ok := true
		for _, f := range fragments {
			ok = ok && strings.Contains(e, f)
		}
		if ok {
			return
		}
	}
	t.Fatalf("no %s %s event containing %q in %q", typ, reason, fragments, evs)
}

func (h *harness) deployment(ns, name string) *appsv1.Deployment {
	h.t.Helper()
	d, err := h.kube.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return d
}

// writes lists the mutating API calls the controller made (verb resource[/subresource]).
func (h *harness) writes() []string {
	var out []string
	actions := append(h.kube.Actions(), h.dyn.Actions()...)
	for _, a := range actions {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		r := a.GetResource().Resource
		if a.GetSubresource() != "" {
			r += "/" + a.GetSubresource()
		}
		out = append(out, a.GetVerb()+" "+r)
	}
	return out
}

// ---- fixtures ----

const ns = "models"

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}}
}

// gpuNode is a Ready worker with two GPUs, its MCO annotations at config "rendered-1".
func gpuNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1",
			Labels: map[string]string{"node-role.kubernetes.io/worker": "", corev1.LabelHostname: name},
			Annotations: map[string]string{
				mco.CurrentConfigAnnotation: "rendered-1", mco.DesiredConfigAnnotation: "rendered-1", mco.StateAnnotation: mco.StateDone,
			}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"),
				"nvidia.com/gpu": resource.MustParse("2"),
			},
		},
	}
}

// draining marks the node as under MCO drain to rendered-2 (and cordoned).
func draining(n *corev1.Node) *corev1.Node {
	n.Annotations[mco.DesiredConfigAnnotation] = "rendered-2"
	n.Annotations[mco.StateAnnotation] = "Working"
	n.Annotations[mco.DesiredDrainAnnotation] = "drain-rendered-2"
	n.Annotations[mco.LastAppliedDrainAnnotation] = "uncordon-rendered-1"
	n.Spec.Unschedulable = true
	return n
}

// mcdAnswer is the node's MachineConfigNode as the machine-config daemon writes it once it has
// decided whether the update to rendered-2 drains.
func mcdAnswer(node string, drain bool) *mcfgv1.MachineConfigNode {
	return &mcfgv1.MachineConfigNode{
		ObjectMeta: metav1.ObjectMeta{Name: node, ResourceVersion: "1"},
		Status: mcfgv1.MachineConfigNodeStatus{
			ConfigVersion: &mcfgv1.MachineConfigNodeStatusMachineConfigVersion{Current: "rendered-1", Desired: "rendered-2"},
			Conditions: []metav1.Condition{{
				Type: string(mcfgv1.MachineConfigNodeUpdatePrepared), Status: metav1.ConditionTrue, Reason: "UpdatePrepared",
				Message: fmt.Sprintf("Update Compatible. Post Cfg Actions: [] Drain Required: %t", drain),
			}},
		},
	}
}

// answer records the daemon's answer for the node's update, as an MCN event would.
func (h *harness) answer(node string, drain bool) {
	h.t.Helper()
	if _, err := h.mco.MachineconfigurationV1().MachineConfigNodes().Create(context.Background(), mcdAnswer(node, drain), metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.refresh()
}

func workerPool(updating bool) *mcfgv1.MachineConfigPool {
	p := &mcfgv1.MachineConfigPool{
		ObjectMeta: metav1.ObjectMeta{Name: "worker", ResourceVersion: "1"},
		Spec: mcfgv1.MachineConfigPoolSpec{
			NodeSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"node-role.kubernetes.io/worker": ""}},
			Configuration: mcfgv1.MachineConfigPoolStatusConfiguration{ObjectReference: corev1.ObjectReference{Name: "rendered-2"}},
		},
	}
	setPoolUpdated(p, !updating)
	return p
}

func setPoolUpdated(p *mcfgv1.MachineConfigPool, updated bool) {
	st := func(b bool) corev1.ConditionStatus {
		if b {
			return corev1.ConditionTrue
		}
		return corev1.ConditionFalse
	}
	p.Status.Conditions = []mcfgv1.MachineConfigPoolCondition{
		{Type: mcfgv1.MachineConfigPoolUpdated, Status: st(updated)},
		{Type: mcfgv1.MachineConfigPoolUpdating, Status: st(!updated)},
	}
	p.Status.Configuration.Name = "rendered-1"
	if updated {
		p.Status.Configuration.Name = p.Spec.Configuration.Name
	}
}

var labelsModel = map[string]string{"app": "model"}

// model is a Deployment → ReplicaSet → pods chain; the pods run on the given nodes, Ready.
func model(replicas int32, nodes ...string) []runtime.Object {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: ns, UID: "dep-uid", ResourceVersion: "1"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labelsModel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labelsModel}},
		},
		Status: appsv1.DeploymentStatus{Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: replicas},
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "model-abc", Namespace: ns, UID: "rs-uid", ResourceVersion: "1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "model", UID: "dep-uid", Controller: ptr.To(true)}}}}
	objs := []runtime.Object{d, rs}
	for i, n := range nodes {
		objs = append(objs, modelPod("model-abc-"+string(rune('a'+i)), n, true))
	}
	return objs
}

func modelPod(name, node string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(name + "-uid"), ResourceVersion: "1", Labels: labelsModel,
			CreationTimestamp: metav1.NewTime(t0),
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "model-abc", UID: "rs-uid", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "server", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// pdb is minAvailable 1 over the model's pods with the given status.
func pdb(allowed, healthy, expected int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: ns, ResourceVersion: "1"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labelsModel},
		},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, CurrentHealthy: healthy, DesiredHealthy: 1, ExpectedPods: expected},
	}
}

func hpaFor(min *int32, max int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: ns, UID: "hpa-uid", ResourceVersion: "1"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "model"},
			MinReplicas:    min, MaxReplicas: max,
		},
	}
}

// depSurge is the name of the Surge of the "model" Deployment.
const depSurge = "deployment-model"

// fillRendered fills the caches of --read-machineconfigs through their transforms.
func (h *harness) fillRendered(rc *renderedConfigs) {
	h.t.Helper()
	ctx := context.Background()
	idx := h.c.informers.mcoFactory.Machineconfiguration().V1().MachineConfigs().Informer().GetIndexer()
	mcs, _ := h.mco.MachineconfigurationV1().MachineConfigs().List(ctx, metav1.ListOptions{})
	var objs []any
	for i := range mcs.Items {
		slimmed, err := slimMachineConfig(&mcs.Items[i])
		if err != nil {
			h.t.Fatal(err)
		}
		objs = append(objs, slimmed)
	}
	if err := idx.Replace(objs, ""); err != nil {
		h.t.Fatal(err)
	}
	if rc.operator == nil {
		return
	}
	list, err := h.dyn.Resource(machineConfigurationGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	objs = nil
	for i := range list.Items {
		slimmed, _ := slimSource(trigger.Resource{Slim: slimMachineConfiguration})(&list.Items[i])
		objs = append(objs, slimmed)
	}
	if err := rc.operator.Replace(objs, ""); err != nil {
		h.t.Fatal(err)
	}
}
