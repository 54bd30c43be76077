package gather

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/check"
)

// secretValue stands for every value gather must never copy: it is put in a Secret, in env values
// and in a last-applied-configuration annotation.
const secretValue = "hunter2-do-not-copy"

var (
	llmGVR    = schema.GroupVersionResource{Group: "serving.kserve.io", Version: "v1alpha1", Resource: "llminferenceservices"}
	deployGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	stsGVR    = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	pdbGVR    = schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}
)

func obj(apiVersion, kind, namespace, name string, fields map[string]any) *unstructured.Unstructured {
	o := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name, "namespace": namespace,
		"annotations": map[string]any{lastApplied: `{"env":[{"name":"TOKEN","value":"` + secretValue + `"}]}`}}}
	for k, v := range fields {
		o[k] = v
	}
	return &unstructured.Unstructured{Object: o}
}

func container(env ...any) map[string]any {
	return map[string]any{"name": "main", "image": "model:1", "env": env}
}

func surge(t *testing.T) *unstructured.Unstructured {
	s := &v1alpha1.Surge{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Surge"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "models", Name: "llama"},
		Spec: v1alpha1.SurgeSpec{
			Target:   v1alpha1.ObjectReference{APIVersion: "serving.kserve.io/v1alpha1", Kind: "LLMInferenceService", Name: "llama"},
			PodOwner: v1alpha1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "llama-kserve"},
			Fields:   []v1alpha1.Field{{Path: "spec.replicas", Original: ptr.To[int64](1), Set: 2}},
			Node:     "gpu-1", Pool: "gpu", Trigger: "MCOTargeted", Drain: "rendered-gpu-2", PDB: "llama",
			BlockedPod: "llama-kserve-abc", Delta: 1, Replicas: 1, StartTime: metav1.NewTime(time.Date(2026, 8, 1, 10, 0, 0, 0, time.UTC)),
		},
		Status: v1alpha1.SurgeStatus{Phase: v1alpha1.PhaseReady},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func clusterObjects(t *testing.T) []runtime.Object {
	secretEnv := map[string]any{"name": "HF_TOKEN", "value": secretValue}
	refEnv := map[string]any{"name": "API_KEY", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "creds", "key": "key"}}}
	return []runtime.Object{
		surge(t),
		obj("serving.kserve.io/v1alpha1", "LLMInferenceService", "models", "llama", map[string]any{
			"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"containers": []any{container(secretEnv, refEnv)}}},
			"status": map[string]any{"conditions": []any{
				map[string]any{"type": "Ready", "status": "False", "reason": "MinimumReplicasUnavailable"},
				map[string]any{"type": "WorkloadsReady", "status": "False"},
			}},
		}),
		obj("apps/v1", "Deployment", "models", "llama-kserve", map[string]any{
			"spec":   map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{"containers": []any{container(secretEnv)}}}},
			"status": map[string]any{"replicas": int64(2), "readyReplicas": int64(1)},
		}),
		obj("apps/v1", "StatefulSet", "db", "vector", map[string]any{
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"initContainers": []any{container(secretEnv)}}}},
		}),
		obj("policy/v1", "PodDisruptionBudget", "models", "llama", map[string]any{"spec": map[string]any{"minAvailable": int64(1)}}),
		obj("policy/v1", "PodDisruptionBudget", "db", "vector", nil),
		obj("machineconfiguration.openshift.io/v1", "MachineConfigPool", "", "gpu", map[string]any{
			"status": map[string]any{"machineCount": int64(3), "updatedMachineCount": int64(1), "readyMachineCount": int64(1),
				"conditions": []any{map[string]any{"type": "Updating", "status": "True"}}},
		}),
	}
}

