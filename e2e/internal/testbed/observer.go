package testbed

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclientset "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	mcfginformers "github.com/openshift/client-go/machineconfiguration/informers/externalversions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
)

// Timing of the observer.
const (
	// SampleInterval is how often the observer counts the model's Ready pods. Every pod change is
	// also counted when it arrives, so no unavailability between two samples goes unseen.
	SampleInterval = 100 * time.Millisecond
)

// Resources of the KServe kinds and of drain-guardian's Surge.
var (
	Surges               = schema.GroupVersionResource{Group: "drain-guardian.io", Version: "v1alpha1", Resource: "surges"}
	InferenceServices    = schema.GroupVersionResource{Group: "serving.kserve.io", Version: "v1beta1", Resource: "inferenceservices"}
	LLMInferenceServices = schema.GroupVersionResource{Group: "serving.kserve.io", Version: "v1alpha2", Resource: "llminferenceservices"}
)

// Scope says what an Observer watches.
type Scope struct {
	// Namespace of the model: its pods, workloads, KServe objects and Events.
	Namespace string
	// Pool is the MachineConfigPool whose update is watched.
	Pool string
	// NodeSelector selects the pool's nodes (label selector syntax).
	NodeSelector string
	// PodSelector selects the model's pods, whose Ready count is sampled.
	PodSelector string
	// ModelSelectors, when set, select the pods of each of several models (label selector syntax):
	// the sampled count is then the lowest Ready count of any model, so an observation counts as
	// available only when every model has a Ready pod. PodSelector is then ignored.
	ModelSelectors []string
}

// Entry is one line of the timeline.
type Entry struct {
	// At is the time since the observer started.
	At time.Duration
	// Source is what the entry is about: "event", "node", "pool", "pod", "deployment",
	// "statefulset", "InferenceService", "LLMInferenceService", "availability", "sampling" or "note".
	Source string
	// Reason is the Event's reason for Source "event".
	Reason string
	What   string
}

func (e Entry) String() string { return fmt.Sprintf("%+7.1fs  %s", e.At.Seconds(), e.What) }

// Availability summarises the sampled Ready counts of the model.
type Availability struct {
	// Samples is the number of periodic observations; Available those with at least one Ready pod.
	Samples, Available int
	// MinReady is the lowest Ready count seen, periodic observations and pod changes alike.
	MinReady int
	// MaxGap is the longest time between two periodic observations.
	MaxGap time.Duration
}

// Share is the fraction of observations with at least one Ready pod.
func (a Availability) Share() float64 {
	if a.Samples == 0 {
		return 0
	}
	return float64(a.Available) / float64(a.Samples)
}

func (a Availability) String() string {
	return fmt.Sprintf("%d/%d observations with a Ready replica (%.1f%%), minimum Ready %d, longest gap between observations %v",
		a.Available, a.Samples, 100*a.Share(), a.MinReady, a.MaxGap.Round(time.Millisecond))
}

// Observer watches a pool update and a model through informers: it records a timeline of every
// meaningful change (Events, node MCO states, pool status, pods, workload replicas) and samples how
// many of the model's pods are Ready.
type Observer struct {
	scope       Scope
	start       time.Time
	live        func(Entry)
	podSelector labels.Selector
	models      []labels.Selector
	pods        corelisters.PodLister

	mu       sync.Mutex
	timeline []Entry
	last     map[string]string
	nodes    map[string]bool
	sampling bool
	avail    Availability
	lastTick time.Time
}

