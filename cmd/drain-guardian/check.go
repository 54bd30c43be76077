package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/drain-guardian/drain-guardian/internal/check"
	"github.com/drain-guardian/drain-guardian/internal/controller"
	"github.com/drain-guardian/drain-guardian/internal/logging"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/trigger"
	"github.com/drain-guardian/drain-guardian/internal/version"
)

// exitError ends the process with code; err, when set, is printed first.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// checkFlags are the daemon's flags that change what check predicts; the others (leader election,
// endpoints, timeouts) play no part in it.
var checkFlags = []string{"kubeconfig", "namespace-selector", "pool-selector", "restore", "kserve-llm-nil-semantics", "log-format", "log-level", "read-machineconfigs"}

// checkOptions are the flags of check beyond the daemon's.
type checkOptions struct {
	output        string
	readyEstimate time.Duration
	metricsURL    string
	mco           bool
	timeout       time.Duration
}

func newCheckCommand() *cobra.Command {
	opts := options.NewOptions()
	// check prints its report on stdout; its logs on stderr are for trouble only.
	opts.LogFormat, opts.LogLevel = "console", "error"
	co := &checkOptions{output: "table", mco: true, timeout: 2 * time.Minute}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Predict, before an update, which pods will stall which pool's drains",
		Long: `Read the cluster once and print, per MachineConfigPool, the nodes in the MCO's update order and
every pod a PodDisruptionBudget would keep on them, with a verdict: whether the guardian resolves it
(and which fields it changes) or why the drain will stall. Each pool ends with its plan: the extended
resources (GPUs, ...) the surges take at their peak against what is free, and the time they add.

check only reads (get, list, watch; see manifests/base/rbac-check.yaml) and never writes.
Without MachineConfigPools (or with --mco=false) every node forms one pseudo-pool, by name.

Exit codes: 0 no pod blocks a drain, 1 every blocking pod is resolvable, 2 something will stall,
3 the check could not be made (bad flags, unreadable cluster).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := co.validate(); err != nil {
				return &exitError{code: check.ExitError, err: err}
			}
			if err := opts.Validate(); err != nil {
				return &exitError{code: check.ExitError, err: err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			report, err := runCheck(ctx, opts, co)
			if err != nil {
				return &exitError{code: check.ExitError, err: err}
			}
			if err := check.Render(cmd.OutOrStdout(), report, co.output); err != nil {
				return &exitError{code: check.ExitError, err: err}
			}
			if code := report.ExitCode(); code != check.ExitClear {
				return &exitError{code: code}
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: check.ExitError, err: err} })
	daemon := pflag.NewFlagSet("run", pflag.ContinueOnError)
	opts.AddFlags(daemon)
	for _, name := range checkFlags {
		cmd.Flags().AddFlag(daemon.Lookup(name))
	}
	// The drain sources' switches change which drains are predicted.
	for _, k := range trigger.Kinds {
		cmd.Flags().AddFlag(daemon.Lookup(k.Flag))
	}
	fs := cmd.Flags()
	fs.StringVarP(&co.output, "output", "o", co.output, "Output format: "+strings.Join(check.Formats, ", ")+".")
	fs.DurationVar(&co.readyEstimate, "ready-estimate", co.readyEstimate, "How long a replacement takes to be Ready, for workload kinds with no observed time (0: report the added time as unknown).")
	fs.StringVar(&co.metricsURL, "metrics-url", co.metricsURL, "URL of a Prometheus text endpoint with drain_guardian_replacement_ready_duration_seconds (the daemon's /metrics through a port-forward, or Prometheus /federate?match[]=...): observed replacement-ready times per kind.")
	fs.BoolVar(&co.mco, "mco", co.mco, "Group nodes by MachineConfigPool; false: every node in one pseudo-pool, as in cordon mode.")
	fs.DurationVar(&co.timeout, "timeout", co.timeout, "How long to wait for the cluster's objects to be read.")
	return cmd
}

func (co *checkOptions) validate() error {
	var errs []error
	if !slices.Contains(check.Formats, co.output) {
		errs = append(errs, fmt.Errorf("--output: must be one of %s, got %q", strings.Join(check.Formats, ", "), co.output))
	}
	if co.readyEstimate < 0 {
		errs = append(errs, fmt.Errorf("--ready-estimate: must not be negative, got %s", co.readyEstimate))
	}
	if co.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout: must be positive, got %s", co.timeout))
	}
	if co.metricsURL != "" {
		if u, err := url.Parse(co.metricsURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--metrics-url: want an http or https URL, got %q", co.metricsURL))
		}
	}
	return errors.Join(errs...)
}

// runCheck reads the cluster through the daemon's own informers and analysis, without leader
// election and without Run: nothing is written.
func runCheck(ctx context.Context, opts *options.Options, co *checkOptions) (*check.Report, error) {
	log, err := logging.New(opts.LogFormat, opts.LogLevel)
	if err != nil {
		return nil, err
	}
	defer func() { _ = log.Sync() }()
	po := controller.PredictOptions{ReadyEstimate: co.readyEstimate}
	if co.metricsURL != "" {
		if po.ReadyTimes, err = fetchReadyTimes(ctx, co.metricsURL); err != nil {
			return nil, err
		}
	}
	cfg, err := restConfig(opts.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "drain-guardian-check/" + version.Version
	kube, err := kubernetes.NewForConfig(protobuf(cfg))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if _, err := kube.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("cannot reach the Kubernetes API at %s: %w", cfg.Host, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	clients := controller.Clients{Kube: kube, Dynamic: dyn, Discovery: kube.Discovery()}
	if co.mco {
		if clients.MCO, err = mcfgclient.NewForConfig(cfg); err != nil {
			return nil, fmt.Errorf("machineconfiguration client: %w", err)
		}
	}
	informers, err := controller.NewInformers(opts, clients, log)
	if err != nil {
		return nil, err
	}
	syncCtx, cancel := context.WithTimeout(ctx, co.timeout)
	defer cancel()
	if err := informers.Start(syncCtx); err != nil {
		return nil, fmt.Errorf("reading the cluster: %w (does the caller have the read-only access of manifests/base/rbac-check.yaml?)", err)
	}
	return controller.Check(informers, log, po)
}

// fetchReadyTimes reads the observed replacement-ready times from a Prometheus text endpoint.
func fetchReadyTimes(ctx context.Context, u string) (map[string]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("--metrics-url: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("--metrics-url: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("--metrics-url: %s answered %s", u, resp.Status)
	}
	times, err := check.ReadyTimesFromText(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("--metrics-url: %w", err)
	}
	return times, nil
}