func kubeObjects() []runtime.Object {
	labels := map[string]string{"app.kubernetes.io/name": "drain-guardian"}
	guardianPod := func(name string, restarts int32) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "drain-guardian", Name: name, Labels: labels},
			Spec:       corev1.PodSpec{NodeName: "infra-1", Containers: []corev1.Container{{Name: "drain-guardian"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				ContainerStatuses: []corev1.ContainerStatus{{Name: "drain-guardian", RestartCount: restarts}}},
		}
	}
	event := func(name, controller string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "models", Name: name}, ReportingController: controller,
			Reason: name, InvolvedObject: corev1.ObjectReference{Kind: "Deployment", Name: "llama-kserve"}}
	}
	return []runtime.Object{
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "drain-guardian", Name: "drain-guardian",
				Annotations: map[string]string{lastApplied: secretValue}},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "drain-guardian", Image: "quay.io/drain-guardian/drain-guardian:v0.1.0",
					Args: []string{"run", "--leader-elect=true", "--leader-election-id=dg-lock", "--restore=auto"},
					Env: []corev1.EnvVar{
						{Name: "DRAIN_GUARDIAN_READY_TIMEOUT", Value: "45m"},
						{Name: "HTTPS_PROXY", Value: "http://user:" + secretValue + "@proxy:3128"},
						{Name: "DRAIN_GUARDIAN_MEMORY_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
					},
				}}}},
			},
		},
		guardianPod("drain-guardian-a", 0),
		guardianPod("drain-guardian-b", 2),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "drain-guardian", Name: "unrelated"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "drain-guardian", Name: "dg-lock"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("drain-guardian-b_1234")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "drain-guardian", Name: "drain-guardian-metrics-tls"},
			Data: map[string][]byte{"tls.key": []byte(secretValue)}},
		&corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Annotations: map[string]string{
				"machineconfiguration.openshift.io/desiredDrain":     "drain-rendered-gpu-2",
				"machineconfiguration.openshift.io/lastAppliedDrain": "uncordon-rendered-gpu-1",
				"machineconfiguration.openshift.io/currentConfig":    "rendered-gpu-1",
				"example.com/owner": "not-copied",
			}},
			Spec:   corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"not-copied-image"}}}},
		},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-2"}},
		event("SurgeReady", "drain-guardian"),
		event("ScalingReplicaSet", "deployment-controller"),
	}
}

func sources(t *testing.T) Sources {
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		v1alpha1.SurgesResource: "SurgeList", MachineConfigPools: "MachineConfigPoolList", llmGVR: "LLMInferenceServiceList",
		deployGVR: "DeploymentList", stsGVR: "StatefulSetList", pdbGVR: "PodDisruptionBudgetList",
	}, clusterObjects(t)...)
	report := &check.Report{Pools: []check.Pool{{Name: "gpu", Nodes: []check.Node{{Name: "gpu-2", Blocks: []check.Block{{
		Namespace: "db", Pod: "vector-0", PDB: "vector", Workload: "StatefulSet vector", Verdict: check.UnsatisfiablePDB,
		Regarding: &corev1.ObjectReference{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: "db", Name: "vector"},
	}}}}}}}
	return Sources{
		Kube:    kubefake.NewClientset(kubeObjects()...),
		Dynamic: dyn,
		Check:   func(context.Context) (*check.Report, error) { return report, nil },
		Metrics: func(context.Context) ([]byte, error) { return []byte("drain_guardian_leader 1\n"), nil },
	}
}