// Observe starts watching until ctx is done and returns once the informers have synced. live,
// when not nil, is called with every timeline entry as it happens (with the observer's lock held:
// it must not call the observer).
func Observe(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, mcfg mcfgclientset.Interface, scope Scope, live func(Entry)) (*Observer, error) {
	podSel, err := labels.Parse(scope.PodSelector)
	if err != nil {
		return nil, fmt.Errorf("pod selector: %w", err)
	}
	o := &Observer{
		scope: scope, start: time.Now(), live: live, podSelector: podSel,
		last: map[string]string{}, nodes: map[string]bool{},
	}
	for _, m := range scope.ModelSelectors {
		sel, err := labels.Parse(m)
		if err != nil {
			return nil, fmt.Errorf("model selector %q: %w", m, err)
		}
		o.models = append(o.models, sel)
	}

	nsInf := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(scope.Namespace))
	nodeInf := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.LabelSelector = scope.NodeSelector
	}))
	mcoEventInf := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(mcosim.EventNamespace))
	poolInf := mcfginformers.NewSharedInformerFactoryWithOptions(mcfg, 0, mcfginformers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", scope.Pool).String()
	}))
	dynInf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, scope.Namespace, nil)

	var synced []cache.InformerSynced
	add := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) {
		_, _ = inf.AddEventHandler(h)
		synced = append(synced, inf.HasSynced)
	}
	podInf := nsInf.Core().V1().Pods()
	o.pods = podInf.Lister()
	add(podInf.Informer(), o.handler("pod", func(obj any) string { return podSummary(obj.(*corev1.Pod)) }, true))
	add(nsInf.Apps().V1().Deployments().Informer(), o.handler("deployment", func(obj any) string {
		d := obj.(*appsv1.Deployment)
		return replicaSummary(d.Spec.Replicas, d.Status.ReadyReplicas)
	}, false))
	add(nsInf.Apps().V1().StatefulSets().Informer(), o.handler("statefulset", func(obj any) string {
		s := obj.(*appsv1.StatefulSet)
		return replicaSummary(s.Spec.Replicas, s.Status.ReadyReplicas)
	}, false))
	add(nodeInf.Core().V1().Nodes().Informer(), o.handler("node", func(obj any) string {
		n := obj.(*corev1.Node)
		o.nodes[n.Name] = true
		return nodeSummary(n)
	}, false))
	add(poolInf.Machineconfiguration().V1().MachineConfigPools().Informer(), o.handler("pool", func(obj any) string {
		return poolSummary(obj.(*mcfgv1.MachineConfigPool))
	}, false))
	add(dynInf.ForResource(InferenceServices).Informer(), o.handler("InferenceService", func(obj any) string {
		return kserveSummary(obj.(*unstructured.Unstructured), "spec", "predictor")
	}, false))
	add(dynInf.ForResource(LLMInferenceServices).Informer(), o.handler("LLMInferenceService", func(obj any) string {
		return kserveSummary(obj.(*unstructured.Unstructured), "spec")
	}, false))
	add(dynInf.ForResource(Surges).Informer(), o.handler("Surge", func(obj any) string {
		return SurgeSummary(obj.(*unstructured.Unstructured))
	}, false))
	add(nsInf.Core().V1().Events().Informer(), o.eventHandler(func(*corev1.Event) bool { return true }))
	add(mcoEventInf.Core().V1().Events().Informer(), o.eventHandler(func(e *corev1.Event) bool {
		// The MCO namespace has Events of every pool: keep those about this pool and its nodes.
		return (e.InvolvedObject.Kind == "Node" && o.nodes[e.InvolvedObject.Name]) ||
			(e.InvolvedObject.Kind == "MachineConfigPool" && e.InvolvedObject.Name == scope.Pool)
	}))

	for _, f := range []interface{ Start(<-chan struct{}) }{nsInf, nodeInf, mcoEventInf, poolInf, dynInf} {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil, fmt.Errorf("observer: informers did not sync: %w", context.Cause(ctx))
	}
	go o.sample(ctx)
	return o, nil
}

// StartSampling starts counting the model's Ready pods; call it once the model serves.
func (o *Observer) StartSampling() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sampling = true
	o.avail = Availability{MinReady: int(^uint(0) >> 1)}
	o.lastTick = time.Time{}
	o.record("sampling", "availability sampling started")
}

