package faultproxy

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// upstream is a stand-in API server: it answers a Pod GET, PATCH, and a watch that sends nothing
// until the client goes; served counts the requests that reached it.
type upstream struct {
	*httptest.Server
	served atomic.Int64
}

const podJSON = `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","resourceVersion":"7"}}`

func startUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		_, _ = fmt.Fprint(w, podJSON)
	}))
	t.Cleanup(u.Close)
	return u
}

func startProxy(t *testing.T, u *upstream, cfg Config) (*Proxy, kubernetes.Interface) {
	t.Helper()
	cfg.Upstream = u.URL
	cfg.UpstreamCA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: u.Certificate().Raw})
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	dir := t.TempDir()
	from, to := filepath.Join(dir, "upstream.kubeconfig"), filepath.Join(dir, "proxy.kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: u.URL, CertificateAuthorityData: cfg.UpstreamCA}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "secret"}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*kc, from); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteKubeconfig(from, to); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", to)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != p.URL() || rc.BearerToken != "secret" {
		t.Fatalf("kubeconfig through the proxy: host %s token %q, want %s and the original token", rc.Host, rc.BearerToken, p.URL())
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return p, kube
}

func TestNoFaultsForwardsEverything(t *testing.T) {
	u := startUpstream(t)
	p, kube := startProxy(t, u, Config{Seed: 1, Rate: 0})
	for range 20 {
		if _, err := kube.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := u.served.Load(); got != 20 {
		t.Errorf("upstream served %d requests, want 20", got)
	}
	if p.Total() != 0 {
		t.Errorf("%d faults at rate 0", p.Total())
	}
}

// TestFailedTestIs422WithoutObject: a JSON patch meets the API server's answer to a failed test
// operation, which the guardian must read as a conflict; the upstream never sees the write.
func TestFailedTestIs422WithoutObject(t *testing.T) {
	u := startUpstream(t)
	p, kube := startProxy(t, u, Config{Seed: 1, Rate: 1, Only: []Fault{TestFailed}})
	patch := []byte(`[{"op":"test","path":"/metadata/resourceVersion","value":"6"}]`)
	_, err := kube.CoreV1().Pods("ns").Patch(t.Context(), "p", types.JSONPatchType, patch, metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("JSON patch answered %v, want 422 Invalid", err)
	}
	var status apierrors.APIStatus
	if ok := asStatus(err, &status); !ok || status.Status().Code != http.StatusUnprocessableEntity || status.Status().Details.Name != "" {
		t.Fatalf("status %+v, want code 422 naming no object", status)
	}
	// A merge patch cannot fail a test: it goes through.
	if _, err := kube.CoreV1().Pods("ns").Patch(t.Context(), "p", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("merge patch: %v", err)
	}
	if got := u.served.Load(); got != 1 {
		t.Errorf("upstream served %d requests, want only the merge patch", got)
	}
	if c := p.Counts(); c[TestFailed] != 1 || p.Total() != 1 {
		t.Errorf("counts %v, want one %s", c, TestFailed)
	}
}

func asStatus(err error, into *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus) //nolint:errorlint // client-go returns *StatusError itself
	if ok {
		*into = s
	}
	return ok
}

// TestResetAfterServingLosesTheAnswer: the write reaches the upstream, the client sees an error.
func TestResetAfterServingLosesTheAnswer(t *testing.T) {
	u := startUpstream(t)
	_, kube := startProxy(t, u, Config{Seed: 1, Rate: 1, Only: []Fault{ResetAfter}})
	_, err := kube.CoreV1().Pods("ns").Patch(t.Context(), "p", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
	if err == nil {
		t.Fatal("the patch succeeded, want the reset to lose its answer")
	}
	if got := u.served.Load(); got != 1 {
		t.Errorf("upstream served %d requests, want the write to have happened once", got)
	}
}

// TestWatchExpiredForcesARelist: the watch answers with the 410 ERROR event a reflector reacts to
// by listing again.
func TestWatchExpiredForcesARelist(t *testing.T) {
	u := startUpstream(t)
	_, kube := startProxy(t, u, Config{Seed: 1, Rate: 1, Only: []Fault{WatchExpired}})
	w, err := kube.CoreV1().Pods("ns").Watch(t.Context(), metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Error {
			t.Fatalf("event %s, want ERROR", ev.Type)
		}
		if err := apierrors.FromObject(ev.Object); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("error event %v, want 410 Expired", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
}

// TestWatchCutEndsTheStream: a cut watch ends within MaxWatchLife.
func TestWatchCutEndsTheStream(t *testing.T) {
	u := startUpstream(t)
	_, kube := startProxy(t, u, Config{Seed: 1, Rate: 1, Only: []Fault{WatchCut}, MaxWatchLife: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	w, err := kube.CoreV1().Pods("ns").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		select {
		case _, open := <-w.ResultChan():
			if !open {
				return
			}
		case <-ctx.Done():
			t.Fatal("the watch was not cut")
		}
	}
}

// TestSameSeedSameFaults: two proxies with one seed answer the same sequence of requests alike; a
// different seed answers differently; the rate is roughly kept.
func TestSameSeedSameFaults(t *testing.T) {
	u := startUpstream(t)
	only := []Fault{TooManyRequests, InternalError}
	sequence := func(seed uint64) []int {
		p, _ := startProxy(t, u, Config{Seed: seed, Rate: 0.3, Only: only})
		client := &http.Client{Transport: p.client.Clone()}
		client.Transport.(*http.Transport).TLSClientConfig.RootCAs = poolOf(t, p.CA())
		var codes []int
		for range 200 {
			resp, err := client.Get(p.URL() + "/api/v1/namespaces/ns/pods/p")
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			codes = append(codes, resp.StatusCode)
		}
		return codes
	}
	a, b, c := sequence(42), sequence(42), sequence(43)
	faulty := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("request %d: %d and %d with the same seed", i, a[i], b[i])
		}
		if a[i] != http.StatusOK {
			faulty++
		}
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Error("seeds 42 and 43 injected the same faults")
	}
	if faulty < 30 || faulty > 90 {
		t.Errorf("%d of 200 requests met a fault at rate 0.3", faulty)
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Upstream: "https://127.0.0.1:1", Rate: 1.5},
		{Upstream: "::not a url", Rate: 0.1},
		{Upstream: "https://127.0.0.1:1", Rate: 0.1, UpstreamCA: []byte("no pem")},
	} {
		if p, err := Start(cfg); err == nil {
			_ = p.Close()
			t.Errorf("Start(%+v) succeeded", cfg)
		}
	}
}

func poolOf(t *testing.T, caPEM []byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no certificate in the proxy's CA")
	}
	return pool
}
