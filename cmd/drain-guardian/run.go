package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/drain-guardian/drain-guardian/internal/controller"
	"github.com/drain-guardian/drain-guardian/internal/logging"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/server"
	"github.com/drain-guardian/drain-guardian/internal/version"
)

// gcPercent is the daemon's GOGC unless the environment sets one. The heap is mostly the informer
// caches, which live as long as the process; Go's default of 100 lets garbage grow to the size of
// that cache before a collection, doubling the memory of a large cluster's guardian for CPU it does
// not need: between events the daemon allocates little, so collections stay rare either way.
const gcPercent = 50

// run wires the daemon and blocks until ctx ends or a component fails.
func run(ctx context.Context, opts *options.Options) error {
	log, err := logging.New(opts.LogFormat, opts.LogLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log.Info("starting drain-guardian", zap.String("version", version.Version), zap.String("revision", version.Revision),
		zap.Bool("dryRun", opts.DryRun), zap.String("restore", opts.Restore), zap.Bool("preemptive", opts.Preemptive))
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
		log.Info("Go garbage collection percent set (GOGC overrides it)", zap.Int("gcPercent", gcPercent))
	}
	if soft := opts.SoftMemoryLimit(); soft > 0 {
		if _, set := os.LookupEnv("GOMEMLIMIT"); set {
			log.Info("GOMEMLIMIT is set: it wins over --memory-limit", zap.String("memoryLimit", opts.MemoryLimit))
		} else {
			debug.SetMemoryLimit(soft)
			log.Info("Go soft memory limit set", zap.String("memoryLimit", opts.MemoryLimit), zap.Int64("softLimitBytes", soft))
		}
	}

	cfg, err := restConfig(opts.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "drain-guardian/" + version.Version
	kube, err := kubernetes.NewForConfig(protobuf(cfg))
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	// Fail fast, with the server's words, on an unreachable cluster or rejected credentials.
	if _, err := kube.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("cannot reach the Kubernetes API at %s: %w", cfg.Host, err)
	}
	mco, err := mcfgclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("machineconfiguration client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}

	m := metrics.New()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	recorder := broadcaster.NewRecorder(scheme.Scheme, "drain-guardian")
	clients := controller.Clients{Kube: kube, MCO: mco, Dynamic: dyn, Discovery: kube.Discovery()}
	informers, err := controller.NewInformers(opts, clients, log)
	if err != nil {
		return err
	}
	ctrl, err := controller.New(informers, clients, recorder, m, log)
	if err != nil {
		return err
	}

	// Bind both endpoints before anything runs: a bad address fails at once, and /metrics accepts
	// scrapes by the time /readyz says ready.
	var metricsTLS *server.TLSOptions
	var authClient kubernetes.Interface
	if opts.MetricsSecure {
		metricsTLS = &server.TLSOptions{CertDir: opts.MetricsCertDir}
		authClient = kube
	}
	metricsSrv, err := server.ListenMetrics(opts.MetricsBindAddress, m.Registry, authClient, metricsTLS, opts.Profiling, log)
	if err != nil {
		return err
	}
	healthSrv, err := server.Listen("health", opts.HealthProbeBindAddress, server.Health(ctrl.Ready), nil)
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return metricsSrv.Serve(ctx, log) })
	g.Go(func() error { return healthSrv.Serve(ctx, log) })
	g.Go(func() error {
		if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		broadcaster.Shutdown()
		return nil
	})
	g.Go(func() error {
		if err := informers.Start(ctx); err != nil {
			return err
		}
		if !opts.LeaderElect {
			m.Leader.Set(1)
			ctrl.Run(ctx)
			return nil
		}
		return lead(ctx, opts, kube, log, m, ctrl)
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info("drain-guardian stopped")
	return err
}

// lead runs the controller while this replica holds the Lease. Losing the Lease ends the process with
// an error, so that a restart begins from a clean state rather than racing the new leader.
func lead(ctx context.Context, opts *options.Options, kube kubernetes.Interface, log *zap.Logger, m *metrics.Metrics, ctrl *controller.Controller) error {
	id, err := os.Hostname()
	if err != nil {
		return err
	}
	id = fmt.Sprintf("%s_%d", id, time.Now().UnixNano())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, opts.LeaderElectionNamespace, opts.LeaderElectionID,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	lost := make(chan struct{})
	leaderCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true, Name: opts.LeaderElectionID,
		LeaseDuration: opts.LeaseDuration, RenewDeadline: opts.RenewDeadline, RetryPeriod: opts.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("became leader", zap.String("identity", id))
				m.Leader.Set(1)
				ctrl.Run(ctx)
			},
			OnStoppedLeading: func() {
				m.Leader.Set(0)
				close(lost)
			},
			OnNewLeader: func(current string) {
				if current != id {
					log.Info("following leader", zap.String("leader", current))
				}
			},
		},
	})
	if err != nil {
		return err
	}
	le.Run(leaderCtx)
	select {
	case <-ctx.Done():
		return nil
	case <-lost:
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("lost the leader-election Lease")
	}
}

// restConfig loads the kubeconfig: the --kubeconfig file, else in-cluster, else the default loading rules.
// protobuf returns a copy of cfg that speaks protobuf, falling back to JSON: for the built-in kinds
// (pods, nodes, PDBs) decoding protobuf takes a fraction of the CPU and garbage of JSON, which on a
// large cluster is most of the initial list and of every watch event. Custom resources (Surges,
// MachineConfigPools, KServe) have no protobuf encoding: their clients keep cfg as it is.
func protobuf(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.ContentType = runtime.ContentTypeProtobuf
	out.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return out
}

func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			return cfg, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}
