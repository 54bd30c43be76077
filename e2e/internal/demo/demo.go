// Package demo runs drain-guardian's demonstration on a local test bed: a GPU worker pool, a
// single-replica InferenceService whose PodDisruptionBudget blocks every drain, and a pool update
// that completes without the model ever going down. It is told with the building blocks of package
// testbed, which the end-to-end scenarios use too.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// The demo's objects.
const (
	demoNamespace = "demo"
	demoPool      = "gpu-workers"
	demoModel     = "granite"
	// demoLoading is how long a replica of the model takes to turn Ready.
	demoLoading = "5s"
	// DefaultTimeScale makes the MachineConfig operator simulator 20 times faster than a real MCO.
	DefaultTimeScale = 0.05
)

// reasons of Events worth showing a newcomer: the guardian's and the MCO's.
var demoReasons = map[string]bool{
	"StallDetected": true, "StallPredicted": true, "NoCapacity": true, "UnsatisfiablePDB": true,
	"UnsupportedOwner": true, "SurgeStarted": true, "ReplacementReady": true, "PodEvicted": true,
	"StallResolved": true, "SurgeRestored": true, "SurgeFailed": true, "SurgeExpired": true,
	"ExternalChange": true, "SurgeDeferred": true,
	"SetDesiredConfig": true, "Completed": true, "DrainThresholdExceeded": true, "DrainFailed": true,
}

