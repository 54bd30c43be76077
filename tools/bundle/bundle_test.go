package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
)

const bundleDir = "../../bundle"

// validate runs what `operator-sdk bundle validate --select-optional suite=operatorframework`
// runs: the default bundle validators plus the OperatorHub, capability, category and
// good-practices suites. It returns the errors and the warnings, one string each.
func validate(t *testing.T, dir string) (errs, warns []string) {
	t.Helper()
	b, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		return []string{"loading the bundle: " + err.Error()}, nil
	}
	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCapabilitiesValidator,
		validation.StandardCategoriesValidator,
		validation.GoodPracticesValidator,
		validation.AlphaDeprecatedAPIsValidator,
		validation.ObjectValidator,
	)
	objs := append(b.ObjectsToValidate(), map[string]string{"k8s-version": "1.34"})
	for _, res := range validators.Validate(objs...) {
		for _, e := range res.Errors {
			errs = append(errs, e.Error())
		}
		for _, w := range res.Warnings {
			warns = append(warns, w.Error())
		}
	}
	return errs, warns
}

func TestBundlePassesOperatorFrameworkValidators(t *testing.T) {
	errs, warns := validate(t, bundleDir)
	for _, e := range errs {
		t.Errorf("validation error: %s", e)
	}
	for _, w := range warns {
		if !expectedWarning(w) {
			t.Errorf("validation warning: %s", w)
		}
	}
}

// removedAPIResource is a resource the removed-APIs check names in its warning.
var removedAPIResource = regexp.MustCompile(`(\w+): \(\["ClusterServiceVersion`)

// expectedWarning reports whether w is one of the warnings the bundle gives on purpose:
//   - no icon: optional;
//   - no example for Surge: a Surge is created by the guardian only (internal-objects), so the
//     CSV's alm-examples is empty on purpose;
//   - the v1.25 removed-APIs check on RBAC rules: a rule names a group and a resource but no
//     version, so the check warns for every resource that ever had a removed version; the
//     guardian uses events.k8s.io/v1, autoscaling/v2 and policy/v1.
func expectedWarning(w string) bool {
	switch {
	case strings.Contains(w, "csv.Spec.Icon not specified"):
		return true
	case strings.Contains(w, "Kind=Surge: provided API should have an example annotation"):
		return true
	case strings.Contains(w, "deprecated and removed in v1.25"):
		for _, m := range removedAPIResource.FindAllStringSubmatch(w, -1) {
			if m[1] != "events" && m[1] != "horizontalpodautoscalers" && m[1] != "poddisruptionbudgets" {
				return false
			}
		}
		return true
	}
	return false
}

// The fixture's CSV has none of the fields OperatorHub requires and an owned CRD the bundle does not
// ship: the validators must say so, or the test above could pass on anything.
func TestBrokenCSVFailsValidationWithAMessage(t *testing.T) {
	dir := t.TempDir()
	if err := copyDir(bundleDir, dir); err != nil {
		t.Fatal(err)
	}
	broken, err := os.ReadFile("testdata/broken.clusterserviceversion.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", Package+".clusterserviceversion.yaml"), broken, 0o644); err != nil {
		t.Fatal(err)
	}
	errs, _ := validate(t, dir)
	all := strings.Join(errs, "\n")
	for _, want := range []string{
		`owned CRD "example.com/v1, Kind=Widget" not found in bundle`,
		"csv.Spec.Provider.Name not specified",
		"csv.Spec.Version must be set",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no error mentions %q; errors:\n%s", want, all)
		}
	}
}

// bundle/ is generated from manifests/overlays/openshift (and so manifests/base): a change to
// either without `make bundle` fails here.
func TestBundleIsUpToDate(t *testing.T) {
	cfg := Config{Base: DefaultBase, Version: DefaultVersion}
	cfg.defaults()
	files, err := Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, f := range files {
		want[f.Path] = f.Data
	}
	got := map[string][]byte{}
	for _, sub := range []string{"manifests", "metadata"} {
		entries, err := os.ReadDir(filepath.Join(bundleDir, sub))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(bundleDir, sub, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			got[sub+"/"+e.Name()] = data
		}
	}
	for _, name := range []string{"bundle.Dockerfile", "apply-separately.yaml"} {
		if data, err := os.ReadFile(filepath.Join(bundleDir, name)); err == nil {
			got[name] = data
		}
	}
	for path, data := range want {
		if !bytes.Equal(got[path], data) {
			t.Errorf("bundle/%s is stale: run make bundle", path)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("bundle/%s is not generated any more: run make bundle", path)
		}
	}
}

