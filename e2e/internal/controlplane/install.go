package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// openshiftCRDs are the MCO's CRDs installed from the pinned github.com/openshift/api module,
// relative to its root: MachineConfigPool, MachineConfigNode and MachineConfig
// (machineconfiguration.openshift.io), and MachineConfiguration (operator.openshift.io, whose
// "cluster" object carries the node disruption policies the machine-config-daemon reads). The
// feature-set variants of MachineConfigNode and MachineConfiguration differ only in gated fields;
// Default is what a production cluster serves.
var openshiftCRDs = []string{
	"machineconfiguration/v1/zz_generated.crd-manifests/0000_80_machine-config_01_machineconfigpools.crd.yaml",
	"machineconfiguration/v1/zz_generated.crd-manifests/0000_80_machine-config_01_machineconfignodes-Default.crd.yaml",
	"machineconfiguration/v1/zz_generated.crd-manifests/0000_80_machine-config_01_machineconfigs.crd.yaml",
	"operator/v1/zz_generated.crd-manifests/0000_80_machine-config_01_machineconfigurations-Default.crd.yaml",
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// localCRDDirs hold the other CRDs the test bed installs, relative to the repository root: the KServe
// ones written for the tests, and the guardian's own Surge CRD exactly as manifests/base ships it.
var localCRDDirs = []string{
	filepath.Join("e2e", "crds"),
	filepath.Join("manifests", "base", "crd"),
}

// installCRDs applies the OpenShift CRDs of openshiftCRDs and every CRD found in localCRDDirs,
// then waits until all are Established.
func (cp *ControlPlane) installCRDs(ctx context.Context) error {
	var files []string
	dir, err := cp.openshiftAPIDir(ctx)
	if err != nil {
		return err
	}
	for _, f := range openshiftCRDs {
		files = append(files, filepath.Join(dir, filepath.FromSlash(f)))
	}
	for _, local := range localCRDDirs {
		err = filepath.WalkDir(filepath.Join(cp.repoRoot, local), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return cp.ApplyCRDs(ctx, files...)
}

// ApplyCRDs applies every CustomResourceDefinition of the YAML files and waits until all are
// Established.
func (cp *ControlPlane) ApplyCRDs(ctx context.Context, files ...string) error {
	var names []string
	for _, f := range files {
		objs, err := readYAML(f)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if obj.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if _, err := cp.dynamic.Resource(crdGVR).Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
				return fmt.Errorf("applying CRD %s from %s: %w", obj.GetName(), filepath.Base(f), err)
			}
			names = append(names, obj.GetName())
		}
	}
	fmt.Fprintf(cp.out, "installed %d CRDs\n", len(names))
	for _, name := range names {
		err := poll(ctx, startTimeout, "CRD "+name+" to be Established", func(ctx context.Context) (bool, error) {
			crd, err := cp.dynamic.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ModuleDir is the directory of a module that the Go module in moduleDir (relative to e2e/) pins,
// downloaded first if needed.
func (cp *ControlPlane) ModuleDir(ctx context.Context, moduleDir, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
	cmd.Dir = filepath.Join(cp.repoRoot, "e2e", moduleDir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("downloading %s: %w: %s%s", module, err, out, stderr.String())
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	if mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s: no module directory: %s", module, mod.Error)
	}
	return mod.Dir, nil
}

// openshiftAPIDir is the module directory of the github.com/openshift/api version e2e/go.mod pins,
// downloaded first if needed (no control-plane binary depends on it, so a fresh machine may not have
// it yet).
func (cp *ControlPlane) openshiftAPIDir(ctx context.Context) (string, error) {
	return cp.ModuleDir(ctx, ".", "github.com/openshift/api")
}

// readYAML decodes every non-empty document of a multi-document YAML file.
func readYAML(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// guardianKinds are the objects of manifests/base that make up the guardian's identity and confine
// its writes, in apply order, with their resources. The Deployment and monitoring objects are not applied: on the test
// bed the guardian runs as a local process.
var guardianKinds = []struct {
	kind       string
	gvr        schema.GroupVersionResource
	namespaced bool
}{
	{"Namespace", schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, false},
	{"ServiceAccount", schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true},
	{"ClusterRole", schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, false},
	{"ClusterRoleBinding", schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, false},
	{"Role", schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, true},
	{"RoleBinding", schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, true},
	// The settings the policy reads its bounds from (its parameter), then the policy that confines the
	// guardian's writes: every scenario runs with both in place.
	{"ConfigMap", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, true},
	{"ValidatingAdmissionPolicy", schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}, false},
	{"ValidatingAdmissionPolicyBinding", schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}, false},
}

// installGuardianIdentity creates the guardian's Namespace and ServiceAccount, applies the RBAC
// rendered from manifests/base, and writes a kubeconfig with a 24h token of that ServiceAccount, so
// that the guardian runs on the test bed with exactly the permissions it ships with.
func (cp *ControlPlane) installGuardianIdentity(ctx context.Context, caPEM []byte) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: GuardianNamespace}}
	if _, err := cp.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: GuardianServiceAccount, Namespace: GuardianNamespace}}
	if _, err := cp.client.CoreV1().ServiceAccounts(GuardianNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}

	objs, err := renderGuardianManifests(filepath.Join(cp.repoRoot, "manifests", "base"))
	if err != nil {
		return err
	}
	applied := 0
	for _, k := range guardianKinds {
		for _, obj := range objs {
			if obj.GetKind() != k.kind {
				continue
			}
			var ri dynamic.ResourceInterface
			if k.namespaced {
				ri = cp.dynamic.Resource(k.gvr).Namespace(obj.GetNamespace())
			} else {
				ri = cp.dynamic.Resource(k.gvr)
			}
			if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
				return fmt.Errorf("applying %s %s from manifests/base: %w", k.kind, obj.GetName(), err)
			}
			applied++
		}
	}
	fmt.Fprintf(cp.out, "applied %d objects of the guardian's identity from manifests/base\n", applied)

	tr, err := cp.client.CoreV1().ServiceAccounts(GuardianNamespace).CreateToken(ctx, GuardianServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 60 * 60)}},
		metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", GuardianNamespace, GuardianServiceAccount, err)
	}
	return writeKubeconfig(cp.guardianKubeconfig, cp.server, caPEM, GuardianServiceAccount, tr.Status.Token)
}

// renderGuardianManifests builds the kustomization in dir, as `kubectl apply -k` would.
func renderGuardianManifests(dir string) ([]*unstructured.Unstructured, error) {
	if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); err != nil {
		return nil, fmt.Errorf("the guardian's RBAC is rendered from manifests/base, which has no kustomization.yaml yet: %w", err)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("rendering manifests/base with kustomize: %w", err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, err
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs, nil
}