// StopSampling stops counting and returns what was observed.
func (o *Observer) StopSampling() Availability {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sampling {
		o.sampling = false
		o.record("sampling", "availability sampling stopped")
	}
	return o.avail
}

// Availability returns what was observed so far.
func (o *Observer) Availability() Availability {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.avail
}

// Elapsed is the time since the observer started.
func (o *Observer) Elapsed() time.Duration { return time.Since(o.start) }

// Note adds a line of the caller's to the timeline (what the scenario did).
func (o *Observer) Note(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.append(Entry{Source: "note", What: fmt.Sprintf(format, args...)})
}

// Timeline returns the entries so far.
func (o *Observer) Timeline() []Entry {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Entry(nil), o.timeline...)
}

// FormatTimeline renders the timeline one entry a line.
func (o *Observer) FormatTimeline() string {
	var b strings.Builder
	for _, e := range o.Timeline() {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// ReadyPods counts the model's Ready pods in the informer cache; with several models, the lowest
// count of any of them.
func (o *Observer) ReadyPods() int {
	if len(o.models) == 0 {
		return o.readyPods(o.podSelector)
	}
	lowest := -1
	for _, sel := range o.models {
		if n := o.readyPods(sel); lowest < 0 || n < lowest {
			lowest = n
		}
	}
	return lowest
}

func (o *Observer) readyPods(sel labels.Selector) int {
	pods, err := o.pods.List(sel)
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range pods {
		if p.DeletionTimestamp == nil && PodReady(p) {
			n++
		}
	}
	return n
}

func (o *Observer) sample(ctx context.Context) {
	t := time.NewTicker(SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			ready := o.ReadyPods()
			o.mu.Lock()
			if o.sampling {
				if !o.lastTick.IsZero() {
					o.avail.MaxGap = max(o.avail.MaxGap, now.Sub(o.lastTick))
				}
				o.lastTick = now
				o.avail.Samples++
				if ready > 0 {
					o.avail.Available++
				}
				o.observeReady(ready)
			}
			o.mu.Unlock()
		}
	}
}

// observeReady notes a Ready count; o.mu must be held.
func (o *Observer) observeReady(ready int) {
	if ready < o.avail.MinReady {
		o.avail.MinReady = ready
	}
	if ready == 0 {
		o.record("availability", "NO READY REPLICA")
	} else {
		o.record("availability", fmt.Sprintf("%d Ready replica(s)", ready))
	}
}

func (o *Observer) handler(kind string, summary func(any) string, pods bool) cache.ResourceEventHandler {
	key := func(obj any) string {
		m, err := metaOf(obj)
		if err != nil {
			return kind
		}
		return kind + " " + m.GetName()
	}
	onChange := func(obj any) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.record(key(obj), summary(obj))
		if pods && o.sampling {
			o.observeReady(o.ReadyPods())
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    onChange,
		UpdateFunc: func(_, obj any) { onChange(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			o.record(key(obj), "deleted")
			if pods && o.sampling {
				o.observeReady(o.ReadyPods())
			}
		},
	}
}

func (o *Observer) eventHandler(keep func(*corev1.Event) bool) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		e, ok := obj.(*corev1.Event)
		if !ok {
			return
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if !keep(e) {
			return
		}
		typ := ""
		if e.Type == corev1.EventTypeWarning {
			typ = " (Warning)"
		}
		o.append(Entry{Source: "event", Reason: e.Reason,
			What: fmt.Sprintf("Event %s%s on %s %s: %s", e.Reason, typ, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)})
	}}
}

// record appends "key: summary" when the summary of key changed; o.mu must be held.
func (o *Observer) record(key, summary string) {
	if o.last[key] == summary {
		return
	}
	o.last[key] = summary
	source, _, _ := strings.Cut(key, " ")
	o.append(Entry{Source: source, What: key + ": " + summary})
}