func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		files[filepath.ToSlash(rel)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestCollectWritesWhatSupportNeedsAndNoSecretOrEnvValue(t *testing.T) {
	dest := t.TempDir()
	res, err := Collect(context.Background(), sources(t), Options{Dest: dest, Namespace: "drain-guardian", Deployment: "drain-guardian"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Problems) > 0 {
		t.Errorf("problems: %q", res.Problems)
	}
	files := readAll(t, dest)
	want := map[string][]string{
		"surges.yaml":              {"kind: Surge", "name: llama", "phase: Ready"},
		"events.yaml":              {"SurgeReady"},
		"guardian/deployment.yaml": {"--leader-election-id=dg-lock"},
		"guardian/flags.txt":       {"--restore=auto", "DRAIN_GUARDIAN_READY_TIMEOUT=45m", "HTTPS_PROXY=" + Redacted, "DRAIN_GUARDIAN_MEMORY_LIMIT from resource limits.memory"},
		"guardian/lease.yaml":      {"holderIdentity: drain-guardian-b_1234"},
		"guardian/logs/drain-guardian-a_drain-guardian.log":          {"fake logs"},
		"guardian/logs/drain-guardian-b_drain-guardian.log":          {"fake logs"},
		"guardian/logs/drain-guardian-b_drain-guardian.previous.log": {"fake logs"},
		"cluster/machineconfigpools.yaml":                            {"name: gpu"},
		"cluster/nodes.yaml":                                         {"machineconfiguration.openshift.io/desiredDrain: drain-rendered-gpu-2", "unschedulable: true", "node.kubernetes.io/unschedulable", "draining: true", "name: gpu-2"},
		"workloads/models/llminferenceservice_llama.yaml":            {"MinimumReplicasUnavailable", "secretKeyRef", "value: " + Redacted},
		"workloads/models/deployment_llama-kserve.yaml":              {"readyReplicas: 1"},
		"workloads/models/poddisruptionbudget_llama.yaml":            {"minAvailable: 1"},
		"workloads/db/statefulset_vector.yaml":                       {"initContainers"},
		"workloads/db/poddisruptionbudget_vector.yaml":               {"name: vector"},
		"check.json":  {`"unsatisfiable-pdb"`},
		"metrics.txt": {"drain_guardian_leader 1"},
		"summary.txt": {"Leader: drain-guardian-b_1234", "models/llama Ready: LLMInferenceService llama +1 for node gpu-1 (pool gpu, MCOTargeted)",
			"Ready=False (MinimumReplicasUnavailable): serving (1 Ready pods)", "pods of Deployment llama-kserve",
			"gpu: 1/3 updated", "draining: gpu-1", "Events by drain-guardian: 1"},
	}
	for name, subs := range want {
		got, ok := files[name]
		if !ok {
			t.Errorf("%s not written", name)
			continue
		}
		for _, s := range subs {
			if !strings.Contains(got, s) {
				t.Errorf("%s does not contain %q:\n%s", name, s, got)
			}
		}
	}
	if _, ok := files["guardian/logs/drain-guardian-a_drain-guardian.previous.log"]; ok {
		t.Error("a previous log was asked for a container that never restarted")
	}
	for name, content := range files {
		for _, banned := range []string{secretValue, "drain-guardian-metrics-tls", "ScalingReplicaSet", "example.com/owner", "not-copied-image", "unrelated", "managedFields"} {
			if strings.Contains(content, banned) {
				t.Errorf("%s contains %q", name, banned)
			}
		}
	}
	if len(files) != len(want) {
		t.Errorf("wrote %d files, want %d: %v", len(files), len(want), res.Files)
	}
}

func TestCollectRecordsWhatItCannotReadAndGoesOn(t *testing.T) {
	src := sources(t)
	src.Kube = kubefake.NewClientset() // no Deployment, no Lease, no nodes
	src.Check = func(context.Context) (*check.Report, error) { return nil, errors.New("forbidden: list pods") }
	src.Metrics = func(context.Context) ([]byte, error) { return nil, errors.New("connection refused") }
	dest := t.TempDir()
	res, err := Collect(context.Background(), src, Options{Dest: dest, Namespace: "drain-guardian", Deployment: "drain-guardian"})
	if err != nil {
		t.Fatal(err)
	}
	files := readAll(t, dest)
	for _, s := range []string{`deployment drain-guardian/drain-guardian: deployments.apps "drain-guardian" not found`, "check: forbidden: list pods", "metrics: connection refused"} {
		if !strings.Contains(files["problems.txt"], s) || !strings.Contains(files["summary.txt"], s) {
			t.Errorf("problems.txt and summary.txt should say %q:\n%s", s, files["summary.txt"])
		}
	}
	if _, ok := files["surges.yaml"]; !ok || len(res.Files) == 0 {
		t.Error("what could be read was not written")
	}
}

func TestModelVerdictTellsDowntimeFromTheSurgesNotReady(t *testing.T) {
	for _, tc := range []struct {
		m    ModelState
		want string
	}{
		{ModelState{Conditions: []string{"Ready=False (MinimumReplicasUnavailable)"}, ReadyPods: 1, ReadyPodsKnown: true}, "not downtime"},
		{ModelState{Conditions: []string{"PredictorReady=False (MinimumReplicasUnavailable)"}, ReadyPods: 0, ReadyPodsKnown: true}, "DOWN: no Ready pod"},
		{ModelState{Conditions: []string{"Ready=True"}, ReadyPods: 2, ReadyPodsKnown: true}, "serving (2 Ready pods)"},
		// A multi-node model's pod owner is a LeaderWorkerSet: its count is of whole groups.
		{ModelState{Conditions: []string{"Ready=False (MinimumReplicasUnavailable)"}, ReadyPods: 1, ReadyPodsKnown: true, Groups: true}, "serving (1 Ready groups)"},
		{ModelState{ReadyPods: 0, ReadyPodsKnown: true, Groups: true}, "DOWN: no Ready group"},
		{ModelState{Conditions: []string{"Ready=False"}}, "unknown"},
	} {
		if got := tc.m.Verdict(); !strings.Contains(got, tc.want) {
			t.Errorf("%+v: verdict %q, want it to contain %q", tc.m, got, tc.want)
		}
	}
}

func TestRedactEveryNestedEnvValue(t *testing.T) {
	isvc := map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{lastApplied: secretValue, "keep": "me"}, "managedFields": []any{}},
		"spec": map[string]any{"predictor": map[string]any{
			"model":      map[string]any{"env": []any{map[string]any{"name": "A", "value": secretValue}}},
			"containers": []any{map[string]any{"env": []any{map[string]any{"name": "B", "value": secretValue}, map[string]any{"name": "C", "valueFrom": map[string]any{}}}}},
		}},
	}
	Redact(isvc)
	out, err := marshalYAML(isvc)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), secretValue) || strings.Contains(string(out), "managedFields") {
		t.Fatalf("not redacted:\n%s", out)
	}
	for _, s := range []string{"keep: me", "name: C", "valueFrom"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("redaction removed %q:\n%s", s, out)
		}
	}
}

