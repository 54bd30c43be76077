package main

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gather reads the metrics of an https endpoint it verifies with the given CA, sending the token
// from the given file (the platform Prometheus in must-gather, a route from a workstation); an
// endpoint whose certificate the CA did not sign is refused, so the token is never sent to it.
func TestFetchMetricsVerifiesTheServerAndSendsTheToken(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("drain_guardian_leader 1\n"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := fetchMetrics(t.Context(), srv.URL+"/federate", ca, token)
	if err != nil || string(got) != "drain_guardian_leader 1\n" {
		t.Fatalf("fetchMetrics = %q, %v", got, err)
	}
	if _, err := fetchMetrics(t.Context(), srv.URL, ca, ""); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("without the token: %v, want the server's 401", err)
	}
	if _, err := fetchMetrics(t.Context(), srv.URL, "", token); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("with the system roots: %v, want a certificate error", err)
	}
}
