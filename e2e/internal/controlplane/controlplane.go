// Package controlplane runs a real, local Kubernetes control plane for the end-to-end suite and the
// demo: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as child processes on
// loopback, with RBAC enforced, the OpenShift MachineConfigPool/MachineConfigNode and KServe CRDs
// installed, and drain-guardian's own ServiceAccount bound to the shipped RBAC.
//
// kwok plays the kubelets: Nodes annotated kwok.x-k8s.io/node=fake become Ready, and their pods
// become Running and Ready without any container runtime. The scheduler, the disruption controller
// and the Eviction API are the real ones, so a PodDisruptionBudget blocks an eviction exactly as it
// does on a real cluster.
package controlplane

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/drain-guardian/drain-guardian/e2e/internal/build"
)

const (
	// GuardianNamespace is where drain-guardian is deployed and holds its leader-election Lease.
	GuardianNamespace = "drain-guardian"
	// GuardianServiceAccount is the identity the guardian kubeconfig authenticates as.
	GuardianServiceAccount = "drain-guardian"
	// FakeNodeAnnotation marks the Nodes that kwok manages (value "fake").
	FakeNodeAnnotation = "kwok.x-k8s.io/node"
	// ReadyDelayAnnotation on a pod delays its readiness by a Go duration ("30s", "2m"): the pod
	// starts Running but not Ready and turns Ready once the duration has passed, imitating a model
	// server loading its weights. The wait restarts if the pod is updated before it is Ready.
	ReadyDelayAnnotation = "e2e.drain-guardian.io/ready-delay"
	// GPUResource is the extended resource fake GPU nodes advertise.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"

	adminUser = "admin"
	// fieldManager owns every object the test bed applies.
	fieldManager = "drain-guardian-testbed"
	// startTimeout bounds how long one component may take to become healthy.
	startTimeout = 2 * time.Minute
	stopGrace    = 5 * time.Second
)

//go:embed kwok-stages.yaml
var kwokStages []byte

// Options configures Start.
type Options struct {
	// Dir holds all state: etcd data, certificates, kubeconfigs and component logs (in Dir/logs).
	// State of an earlier run in Dir is discarded. Required.
	Dir string
	// RepoRoot is the repository root; empty means found from the working directory.
	RepoRoot string
	// Out receives progress lines (builds, components starting); nil discards them.
	Out io.Writer
	// NodeMonitorGracePeriod is how long the node lifecycle controller waits for a node's lease
	// before it marks the node and its pods NotReady; zero keeps the controller-manager's default.
	// A benchmark with a thousand kwok nodes on two cores sets it long: kwok's lease renewals lag
	// behind on an overloaded control plane, and the benchmark measures the guardian, not kwok.
	NodeMonitorGracePeriod time.Duration
}

// ControlPlane is a running local control plane. Its methods are safe for concurrent use.
type ControlPlane struct {
	dir      string
	repoRoot string
	out      io.Writer
	builder  *build.Builder
	// nodeMonitorGracePeriod is Options.NodeMonitorGracePeriod.
	nodeMonitorGracePeriod time.Duration

	mu    sync.Mutex
	procs []*component // in start order

	server             string
	serverCA           []byte
	adminKubeconfig    string
	guardianKubeconfig string
	config             *rest.Config
	client             kubernetes.Interface
	dynamic            dynamic.Interface

	stopOnce sync.Once
}

// Start checks that the binaries are built (it never builds them: see package build), starts every component, installs the CRDs and the guardian's
// identity, and returns once the cluster is usable. On error everything started is stopped again.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.Dir == "" {
		return nil, errors.New("controlplane: Options.Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	root := opts.RepoRoot
	if root == "" {
		if root, err = build.RepoRoot(); err != nil {
			return nil, err
		}
	}
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	cp := &ControlPlane{
		dir:                    dir,
		repoRoot:               root,
		out:                    out,
		builder:                build.New(root, out),
		nodeMonitorGracePeriod: opts.NodeMonitorGracePeriod,
		adminKubeconfig:        filepath.Join(dir, "kubeconfig"),
		guardianKubeconfig:     filepath.Join(dir, "guardian.kubeconfig"),
	}
	if err := cp.start(ctx); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// AdminKubeconfig is the path of a kubeconfig for a cluster admin (system:masters).
func (cp *ControlPlane) AdminKubeconfig() string { return cp.adminKubeconfig }

// GuardianKubeconfig is the path of a kubeconfig for the drain-guardian ServiceAccount: it holds
// exactly the permissions of manifests/base.
func (cp *ControlPlane) GuardianKubeconfig() string { return cp.guardianKubeconfig }

// Server is the apiserver URL.
func (cp *ControlPlane) Server() string { return cp.server }

// ServerCA is the PEM of the certificate the kube-apiserver serves (self-signed, its own CA).
func (cp *ControlPlane) ServerCA() []byte { return cp.serverCA }

// Dir is the state directory.
func (cp *ControlPlane) Dir() string { return cp.dir }

// LogDir holds one log file per component.
func (cp *ControlPlane) LogDir() string { return filepath.Join(cp.dir, "logs") }

// RESTConfig returns a copy of the admin client configuration.
func (cp *ControlPlane) RESTConfig() *rest.Config { return rest.CopyConfig(cp.config) }

// Client is a typed clientset authenticated as admin.
func (cp *ControlPlane) Client() kubernetes.Interface { return cp.client }

// Dynamic is a dynamic client authenticated as admin.
func (cp *ControlPlane) Dynamic() dynamic.Interface { return cp.dynamic }

// BinaryPath returns the path of one of the built binaries (see the build package's names), such as
// kubectl.
func (cp *ControlPlane) BinaryPath(name string) string { return cp.builder.Path(name) }

// Stop stops the components in reverse start order, each with SIGTERM and then SIGKILL after a few
// seconds. It is idempotent; the state directory is kept for inspection.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(func() {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		for i := len(cp.procs) - 1; i >= 0; i-- {
			cp.procs[i].proc.Stop(stopGrace)
		}
	})
}

