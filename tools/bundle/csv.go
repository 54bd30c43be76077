package main

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/operator-framework/api/pkg/lib/version"
)

const repository = "https://github.com/drain-guardian/drain-guardian"

// features are the features.operators.openshift.io annotations, each stated for what the
// guardian does:
//   - disconnected: it needs nothing outside the cluster, but a mirror can only map its images when
//     the CSV names them by digest; true only then.
//   - proxy-aware: it reaches only the Kubernetes API and has no operands; Go's HTTP client honours
//     the HTTP(S)_PROXY and NO_PROXY that OLM injects on a proxied cluster.
//   - fips-compliant: it is a static Go binary built without the RHEL OpenSSL crypto that
//     OpenShift's FIPS mode validates.
//   - tls-profiles: the metrics endpoint does not follow the cluster's TLS security profile.
//   - token-auth-*: it calls no cloud API.
func features(cfg Config) map[string]string {
	disconnected := strings.Contains(cfg.Image, "@sha256:") && strings.Contains(cfg.MustGatherImage, "@sha256:")
	return map[string]string{
		"features.operators.openshift.io/disconnected":     fmt.Sprint(disconnected),
		"features.operators.openshift.io/proxy-aware":      "true",
		"features.operators.openshift.io/fips-compliant":   "false",
		"features.operators.openshift.io/tls-profiles":     "false",
		"features.operators.openshift.io/token-auth-aws":   "false",
		"features.operators.openshift.io/token-auth-azure": "false",
		"features.operators.openshift.io/token-auth-gcp":   "false",
		"features.operators.openshift.io/cnf":              "false",
		"features.operators.openshift.io/cni":              "false",
		"features.operators.openshift.io/csi":              "false",
	}
}

