package controller

import (
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/drain-guardian/drain-guardian/internal/dra"
	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/trigger"
)

// renderedWithKargs is a rendered MachineConfig as the MCO's render controller writes it, with a
// kernel argument, an SSH key and a file.
func renderedWithKargs(name string, kargs ...string) *mcfgv1.MachineConfig {
	return &mcfgv1.MachineConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "4", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "machine-config-controller"}}},
		Spec: mcfgv1.MachineConfigSpec{KernelArguments: kargs, Config: runtime.RawExtension{Raw: []byte(`{"ignition":{"version":"3.5.0"},` +
			`"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 AAAA core"]}]},` +
			`"storage":{"files":[{"path":"/etc/app.conf","contents":{"source":"data:,level%3Dinfo"}}]},"systemd":{}}`)}},
	}
}

// Every informer transform is idempotent: with streaming lists (WatchListClient, on in the daemon)
// client-go's reflector transforms each listed object into a temporary store, and the FIFO's
// Replace transforms it once more. A transform that is not caches something else than it means to:
// the MachineConfig digest, digested again, said "no change" for a kernel argument update.
func TestTransformsAreIdempotent(t *testing.T) {
	nm := slimSource(trigger.Resource{GVR: trigger.Medik8sNodeMaintenanceGVR, NodeOf: trigger.NodeName})
	cases := []struct {
		name      string
		transform cache.TransformFunc
		obj       runtime.Object
	}{
		{"pod", slim, richPod()},
		{"node", slim, gpuNode("w1")},
		{"pdb", slim, oversizedPDB(1)},
		{"hpa", slim, hpaFor(ptr.To(int32(1)), 3)},
		{"deployment", slim, model(1)[0]},
		{"statefulset", slim, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: ns, Annotations: map[string]string{lastAppliedAnnotation: "{}"}},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(1)), Template: corev1.PodTemplateSpec{Spec: richPod().Spec}}}},
		{"replicaset", slim, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "model-abc", Namespace: ns, UID: "rs",
			OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "model", Controller: ptr.To(true)}}}}},
		{"inferenceservice", slimKServe, inferenceService(map[string]any{"predictor": map[string]any{"minReplicas": int64(1), "model": map[string]any{"storageUri": "s3://x"}}})},
		{"machineconfig", slimMachineConfig, renderedWithKargs("rendered-2", "nosmt")},
		{"machineconfiguration", slimSource(trigger.Resource{GVR: machineConfigurationGVR, Slim: slimMachineConfiguration}), machineConfiguration()},
		{"nodemaintenance", nm, nodeMaintenance("w1", "Running")},
		{"resourceslice", dra.Slim, draSlice("w1", true)},
		{"resourceclaim", dra.Slim, allocatedClaim("gpu", "w1", true)},
		{"resourceclaimtemplate", dra.Slim, gpuTemplate()},
		{"deviceclass", dra.Slim, draClass()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			once, err := tc.transform(tc.obj.DeepCopyObject())
			if err != nil {
				t.Fatal(err)
			}
			twice, err := tc.transform(copyOf(once))
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(once, twice) {
				t.Errorf("transformed twice:\n%+v\nonce:\n%+v", twice, once)
			}
		})
	}
}

// copyOf deep-copies a cached object when it is an API object (podinfo.Pod is read-only).
func copyOf(obj any) any {
	if o, ok := obj.(runtime.Object); ok {
		return o.DeepCopyObject()
	}
	return obj
}

// What the cache holds of a rendered config after the reflector's two passes still tells a kernel
// argument apart from no change.
func TestRenderedDigestSurvivesTheSecondTransform(t *testing.T) {
	cached := func(mc *mcfgv1.MachineConfig) runtime.Object {
		once, _ := slimMachineConfig(mc)
		twice, _ := slimMachineConfig(once)
		return twice.(runtime.Object)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range []runtime.Object{cached(renderedWithKargs("rendered-1")), cached(renderedWithKargs("rendered-2", "nosmt"))} {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	rc := &renderedConfigs{configs: mcfgListerOf(idx)}
	got := rc.decide(mco.Update{From: "rendered-1", To: "rendered-2"})
	if got.Need != mco.NeedDrain || got.Reason != "kernel arguments changed: the node reboots" {
		t.Fatalf("decision over the cached digests = %+v, want a drain for the kernel argument", got)
	}
}

// An Ignition config that reached the cache undigested (a MachineConfig carrying the marker
// annotation) is no digest: the decision is unknown, never "no change".
func TestAnUndigestedConfigIsUnknown(t *testing.T) {
	raw := renderedWithKargs("rendered-2", "nosmt")
	raw.Annotations = map[string]string{digestedAnnotation: ""}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	one, _ := slimMachineConfig(renderedWithKargs("rendered-1"))
	for _, o := range []any{one, raw} {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	rc := &renderedConfigs{configs: mcfgListerOf(idx)}
	if got := rc.decide(mco.Update{From: "rendered-1", To: "rendered-2"}); got.Known() {
		t.Fatalf("decision over an undigested config = %+v, want unknown", got)
	}
}

func mcfgListerOf(idx cache.Indexer) mcfglisters.MachineConfigLister {
	return mcfglisters.NewMachineConfigLister(idx)
}
