// Package gather collects, read-only, what a support case about drain-guardian needs: the Surges,
// the guardian's Events, logs, Deployment, Lease and flags, the MachineConfigPools, every node's MCO
// annotations and taints, the PDBs and workloads that Surges or blocked pods name (redacted), the
// output of check and the metrics text. It never reads a Secret and never copies an env value.
package gather

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/check"
)

// ReportingController is the name the guardian records its Events with.
const ReportingController = "drain-guardian"

// Bounds on what gather copies, whatever the cluster holds: Events can be created by anyone allowed
// to create Events, and check names every blocked pod's workload.
const (
	maxEvents    = 5000
	maxWorkloads = 500
	// maxLogBytes is the tail of each container log gather keeps.
	maxLogBytes int64 = 32 << 20
	pageSize          = 500
)

// MachineConfigPools is the resource of the MCO's pools.
var MachineConfigPools = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigpools"}

// Sources is what gather reads from.
type Sources struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Check returns check's report of the cluster as it is; nil leaves check.json out.
	Check func(context.Context) (*check.Report, error)
	// Metrics returns the guardian's metrics text; nil when no endpoint is known.
	Metrics func(context.Context) ([]byte, error)
}

// Options say where the guardian runs and where the output goes.
type Options struct {
	// Dest is the output directory; it is created when missing.
	Dest string
	// Namespace and Deployment name the guardian's Deployment.
	Namespace  string
	Deployment string
}

// Result lists what was written and what could not be collected.
type Result struct {
	Files    []string
	Problems []string
	Summary  Summary
}

type gatherer struct {
	src    Sources
	opts   Options
	result Result
}

