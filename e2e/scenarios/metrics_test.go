package scenarios

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMetricsOverTLSWithAuthorization runs a stall with /metrics served as shipped (TLS, TokenReview
// and SubjectAccessReview) and scrapes it as the platform Prometheus does, with the token of
// openshift-monitoring/prometheus-k8s, which the shipped RBAC allows; a token without that grant and a
// request without a token are refused. The metrics then tell the stall's story.
func TestMetricsOverTLSWithAuthorization(t *testing.T) {
	s := newScenario(t, "metrics", gpuNodes(3, 1), selectorOf(modelLabels))
	s.createDeployment(loadingDelay)
	g := s.startGuardian("--metrics-secure=true")

	prometheus := s.serviceAccountToken("openshift-monitoring", "prometheus-k8s")
	stranger := s.serviceAccountToken(s.ns, "default")
	scrape := func(token string) (int, string) {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			// The certificate is self-signed (no --metrics-cert-dir), as on a cluster without the service CA.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback test of a self-signed endpoint
		}}
		req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, "https://"+g.MetricsAddr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			s.fatalf("scraping /metrics over TLS: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, c := range []struct {
		who, token string
		want       int
	}{{"no token", "", http.StatusUnauthorized}, {"a service account without the grant", stranger, http.StatusForbidden}} {
		if code, _ := scrape(c.token); code != c.want {
			t.Errorf("scrape with %s: HTTP %d, want %d", c.who, code, c.want)
		}
	}

	s.obs.StartSampling()
	s.updatePool()
	s.waitPoolUpdated()
	s.waitRestored(selectorOf(modelLabels), 1)
	s.assertAvailable()

	code, body := scrape(prometheus)
	if code != http.StatusOK {
		s.fatalf("scrape as openshift-monitoring/prometheus-k8s: HTTP %d: %s", code, body)
	}
	pool := fmt.Sprintf("pool=%q", s.pool)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`drain_guardian_stalls_detected_total\{kind="Deployment",` + pool + `,trigger="MCO(Targeted|Drain|Predicted)"\} 1`),
		regexp.MustCompile(`drain_guardian_stalls_resolved_total\{kind="Deployment",` + pool + `\} 1`),
		regexp.MustCompile(`drain_guardian_replacement_ready_duration_seconds_count\{kind="Deployment"\} 1`),
		regexp.MustCompile(`drain_guardian_leader 1`),
		regexp.MustCompile(`drain_guardian_build_info\{`),
		regexp.MustCompile(`drain_guardian_workqueue_adds_total\{name="drain_guardian"\} [1-9]`),
	} {
		if !want.MatchString(body) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, "drain_guardian_surges_active{") && !regexp.MustCompile(`drain_guardian_surges_active\{[^}]*\} 0`).MatchString(body) {
		t.Errorf("a surge is still reported active after the restore")
	}
}

// serviceAccountToken creates the ServiceAccount if needed and returns a short-lived token for it.
func (s *scenario) serviceAccountToken(namespace, name string) string {
	s.t.Helper()
	kube := testBed.CP.Client()
	if _, err := kube.CoreV1().Namespaces().Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		s.fatalf("creating namespace %s: %v", namespace, err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(namespace).Create(s.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		s.fatalf("creating service account %s/%s: %v", namespace, name, err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(s.ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptrInt64(600)},
	}, metav1.CreateOptions{})
	if err != nil {
		s.fatalf("token for %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

func ptrInt64(v int64) *int64 { return &v }
