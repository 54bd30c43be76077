package gather

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
)

// Summary is the first page of a gather: what support reads before opening any file.
type Summary struct {
	Leader       string
	GuardianPods []string
	Surges       []string
	Models       []ModelState
	Pools        []string
	Nodes        int
	Draining     []string
	Cordoned     []string
	Events       int
	Metrics      string
	Problems     []string
}

// ModelState is a surged model's readiness as KServe reports it and as its pods are.
type ModelState struct {
	Surge, Model, Phase string
	// PodOwner is the Deployment whose pods serve the model, as "Kind name".
	PodOwner   string
	Conditions []string
	// ReadyPods is the pod owner's status.readyReplicas; ReadyPodsKnown is false when the pod owner
	// could not be read. For a LeaderWorkerSet (Groups) it counts whole Ready groups, not pods.
	ReadyPods      int64
	ReadyPodsKnown bool
	Groups         bool
}

// unit names what ReadyPods counts.
func (m ModelState) unit() string {
	if m.Groups {
		return "group"
	}
	return "pod"
}

// Verdict tells real downtime from the Ready=False that every surged KServe model shows: during a
// surge its Deployment is not Available (fewer Ready pods than the surged count) although a Ready
// pod serves, so LLMInferenceService Ready and InferenceService PredictorReady are False
// (MinimumReplicasUnavailable). Only "no Ready pod" is downtime.
func (m ModelState) Verdict() string {
	notReady := false
	for _, c := range m.Conditions {
		if strings.Contains(c, "=False") {
			notReady = true
		}
	}
	switch {
	case !m.ReadyPodsKnown:
		return "unknown: the pod owner could not be read"
	case m.ReadyPods == 0:
		return "DOWN: no Ready " + m.unit()
	case notReady:
		return fmt.Sprintf("serving (%d Ready %ss): Ready=False here is the surge's expected MinimumReplicasUnavailable, not downtime", m.ReadyPods, m.unit())
	default:
		return fmt.Sprintf("serving (%d Ready %ss)", m.ReadyPods, m.unit())
	}
}

// Write renders the summary as text.
func (s Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "drain-guardian gather summary\n\n")
	fmt.Fprintf(w, "Leader: %s\n", dash(s.Leader))
	section(w, "Guardian pods", s.GuardianPods)
	section(w, "Surges", s.Surges)
	var models []string
	for _, m := range s.Models {
		line := fmt.Sprintf("%s (Surge %s, %s; pods of %s) %s: %s", m.Model, m.Surge, m.Phase, m.PodOwner,
			strings.Join(m.Conditions, ", "), m.Verdict())
		models = append(models, line)
	}
	section(w, "Surged KServe models", models)
	if len(s.Models) > 0 {
		fmt.Fprint(w, "  A surged model reports Ready=False (MinimumReplicasUnavailable) while a Ready pod serves: its\n"+
			"  Deployment at the surged count is not Available with one Ready pod. Real downtime is no Ready pod:\n"+
			"    oc get deploy -n <namespace> <deployment> -o jsonpath='{.status.readyReplicas}'   (0 or empty = down)\n"+
			"    PromQL: kube_deployment_status_replicas_available{namespace=\"<namespace>\",deployment=\"<deployment>\"} == 0\n")
	}
	section(w, "MachineConfigPools", s.Pools)
	fmt.Fprintf(w, "\nNodes: %d; draining: %s; cordoned: %s\n", s.Nodes, list(s.Draining), list(s.Cordoned))
	fmt.Fprintf(w, "Events by drain-guardian: %d (events.yaml)\n", s.Events)
	fmt.Fprintf(w, "Metrics: %s\n", s.Metrics)
	section(w, "Not collected", s.Problems)
}

func section(w io.Writer, title string, lines []string) {
	fmt.Fprintf(w, "\n%s: %d\n", title, len(lines))
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// surgeLines describes each Surge on one line, oldest first.
func surgeLines(surges []v1alpha1.Surge) []string {
	sorted := append([]v1alpha1.Surge(nil), surges...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Spec.StartTime.Before(&sorted[j].Spec.StartTime) })
	var out []string
	for _, s := range sorted {
		line := fmt.Sprintf("%s/%s %s: %s %s +%d for node %s (pool %s, %s), since %s", s.Namespace, s.Name, phase(s),
			s.Spec.Target.Kind, s.Spec.Target.Name, s.Spec.Delta, s.Spec.Node, dash(s.Spec.Pool), s.Spec.Trigger,
			s.Spec.StartTime.UTC().Format("2006-01-02T15:04:05Z"))
		if s.Status.Reason != "" {
			line += ", reason " + s.Status.Reason
		}
		out = append(out, line)
	}
	return out
}

// poolLines describes each pool by its machine counts and its True conditions.
func poolLines(pools []map[string]any) []string {
	var out []string
	for _, p := range pools {
		u := unstructured.Unstructured{Object: p}
		count := func(f string) int64 { n, _, _ := unstructured.NestedInt64(p, "status", f); return n }
		paused, _, _ := unstructured.NestedBool(p, "spec", "paused")
		var conds []string
		cs, _, _ := unstructured.NestedSlice(p, "status", "conditions")
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok && m["status"] == "True" {
				conds = append(conds, fmt.Sprint(m["type"]))
			}
		}
		line := fmt.Sprintf("%s: %d/%d updated, %d ready, %d unavailable, %d degraded; %s", u.GetName(),
			count("updatedMachineCount"), count("machineCount"), count("readyMachineCount"),
			count("unavailableMachineCount"), count("degradedMachineCount"), list(conds))
		if paused {
			line += "; paused"
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}

func marshalYAML(v any) ([]byte, error) { return yaml.Marshal(v) }
