// Package faultproxy is a fault-injecting reverse proxy for the kube-apiserver, on loopback: a client
// whose kubeconfig points at it (WriteKubeconfig) sees the API server misbehave as it does during a
// control-plane upgrade. Each request draws, from a seeded generator, whether it meets a fault and
// which one among those that can happen to a request of its kind:
//
//   - writes (POST, PUT, PATCH, DELETE): 409 Conflict (PUT and PATCH), 422 from a failed JSON-patch
//     `test` (JSON patches only, as the API server answers one), 429 with Retry-After, 500, 503 with
//     Retry-After, added latency, the connection reset before the request reaches the API server, and
//     the request served but its answer lost to a reset;
//   - reads: 429, 500, 503, latency, reset;
//   - watches: closed mid-stream after a random time, or answered with the ERROR event carrying 410
//     Expired that forces the client to list again, or delayed.
//
// The sequence of draws is fixed by the seed; which request meets which draw depends on the order in
// which requests arrive. Every fault is counted and logged, one line each.
package faultproxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// Fault is one kind of misbehaviour.
type Fault string

// The faults, as counted and logged.
const (
	Conflict        Fault = "conflict-409"
	TestFailed      Fault = "test-failed-422"
	TooManyRequests Fault = "throttled-429"
	InternalError   Fault = "internal-error-500"
	Unavailable     Fault = "unavailable-503"
	Latency         Fault = "latency"
	ResetBefore     Fault = "reset-before-serving"
	ResetAfter      Fault = "reset-after-serving"
	WatchCut        Fault = "watch-cut"
	WatchExpired    Fault = "watch-expired-410"
)

// Faults lists every fault in a stable order (the order of a report's columns).
var Faults = []Fault{Conflict, TestFailed, TooManyRequests, InternalError, Unavailable, Latency, ResetBefore, ResetAfter, WatchCut, WatchExpired}

// Config configures Start.
type Config struct {
	// Upstream is the kube-apiserver's URL (https://127.0.0.1:port) and UpstreamCA the PEM of the
	// CA its serving certificate is checked against.
	Upstream   string
	UpstreamCA []byte
	// Seed fixes the sequence of draws.
	Seed uint64
	// Rate is the probability, in [0, 1], that a request meets a fault.
	Rate float64
	// MaxLatency bounds an added latency (default 2s); MaxWatchLife bounds how long a cut watch runs
	// before it is cut (default 10s).
	MaxLatency, MaxWatchLife time.Duration
	// Only, when set, restricts the faults to these (each still only where it can happen).
	Only []Fault
	// Log receives one line per fault; nil discards them.
	Log io.Writer
}

// Proxy is a running fault-injecting proxy. Its methods are safe for concurrent use.
type Proxy struct {
	cfg      Config
	upstream *url.URL
	rp       *httputil.ReverseProxy
	client   *http.Transport
	server   *http.Server
	listener net.Listener
	caPEM    []byte

	mu     sync.Mutex
	rng    *mathrand.Rand
	rate   float64
	counts map[Fault]int
}

// Start listens on a free loopback port with a certificate of its own and forwards to the upstream.
func Start(cfg Config) (*Proxy, error) {
	if cfg.Rate < 0 || cfg.Rate > 1 {
		return nil, fmt.Errorf("faultproxy: rate %v outside [0, 1]", cfg.Rate)
	}
	up, err := url.Parse(cfg.Upstream)
	if err != nil || up.Host == "" {
		return nil, fmt.Errorf("faultproxy: upstream %q is not a URL", cfg.Upstream)
	}
	if cfg.MaxLatency <= 0 {
		cfg.MaxLatency = 2 * time.Second
	}
	if cfg.MaxWatchLife <= 0 {
		cfg.MaxWatchLife = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.UpstreamCA) {
		return nil, errors.New("faultproxy: no certificate in the upstream CA")
	}
	cert, caPEM, err := selfSigned()
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg: cfg, upstream: up, caPEM: caPEM,
		rng:    mathrand.New(mathrand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		rate:   cfg.Rate,
		counts: map[Fault]int{},
		client: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true,
			MaxIdleConns:      100,
			IdleConnTimeout:   90 * time.Second,
		},
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(up)
			r.Out.Host = up.Host
		},
		Transport: p.client,
		// Watches and other streams are relayed as they arrive.
		FlushInterval: -1,
		// A cut watch ends with a copy error: that is the fault, logged with the others.
		ErrorLog: log.New(cfg.Log, "faultproxy: ", log.LstdFlags),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return
			}
			writeStatus(w, http.StatusBadGateway, "ServiceUnavailable", "faultproxy: upstream: "+err.Error(), "")
		},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.listener = l
	p.server = &http.Server{
		Handler:           p,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(cfg.Log, "faultproxy server: ", log.LstdFlags),
	}
	go func() { _ = p.server.ServeTLS(l, "", "") }()
	return p, nil
}

// URL is the proxy's https URL.
func (p *Proxy) URL() string { return "https://" + p.listener.Addr().String() }

// CA is the PEM of the certificate the proxy serves (self-signed, for 127.0.0.1).
func (p *Proxy) CA() []byte { return p.caPEM }

// SetRate changes the fault rate from the next request on.
func (p *Proxy) SetRate(rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rate = rate
}

// Counts returns how many times each fault was injected so far.
func (p *Proxy) Counts() map[Fault]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[Fault]int, len(p.counts))
	for f, n := range p.counts {
		out[f] = n
	}
	return out
}

// Total is the number of faults injected so far.
func (p *Proxy) Total() int { return Sum(p.Counts()) }

