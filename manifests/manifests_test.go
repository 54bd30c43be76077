// Package manifests holds the tests of the shipped Kubernetes manifests: every kustomization renders
// offline, every object decodes strictly against the real API types, the RBAC equals what the code
// needs, the Deployment passes only flags the daemon has, and the alerts query only metrics the daemon
// exports.
package manifests

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/rbac"
	"github.com/drain-guardian/drain-guardian/manifests/promcheck"
)

var update = flag.Bool("update", false, "rewrite prometheus/drain-guardian.rules.yaml from base/prometheusrule.yaml")

const (
	namespace      = "drain-guardian"
	serviceAccount = "drain-guardian"
	image          = "quay.io/drain-guardian/drain-guardian:latest"
	rulesFile      = "prometheus/drain-guardian.rules.yaml"
	alertTestsFile = "tests/alerts_test.yaml"
	runbookURLBase = "https://github.com/drain-guardian/drain-guardian/blob/main/docs/runbooks/"
)

// installable are the kustomizations an admin applies to install the daemon.
var installable = []string{"base", "overlays/openshift", "overlays/kubernetes"}

// requiredAlerts are the alerts the documentation promises.
var requiredAlerts = []string{
	"DrainGuardianDown",
	"DrainGuardianSurgeFailed",
	"DrainGuardianStallUnresolved",
	"DrainGuardianSurgeHeldTooLong",
	"DrainGuardianUnresolvableBlock",
}

// rendered is the output of one kustomization, decoded into typed objects.
type rendered struct {
	dir     string
	objects []runtime.Object
}

// decoder decodes strictly: an unknown or duplicated field is an error, so a typo in a manifest
// (which the API server would silently drop) fails the test.
var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

