package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Package is the OLM package name and the operator's name.
const Package = "drain-guardian"

// Channel is the one channel the bundle is published in: "candidate" while the API is
// v1alpha1 (OLM's channel naming: candidate, fast, stable).
const Channel = "candidate"

// supportedKinds are the kinds a registry+v1 bundle may carry besides the CSV and CRDs, as listed
// by operator-registry (pkg/lib/bundle/supported_resources.go); OLM refuses a bundle with any
// other kind. Anything else in the base is written to apply-separately.yaml.
var supportedKinds = map[string]bool{
	"Secret": true, "ClusterRole": true, "ClusterRoleBinding": true, "ConfigMap": true, "ServiceAccount": true,
	"Service": true, "Role": true, "RoleBinding": true, "PrometheusRule": true, "ServiceMonitor": true,
	"PodMonitor": true, "PodDisruptionBudget": true, "PriorityClass": true, "VerticalPodAutoscaler": true,
	"ConsoleYAMLSample": true, "ConsoleQuickStart": true, "ConsoleCLIDownload": true, "ConsoleLink": true,
	"ConsolePlugin": true, "NetworkPolicy": true,
}

// Config says what to generate the bundle from.
type Config struct {
	// Base is the kustomization the bundle is made of (manifests/base).
	Base string
	// Version is the bundle's semantic version, without "v".
	Version string
	// Image and MustGatherImage are the images the CSV deploys and names as related.
	Image, MustGatherImage string
	// Replaces is the CSV this one upgrades, empty for the first.
	Replaces string
}

// File is one file of the bundle, by its path under the bundle directory.
type File struct {
	Path string
	Data []byte
}

// render runs kustomize on the base, as `kubectl kustomize` does.
func render(dir string) ([]*unstructured.Unstructured, error) {
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, err
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

func convert[T any](u *unstructured.Unstructured) (*T, error) {
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return out, nil
}

// parts is the rendered base sorted into what the CSV carries and what goes beside it.
type parts struct {
	namespace   *corev1.Namespace
	deployment  *appsv1.Deployment
	crds        []*apiextensionsv1.CustomResourceDefinition
	clusterPerm []rbacv1.PolicyRule
	perm        []rbacv1.PolicyRule
	others      []*unstructured.Unstructured
	separate    []*unstructured.Unstructured
}

// split sorts the objects: the Deployment becomes the install strategy; the ClusterRoles and Roles
// bound to its ServiceAccount become its clusterPermissions and permissions (OLM creates the
// ServiceAccount and the bindings itself); the Namespace becomes the suggested namespace.
func split(objs []*unstructured.Unstructured) (*parts, error) {
	p := &parts{}
	byKind := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()] = append(byKind[o.GetKind()], o)
	}
	if len(byKind["Deployment"]) != 1 || len(byKind["Namespace"]) != 1 {
		return nil, fmt.Errorf("the base must hold one Deployment and one Namespace, has %d and %d", len(byKind["Deployment"]), len(byKind["Namespace"]))
	}
	var err error
	if p.deployment, err = convert[appsv1.Deployment](byKind["Deployment"][0]); err != nil {
		return nil, err
	}
	if p.namespace, err = convert[corev1.Namespace](byKind["Namespace"][0]); err != nil {
		return nil, err
	}
	sa := p.deployment.Spec.Template.Spec.ServiceAccountName
	ns := p.namespace.Name
	boundToSA := func(subjects []rbacv1.Subject) bool {
		return len(subjects) == 1 && subjects[0].Kind == rbacv1.ServiceAccountKind && subjects[0].Name == sa && subjects[0].Namespace == ns
	}
	consumed := map[string]bool{}
	roles := map[string]*unstructured.Unstructured{}
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, r := range byKind[kind] {
			roles[kind+"/"+r.GetName()] = r
		}
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, b := range byKind[kind] {
			binding, err := convert[rbacv1.RoleBinding](b) // same fields as a ClusterRoleBinding
			if err != nil {
				return nil, err
			}
			role := roles[binding.RoleRef.Kind+"/"+binding.RoleRef.Name]
			if !boundToSA(binding.Subjects) || role == nil {
				continue
			}
			r, err := convert[rbacv1.ClusterRole](role)
			if err != nil {
				return nil, err
			}
			if kind == "ClusterRoleBinding" {
				p.clusterPerm = append(p.clusterPerm, r.Rules...)
			} else {
				p.perm = append(p.perm, r.Rules...)
			}
			consumed[kind+"/"+b.GetName()], consumed[binding.RoleRef.Kind+"/"+role.GetName()] = true, true
		}
	}
	consumed["ServiceAccount/"+sa] = true
	for _, o := range objs {
		key := o.GetKind() + "/" + o.GetName()
		switch {
		case consumed[key] || o.GetKind() == "Deployment" || o.GetKind() == "Namespace":
		case o.GetKind() == "CustomResourceDefinition":
			crd, err := convert[apiextensionsv1.CustomResourceDefinition](o)
			if err != nil {
				return nil, err
			}
			p.crds = append(p.crds, crd)
		case supportedKinds[o.GetKind()]:
			if o.GetNamespace() != "" && o.GetNamespace() != ns {
				p.separate = append(p.separate, o) // OLM creates namespaced objects in the install namespace only
				continue
			}
			o.SetNamespace("") // OLM puts it in the install namespace
			p.others = append(p.others, o)
		default:
			p.separate = append(p.separate, o)
		}
	}
	return p, nil
}

