// Package server serves drain-guardian's HTTP endpoints: /metrics (TLS with Kubernetes authentication
// and authorization by default), with --profiling Go's profiles under /debug/pprof/ behind the same
// checks, and the plain /healthz and /readyz probes.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
)

// MetricsPath is the path Prometheus scrapes; callers need `get` on this non-resource URL.
const MetricsPath = "/metrics"

// ProfilingPath is where --profiling serves net/http/pprof; callers need `get` on the non-resource
// URL of the profile they fetch (an RBAC rule for "/debug/pprof/*" covers them all).
const ProfilingPath = "/debug/pprof/"

// Server is one HTTP endpoint, already listening.
type Server struct {
	name string
	ln   net.Listener
	srv  *http.Server
	tls  bool
}

// Listen binds addr now, so that a bad address fails at start-up and the endpoint accepts connections
// before the daemon reports ready. addr "0" or "" disables the endpoint: Listen returns nil.
func Listen(name, addr string, handler http.Handler, tlsConfig *tls.Config) (*Server, error) {
	if addr == "0" || addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s endpoint: %w", name, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig}
	return &Server{name: name, ln: ln, srv: srv, tls: tlsConfig != nil}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until ctx ends. A nil Server (a disabled endpoint) returns at once.
func (s *Server) Serve(ctx context.Context, log *zap.Logger) error {
	if s == nil {
		return nil
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(shutdown)
	}()
	log.Info("serving", zap.String("endpoint", s.name), zap.String("address", s.Addr()), zap.Bool("tls", s.tls))
	var err error
	if s.tls {
		err = s.srv.ServeTLS(s.ln, "", "")
	} else {
		err = s.srv.Serve(s.ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// TLSOptions configures TLS on the metrics endpoint.
type TLSOptions struct {
	// CertDir holds tls.crt and tls.key; empty means a self-signed certificate.
	CertDir string
}

// ListenMetrics binds the metrics endpoint: over TLS with token authentication and authorization when
// tlsOpts is set, plain otherwise; with profiling it also serves ProfilingPath.
func ListenMetrics(addr string, reg *prometheus.Registry, auth kubernetes.Interface, tlsOpts *TLSOptions, profiling bool, log *zap.Logger) (*Server, error) {
	var cfg *tls.Config
	if tlsOpts != nil {
		var err error
		if cfg, err = TLSConfig(tlsOpts.CertDir, "drain-guardian"); err != nil {
			return nil, err
		}
	}
	return Listen("metrics", addr, Metrics(reg, auth, profiling, log), cfg)
}

// Health serves /healthz (the process is alive) and /readyz (ready() is true).
func Health(ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// Metrics serves the registry on MetricsPath and, with profiling, net/http/pprof on ProfilingPath.
// With client non-nil every request must carry a bearer token that a TokenReview authenticates and a
// SubjectAccessReview allows to get the request's path.
func Metrics(reg *prometheus.Registry, client kubernetes.Interface, profiling bool, log *zap.Logger) http.Handler {
	handlers := map[string]http.Handler{MetricsPath: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})}
	if profiling {
		handlers[ProfilingPath] = http.HandlerFunc(pprof.Index)
		handlers[ProfilingPath+"cmdline"] = http.HandlerFunc(pprof.Cmdline)
		handlers[ProfilingPath+"profile"] = http.HandlerFunc(pprof.Profile)
		handlers[ProfilingPath+"symbol"] = http.HandlerFunc(pprof.Symbol)
		handlers[ProfilingPath+"trace"] = http.HandlerFunc(pprof.Trace)
	}
	mux := http.NewServeMux()
	var a *authorizer
	if client != nil {
		a = &authorizer{client: client, log: log, cache: map[string]decision{}}
	}
	for path, h := range handlers {
		if a != nil {
			h = a.wrap(h)
		}
		mux.Handle(path, h)
	}
	return mux
}

type decision struct {
	allowed bool
	expires time.Time
}

// authorizer checks bearer tokens with TokenReview and SubjectAccessReview, caching answers briefly so
// a scrape every few seconds costs the API server almost nothing.
type authorizer struct {
	client kubernetes.Interface
	log    *zap.Logger
	mu     sync.Mutex
	cache  map[string]decision
}

const decisionTTL = time.Minute

func (a *authorizer) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		allowed, status, err := a.check(r.Context(), token, r.URL.Path)
		if err != nil {
			a.log.Warn("cannot authorize a metrics scrape", zap.Error(err))
			http.Error(w, "authorization failed", http.StatusInternalServerError)
			return
		}
		if !allowed {
			http.Error(w, http.StatusText(status), status)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// check asks whether the token's user may get path. Answers are cached by token and path.
func (a *authorizer) check(ctx context.Context, token, path string) (bool, int, error) {
	now := time.Now()
	cacheKey := token + "\x00" + path
	a.mu.Lock()
	if d, ok := a.cache[cacheKey]; ok && now.Before(d.expires) {
		a.mu.Unlock()
		return d.allowed, http.StatusForbidden, nil
	}
	a.mu.Unlock()
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return false, 0, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		return false, http.StatusUnauthorized, nil
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, 0, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	a.mu.Lock()
	if len(a.cache) > 1000 {
		a.cache = map[string]decision{}
	}
	a.cache[cacheKey] = decision{allowed: sar.Status.Allowed, expires: now.Add(decisionTTL)}
	a.mu.Unlock()
	return sar.Status.Allowed, http.StatusForbidden, nil
}

// TLSConfig returns a TLS configuration serving tls.crt/tls.key from certDir, re-read when the files
// change (the OpenShift service CA rotates them), or a self-signed certificate when certDir is empty.
func TLSConfig(certDir, host string) (*tls.Config, error) {
	if certDir == "" {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("generating a self-signed metrics certificate: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, err
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
	}
	r := &certReloader{certFile: filepath.Join(certDir, "tls.crt"), keyFile: filepath.Join(certDir, "tls.key")}
	if _, err := r.get(nil); err != nil {
		return nil, fmt.Errorf("--metrics-cert-dir: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}, nil
}

type certReloader struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	modTime           time.Time
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	st, err := os.Stat(r.certFile)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cert != nil && st.ModTime().Equal(r.modTime) {
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.cert != nil {
			// Mid-rotation the two files may not match yet: keep serving the previous pair.
			return r.cert, nil
		}
		return nil, err
	}
	r.cert, r.modTime = &cert, st.ModTime()
	return r.cert, nil
}