// Run is the newcomer's demo. It starts a control plane with the MachineConfig operator and KServe
// simulators (TIME_SCALE, default 0.05, scales the MCO's delays), creates a pool of three GPU
// workers and a single-replica InferenceService (autoscaler class hpa, required pod anti-affinity)
// protected by a minAvailable 1 PDB, starts drain-guardian from the repository's sources, updates
// the pool and prints a live timeline to out, then a verdict: how long the pool update took, the
// model's availability (share of 100 ms observations with a Ready replica) and whether the
// InferenceService's spec was restored exactly. Everything is stopped before Run returns; the error
// is non-nil when the verdict is bad.
func Run(ctx context.Context, out io.Writer, repoRoot string) (err error) {
	scale := DefaultTimeScale
	if s := os.Getenv("TIME_SCALE"); s != "" {
		v, perr := strconv.ParseFloat(s, 64)
		if perr != nil || v <= 0 {
			return fmt.Errorf("TIME_SCALE=%q: want a positive number", s)
		}
		scale = v
	}
	dir, err := os.MkdirTemp("", "drain-guardian-demo-")
	if err != nil {
		return err
	}
	defer func() {
		if err == nil {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintf(out, "state and logs kept in %s\n", dir)
		}
	}()

	// client-go's informers log through the global klog; the demo's output is for the timeline.
	klogFile, err := os.Create(filepath.Join(dir, "klog.log"))
	if err != nil {
		return err
	}
	defer klogFile.Close()
	klog.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(klogFile))))
	defer klog.ClearLogger()

	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	say("drain-guardian demo: TIME_SCALE=%g (the MachineConfig operator runs %.0fx faster than on a real cluster)", scale, 1/scale)
	say("starting a local control plane...")
	tb, err := testbed.StartTestBed(ctx, testbed.TestBedConfig{Dir: dir, RepoRoot: repoRoot, TimeScale: scale, Out: indent(out)})
	if err != nil {
		return err
	}
	defer tb.Stop()

	var nodes []testbed.NodeSpec
	for i, zone := range []string{"zone-a", "zone-b", "zone-c"} {
		nodes = append(nodes, testbed.NodeSpec{Name: fmt.Sprintf("gpu-worker-%d", i+1), Zone: zone, GPUs: 1})
	}
	say("creating MachineConfigPool %s with 3 GPU workers (1 nvidia.com/gpu each)...", demoPool)
	if err := tb.CreatePool(ctx, demoPool, "rendered-gpu-workers-1", nodes); err != nil {
		return err
	}
	if err := tb.CreateNamespace(ctx, demoNamespace); err != nil {
		return err
	}
	kube, dyn := tb.CP.Client(), tb.CP.Dynamic()
	isvcs := dyn.Resource(testbed.InferenceServices).Namespace(demoNamespace)
	app := map[string]string{"app": "isvc." + demoModel + "-predictor"}
	say("creating InferenceService %s/%s (1 replica, autoscaler class hpa, pods take %s to load) and PDB minAvailable 1 on %s...",
		demoNamespace, demoModel, demoLoading, labels.SelectorFromSet(app))
	if _, err := isvcs.Create(ctx, testbed.InferenceService(demoNamespace, demoModel, "hpa", demoPool, demoLoading), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the InferenceService: %w", err)
	}
	if _, err := kube.PolicyV1().PodDisruptionBudgets(demoNamespace).Create(ctx, testbed.MinAvailablePDB(demoNamespace, demoModel+"-predictor", app), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the PDB: %w", err)
	}
	var modelNode string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods(demoNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(app).String()})
		if err != nil || len(pods.Items) != 1 || !testbed.PodReady(&pods.Items[0]) {
			return false, nil
		}
		pdb, err := kube.PolicyV1().PodDisruptionBudgets(demoNamespace).Get(ctx, demoModel+"-predictor", metav1.GetOptions{})
		if err != nil || pdb.Status.ObservedGeneration != pdb.Generation || pdb.Status.DisruptionsAllowed != 0 || pdb.Status.CurrentHealthy != 1 {
			return false, nil
		}
		modelNode = pods.Items[0].Spec.NodeName
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the model to serve: %w", err)
	}
	say("the model serves from %s; its PDB allows no disruption: without help, draining %s blocks forever", modelNode, modelNode)
	isvc, err := isvcs.Get(ctx, demoModel, metav1.GetOptions{})
	if err != nil {
		return err
	}
	specBefore, _ := json.Marshal(isvc.Object["spec"])

	guardianLog := filepath.Join(tb.CP.LogDir(), "drain-guardian.log")
	g, err := testbed.StartGuardian(tb.GuardianBinary, guardianLog,
		"--kubeconfig="+tb.CP.GuardianKubeconfig(),
		"--leader-elect=false",
		"--pool-selector="+testbed.PoolLabel+"="+demoPool,
		"--schedule-timeout=30s",
	)
	if err != nil {
		return err
	}
	defer g.Stop()
	if err := g.WaitReady(ctx, time.Minute); err != nil {
		return err
	}
	say("drain-guardian runs (pid %d) with the shipped RBAC; its log: %s (kept if the demo fails)", g.Pid(), guardianLog)

	say("")
	say("updating pool %s to rendered-gpu-workers-2; timeline (seconds since the update):", demoPool)
	obs, err := testbed.Observe(ctx, kube, dyn, tb.MCFG, testbed.Scope{
		Namespace:    demoNamespace,
		Pool:         demoPool,
		NodeSelector: testbed.PoolLabel + "=" + demoPool,
		PodSelector:  labels.SelectorFromSet(app).String(),
	}, func(e testbed.Entry) {
		if narrate(e) {
			fmt.Fprintf(out, "  %s\n", e)
		}
	})
	if err != nil {
		return err
	}
	obs.StartSampling()
	start := time.Now()
	if err := tb.UpdatePool(ctx, demoPool, "rendered-gpu-workers-2"); err != nil {
		return err
	}
	timeout := 2*time.Minute + time.Duration(float64(20*time.Minute)*scale)
	var poolTook time.Duration
	poolErr := tb.WaitPool(ctx, demoPool, timeout, func(p *mcfgv1.MachineConfigPool) bool {
		done := mcosim.PoolUpdated(p) && p.Spec.Configuration.Name == "rendered-gpu-workers-2" && int(p.Status.UpdatedMachineCount) == len(nodes)
		if done {
			poolTook = time.Since(start)
		}
		return done
	})
	restored := false
	var specAfter []byte
	if poolErr == nil {
		// The guardian restores the InferenceService once the pool is Updated; then the HPA
		// scales the predictor back to one replica.
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute+time.Duration(float64(5*time.Minute)*scale), true, func(ctx context.Context) (bool, error) {
			cur, err := isvcs.Get(ctx, demoModel, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			specAfter, _ = json.Marshal(cur.Object["spec"])
			surges, err := tb.CP.Dynamic().Resource(testbed.Surges).Namespace(demoNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			surged := len(surges.Items) > 0
			d, err := kube.AppsV1().Deployments(demoNamespace).Get(ctx, demoModel+"-predictor", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			restored = !surged && string(specAfter) == string(specBefore) &&
				d.Spec.Replicas != nil && *d.Spec.Replicas == 1 && d.Status.Replicas == 1
			return restored, nil
		})
	}
	avail := obs.StopSampling()

	say("")
	say("verdict:")
	var problems []string
	if poolErr != nil {
		say("  pool update:            NOT finished after %v", timeout)
		problems = append(problems, "the pool update did not finish")
	} else {
		say("  pool update:            %.1fs (all 3 nodes updated)", poolTook.Seconds())
	}
	say("  model availability:     %.1f%% (%d of %d observations every %v had a Ready replica)",
		100*avail.Share(), avail.Available, avail.Samples, testbed.SampleInterval)
	if avail.Samples == 0 || avail.Available != avail.Samples || avail.MinReady < 1 {
		problems = append(problems, "the model was unavailable")
	}
	say("  original spec restored: %s", yesNo(restored))
	if !restored {
		problems = append(problems, "the InferenceService was not restored")
		say("    before: %s\n    after:  %s", specBefore, specAfter)
	}
	if len(problems) > 0 {
		say("guardian log tail:\n%s", lastLines(guardianLog, 30))
		return errors.New("demo failed: " + strings.Join(problems, "; "))
	}
	say("the pool updated with no model downtime and the InferenceService is as it was.")
	return nil
}

// narrate picks the timeline entries a newcomer needs: the guardian's and the MCO's Events, node
// and pool progress, the model's pods and replica counts, and availability changes.
func narrate(e testbed.Entry) bool {
	switch e.Source {
	case "event":
		return demoReasons[e.Reason]
	case "sampling":
		return false
	}
	return true
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// indent prefixes every line written to w with two spaces (the test bed's progress lines).
func indent(w io.Writer) io.Writer { return &prefixWriter{w: w} }

type prefixWriter struct{ w io.Writer }

func (p *prefixWriter) Write(b []byte) (int, error) {
	lines := strings.SplitAfter(string(b), "\n")
	for _, l := range lines {
		if l == "" {
			continue
		}
		if _, err := io.WriteString(p.w, "  "+l); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