// append adds an entry; o.mu must be held.
func (o *Observer) append(e Entry) {
	e.At = time.Since(o.start)
	o.timeline = append(o.timeline, e)
	if o.live != nil {
		o.live(e)
	}
}

func metaOf(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", obj)
	}
	return m, nil
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podSummary(p *corev1.Pod) string {
	where := "unscheduled"
	if p.Spec.NodeName != "" {
		where = "on " + p.Spec.NodeName
	}
	state := string(p.Status.Phase)
	if PodReady(p) {
		state += ", Ready"
	} else {
		state += ", not Ready"
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			state += " (" + c.Reason + ")"
		}
	}
	if p.DeletionTimestamp != nil {
		state += ", terminating"
	}
	return where + ", " + state
}

func replicaSummary(replicas *int32, ready int32) string {
	spec := "unset"
	if replicas != nil {
		spec = fmt.Sprint(*replicas)
	}
	return fmt.Sprintf("replicas %s, %d Ready", spec, ready)
}

// SurgeSummary is one line of `oc get surges`: target, node, phase and reason.
func SurgeSummary(u *unstructured.Unstructured) string {
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "target", "kind")
	name, _, _ := unstructured.NestedString(u.Object, "spec", "target", "name")
	node, _, _ := unstructured.NestedString(u.Object, "spec", "node")
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	reason, _, _ := unstructured.NestedString(u.Object, "status", "reason")
	if phase == "" {
		phase = "Pending"
	}
	s := fmt.Sprintf("%s/%s for node %s: phase %s", kind, name, node, phase)
	if reason != "" {
		s += " (" + reason + ")"
	}
	return s
}

func kserveSummary(u *unstructured.Unstructured, path ...string) string {
	m, _, _ := unstructured.NestedMap(u.Object, path...)
	var parts []string
	for _, f := range []string{"minReplicas", "maxReplicas", "replicas"} {
		if v, ok := m[f]; ok {
			parts = append(parts, fmt.Sprintf("%s %v", f, v))
		} else if f == "replicas" && len(path) == 1 {
			parts = append(parts, "replicas unset")
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "replicas fields unset")
	}
	return strings.Join(parts, ", ")
}

func nodeSummary(n *corev1.Node) string {
	a := n.Annotations
	cur, des, state := a[mcosim.CurrentConfigAnnotation], a[mcosim.DesiredConfigAnnotation], a[mcosim.StateAnnotation]
	desiredDrain, applied := a[mcosim.DesiredDrainAnnotation], a[mcosim.LastAppliedDrainAnnotation]
	var s string
	switch {
	case cur == "" && des == "":
		s = "not managed by the MCO yet"
	case mcosim.DrainInProgress(n):
		s = "draining for " + des + " (drain requested, not done)"
	case des != cur && state == mcosim.StateDone:
		s = fmt.Sprintf("targeted for update %s -> %s", cur, des)
	case des != cur && desiredDrain == mcosim.DrainRequest(des) && applied == desiredDrain:
		s = "drained, rebooting into " + des
	case desiredDrain == mcosim.UncordonRequest(des) && applied != desiredDrain:
		s = "rebooted into " + des + ", uncordoning"
	case des != cur:
		s = fmt.Sprintf("updating %s -> %s (state %s)", cur, des, state)
	case state == mcosim.StateDone:
		s = "updated, runs " + cur
	default:
		s = fmt.Sprintf("runs %s (state %s)", cur, state)
	}
	if n.Spec.Unschedulable {
		s += ", cordoned"
	}
	return s
}

func poolSummary(p *mcfgv1.MachineConfigPool) string {
	var conds []string
	for _, c := range p.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			conds = append(conds, string(c.Type))
		}
	}
	sort.Strings(conds)
	return fmt.Sprintf("target %s, %d/%d machines updated, %d unavailable [%s]",
		p.Spec.Configuration.Name, p.Status.UpdatedMachineCount, p.Status.MachineCount,
		p.Status.UnavailableMachineCount, strings.Join(conds, ","))
}