func TestReferencesRefuseNamesThatAreNotFileNames(t *testing.T) {
	s := v1alpha1.Surge{ObjectMeta: metav1.ObjectMeta{Namespace: "models", Name: "x"}, Spec: v1alpha1.SurgeSpec{
		Target:   v1alpha1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "../../etc"},
		PodOwner: v1alpha1.ObjectReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "w"},
		PDB:      "ok",
	}}
	refs, unknown := References([]v1alpha1.Surge{s}, nil)
	if len(refs) != 1 || refs[0].file() != "workloads/models/poddisruptionbudget_ok.yaml" {
		t.Errorf("refs = %v", refs)
	}
	if len(unknown) != 2 {
		t.Errorf("unknown = %q, want the unsafe name and the unknown kind", unknown)
	}
}

// A multi-node model's Surge names its LeaderWorkerSet as the pod owner: gather copies it with the
// LLMInferenceService and the PDB.
func TestReferencesCopyTheLeaderWorkerSet(t *testing.T) {
	s := v1alpha1.Surge{ObjectMeta: metav1.ObjectMeta{Namespace: "models", Name: "x"}, Spec: v1alpha1.SurgeSpec{
		Target:   v1alpha1.ObjectReference{APIVersion: "serving.kserve.io/v1alpha2", Kind: "LLMInferenceService", Name: "deepseek"},
		PodOwner: v1alpha1.ObjectReference{APIVersion: "leaderworkerset.x-k8s.io/v1", Kind: "LeaderWorkerSet", Name: "deepseek-kserve-mn"},
		PDB:      "deepseek",
	}}
	refs, unknown := References([]v1alpha1.Surge{s}, nil)
	if len(refs) != 3 || len(unknown) != 0 || refs[1].gvr.Resource != "leaderworkersets" || refs[1].gvr.Group != "leaderworkerset.x-k8s.io" {
		t.Errorf("refs = %v, unknown = %q; want the LLMInferenceService, the LeaderWorkerSet and the PDB", refs, unknown)
	}
}