// Collect gathers into opts.Dest. What cannot be read is recorded in problems.txt and the summary
// and gather goes on; only a failure to write the destination is an error.
func Collect(ctx context.Context, src Sources, opts Options) (*Result, error) {
	if err := os.MkdirAll(opts.Dest, 0o755); err != nil {
		return nil, fmt.Errorf("--dest: %w", err)
	}
	g := &gatherer{src: src, opts: opts}
	surges, err := g.surges(ctx)
	if err != nil {
		return nil, err
	}
	steps := []func(context.Context) error{g.guardian, g.events, g.pools, g.nodes}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	report, err := g.check(ctx)
	if err != nil {
		return nil, err
	}
	models, err := g.workloads(ctx, surges, report)
	if err != nil {
		return nil, err
	}
	if err := g.metrics(ctx); err != nil {
		return nil, err
	}
	g.result.Summary.Surges = surgeLines(surges)
	g.result.Summary.Models = models
	g.result.Summary.Problems = g.result.Problems
	if len(g.result.Problems) > 0 {
		if err := g.write("problems.txt", []byte(strings.Join(g.result.Problems, "\n")+"\n")); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	g.result.Summary.Write(&b)
	if err := g.write("summary.txt", b.Bytes()); err != nil {
		return nil, err
	}
	return &g.result, nil
}

func (g *gatherer) problem(format string, args ...any) {
	g.result.Problems = append(g.result.Problems, fmt.Sprintf(format, args...))
}

// write puts data at rel under Dest; every path element is checked, since names come from the cluster.
func (g *gatherer) write(rel string, data []byte) error {
	for _, part := range strings.Split(rel, "/") {
		if !safeName(part) {
			return fmt.Errorf("refusing to write %q: unsafe path element %q", rel, part)
		}
	}
	path := filepath.Join(g.opts.Dest, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	g.result.Files = append(g.result.Files, rel)
	return nil
}

// writeObjects writes objects, redacted, as one YAML List.
func (g *gatherer) writeObjects(rel string, objs []map[string]any) error {
	for _, o := range objs {
		Redact(o)
	}
	data, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": objs})
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return g.write(rel, data)
}

// typed turns an object from a typed client into the unstructured form gather writes.
func typed(obj runtime.Object, gvk schema.GroupVersionKind) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	m["apiVersion"], m["kind"] = gvk.GroupVersion().String(), gvk.Kind
	return m, nil
}

// listAll lists a resource through the dynamic client page by page, up to limit objects (0: no limit).
func listAll(ctx context.Context, ri dynamic.ResourceInterface, limit int) ([]map[string]any, error) {
	var out []map[string]any
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		list, err := ri.List(ctx, opts)
		if err != nil {
			return out, err
		}
		for i := range list.Items {
			if limit > 0 && len(out) == limit {
				return out, nil
			}
			out = append(out, list.Items[i].Object)
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
}

// surges writes every Surge, whatever its phase, and returns them typed for the summary.
func (g *gatherer) surges(ctx context.Context) ([]v1alpha1.Surge, error) {
	objs, err := listAll(ctx, g.src.Dynamic.Resource(v1alpha1.SurgesResource), 0)
	if err != nil {
		g.problem("surges: %v", err)
		return nil, nil
	}
	out := make([]v1alpha1.Surge, 0, len(objs))
	for _, o := range objs {
		var s v1alpha1.Surge
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o, &s); err != nil {
			g.problem("surge %v: %v", (&unstructured.Unstructured{Object: o}).GetName(), err)
			continue
		}
		out = append(out, s)
	}
	return out, g.writeObjects("surges.yaml", objs)
}

// events writes the Events the guardian recorded. The field selector does the filtering on a real
// API server; the check after it keeps a client that ignores selectors from copying others' Events.
func (g *gatherer) events(ctx context.Context) error {
	var objs []map[string]any
	opts := metav1.ListOptions{Limit: pageSize, FieldSelector: "reportingComponent=" + ReportingController}
	for len(objs) < maxEvents {
		list, err := g.src.Kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			g.problem("events: %v", err)
			break
		}
		for i := range list.Items {
			e := &list.Items[i]
			if e.ReportingController != ReportingController || len(objs) == maxEvents {
				continue
			}
			m, err := typed(e, corev1.SchemeGroupVersion.WithKind("Event"))
			if err != nil {
				return err
			}
			objs = append(objs, m)
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	if len(objs) == maxEvents {
		g.problem("events: only the first %d were kept", maxEvents)
	}
	g.result.Summary.Events = len(objs)
	return g.writeObjects("events.yaml", objs)
}

// pools writes the MachineConfigPools; a cluster without the MCO has none, which is said, not failed.
func (g *gatherer) pools(ctx context.Context) error {
	objs, err := listAll(ctx, g.src.Dynamic.Resource(MachineConfigPools), 0)
	if err != nil {
		g.problem("machineconfigpools: %v", err)
		return nil
	}
	g.result.Summary.Pools = poolLines(objs)
	return g.writeObjects("cluster/machineconfigpools.yaml", objs)
}

// guardian writes the guardian's Deployment, its flags, its Lease and its pods' logs.
func (g *gatherer) guardian(ctx context.Context) error {
	dep, err := g.src.Kube.AppsV1().Deployments(g.opts.Namespace).Get(ctx, g.opts.Deployment, metav1.GetOptions{})
	if err != nil {
		g.problem("deployment %s/%s: %v", g.opts.Namespace, g.opts.Deployment, err)
		return nil
	}
	m, err := typed(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))
	if err != nil {
		return err
	}
	if err := g.writeObjects("guardian/deployment.yaml", []map[string]any{m}); err != nil {
		return err
	}
	if err := g.write("guardian/flags.txt", []byte(Flags(dep))); err != nil {
		return err
	}
	if err := g.lease(ctx, LeaseName(dep)); err != nil {
		return err
	}
	return g.logs(ctx, dep)
}

func (g *gatherer) lease(ctx context.Context, name string) error {
	lease, err := g.src.Kube.CoordinationV1().Leases(g.opts.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		g.problem("lease %s/%s: %v", g.opts.Namespace, name, err)
		return nil
	}
	m, err := typed(lease, schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"})
	if err != nil {
		return err
	}
	if lease.Spec.HolderIdentity != nil {
		g.result.Summary.Leader = *lease.Spec.HolderIdentity
	}
	return g.writeObjects("guardian/lease.yaml", []map[string]any{m})
}

// logs writes the current and the previous log of every container of the Deployment's pods.
func (g *gatherer) logs(ctx context.Context, dep *appsv1.Deployment) error {
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		g.problem("deployment selector: %v", err)
		return nil
	}
	pods, err := g.src.Kube.CoreV1().Pods(g.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		g.problem("guardian pods: %v", err)
		return nil
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		g.result.Summary.GuardianPods = append(g.result.Summary.GuardianPods, podLine(pod))
		for _, c := range pod.Spec.Containers {
			for _, previous := range []bool{false, true} {
				if err := g.log(ctx, pod, c.Name, previous); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (g *gatherer) log(ctx context.Context, pod *corev1.Pod, container string, previous bool) error {
	suffix := ".log"
	if previous {
		if !restarted(pod, container) {
			return nil // no previous instance: nothing to ask the kubelet for
		}
		suffix = ".previous.log"
	}
	limit := maxLogBytes
	rc, err := g.src.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{
		Container: container, Previous: previous, LimitBytes: &limit,
	}).Stream(ctx)
	if err != nil {
		g.problem("log of %s/%s container %s (previous=%t): %v", pod.Namespace, pod.Name, container, previous, err)
		return nil
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(io.LimitReader(rc, maxLogBytes))
	if err != nil {
		g.problem("log of %s/%s container %s: %v", pod.Namespace, pod.Name, container, err)
	}
	return g.write("guardian/logs/"+pod.Name+"_"+container+suffix, data)
}

// restarted reports whether the container has a previous instance whose log the kubelet may keep.
func restarted(pod *corev1.Pod, container string) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == container {
			return s.RestartCount > 0
		}
	}
	return false
}

func podLine(pod *corev1.Pod) string {
	ready := "not Ready"
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			ready = "Ready"
		}
	}
	var restarts int32
	for _, s := range pod.Status.ContainerStatuses {
		restarts += s.RestartCount
	}
	return fmt.Sprintf("%s on %s: %s, %s, %d restarts", pod.Name, dash(pod.Spec.NodeName), pod.Status.Phase, ready, restarts)
}

// check writes check's JSON report and returns it, for the workloads of the blocked pods.
func (g *gatherer) check(ctx context.Context) (*check.Report, error) {
	if g.src.Check == nil {
		return nil, nil
	}
	report, err := g.src.Check(ctx)
	if err != nil {
		g.problem("check: %v", err)
		return nil, nil
	}
	var b bytes.Buffer
	if err := check.Render(&b, report, "json"); err != nil {
		return nil, err
	}
	return report, g.write("check.json", b.Bytes())
}

func (g *gatherer) metrics(ctx context.Context) error {
	if g.src.Metrics == nil {
		g.result.Summary.Metrics = "not collected (no metrics endpoint given: --metrics-url)"
		return nil
	}
	data, err := g.src.Metrics(ctx)
	if err != nil {
		g.problem("metrics: %v", err)
		g.result.Summary.Metrics = "unreachable: " + err.Error()
		return nil
	}
	g.result.Summary.Metrics = fmt.Sprintf("metrics.txt, %d bytes", len(data))
	return g.write("metrics.txt", data)
}

// Flags lists the guardian container's command-line flags, and its environment by name: the
// DRAIN_GUARDIAN_* variables are flags (options.ApplyEnv) and keep their literal value; any other
// variable is named only, its value redacted; references say where their value comes from.
func Flags(dep *appsv1.Deployment) string {
	var b strings.Builder
	for _, c := range dep.Spec.Template.Spec.Containers {
		fmt.Fprintf(&b, "container %s\n  image: %s\n  command: %s\n  args:\n", c.Name, c.Image, strings.Join(c.Command, " "))
		for _, a := range c.Args {
			fmt.Fprintf(&b, "    %s\n", a)
		}
		b.WriteString("  env:\n")
		for _, e := range c.Env {
			switch {
			case e.ValueFrom != nil:
				fmt.Fprintf(&b, "    %s from %s\n", e.Name, source(e.ValueFrom))
			case strings.HasPrefix(e.Name, "DRAIN_GUARDIAN_"):
				fmt.Fprintf(&b, "    %s=%s\n", e.Name, e.Value)
			default:
				fmt.Fprintf(&b, "    %s=%s\n", e.Name, Redacted)
			}
		}
	}
	return b.String()
}

func source(v *corev1.EnvVarSource) string {
	switch {
	case v.FieldRef != nil:
		return "field " + v.FieldRef.FieldPath
	case v.ResourceFieldRef != nil:
		return "resource " + v.ResourceFieldRef.Resource
	case v.ConfigMapKeyRef != nil:
		return "configmap " + v.ConfigMapKeyRef.Name + " key " + v.ConfigMapKeyRef.Key
	case v.SecretKeyRef != nil:
		return "secret " + v.SecretKeyRef.Name + " key " + v.SecretKeyRef.Key
	}
	return "a source"
}

// LeaseName is the Lease the guardian's leader election uses: --leader-election-id, by default
// drain-guardian.
func LeaseName(dep *appsv1.Deployment) string {
	for _, c := range dep.Spec.Template.Spec.Containers {
		for i, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--leader-election-id="); ok {
				return v
			}
			if a == "--leader-election-id" && i+1 < len(c.Args) {
				return c.Args[i+1]
			}
		}
	}
	return "drain-guardian"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