// The CSV carries the base's Deployment and the rules of the roles bound to its ServiceAccount; the
// roles bound to others (check, readers) are bundle manifests of their own.
func TestCSVComesFromTheBase(t *testing.T) {
	objs, err := render(DefaultBase)
	if err != nil {
		t.Fatal(err)
	}
	p, err := split(objs)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Version: "1.2.3"}
	cfg.defaults()
	csv, err := clusterServiceVersion(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	spec := csv.Spec.InstallStrategy.StrategySpec
	if len(spec.DeploymentSpecs) != 1 || spec.DeploymentSpecs[0].Spec.Template.Spec.Containers[0].Image != "quay.io/drain-guardian/drain-guardian:v1.2.3" {
		t.Errorf("deployment specs: %+v", spec.DeploymentSpecs)
	}
	if len(spec.ClusterPermissions) != 1 || len(spec.ClusterPermissions[0].Rules) == 0 || len(spec.Permissions[0].Rules) != 1 ||
		spec.Permissions[0].Rules[0].Resources[0] != "leases" {
		t.Errorf("permissions: %+v %+v", spec.ClusterPermissions, spec.Permissions)
	}
	var kinds []string
	for _, o := range p.others {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
		if o.GetNamespace() != "" {
			t.Errorf("%s keeps namespace %q: OLM installs into the namespace chosen at install", o.GetName(), o.GetNamespace())
		}
	}
	joined := strings.Join(kinds, " ")
	// The settings the Deployment's --max-surge-replicas and the admission policy's bound share travel
	// with the bundle: the Deployment cannot start without them.
	for _, want := range []string{"ClusterRole/drain-guardian-check", "ClusterRole/drain-guardian-surges-reader", "ServiceMonitor/drain-guardian", "ConfigMap/drain-guardian-settings"} {
		if !strings.Contains(joined, want) {
			t.Errorf("bundle objects %s lack %s", joined, want)
		}
	}
	for _, not := range []string{"ClusterRole/drain-guardian ", "ServiceAccount/", "Namespace/"} {
		if strings.Contains(joined+" ", not) {
			t.Errorf("bundle objects %s carry %s, which OLM makes from the CSV", joined, not)
		}
	}
	// The console dashboard is a ConfigMap in openshift-config-managed (OLM creates objects in the
	// install namespace only), and OLM installs no admission policy.
	var separate []string
	for _, o := range p.separate {
		separate = append(separate, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	sort.Strings(separate)
	want := []string{
		"ConfigMap/openshift-config-managed/drain-guardian-dashboard",
		"ValidatingAdmissionPolicy//drain-guardian-writes",
		"ValidatingAdmissionPolicyBinding//drain-guardian-writes",
		"ValidatingAdmissionPolicyBinding//drain-guardian-writes-settings",
	}
	if !slices.Equal(separate, want) {
		t.Errorf("objects to apply separately: %v, want %v", separate, want)
	}
}

// A kind OLM cannot install (the admission policy that confines the guardian's writes, say) is
// written beside the bundle and named in the CSV description, not silently dropped.
func TestKindsABundleCannotCarryAreAppliedSeparately(t *testing.T) {
	files, err := Generate(Config{Base: DefaultBase, Version: "0.1.0", Image: "img", MustGatherImage: "mg"})
	if err != nil {
		t.Fatal(err)
	}
	var csv, separate string
	for _, f := range files {
		switch f.Path {
		case "manifests/" + Package + ".clusterserviceversion.yaml":
			csv = string(f.Data)
		case "apply-separately.yaml":
			separate = string(f.Data)
		}
		if strings.HasPrefix(f.Path, "manifests/") && strings.Contains(string(f.Data), "kind: ValidatingAdmissionPolicy") {
			t.Errorf("%s carries a ValidatingAdmissionPolicy into the bundle", f.Path)
		}
	}
	for _, want := range []string{"kind: ValidatingAdmissionPolicy\n", "kind: ValidatingAdmissionPolicyBinding\n", "name: drain-guardian-writes"} {
		if !strings.Contains(separate, want) {
			t.Errorf("apply-separately.yaml lacks %q:\n%s", want, separate)
		}
	}
	if !strings.Contains(csv, "ValidatingAdmissionPolicy drain-guardian-writes") || !strings.Contains(csv, "apply-separately.yaml") {
		t.Errorf("the CSV description does not name what to apply separately:\n%s", csv)
	}
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