// Sum adds up counts.
func Sum(counts map[Fault]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// Summary renders the counts as "fault=n" pairs in the order of Faults, skipping zeros.
func Summary(counts map[Fault]int) string {
	var parts []string
	for _, f := range Faults {
		if n := counts[f]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", f, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Close stops accepting requests and ends those in flight (watches included).
func (p *Proxy) Close() error {
	err := p.server.Close()
	p.client.CloseIdleConnections()
	return err
}

// WriteKubeconfig writes to a copy of the kubeconfig at from whose current cluster is the proxy:
// same user and credentials, the proxy's URL and CA.
func (p *Proxy) WriteKubeconfig(from, to string) error {
	cfg, err := clientcmd.LoadFromFile(from)
	if err != nil {
		return err
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return fmt.Errorf("faultproxy: %s has no current context", from)
	}
	cluster, ok := cfg.Clusters[ctx.Cluster]
	if !ok {
		return fmt.Errorf("faultproxy: %s has no cluster %q", from, ctx.Cluster)
	}
	cluster.Server, cluster.CertificateAuthorityData, cluster.CertificateAuthority = p.URL(), p.caPEM, ""
	return clientcmd.WriteToFile(*cfg, to)
}

// class is what a request is, for the faults that can happen to it.
type class int

const (
	readClass class = iota
	writeClass
	watchClass
)

func classify(r *http.Request) class {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if v := r.URL.Query().Get("watch"); v == "true" || v == "1" {
			return watchClass
		}
		return readClass
	}
	return writeClass
}

// faultsFor lists the faults a request can meet.
func faultsFor(r *http.Request) []Fault {
	switch classify(r) {
	case watchClass:
		return []Fault{WatchCut, WatchExpired, Latency}
	case readClass:
		return []Fault{TooManyRequests, InternalError, Unavailable, Latency, ResetBefore}
	}
	out := []Fault{TooManyRequests, InternalError, Unavailable, Latency, ResetBefore, ResetAfter}
	if r.Method == http.MethodPut || r.Method == http.MethodPatch {
		out = append(out, Conflict)
	}
	if r.Method == http.MethodPatch && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json-patch+json") {
		out = append(out, TestFailed)
	}
	return out
}

// draw decides the fault of one request ("" for none) and a uniform number in [0, 1) for its
// duration, from the seeded generator.
func (p *Proxy) draw(r *http.Request) (Fault, float64) {
	options := faultsFor(r)
	if len(p.cfg.Only) > 0 {
		options = slices.DeleteFunc(options, func(f Fault) bool { return !slices.Contains(p.cfg.Only, f) })
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rate == 0 || p.rng.Float64() >= p.rate || len(options) == 0 {
		return "", 0
	}
	f := options[p.rng.IntN(len(options))]
	p.counts[f]++
	return f, p.rng.Float64()
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, u := p.draw(r)
	if f != "" {
		fmt.Fprintf(p.cfg.Log, "%s fault=%s method=%s path=%s\n", time.Now().Format("15:04:05.000"), f, r.Method, r.URL.RequestURI())
	}
	switch f {
	case "":
		p.rp.ServeHTTP(w, r)
	case Conflict:
		writeStatus(w, http.StatusConflict, "Conflict",
			"Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again", "")
	case TestFailed:
		// What the API server answers when a JSON patch's test operation fails: 422, reason Invalid,
		// no object named (k8s.io/apiserver pkg/endpoints/handlers/patch.go).
		writeStatus(w, http.StatusUnprocessableEntity, "Invalid",
			"the server rejected our request due to an error in our request", "")
	case TooManyRequests:
		writeStatus(w, http.StatusTooManyRequests, "TooManyRequests", "Too many requests, please try again later.", "1")
	case InternalError:
		writeStatus(w, http.StatusInternalServerError, "InternalError", "Internal error occurred: injected by faultproxy", "")
	case Unavailable:
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "The server is currently unable to handle the request", "1")
	case Latency:
		select {
		case <-time.After(time.Duration(u * float64(p.cfg.MaxLatency))):
		case <-r.Context().Done():
			return
		}
		p.rp.ServeHTTP(w, r)
	case ResetBefore:
		panic(http.ErrAbortHandler)
	case ResetAfter:
		p.serveThenReset(r)
	case WatchCut:
		ctx, cancel := context.WithTimeout(r.Context(), time.Duration(u*float64(p.cfg.MaxWatchLife)))
		defer cancel()
		p.rp.ServeHTTP(w, r.WithContext(ctx))
	case WatchExpired:
		expired(w)
	}
}

// serveThenReset forwards the request, waits for the whole answer, and drops it with a reset: the
// write happened, the client does not know.
func (p *Proxy) serveThenReset(r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = p.upstream.Scheme, p.upstream.Host, p.upstream.Host
	if resp, err := p.client.RoundTrip(out); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	panic(http.ErrAbortHandler)
}

// writeStatus answers with a metav1.Status, as the API server does.
func writeStatus(w http.ResponseWriter, code int, reason, message, retryAfter string) {
	body, _ := json.Marshal(map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": message, "reason": reason, "code": code,
		"details": map[string]any{},
	})
	w.Header().Set("Content-Type", "application/json")
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// expired answers a watch as the API server does when the resourceVersion asked for is older than
// what it keeps: 200, then one ERROR event with a 410 Expired Status, then the end of the stream.
func expired(w http.ResponseWriter) {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(map[string]any{
		"type": "ERROR",
		"object": map[string]any{
			"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
			"status": "Failure", "message": "too old resource version (injected by faultproxy)", "reason": "Expired", "code": http.StatusGone,
		},
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

// selfSigned makes an ECDSA certificate for 127.0.0.1 and localhost, valid for a day.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "faultproxy"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return cert, certPEM, err
}
