// Command lws runs the real LeaderWorkerSet controllers of kubernetes-sigs/lws (the LeaderWorkerSet
// and Pod reconcilers of sigs.k8s.io/lws/pkg/controllers, and its LeaderWorkerSet and Pod webhooks)
// in one process against the local control plane of the test bed. Only the wiring is ours: the
// upstream manager (sigs.k8s.io/lws/cmd) expects an in-cluster Service for its webhooks and a
// certificate rotator; here the webhooks listen on 127.0.0.1 with a self-signed certificate and are
// registered with the API server by URL. Behaviour learnt from lws v0.8.0 cmd/main.go and
// config/webhook/manifests.yaml.
package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	leaderworkerset "sigs.k8s.io/lws/api/leaderworkerset/v1"
	"sigs.k8s.io/lws/pkg/controllers"
	"sigs.k8s.io/lws/pkg/webhooks"
)

// setLabel is the label of every LeaderWorkerSet pod: the pod webhooks are asked only about those, so
// that a stopped controller never blocks the creation of the test bed's other pods.
const setLabel = "leaderworkerset.sigs.k8s.io/name"

func main() {
	// --kubeconfig is controller-runtime's own flag (pkg/client/config).
	port := flag.Int("webhook-port", 9443, "port of the webhook server on 127.0.0.1")
	certDir := flag.String("cert-dir", "", "directory for the webhook's self-signed certificate (default: a temporary one)")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	if err := run(*port, *certDir); err != nil {
		fmt.Fprintln(os.Stderr, "lws:", err)
		os.Exit(1)
	}
}

func run(port int, certDir string) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	if certDir == "" {
		if certDir, err = os.MkdirTemp("", "lws-webhook-"); err != nil {
			return err
		}
	}
	caPEM, err := selfSigned(certDir)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := leaderworkerset.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir}),
	})
	if err != nil {
		return err
	}
	if err := controllers.SetupIndexes(mgr.GetFieldIndexer()); err != nil {
		return err
	}
	rec := mgr.GetEventRecorderFor("leaderworkerset")
	if err := controllers.NewLeaderWorkerSetReconciler(mgr.GetClient(), mgr.GetScheme(), rec).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := controllers.NewPodReconciler(mgr.GetClient(), mgr.GetScheme(), rec, nil).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := webhooks.SetupLeaderWorkerSetWebhook(mgr); err != nil {
		return err
	}
	if err := webhooks.NewPodWebhook(nil).Setup(mgr); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	errs := make(chan error, 1)
	go func() { errs <- mgr.Start(ctx) }()
	// Register the webhooks once the server answers, so that no object is refused meanwhile.
	if err := waitListening(ctx, fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		return err
	}
	if err := register(ctx, c, fmt.Sprintf("https://127.0.0.1:%d", port), caPEM); err != nil {
		return err
	}
	fmt.Println("lws: controllers and webhooks running")
	return <-errs
}

func waitListening(ctx context.Context, addr string) error {
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// register creates (or replaces) the webhook configurations of lws's config/webhook/manifests.yaml,
// reached by URL instead of through a Service.
func register(ctx context.Context, c client.Client, base string, ca []byte) error {
	fail, none := admissionv1.Fail, admissionv1.SideEffectClassNone
	hook := func(path string, group, resource string, ops ...admissionv1.OperationType) (admissionv1.WebhookClientConfig, []admissionv1.RuleWithOperations) {
		url := base + path
		return admissionv1.WebhookClientConfig{URL: &url, CABundle: ca}, []admissionv1.RuleWithOperations{{
			Operations: ops,
			Rule:       admissionv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}},
		}}
	}
	podsOnly := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: setLabel, Operator: metav1.LabelSelectorOpExists}}}
	mutating := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "lws-mutating-webhook-configuration"}}
	cc, rules := hook("/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset", leaderworkerset.GroupVersion.Group, "leaderworkersets", admissionv1.Create, admissionv1.Update)
	mutating.Webhooks = append(mutating.Webhooks, admissionv1.MutatingWebhook{Name: "mleaderworkerset.kb.io", ClientConfig: cc, Rules: rules,
		FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}})
	cc, rules = hook("/mutate--v1-pod", "", "pods", admissionv1.Create)
	mutating.Webhooks = append(mutating.Webhooks, admissionv1.MutatingWebhook{Name: "mpod.kb.io", ClientConfig: cc, Rules: rules,
		FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, ObjectSelector: podsOnly})
	validating := &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "lws-validating-webhook-configuration"}}
	cc, rules = hook("/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset", leaderworkerset.GroupVersion.Group, "leaderworkersets", admissionv1.Create, admissionv1.Update)
	validating.Webhooks = append(validating.Webhooks, admissionv1.ValidatingWebhook{Name: "vleaderworkerset.kb.io", ClientConfig: cc, Rules: rules,
		FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}})
	cc, rules = hook("/validate--v1-pod", "", "pods", admissionv1.Create, admissionv1.Update)
	validating.Webhooks = append(validating.Webhooks, admissionv1.ValidatingWebhook{Name: "vpod.kb.io", ClientConfig: cc, Rules: rules,
		FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, ObjectSelector: podsOnly})
	for _, obj := range []client.Object{mutating, validating} {
		if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err := c.Create(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

// selfSigned writes tls.crt and tls.key for 127.0.0.1 into dir and returns the certificate, which
// is its own CA.
func selfSigned(dir string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "lws-webhook"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	var crt, k bytes.Buffer
	_ = pem.Encode(&crt, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	_ = pem.Encode(&k, &pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), crt.Bytes(), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), k.Bytes(), 0o600); err != nil {
		return nil, err
	}
	return crt.Bytes(), nil
}
