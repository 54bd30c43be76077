package controller

import (
	"bytes"
	"encoding/json"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/trigger"
)

// machineConfigurationGVR is the MCO operator's configuration, whose status publishes the merged
// node disruption policies (read through the dynamic client).
var machineConfigurationGVR = schema.GroupVersionResource{Group: "operator.openshift.io", Version: "v1", Resource: "machineconfigurations"}

// machineConfigurationName is the one MachineConfiguration the daemon reads.
const machineConfigurationName = "cluster"

// renderedConfigs computes whether an update drains from the rendered MachineConfigs, ahead of any
// node (--read-machineconfigs): only where an admin granted the read, since rendered configs carry
// the pull secret, SSH keys and certificates. The cache keeps of each config only its digest
// (mco.Rendered, see slimMachineConfig); nothing of them is logged.
type renderedConfigs struct {
	configs mcfglisters.MachineConfigLister
	// operator is MachineConfiguration's cache; nil when not served.
	operator cache.Indexer
	log      *zap.Logger
}

// decide is the daemon's decision for u, unknown when a config or the policies cannot be read.
func (r *renderedConfigs) decide(u mco.Update) mco.Answer {
	if r == nil {
		return mco.Answer{Reason: "the rendered MachineConfigs are not read (--read-machineconfigs=false)"}
	}
	return mco.DecideDrain(r.rendered(u.From), r.rendered(u.To), r.policies())
}

// rendered is the cached digest of a rendered config, nil when it is not cached.
func (r *renderedConfigs) rendered(name string) *mco.Rendered {
	mc, err := r.configs.Get(name)
	if err != nil {
		return nil
	}
	// Strict: an Ignition config (a MachineConfig the transform passed through) is no digest.
	dec := json.NewDecoder(bytes.NewReader(mc.Spec.Config.Raw))
	dec.DisallowUnknownFields()
	var out mco.Rendered
	if err := dec.Decode(&out); err != nil {
		return nil
	}
	return &out
}

// policies are the merged node disruption policies, nil when MachineConfiguration cluster is not
// cached or its status is not current (the daemon waits for that too).
func (r *renderedConfigs) policies() *opv1.NodeDisruptionPolicyClusterStatus {
	if r.operator == nil {
		return nil
	}
	obj, ok, _ := r.operator.GetByKey(machineConfigurationName)
	u, isU := obj.(*unstructured.Unstructured)
	if !ok || !isU {
		return nil
	}
	var mc opv1.MachineConfiguration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &mc); err != nil {
		r.log.Debug("reading MachineConfiguration cluster", zap.Error(err))
		return nil
	}
	if mc.Generation != mc.Status.ObservedGeneration {
		return nil
	}
	return &mc.Status.NodeDisruptionPolicyStatus.ClusterPolicies
}

// slimMachineConfig is the MachineConfig informer's transform: the config becomes its digest
// (mco.ReadRendered), written where the Ignition config was, and the rest of the object goes but
// its name and versions. File contents, keys and certificates never reach the cache.
//
// Like every informer transform it is idempotent: with streaming lists (WatchListClient, which the
// daemon turns on) client-go's reflector transforms each listed object into a temporary store and
// the FIFO's Replace transforms it again (k8s.io/client-go tools/cache reflector.go watchList). A
// digest read as a MachineConfig would digest to "no change" whatever the update, so the digested
// object says it is one (digestedAnnotation) and is passed through.
func slimMachineConfig(obj any) (any, error) {
	mc, ok := obj.(*mcfgv1.MachineConfig)
	if !ok {
		return stripManagedFields(obj)
	}
	if _, done := mc.Annotations[digestedAnnotation]; done {
		return mc, nil
	}
	digest, err := json.Marshal(mco.ReadRendered(mc))
	if err != nil {
		return nil, err
	}
	return &mcfgv1.MachineConfig{
		ObjectMeta: metav1.ObjectMeta{Name: mc.Name, UID: mc.UID, ResourceVersion: mc.ResourceVersion,
			Annotations: map[string]string{digestedAnnotation: ""}},
		Spec: mcfgv1.MachineConfigSpec{Config: runtime.RawExtension{Raw: digest}},
	}, nil
}

// digestedAnnotation marks a cached MachineConfig whose config is already the guardian's digest
// (mco.Rendered). Were an admin to put it on a MachineConfig, its Ignition config would not read
// as a digest (renderedConfigs.rendered decodes strictly): the decision is unknown, never a wrong
// no-drain.
const digestedAnnotation = "drain-guardian.io/digested"

// slimMachineConfiguration keeps of MachineConfiguration its metadata, generation and the
// published node disruption policies.
func slimMachineConfiguration(u *unstructured.Unstructured) {
	policies, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "nodeDisruptionPolicyStatus")
	observed, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "observedGeneration")
	delete(u.Object, "spec")
	delete(u.Object, "status")
	if found {
		_ = unstructured.SetNestedField(u.Object, policies, "status", "nodeDisruptionPolicyStatus")
	}
	if observed != nil {
		_ = unstructured.SetNestedField(u.Object, observed, "status", "observedGeneration")
	}
}

// watchRenderedConfigs reads rendered MachineConfigs and MachineConfiguration cluster when
// --read-machineconfigs is set. Their changes re-examine the nodes of updating pools through the
// node and pool events that follow a new rendered config; the answers are recomputed then.
func (i *Informers) watchRenderedConfigs() error {
	if !i.opts.ReadMachineConfigs {
		return nil
	}
	inf := i.mcoFactory.Machineconfiguration().V1().MachineConfigs()
	if err := inf.Informer().SetTransform(slimMachineConfig); err != nil {
		return err
	}
	invalidate := func(c *Controller) cache.ResourceEventHandler { return c.handler(func(any) { c.answers.invalidate() }) }
	i.register(inf.Informer(), invalidate)
	rc := &renderedConfigs{configs: inf.Lister(), log: i.log}
	opInf, err := i.watchServed(machineConfigurationGVR, invalidate,
		slimSource(trigger.Resource{GVR: machineConfigurationGVR, Slim: slimMachineConfiguration}))
	if err != nil {
		return err
	}
	if opInf != nil {
		rc.operator = opInf.GetIndexer()
	}
	i.view.answers.rendered = rc
	return nil
}
