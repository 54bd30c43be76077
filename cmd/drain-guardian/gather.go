package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/drain-guardian/drain-guardian/internal/check"
	"github.com/drain-guardian/drain-guardian/internal/gather"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/version"
)

// mustGatherDir is where `oc adm must-gather` copies the output from.
const mustGatherDir = "/must-gather"

// In a pod on OpenShift every ServiceAccount token volume carries the service CA, which signs the
// platform Prometheus' serving certificate.
const (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	platformFederate  = `https://prometheus-k8s.openshift-monitoring.svc:9091/federate?match[]={__name__=~"drain_guardian_.%2B"}`
)

type gatherOptions struct {
	dest, namespace, deployment string
	metricsURL                  string
	metricsCAFile               string
	metricsTokenFile            string
	check                       bool
	timeout                     time.Duration
}

// newGatherCommand is `gather`. mustGather is true when the binary runs as /usr/bin/gather in an
// `oc adm must-gather` pod: the output then goes to /must-gather and the metrics come from the
// platform Prometheus, with the pod's own token and the service CA.
func newGatherCommand(mustGather bool) *cobra.Command {
	opts := options.NewOptions()
	opts.LogFormat, opts.LogLevel = "console", "error"
	gopts := &gatherOptions{namespace: "drain-guardian", deployment: "drain-guardian", check: true, timeout: 5 * time.Minute}
	if mustGather {
		gopts.dest = mustGatherDir
		if _, err := os.Stat(serviceAccountDir + "/service-ca.crt"); err == nil {
			gopts.metricsURL = platformFederate
			gopts.metricsCAFile = serviceAccountDir + "/service-ca.crt"
			gopts.metricsTokenFile = serviceAccountDir + "/token"
		}
	}
	cmd := &cobra.Command{
		Use:   "gather",
		Short: "Collect, read-only, what a support case about drain-guardian needs into a directory",
		Long: `Collect into --dest what a support case needs: Surges (all phases), the Events drain-guardian
recorded, its pods' current and previous logs, its Deployment, Lease and flags, the
MachineConfigPools, every node's MCO annotations and taints, the PDBs and workloads that Surges
or blocked pods name, the output of check -o json and, when reachable, the metrics text.
summary.txt is the first page; problems.txt lists what could not be collected.

gather only reads. It never reads a Secret, and every env value in the copied specs is replaced
by <redacted> (the DRAIN_GUARDIAN_* variables of the guardian, which are its flags, excepted).
In the drain-guardian must-gather image it runs as /usr/bin/gather:
  oc adm must-gather --image=quay.io/drain-guardian/drain-guardian-must-gather:<version>`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if gopts.dest == "" {
				return fmt.Errorf("--dest: required: the directory to write into")
			}
			if gopts.timeout <= 0 {
				return fmt.Errorf("--timeout: must be positive, got %s", gopts.timeout)
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, gopts.timeout)
			defer cancel()
			return runGather(ctx, cmd.OutOrStdout(), opts, gopts)
		},
	}
	daemon := pflag.NewFlagSet("run", pflag.ContinueOnError)
	opts.AddFlags(daemon)
	for _, name := range checkFlags {
		cmd.Flags().AddFlag(daemon.Lookup(name))
	}
	fs := cmd.Flags()
	fs.StringVar(&gopts.dest, "dest", gopts.dest, "Directory to write into (created when missing).")
	fs.StringVar(&gopts.namespace, "guardian-namespace", gopts.namespace, "Namespace of the guardian's Deployment.")
	fs.StringVar(&gopts.deployment, "guardian-deployment", gopts.deployment, "Name of the guardian's Deployment.")
	fs.StringVar(&gopts.metricsURL, "metrics-url", gopts.metricsURL, "Prometheus text endpoint with the drain_guardian_ metrics (the daemon's /metrics through a port-forward, or Prometheus /federate); empty: metrics are not collected.")
	fs.StringVar(&gopts.metricsCAFile, "metrics-ca-file", gopts.metricsCAFile, "CA bundle that verifies an https --metrics-url (default: the system roots).")
	fs.StringVar(&gopts.metricsTokenFile, "metrics-token-file", gopts.metricsTokenFile, "File holding a bearer token sent to --metrics-url.")
	fs.BoolVar(&gopts.check, "check", gopts.check, "Also run check and keep its JSON report (check.json).")
	fs.DurationVar(&gopts.timeout, "timeout", gopts.timeout, "How long gather may take in all.")
	return cmd
}

func runGather(ctx context.Context, out io.Writer, opts *options.Options, gopts *gatherOptions) error {
	cfg, err := restConfig(opts.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "drain-guardian-gather/" + version.Version
	kube, err := kubernetes.NewForConfig(protobuf(cfg))
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	if _, err := kube.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("cannot reach the Kubernetes API at %s: %w", cfg.Host, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	src := gather.Sources{Kube: kube, Dynamic: dyn}
	if gopts.check {
		src.Check = func(ctx context.Context) (*check.Report, error) {
			return runCheck(ctx, opts, &checkOptions{output: "json", mco: true, timeout: 2 * time.Minute})
		}
	}
	if gopts.metricsURL != "" {
		src.Metrics = func(ctx context.Context) ([]byte, error) {
			return fetchMetrics(ctx, gopts.metricsURL, gopts.metricsCAFile, gopts.metricsTokenFile)
		}
	}
	res, err := gather.Collect(ctx, src, gather.Options{Dest: gopts.dest, Namespace: gopts.namespace, Deployment: gopts.deployment})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "drain-guardian gather: %d files in %s", len(res.Files), gopts.dest)
	if n := len(res.Problems); n > 0 {
		fmt.Fprintf(out, "; %d things not collected (problems.txt)", n)
	}
	fmt.Fprintln(out)
	return nil
}

// fetchMetrics reads a Prometheus text endpoint, at most 64 MiB of it.
func fetchMetrics(ctx context.Context, url, caFile, tokenFile string) ([]byte, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--metrics-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--metrics-ca-file: no certificate in %s", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if tokenFile != "" {
		token, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--metrics-token-file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", req.URL.Redacted(), resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}
