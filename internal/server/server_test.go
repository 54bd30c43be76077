package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeAuth authenticates the tokens "good", "other" and "profiler"; it allows only "good" to get
// /metrics and only "profiler" to get the profiles under /debug/pprof/.
func fakeAuth() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		tr.Status.Authenticated = tr.Spec.Token == "good" || tr.Spec.Token == "other" || tr.Spec.Token == "profiler"
		tr.Status.User.Username = tr.Spec.Token
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = na != nil && na.Verb == "get" &&
			(sar.Spec.User == "good" && na.Path == MetricsPath || sar.Spec.User == "profiler" && strings.HasPrefix(na.Path, ProfilingPath))
		return true, sar, nil
	})
	return c
}

func TestMetricsRequireAnAuthorizedToken(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "drain_guardian_leader", Help: "x"})
	reg.MustRegister(g)
	client := fakeAuth()
	h := Metrics(reg, client, false, zap.NewNop())
	for _, tc := range []struct {
		header string
		want   int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer bad", http.StatusUnauthorized},
		{"Bearer other", http.StatusForbidden},
		{"Bearer good", http.StatusOK},
		{"Bearer good", http.StatusOK},
	} {
		req := httptest.NewRequest(http.MethodGet, MetricsPath, nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, req)
		if rr.Code != tc.want {
			t.Fatalf("%q: status %d, want %d", tc.header, rr.Code, tc.want)
		}
		if tc.want == http.StatusOK && !strings.Contains(rr.Body.String(), "drain_guardian_leader") {
			t.Fatalf("metrics body lacks the registry's metrics: %s", rr.Body.String())
		}
	}
	reviews := 0
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "tokenreviews" {
			reviews++
		}
	}
	if reviews != 3 {
		t.Fatalf("%d TokenReviews for 3 distinct tokens: answers must be cached", reviews)
	}
}

func TestReadyzFollowsCacheSync(t *testing.T) {
	ready := false
	h := Health(func() bool { return ready })
	get := func(path string) int {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, path, nil))
		return rr.Code
	}
	if get("/healthz") != http.StatusOK || get("/readyz") != http.StatusServiceUnavailable {
		t.Fatal("before sync: healthz must be ok and readyz unavailable")
	}
	ready = true
	if get("/readyz") != http.StatusOK {
		t.Fatal("readyz not ok after sync")
	}
}

func TestSelfSignedTLSConfig(t *testing.T) {
	cfg, err := TLSConfig("", "drain-guardian")
	if err != nil || len(cfg.Certificates) != 1 {
		t.Fatalf("self-signed config: %v", err)
	}
	if _, err := TLSConfig(t.TempDir(), "x"); err == nil || !strings.Contains(err.Error(), "--metrics-cert-dir") {
		t.Fatalf("an empty cert dir must be an error naming the flag, got %v", err)
	}
}

func TestListenBindsAtOnceAndNamesTheEndpointOnError(t *testing.T) {
	s, err := Listen("health", "127.0.0.1:0", Health(func() bool { return true }), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Accepting connections before Serve: the kernel queues them on the bound socket.
	if _, err := Listen("metrics", s.Addr(), http.NotFoundHandler(), nil); err == nil || !strings.Contains(err.Error(), "metrics endpoint") {
		t.Fatalf("binding a taken address: %v, want an error naming the metrics endpoint", err)
	}
	if off, err := Listen("metrics", "0", http.NotFoundHandler(), nil); off != nil || err != nil {
		t.Fatalf(`address "0" must disable the endpoint, got %v, %v`, off, err)
	}
	var disabled *Server
	if err := disabled.Serve(t.Context(), zap.NewNop()); err != nil {
		t.Fatalf("serving a disabled endpoint: %v", err)
	}
}

// --profiling serves Go's profiles behind the metrics endpoint's checks, authorized per path: a
// token allowed to scrape /metrics may not read a heap profile. Without the flag there are none.
func TestProfilingIsOptInAndAuthorizedPerPath(t *testing.T) {
	reg := prometheus.NewRegistry()
	get := func(h http.Handler, path, token string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, req)
		return rr.Code
	}
	if code := get(Metrics(reg, nil, false, zap.NewNop()), ProfilingPath+"heap", ""); code != http.StatusNotFound {
		t.Errorf("profiling off: heap profile status %d, want 404", code)
	}
	if code := get(Metrics(reg, nil, true, zap.NewNop()), ProfilingPath+"heap", ""); code != http.StatusOK {
		t.Errorf("profiling on, plain endpoint: heap profile status %d, want 200", code)
	}
	h := Metrics(reg, fakeAuth(), true, zap.NewNop())
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{ProfilingPath + "heap", "", http.StatusUnauthorized},
		{ProfilingPath + "heap", "good", http.StatusForbidden},
		{MetricsPath, "good", http.StatusOK},
		{ProfilingPath + "heap", "profiler", http.StatusOK},
		{MetricsPath, "profiler", http.StatusForbidden},
	} {
		if code := get(h, tc.path, tc.token); code != tc.want {
			t.Errorf("%s as %q: status %d, want %d", tc.path, tc.token, code, tc.want)
		}
	}
}
