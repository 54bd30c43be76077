package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drain-guardian/drain-guardian/e2e/internal/build"
	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/kservesim"
)

// LeaderWorkerSets is the resource of the LeaderWorkerSet kind (kubernetes-sigs/lws).
var LeaderWorkerSets = kservesim.LeaderWorkerSets

// lwsCRD is the LeaderWorkerSet CRD inside the sigs.k8s.io/lws module that e2e/tools/lws pins: it is
// installed from there, as lws releases it, never copied into this repository.
const lwsCRD = "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"

// lwsReadyLine is what the lws binary prints once its controllers run and its webhooks are registered.
const lwsReadyLine = "lws: controllers and webhooks running"

// lwsWebhooks are the webhook configurations the lws binary registers (see e2e/tools/lws).
var lwsWebhooks = []struct {
	gvr  schema.GroupVersionResource
	name string
}{
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}, "lws-mutating-webhook-configuration"},
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}, "lws-validating-webhook-configuration"},
}

// StartLWS installs the LeaderWorkerSet CRD and runs the real LeaderWorkerSet controllers and webhooks
// (the lws binary, built by `make controlplane`) against the control plane, logging to
// LogPath("lws"), until the returned stop is called; stop also removes its webhook configurations.
// Only the scenarios of multi-node models start it.
func (tb *TestBed) StartLWS(ctx context.Context) (stop func(), err error) {
	if err := tb.builder.Check(build.LWS); err != nil {
		return nil, err
	}
	dir, err := tb.CP.ModuleDir(ctx, "tools/lws", "sigs.k8s.io/lws")
	if err != nil {
		return nil, err
	}
	if err := tb.CP.ApplyCRDs(ctx, filepath.Join(dir, filepath.FromSlash(lwsCRD))); err != nil {
		return nil, err
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return nil, err
	}
	logPath := tb.LogPath(build.LWS)
	args := []string{"--kubeconfig=" + tb.CP.AdminKubeconfig(), "--webhook-port=" + strconv.Itoa(ports[0]), "--cert-dir=" + filepath.Join(tb.CP.Dir(), "lws-certs")}
	if err := os.MkdirAll(filepath.Join(tb.CP.Dir(), "lws-certs"), 0o700); err != nil {
		return nil, err
	}
	p, err := controlplane.StartProcess(build.LWS, tb.builder.Path(build.LWS), args, logPath,
		fmt.Sprintf("=== %s lws %v", time.Now().Format(time.RFC3339), args))
	if err != nil {
		return nil, err
	}
	stop = func() {
		p.Stop(10 * time.Second)
		cleanup, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, w := range lwsWebhooks {
			_ = tb.CP.Dynamic().Resource(w.gvr).Delete(cleanup, w.name, metav1.DeleteOptions{})
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("lws exited: %v; see %s", err, logPath)
		}
		data, _ := os.ReadFile(logPath)
		return strings.Contains(string(data), lwsReadyLine), nil
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("waiting for lws to run: %w", err)
	}
	// The API server applies a new webhook configuration a moment after it is written: until then a
	// LeaderWorkerSet would be stored without lws's defaults (which its controller cannot handle).
	// A dry-run create shows when the defaulting webhook answers.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := tb.CP.Dynamic().Resource(LeaderWorkerSets).Namespace("default").Create(ctx, lwsProbe(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, nil
		}
		_, defaulted, _ := unstructured.NestedMap(out.Object, "spec", "rolloutStrategy", "rollingUpdateConfiguration")
		return defaulted, nil
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("waiting for lws's webhooks to answer: %w", err)
	}
	return stop, nil
}

// lwsProbe is a minimal LeaderWorkerSet, created only as a dry run.
func lwsProbe() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": LeaderWorkerSets.GroupVersion().String(), "kind": "LeaderWorkerSet",
		"metadata": map[string]any{"name": "webhook-probe", "namespace": "default"},
		"spec": map[string]any{"leaderWorkerTemplate": map[string]any{"workerTemplate": map[string]any{
			"spec": map[string]any{"containers": []any{map[string]any{"name": "probe", "image": "registry.example.com/probe:1"}}},
		}}},
	}}
}