// Generate makes the bundle's files from cfg.
func Generate(cfg Config) ([]File, error) {
	objs, err := render(cfg.Base)
	if err != nil {
		return nil, err
	}
	p, err := split(objs)
	if err != nil {
		return nil, err
	}
	csv, err := clusterServiceVersion(cfg, p)
	if err != nil {
		return nil, err
	}
	var files []File
	add := func(path string, v any) error {
		data, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		files = append(files, File{Path: path, Data: data})
		return nil
	}
	if err := add("manifests/"+Package+".clusterserviceversion.yaml", csv); err != nil {
		return nil, err
	}
	for _, crd := range p.crds {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
		if err != nil {
			return nil, err
		}
		delete(u, "status") // OLM owns status; controller-gen's empty one only adds noise
		if err := add("manifests/"+crd.Spec.Group+"_"+crd.Spec.Names.Plural+".yaml", u); err != nil {
			return nil, err
		}
	}
	for _, o := range p.others {
		gvk := o.GroupVersionKind()
		name := fmt.Sprintf("manifests/%s_%s_%s_%s.yaml", o.GetName(), gvk.Group, gvk.Version, strings.ToLower(gvk.Kind))
		if gvk.Group == "" {
			name = fmt.Sprintf("manifests/%s_%s_%s.yaml", o.GetName(), gvk.Version, strings.ToLower(gvk.Kind))
		}
		if err := add(name, o.Object); err != nil {
			return nil, err
		}
	}
	if len(p.separate) > 0 {
		var b bytes.Buffer
		b.WriteString("# Objects of the installation that an OLM bundle cannot carry. Apply them after installing the\n" +
			"# operator: oc apply -f bundle/apply-separately.yaml. Generated by `make bundle`; do not edit.\n")
		for _, o := range p.separate {
			data, err := yaml.Marshal(o.Object)
			if err != nil {
				return nil, err
			}
			b.WriteString("---\n")
			b.Write(data)
		}
		files = append(files, File{Path: "apply-separately.yaml", Data: b.Bytes()})
	}
	if err := add("metadata/annotations.yaml", map[string]any{"annotations": bundleAnnotations()}); err != nil {
		return nil, err
	}
	files = append(files, File{Path: "bundle.Dockerfile", Data: dockerfile()})
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// bundleAnnotations are metadata/annotations.yaml, repeated as the bundle image's labels.
func bundleAnnotations() map[string]string {
	return map[string]string{
		"operators.operatorframework.io.bundle.mediatype.v1":       "registry+v1",
		"operators.operatorframework.io.bundle.manifests.v1":       "manifests/",
		"operators.operatorframework.io.bundle.metadata.v1":        "metadata/",
		"operators.operatorframework.io.bundle.package.v1":         Package,
		"operators.operatorframework.io.bundle.channels.v1":        Channel,
		"operators.operatorframework.io.bundle.channel.default.v1": Channel,
		// ValidatingAdmissionPolicy is GA from Kubernetes 1.30, OpenShift 4.17.
		"com.redhat.openshift.versions": "v4.17",
	}
}

func dockerfile() []byte {
	ann := bundleAnnotations()
	keys := make([]string, 0, len(ann))
	for k := range ann {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# The OLM bundle image. Generated by `make bundle`; do not edit.\n" +
		"#   podman build -f bundle/bundle.Dockerfile -t quay.io/drain-guardian/drain-guardian-bundle:v<version> bundle/\n" +
		"FROM scratch\n\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "LABEL %s=%s\n", k, ann[k])
	}
	b.WriteString("\nCOPY manifests /manifests/\nCOPY metadata /metadata/\n")
	return []byte(b.String())
}

// Write replaces the generated files under dir; files it did not generate there are removed, so a
// kind that leaves the base leaves the bundle too.
func Write(dir string, files []File) error {
	for _, sub := range []string{"manifests", "metadata", "apply-separately.yaml", "bundle.Dockerfile"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return err
		}
	}
	for _, f := range files {
		path := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps and API structs are passed
	}
	return string(data)
}

// DefaultBase is the kustomization the bundle is made of: the OpenShift overlay of manifests/base,
// which adds the service-CA certificate of /metrics (the Service annotation, the Secret volume)
// that the ServiceMonitor verifies, and the console dashboard, which lives in another namespace
// and so is applied separately.
const DefaultBase = "../../manifests/overlays/openshift"

// DefaultVersion is the version `make bundle` generates unless BUNDLE_VERSION says otherwise.
const DefaultVersion = "0.1.0"

// defaults fills the images from the version.
func (c *Config) defaults() {
	if c.Image == "" {
		c.Image = "quay.io/drain-guardian/drain-guardian:v" + c.Version
	}
	if c.MustGatherImage == "" {
		c.MustGatherImage = "quay.io/drain-guardian/drain-guardian-must-gather:v" + c.Version
	}
}