// component is one process of the control plane and how to start it again.
type component struct {
	name, healthURL, token string
	args                   []string
	proc                   *Process
}

// Restart stops one component (build.Etcd, build.KubeAPIServer, ...) with SIGTERM and starts it again
// with the same flags and state, returning once it is healthy: what a control-plane upgrade does to
// its clients. The other components and every client see it go and come back.
func (cp *ControlPlane) Restart(ctx context.Context, name string) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, c := range cp.procs {
		if c.name != name {
			continue
		}
		c.proc.Stop(stopGrace)
		p, err := cp.start1(ctx, c)
		if err != nil {
			return fmt.Errorf("restarting %s: %w", name, err)
		}
		c.proc = p
		return nil
	}
	return fmt.Errorf("controlplane: no component %q", name)
}

func (cp *ControlPlane) start(ctx context.Context) error {
	if err := cp.builder.Check(build.ControlPlaneBinaries...); err != nil {
		return err
	}
	// Only the paths this package creates are reset, so that a state directory shared with other
	// things (.cluster also holds bin/) keeps them.
	for _, p := range []string{"etcd", "pki", "logs", "kwok", "kubeconfig", "guardian.kubeconfig"} {
		if err := os.RemoveAll(filepath.Join(cp.dir, p)); err != nil {
			return err
		}
	}
	pki := filepath.Join(cp.dir, "pki")
	for _, d := range []string{filepath.Join(cp.dir, "etcd"), pki, cp.LogDir(), filepath.Join(cp.dir, "kwok")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}

	adminToken, err := randomToken()
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(pki, "tokens.csv")
	if err := writeTokenAuthFile(tokenFile, adminToken); err != nil {
		return err
	}
	saKey, saPub := filepath.Join(pki, "sa.key"), filepath.Join(pki, "sa.pub")
	if err := writeServiceAccountKeys(saKey, saPub); err != nil {
		return err
	}
	ports, err := FreePorts(5)
	if err != nil {
		return err
	}
	etcdPort, peerPort, apiPort, kcmPort, schedPort := ports[0], ports[1], ports[2], ports[3], ports[4]

	// etcd
	etcdURL := "http://" + hostPort(etcdPort)
	peerURL := "http://" + hostPort(peerPort)
	if err := cp.run(ctx, build.Etcd, []string{
		"--name=default",
		"--data-dir=" + filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		// The data is thrown away after each run: durability buys nothing and fsyncs are slow
		// on a shared disk.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}, etcdURL+"/health", ""); err != nil {
		return err
	}

	// kube-apiserver
	cp.server = "https://" + hostPort(apiPort)
	apiCertDir := filepath.Join(pki, "apiserver")
	if err := cp.run(ctx, build.KubeAPIServer, []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--cert-dir=" + apiCertDir,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=Node,RBAC",
		// An allocation range for Service ClusterIPs only (nothing routes to it), kept on loopback
		// like every other address of the test bed.
		"--service-cluster-ip-range=127.96.0.0/16",
		// The kubernetes Service's endpoint would be the advertise address, 127.0.0.1, which
		// Endpoints reject; no pod really runs, so nothing needs that endpoint.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}, cp.server+"/readyz", adminToken); err != nil {
		return err
	}
	// With --cert-dir the apiserver generates a self-signed serving certificate (with its CA in the
	// same file) for 127.0.0.1 and localhost; clients trust exactly that.
	caPEM, err := os.ReadFile(filepath.Join(apiCertDir, "apiserver.crt"))
	if err != nil {
		return fmt.Errorf("reading the apiserver's generated certificate: %w", err)
	}
	cp.serverCA = caPEM
	if err := writeKubeconfig(cp.adminKubeconfig, cp.server, caPEM, adminUser, adminToken); err != nil {
		return err
	}
	if cp.config, err = clientcmd.BuildConfigFromFlags("", cp.adminKubeconfig); err != nil {
		return err
	}
	cp.config.QPS, cp.config.Burst = 50, 100
	if cp.client, err = kubernetes.NewForConfig(cp.config); err != nil {
		return err
	}
	if cp.dynamic, err = dynamic.NewForConfig(cp.config); err != nil {
		return err
	}

	// kube-controller-manager and kube-scheduler
	kcmArgs := []string{
		"--kubeconfig=" + cp.adminKubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", kcmPort),
		"--cert-dir=" + filepath.Join(pki, "controller-manager"),
		"--service-account-private-key-file=" + saKey,
		"--controllers=*",
		"--profiling=false",
		// As kwokctl runs it: the rate limit of a real controller-manager would take minutes to
		// create the pods of a large benchmark cluster.
		"--kube-api-qps=5000",
		"--kube-api-burst=10000",
	}
	if cp.nodeMonitorGracePeriod > 0 {
		kcmArgs = append(kcmArgs, "--node-monitor-grace-period="+cp.nodeMonitorGracePeriod.String())
	}
	if err := cp.run(ctx, build.KubeControllerManager, kcmArgs, fmt.Sprintf("https://%s/healthz", hostPort(kcmPort)), ""); err != nil {
		return err
	}
	if err := cp.run(ctx, build.KubeScheduler, []string{
		"--kubeconfig=" + cp.adminKubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", schedPort),
		"--cert-dir=" + filepath.Join(pki, "scheduler"),
		"--profiling=false",
		"--kube-api-qps=5000",
		"--kube-api-burst=10000",
	}, fmt.Sprintf("https://%s/healthz", hostPort(schedPort)), ""); err != nil {
		return err
	}

	// kwok
	stages := filepath.Join(cp.dir, "kwok", "stages.yaml")
	if err := os.WriteFile(stages, kwokStages, 0o644); err != nil {
		return err
	}
	if err := cp.run(ctx, build.Kwok, []string{
		"--kubeconfig=" + cp.adminKubeconfig,
		"--config=" + stages,
		"--manage-nodes-with-annotation-selector=" + FakeNodeAnnotation + "=fake",
		// Node leases keep the node lifecycle controller from marking the fake nodes NotReady
		// between their status reports, every five minutes as a kubelet's (kwok-stages.yaml).
		"--node-lease-duration-seconds=40",
		"--cidr=127.64.0.1/16",
		"--node-ip=127.0.0.1",
	}, "", ""); err != nil {
		return err
	}

	// The controller-manager creates the default ServiceAccount of each namespace; pods cannot be
	// created before it exists, so wait for it as the sign that the controllers run.
	if err := poll(ctx, startTimeout, "the default ServiceAccount to be created", func(ctx context.Context) (bool, error) {
		_, err := cp.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return err
	}

	if err := cp.installCRDs(ctx); err != nil {
		return err
	}
	if err := cp.installGuardianIdentity(ctx, caPEM); err != nil {
		return err
	}
	fmt.Fprintf(cp.out, "control plane ready at %s (state in %s)\n", cp.server, cp.dir)
	return nil
}

// run starts a component and, when healthURL is set, waits until it answers 200 there.
func (cp *ControlPlane) run(ctx context.Context, name string, args []string, healthURL, token string) error {
	c := &component{name: name, args: args, healthURL: healthURL, token: token}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	p, err := cp.start1(ctx, c)
	if p != nil {
		c.proc = p
		cp.procs = append(cp.procs, c)
	}
	return err
}

// start1 starts c's process (appending to its log) and waits for it as run describes; the process
// is returned, when it started, even if it did not become healthy, so that Stop stops it.
func (cp *ControlPlane) start1(ctx context.Context, c *component) (*Process, error) {
	name, healthURL, token := c.name, c.healthURL, c.token
	fmt.Fprintf(cp.out, "starting %s\n", name)
	p, err := StartProcess(name, cp.builder.Path(name), c.args, filepath.Join(cp.LogDir(), name+".log"), "")
	if err != nil {
		return nil, err
	}
	if healthURL == "" {
		// Give a process that fails on its flags the chance to do so here rather than later.
		select {
		case <-p.done:
		case <-time.After(time.Second):
		}
		if gone, err := p.Exited(); gone {
			return p, fmt.Errorf("%s %v; last log lines:\n%s", name, err, p.logTail(20))
		}
		return p, nil
	}
	// The components serve self-signed certificates on loopback; health is all that is asked here.
	httpc := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback health probe of a self-signed server
	}
	err = poll(ctx, startTimeout, name+" to become healthy", func(ctx context.Context) (bool, error) {
		if gone, err := p.Exited(); gone {
			return false, fmt.Errorf("%s %v; last log lines:\n%s", name, err, p.logTail(20))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthURL, nil)
		if err != nil {
			return false, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return false, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil && !strings.Contains(err.Error(), "last log lines") {
		err = fmt.Errorf("%w; last log lines of %s:\n%s", err, name, p.logTail(20))
	}
	return p, err
}

// poll calls cond every 200ms until it returns true or an error, or timeout passes. Conditions
// return an error only for failures that waiting cannot fix.
func poll(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for {
		ok, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if ok {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("timed out waiting for %s: %w", what, lastErr)
			}
			return fmt.Errorf("timed out waiting for %s", what)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