// clusterServiceVersion builds the CSV around the base's Deployment and RBAC.
func clusterServiceVersion(cfg Config, p *parts) (*operatorsv1alpha1.ClusterServiceVersion, error) {
	v, err := semver.Parse(cfg.Version)
	if err != nil {
		return nil, fmt.Errorf("--version: %w", err)
	}
	dep := p.deployment.DeepCopy()
	for i := range dep.Spec.Template.Spec.Containers {
		dep.Spec.Template.Spec.Containers[i].Image = cfg.Image
	}
	sa := dep.Spec.Template.Spec.ServiceAccountName
	nsTemplate := map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": p.namespace.Name, "labels": p.namespace.Labels}}
	annotations := map[string]string{
		"alm-examples":   "[]",
		"capabilities":   "Basic Install",
		"categories":     "OpenShift Optional",
		"containerImage": cfg.Image,
		"description":    "Zero-downtime MachineConfigPool updates for single-replica model servers behind PodDisruptionBudgets.",
		"repository":     repository,
		"support":        "drain-guardian project (" + repository + "/issues)",
		"operatorframework.io/suggested-namespace": p.namespace.Name,
		// The OpenShift console creates the namespace from this template, labels included: the
		// platform Prometheus only scrapes a namespace labelled openshift.io/cluster-monitoring.
		"operatorframework.io/suggested-namespace-template": mustJSON(nsTemplate),
		// A Surge is the guardian's own record; the console offers no form to create one.
		"operators.operatorframework.io/internal-objects": mustJSON(crdNames(p)),
	}
	for k, val := range features(cfg) {
		annotations[k] = val
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{
		TypeMeta: metav1.TypeMeta{APIVersion: operatorsv1alpha1.SchemeGroupVersion.String(), Kind: operatorsv1alpha1.ClusterServiceVersionKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:        Package + ".v" + v.String(),
			Annotations: annotations,
			Labels:      map[string]string{"operatorframework.io/arch.amd64": "supported", "operatorframework.io/arch.arm64": "supported", "operatorframework.io/os.linux": "supported"},
		},
		Spec: operatorsv1alpha1.ClusterServiceVersionSpec{
			DisplayName:    "drain-guardian",
			Description:    description(p),
			Version:        version.OperatorVersion{Version: v},
			Replaces:       cfg.Replaces,
			MinKubeVersion: "1.30.0",
			Maturity:       "alpha",
			Provider:       operatorsv1alpha1.AppLink{Name: "drain-guardian project", URL: repository},
			Maintainers:    []operatorsv1alpha1.Maintainer{{Name: "drain-guardian maintainers", Email: "maintainers@drain-guardian.io"}},
			Links: []operatorsv1alpha1.AppLink{
				{Name: "Source", URL: repository},
				{Name: "Install and support", URL: repository + "/blob/main/docs/install.md"},
			},
			Keywords: []string{"machineconfigpool", "drain", "poddisruptionbudget", "kserve", "gpu", "upgrade"},
			InstallModes: []operatorsv1alpha1.InstallMode{
				{Type: operatorsv1alpha1.InstallModeTypeOwnNamespace, Supported: false},
				{Type: operatorsv1alpha1.InstallModeTypeSingleNamespace, Supported: false},
				{Type: operatorsv1alpha1.InstallModeTypeMultiNamespace, Supported: false},
				{Type: operatorsv1alpha1.InstallModeTypeAllNamespaces, Supported: true},
			},
			RelatedImages: []operatorsv1alpha1.RelatedImage{
				{Name: "drain-guardian", Image: cfg.Image},
				{Name: "must-gather", Image: cfg.MustGatherImage},
			},
			InstallStrategy: operatorsv1alpha1.NamedInstallStrategy{
				StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment,
				StrategySpec: operatorsv1alpha1.StrategyDetailsDeployment{
					DeploymentSpecs:    []operatorsv1alpha1.StrategyDeploymentSpec{{Name: dep.Name, Label: dep.Labels, Spec: dep.Spec}},
					ClusterPermissions: []operatorsv1alpha1.StrategyDeploymentPermissions{{ServiceAccountName: sa, Rules: p.clusterPerm}},
					Permissions:        []operatorsv1alpha1.StrategyDeploymentPermissions{{ServiceAccountName: sa, Rules: p.perm}},
				},
			},
		},
	}
	for _, crd := range p.crds {
		for _, ver := range crd.Spec.Versions {
			if !ver.Served {
				continue
			}
			desc := ""
			if ver.Schema != nil && ver.Schema.OpenAPIV3Schema != nil {
				desc = ver.Schema.OpenAPIV3Schema.Description
			}
			csv.Spec.CustomResourceDefinitions.Owned = append(csv.Spec.CustomResourceDefinitions.Owned, operatorsv1alpha1.CRDDescription{
				Name: crd.Name, Version: ver.Name, Kind: crd.Spec.Names.Kind, DisplayName: crd.Spec.Names.Kind,
				Description: firstSentence(desc) + " Created by the guardian only.",
			})
		}
	}
	return csv, nil
}

func crdNames(p *parts) []string {
	var out []string
	for _, crd := range p.crds {
		out = append(out, crd.Name)
	}
	return out
}

func firstSentence(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}

// description is the CSV's long description (markdown, shown in OperatorHub).
func description(p *parts) string {
	var b strings.Builder
	b.WriteString(`drain-guardian keeps a MachineConfigPool update from stalling on a single-replica workload behind a
PodDisruptionBudget (a KServe InferenceService or LLMInferenceService, a Deployment, a StatefulSet),
without downtime: when the Machine Config Operator targets or drains a node, it raises the owning
workload's replica count, waits until the replacement is Ready on another node, evicts the blocked pod
through the Eviction API and restores the original count once the update no longer needs it.

It never uncordons a node, never deletes a pod, never edits a PodDisruptionBudget and never lowers a
count below its original. Each surge is persisted in a ` + "`Surge`" + ` object (drain-guardian.io/v1alpha1) in
the workload's namespace: ` + "`oc get surges -A`" + ` is the live view of what it is doing.

**Surges are created by the guardian only.** There is nothing to create after installing: the
operator acts on every pool and namespace (opt a workload or namespace out with the annotation
` + "`drain-guardian.io/ignore: \"true\"`" + `). Only its ServiceAccount may write Surges; everyone who can view
a namespace can read them.

### Example
A model with one replica and a PodDisruptionBudget ` + "`minAvailable: 1`" + ` needs nothing else. While its node
is updated, the guardian's record of the surge reads:

` + "```" + `
$ oc get surges -A
NAMESPACE   NAME                         KIND                  TARGET   NODE    POOL   PHASE   AGE
models      llminferenceservice-llama    LLMInferenceService   llama    gpu-1   gpu    Ready   40s
` + "```" + `

During the surge the model reports Ready=False (MinimumReplicasUnavailable) although a Ready pod serves:
its Deployment is not Available at the surged count. Downtime is no Ready pod of that Deployment.

### Before an update
` + "`oc drain-guardian check`" + ` (the binary installed as an oc plugin) predicts, from the cluster as it is, which
pods will stall which pool and what the guardian will do about each.

### Install
Install into the namespace ` + "`" + p.namespace.Name + "`" + ` (suggested): the ServiceMonitor, PrometheusRule and
NetworkPolicy in the bundle name it. AllNamespaces install mode only; no dependencies, so OLM v1 can
install it as a ClusterExtension too.

### Support
` + "`oc adm must-gather --image=quay.io/drain-guardian/drain-guardian-must-gather:<version>`" + ` collects the
Surges, the guardian's Events, logs and flags, the pools, the nodes' MCO annotations and the workloads
involved, without Secrets or env values.
`)
	if len(p.separate) > 0 {
		b.WriteString("\n### Applied separately\nAn OLM bundle cannot carry these objects of the installation; apply them after installing\n" +
			"(`oc apply -f " + repository + "/raw/main/bundle/apply-separately.yaml`):\n")
		for _, o := range p.separate {
			fmt.Fprintf(&b, "- %s %s\n", o.GetKind(), qualified(o))
		}
	}
	return b.String()
}

func qualified(o *unstructured.Unstructured) string {
	if o.GetNamespace() != "" {
		return o.GetNamespace() + "/" + o.GetName()
	}
	return o.GetName()
}