// grafanaDashboard is the subset of grafana-operator's GrafanaDashboard (v1beta1) the manifests
// use. grafana-operator's Go module pulls in a large dependency tree, so the object is decoded
// strictly into this struct instead: a field outside it fails the test and must be added here after
// checking the CRD.
type grafanaDashboard struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		InstanceSelector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"instanceSelector"`
		AllowCrossNamespaceImport bool   `json:"allowCrossNamespaceImport"`
		Folder                    string `json:"folder"`
		ConfigMapRef              struct {
			Name string `json:"name"`
			Key  string `json:"key"`
		} `json:"configMapRef"`
	} `json:"spec"`
}

func render(t *testing.T, dir string) (rendered, []*grafanaDashboard) {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	out := rendered{dir: dir}
	var dashboards []*grafanaDashboard
	for _, r := range resMap.Resources() {
		js, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %s: %v", dir, r.CurId(), err)
		}
		if r.GetKind() == "GrafanaDashboard" {
			g := &grafanaDashboard{}
			if err := strictJSON(js, g); err != nil {
				t.Errorf("%s: %s: %v", dir, r.CurId(), err)
				continue
			}
			dashboards = append(dashboards, g)
			continue
		}
		// A strict decoding error still returns the object, so the other checks can run on it.
		obj, _, err := decoder.Decode(js, nil, nil)
		if err != nil {
			t.Errorf("%s: %s: %v", dir, r.CurId(), err)
		}
		if obj != nil {
			out.objects = append(out.objects, obj)
		}
	}
	return out, dashboards
}

func strictJSON(data []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// find returns the only object of type T named name, failing the test if there is none.
func find[T runtime.Object](t *testing.T, r rendered, name string) T {
	t.Helper()
	var found []T
	for _, o := range r.objects {
		if typed, ok := o.(T); ok && objectName(o) == name {
			found = append(found, typed)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%s: want exactly one %T named %q, found %d", r.dir, zero, name, len(found))
	}
	return found[0]
}

func objectName(o runtime.Object) string {
	if m, ok := o.(interface{ GetName() string }); ok {
		return m.GetName()
	}
	return ""
}

func kinds(r rendered) []string {
	var out []string
	for _, o := range r.objects {
		out = append(out, fmt.Sprintf("%T/%s", o, objectName(o)))
	}
	sort.Strings(out)
	return out
}

func TestKustomizationsRenderStrictly(t *testing.T) {
	for _, dir := range append(slices.Clone(installable), "grafana") {
		t.Run(dir, func(t *testing.T) {
			r, _ := render(t, dir)
			if len(r.objects) == 0 && dir != "grafana" {
				t.Fatalf("%s renders no objects", dir)
			}
			for _, o := range r.objects {
				ns, ok := o.(interface{ GetNamespace() string })
				if ok && isNamespaced(o) && ns.GetNamespace() == "" {
					t.Errorf("%T %s has no namespace: applying it would depend on the caller's context", o, objectName(o))
				}
			}
		})
	}
}

// isNamespaced reports whether objects of o's kind live in a namespace.
func isNamespaced(o runtime.Object) bool {
	switch o.(type) {
	case *corev1.Namespace, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
		return false
	}
	return true
}

func TestOverlayContents(t *testing.T) {
	openshift, _ := render(t, "overlays/openshift")
	kubernetes, _ := render(t, "overlays/kubernetes")

	t.Run("openshift monitoring", func(t *testing.T) {
		ns := find[*corev1.Namespace](t, openshift, namespace)
		if ns.Labels["openshift.io/cluster-monitoring"] != "true" {
			t.Errorf("namespace lacks openshift.io/cluster-monitoring=true: the platform Prometheus would ignore it")
		}
		find[*monitoringv1.PrometheusRule](t, openshift, "drain-guardian")
		binding := find[*rbacv1.ClusterRoleBinding](t, openshift, "drain-guardian-metrics-reader")
		want := rbacv1.Subject{Kind: "ServiceAccount", Name: "prometheus-k8s", Namespace: "openshift-monitoring"}
		if len(binding.Subjects) != 1 || binding.Subjects[0] != want {
			t.Errorf("metrics reader binding subjects = %+v, want [%+v]", binding.Subjects, want)
		}
		reader := find[*rbacv1.ClusterRole](t, openshift, binding.RoleRef.Name)
		wantRules := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
		if fmt.Sprint(reader.Rules) != fmt.Sprint(wantRules) {
			t.Errorf("metrics reader rules = %+v, want %+v (the daemon's SubjectAccessReview asks exactly this)", reader.Rules, wantRules)
		}
	})

	t.Run("openshift serving certificate", func(t *testing.T) {
		svc := find[*corev1.Service](t, openshift, "drain-guardian")
		secret := svc.Annotations["service.beta.openshift.io/serving-cert-secret-name"]
		if secret == "" {
			t.Fatal("the Service does not ask the service CA for a serving certificate")
		}
		dep := find[*appsv1.Deployment](t, openshift, "drain-guardian")
		pod := dep.Spec.Template.Spec
		var volume string
		for _, v := range pod.Volumes {
			if v.Secret != nil && v.Secret.SecretName == secret {
				volume = v.Name
			}
		}
		if volume == "" {
			t.Fatalf("no volume mounts the serving certificate Secret %q", secret)
		}
		certDir := flagValue(pod.Containers[0].Args, "metrics-cert-dir")
		mounted := false
		for _, m := range pod.Containers[0].VolumeMounts {
			if m.Name == volume && m.MountPath == certDir {
				mounted = true
			}
		}
		if certDir == "" || !mounted {
			t.Errorf("--metrics-cert-dir=%q is not where the certificate volume %q is mounted", certDir, volume)
		}

		sm := find[*monitoringv1.ServiceMonitor](t, openshift, "drain-guardian")
		tls := sm.Spec.Endpoints[0].TLSConfig
		wantServer := svc.Name + "." + svc.Namespace + ".svc"
		if tls == nil || tls.CAFile == "" || tls.ServerName == nil || *tls.ServerName != wantServer {
			t.Fatalf("ServiceMonitor tlsConfig = %+v, want the service CA and serverName %s", tls, wantServer)
		}
		if tls.InsecureSkipVerify != nil && *tls.InsecureSkipVerify {
			t.Error("ServiceMonitor skips certificate verification although the service CA signs it")
		}
	})

	t.Run("openshift console dashboard", func(t *testing.T) {
		cm := find[*corev1.ConfigMap](t, openshift, "drain-guardian-dashboard")
		if cm.Namespace != "openshift-config-managed" || cm.Labels["console.openshift.io/dashboard"] != "true" {
			t.Errorf("dashboard ConfigMap %s/%s labels %v: the console would not find it", cm.Namespace, cm.Name, cm.Labels)
		}
		want, err := os.ReadFile("../dashboards/drain-guardian.json")
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data["drain-guardian.json"] != string(want) {
			t.Error("the console ConfigMap does not carry dashboards/drain-guardian.json unchanged")
		}
	})

	t.Run("kubernetes has no OpenShift pieces", func(t *testing.T) {
		for _, o := range kubernetes.objects {
			switch o := o.(type) {
			case *monitoringv1.ServiceMonitor, *monitoringv1.PrometheusRule:
				t.Errorf("%T is left in the kubernetes overlay: it fails without the prometheus-operator CRDs", o)
			case *corev1.ConfigMap:
				t.Errorf("ConfigMap %s/%s is left in the kubernetes overlay", o.Namespace, o.Name)
			case *corev1.Namespace:
				if _, ok := o.Labels["openshift.io/cluster-monitoring"]; ok {
					t.Error("the kubernetes overlay keeps the OpenShift cluster-monitoring label")
				}
			case *corev1.Service:
				if len(o.Annotations) > 0 {
					t.Errorf("the kubernetes overlay's Service has annotations %v", o.Annotations)
				}
			case *rbacv1.ClusterRoleBinding:
				for _, s := range o.Subjects {
					if s.Namespace == "openshift-monitoring" {
						t.Errorf("ClusterRoleBinding %s binds %s/%s", o.Name, s.Namespace, s.Name)
					}
				}
			}
		}
		dep := find[*appsv1.Deployment](t, kubernetes, "drain-guardian")
		if v := flagValue(dep.Spec.Template.Spec.Containers[0].Args, "metrics-cert-dir"); v != "" {
			t.Errorf("the kubernetes overlay passes --metrics-cert-dir=%s but mounts no certificate", v)
		}
	})
}

// flagValue returns the value of --name=value in args, or "".
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func TestDeployment(t *testing.T) {
	for _, dir := range installable {
		t.Run(dir, func(t *testing.T) {
			r, _ := render(t, dir)
			dep := find[*appsv1.Deployment](t, r, "drain-guardian")
			pod := dep.Spec.Template.Spec

			if dep.Namespace != namespace || pod.ServiceAccountName != serviceAccount {
				t.Errorf("Deployment runs in %s as %s, want %s as %s", dep.Namespace, pod.ServiceAccountName, namespace, serviceAccount)
			}
			find[*corev1.ServiceAccount](t, r, pod.ServiceAccountName)
			if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
				t.Errorf("replicas = %v, want 2 (leader election with a standby)", dep.Spec.Replicas)
			}
			if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil {
				t.Error("no pod anti-affinity: both replicas could land on the node being drained")
			}
			if !labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).Matches(labels.Set(dep.Spec.Template.Labels)) {
				t.Error("the Deployment's selector does not match its pod template")
			}
			if len(pod.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(pod.Containers))
			}
			c := pod.Containers[0]
			if c.Image != image {
				t.Errorf("image = %s, want %s", c.Image, image)
			}

			// OpenShift's restricted-v2 SCC assigns an arbitrary UID; pinning one would be rejected.
			psc := pod.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser != nil || psc.FSGroup != nil {
				t.Errorf("pod securityContext %+v: want runAsNonRoot and no runAsUser/fsGroup", psc)
			}
			if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Error("pod seccompProfile is not RuntimeDefault")
			}
			sc := c.SecurityContext
			switch {
			case sc == nil:
				t.Fatal("container has no securityContext")
			case sc.RunAsUser != nil:
				t.Error("container pins runAsUser")
			case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				t.Error("container allows privilege escalation")
			case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Error("container root filesystem is writable")
			case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
				t.Errorf("capabilities %+v, want drop [ALL] and nothing added", sc.Capabilities)
			case sc.Privileged != nil && *sc.Privileged:
				t.Error("container is privileged")
			}

			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if _, ok := c.Resources.Requests[res]; !ok {
					t.Errorf("no %s request", res)
				}
				if _, ok := c.Resources.Limits[res]; !ok {
					t.Errorf("no %s limit", res)
				}
			}

			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			wantArgs := map[string]string{
				"metrics-bind-address":      ":8443",
				"health-probe-bind-address": ":8081",
				"leader-elect":              "true",
			}
			for name, want := range wantArgs {
				if got := flagValue(c.Args, name); got != want {
					t.Errorf("--%s=%q, want %q", name, got, want)
				}
			}
			if ports["https"] != 8443 || ports["health"] != 8081 {
				t.Errorf("container ports %v, want https=8443 and health=8081", ports)
			}
			for probe, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil {
					t.Errorf("no HTTP probe for %s", probe)
					continue
				}
				port := p.HTTPGet.Port.IntValue()
				if p.HTTPGet.Port.StrVal != "" {
					port = int(ports[p.HTTPGet.Port.StrVal])
				}
				if p.HTTPGet.Path != probe || port != 8081 || p.HTTPGet.Scheme != corev1.URISchemeHTTP {
					t.Errorf("probe %+v, want GET %s on plain HTTP port 8081", p.HTTPGet, probe)
				}
			}

			// The Service and the NetworkPolicy must lead to the same pod ports.
			svc := find[*corev1.Service](t, r, "drain-guardian")
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) {
				t.Error("the Service selects no drain-guardian pod")
			}
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8443 || ports[svc.Spec.Ports[0].TargetPort.StrVal] != 8443 {
				t.Errorf("Service ports %+v, want 8443 to the container's metrics port", svc.Spec.Ports)
			}
			np := find[*networkingv1.NetworkPolicy](t, r, "drain-guardian")
			sel := labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels)
			if !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
				t.Error("the NetworkPolicy does not select the drain-guardian pods")
			}
			var allowed []int
			for _, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					allowed = append(allowed, p.Port.IntValue())
				}
			}
			sort.Ints(allowed)
			if !slices.Equal(allowed, []int{8081, 8443}) {
				t.Errorf("NetworkPolicy admits ports %v, want exactly the probe and metrics ports [8081 8443]", allowed)
			}
			if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) == 0 {
				t.Error("the NetworkPolicy does not restrict egress")
			}

			if sm, ok := findOptional[*monitoringv1.ServiceMonitor](r, "drain-guardian"); ok {
				if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
					t.Error("the ServiceMonitor does not select the Service")
				}
				ep := sm.Spec.Endpoints[0]
				if ep.Port != svc.Spec.Ports[0].Name || ep.Scheme == nil || *ep.Scheme != "https" {
					t.Errorf("ServiceMonitor endpoint port %q scheme %v, want %q over https", ep.Port, ep.Scheme, svc.Spec.Ports[0].Name)
				}
				if ep.BearerTokenFile == "" && ep.Authorization == nil {
					t.Error("the ServiceMonitor sends no token: every scrape would be refused")
				}
			}
		})
	}
}

func findOptional[T runtime.Object](r rendered, name string) (T, bool) {
	for _, o := range r.objects {
		if typed, ok := o.(T); ok && objectName(o) == name {
			return typed, true
		}
	}
	var zero T
	return zero, false
}

// TestDeploymentFlagsExist parses the Deployment's arguments with the daemon's own flag set, so a
// renamed or removed flag (or a bad value) fails here rather than in a crash-looping pod.
func TestDeploymentFlagsExist(t *testing.T) {
	for _, dir := range installable {
		t.Run(dir, func(t *testing.T) {
			r, _ := render(t, dir)
			args := find[*appsv1.Deployment](t, r, "drain-guardian").Spec.Template.Spec.Containers[0].Args
			if len(args) == 0 || args[0] != "run" {
				t.Fatalf("args %v must start with the run subcommand", args)
			}
			fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
			fs.SetOutput(&bytes.Buffer{})
			options.NewOptions().AddFlags(fs)
			for _, a := range args[1:] {
				name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if !strings.HasPrefix(a, "--") || fs.Lookup(name) == nil {
					t.Errorf("argument %q is not a drain-guardian flag", a)
				}
			}
			if err := fs.Parse(args[1:]); err != nil {
				t.Errorf("the daemon rejects the Deployment's arguments: %v", err)
			}
			if fs.NArg() != 0 {
				t.Errorf("stray arguments %v", fs.Args())
			}
		})
	}
}

// ruleKey is one permission: API group, resource (or non-resource URL) and verb.
type ruleKey struct{ group, resource, verb string }

func flatten(t *testing.T, rules []rbacv1.PolicyRule) map[ruleKey]bool {
	t.Helper()
	out := map[ruleKey]bool{}
	for _, r := range rules {
		if len(r.ResourceNames) > 0 {
			t.Errorf("rule %+v limits resourceNames: compare them too before using them", r)
		}
		for _, v := range r.Verbs {
			for _, u := range r.NonResourceURLs {
				out[ruleKey{"", "url:" + u, v}] = true
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					out[ruleKey{g, res, v}] = true
				}
			}
		}
	}
	for k := range out {
		if k.group == "*" || k.resource == "*" || k.verb == "*" || k.resource == "url:*" {
			t.Errorf("wildcard permission %+v", k)
		}
	}
	return out
}

func compareRules(t *testing.T, what string, got, want []rbacv1.PolicyRule) {
	t.Helper()
	g, w := flatten(t, got), flatten(t, want)
	for k := range w {
		if !g[k] {
			t.Errorf("%s is missing %q %q on group %q, which the daemon uses", what, k.verb, k.resource, k.group)
		}
	}
	for k := range g {
		if !w[k] {
			t.Errorf("%s grants %q %q on group %q, which internal/rbac does not list", what, k.verb, k.resource, k.group)
		}
	}
}

func TestRBACMatchesCode(t *testing.T) {
	for _, dir := range installable {
		t.Run(dir, func(t *testing.T) {
			r, _ := render(t, dir)
			cr := find[*rbacv1.ClusterRole](t, r, "drain-guardian")
			compareRules(t, "ClusterRole drain-guardian", cr.Rules, rbac.ClusterRoleRules())
			role := find[*rbacv1.Role](t, r, "drain-guardian-leader-election")
			if role.Namespace != namespace {
				t.Errorf("leader-election Role is in %q, want %q", role.Namespace, namespace)
			}
			compareRules(t, "Role drain-guardian-leader-election", role.Rules, rbac.LeaderElectionRules())

			sa := rbacv1.Subject{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}
			crb := find[*rbacv1.ClusterRoleBinding](t, r, "drain-guardian")
			if crb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}) ||
				!slices.Equal(crb.Subjects, []rbacv1.Subject{sa}) {
				t.Errorf("ClusterRoleBinding %+v does not bind ClusterRole %s to %+v", crb, cr.Name, sa)
			}
			rb := find[*rbacv1.RoleBinding](t, r, "drain-guardian-leader-election")
			if rb.Namespace != namespace || rb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}) ||
				!slices.Equal(rb.Subjects, []rbacv1.Subject{sa}) {
				t.Errorf("RoleBinding %+v does not bind Role %s to %+v", rb, role.Name, sa)
			}
		})
	}
}

// promRule mirrors one rule of a Prometheus rules file, field for field.
type promRule struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

type promGroup struct {
	Name     string     `yaml:"name"`
	Interval string     `yaml:"interval,omitempty"`
	Rules    []promRule `yaml:"rules"`
}

type promRulesFile struct {
	Groups []promGroup `yaml:"groups"`
}

// fromPrometheusRule converts the operator's object into the plain rules-file form.
func fromPrometheusRule(t *testing.T, pr *monitoringv1.PrometheusRule) promRulesFile {
	t.Helper()
	var out promRulesFile
	for _, g := range pr.Spec.Groups {
		if g.Limit != nil || g.PartialResponseStrategy != "" || g.QueryOffset != nil || len(g.Labels) > 0 {
			t.Fatalf("group %s uses fields the rules-file conversion does not carry", g.Name)
		}
		pg := promGroup{Name: g.Name}
		if g.Interval != nil {
			pg.Interval = string(*g.Interval)
		}
		for _, r := range g.Rules {
			if r.KeepFiringFor != nil {
				t.Fatalf("rule %s%s uses keep_firing_for, which the conversion does not carry", r.Alert, r.Record)
			}
			pr := promRule{Record: r.Record, Alert: r.Alert, Expr: r.Expr.String(), Labels: r.Labels, Annotations: r.Annotations}
			if r.For != nil {
				pr.For = string(*r.For)
			}
			pg.Rules = append(pg.Rules, pr)
		}
		out.Groups = append(out.Groups, pg)
	}
	return out
}

func readRulesFile(t *testing.T) promRulesFile {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f promRulesFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return f
}

func prometheusRule(t *testing.T) *monitoringv1.PrometheusRule {
	t.Helper()
	r, _ := render(t, "base")
	return find[*monitoringv1.PrometheusRule](t, r, "drain-guardian")
}

// TestRulesFileMatchesPrometheusRule keeps the plain rules file (which promtool tests) identical to
// the PrometheusRule (which the cluster runs). Run with -update to regenerate the file.
func TestRulesFileMatchesPrometheusRule(t *testing.T) {
	want := fromPrometheusRule(t, prometheusRule(t))
	if *update {
		var buf bytes.Buffer
		buf.WriteString("# Generated from manifests/base/prometheusrule.yaml by\n" +
			"#   go test ./manifests -run TestRulesFileMatchesPrometheusRule -update\n" +
			"# Do not edit: edit the PrometheusRule and regenerate. Tested by manifests/tests/alerts_test.yaml.\n")
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(want); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(rulesFile, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := readRulesFile(t)
	gotYAML, _ := yaml.Marshal(got)
	wantYAML, _ := yaml.Marshal(want)
	if !bytes.Equal(gotYAML, wantYAML) {
		t.Errorf("%s differs from base/prometheusrule.yaml; regenerate it with\n"+
			"  go test ./manifests -run TestRulesFileMatchesPrometheusRule -update\n--- file:\n%s\n--- PrometheusRule:\n%s",
			rulesFile, gotYAML, wantYAML)
	}
}

func TestAlerts(t *testing.T) {
	catalog, err := promcheck.DaemonCatalog()
	if err != nil {
		t.Fatal(err)
	}
	// up is written by Prometheus itself for every scrape target.
	external := map[string]bool{"up": true}

	alerts := map[string]promRule{}
	for _, g := range fromPrometheusRule(t, prometheusRule(t)).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if _, dup := alerts[r.Alert]; dup {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			alerts[r.Alert] = r
		}
	}
	for _, name := range requiredAlerts {
		if _, ok := alerts[name]; !ok {
			t.Errorf("alert %s is missing", name)
		}
	}
	for name, r := range alerts {
		for _, err := range catalog.Check(r.Expr, external, false) {
			t.Errorf("alert %s: %v", name, err)
		}
		switch r.Labels["severity"] {
		case "info", "warning", "critical":
		default:
			t.Errorf("alert %s: severity %q, want info, warning or critical", name, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s has no %s", name, a)
			}
		}
		if want := runbookURLBase + name + ".md"; r.Annotations["runbook_url"] != want {
			t.Errorf("alert %s runbook_url = %q, want %q", name, r.Annotations["runbook_url"], want)
		}
		if _, err := os.Stat(filepath.Join("..", "docs", "runbooks", name+".md")); err != nil {
			t.Errorf("alert %s: its runbook is missing: %v", name, err)
		}
	}
}

// alertTests mirrors the parts of a promtool test file this test inspects.
type alertTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestEveryAlertHasPromtoolTests makes sure the promtool tests show each alert both firing and
// staying quiet, and that they load the shipped rules file.
func TestEveryAlertHasPromtoolTests(t *testing.T) {
	data, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var at alertTests
	if err := yaml.Unmarshal(data, &at); err != nil {
		t.Fatal(err)
	}
	wantFile, _ := filepath.Rel(filepath.Dir(alertTestsFile), rulesFile)
	if !slices.Equal(at.RuleFiles, []string{wantFile}) {
		t.Errorf("%s loads %v, want [%s]", alertTestsFile, at.RuleFiles, wantFile)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range at.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, g := range fromPrometheusRule(t, prometheusRule(t)).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !firing[r.Alert] {
				t.Errorf("no promtool test shows %s firing", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("no promtool test shows %s staying quiet", r.Alert)
			}
		}
	}
}

func TestGrafanaDashboard(t *testing.T) {
	r, dashboards := render(t, "grafana")
	if len(dashboards) != 1 {
		t.Fatalf("want one GrafanaDashboard, got %d", len(dashboards))
	}
	d := dashboards[0]
	if d.APIVersion != "grafana.integreatly.org/v1beta1" {
		t.Errorf("apiVersion %s, want grafana.integreatly.org/v1beta1", d.APIVersion)
	}
	if len(d.Spec.InstanceSelector.MatchLabels) == 0 {
		t.Error("the GrafanaDashboard selects no Grafana instance")
	}
	// grafana-operator reads configMapRef from the dashboard's own namespace.
	cm := find[*corev1.ConfigMap](t, r, d.Spec.ConfigMapRef.Name)
	if cm.Namespace != d.Metadata.Namespace {
		t.Errorf("ConfigMap %s/%s is not in the GrafanaDashboard's namespace %s", cm.Namespace, cm.Name, d.Metadata.Namespace)
	}
	want, err := os.ReadFile("../dashboards/drain-guardian.json")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[d.Spec.ConfigMapRef.Key] != string(want) {
		t.Errorf("ConfigMap key %q does not carry dashboards/drain-guardian.json unchanged", d.Spec.ConfigMapRef.Key)
	}
}
