package scenarios

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"

	"github.com/drain-guardian/drain-guardian/e2e/internal/controlplane"
	"github.com/drain-guardian/drain-guardian/e2e/internal/mcosim"
	"github.com/drain-guardian/drain-guardian/e2e/internal/testbed"
)

// The scale benchmark's environment (make bench-scale).
const (
	scaleEnv     = "E2E_SCALE"
	scaleIdleEnv = "E2E_SCALE_IDLE"
	scaleOutEnv  = "E2E_SCALE_OUT"
)

// scaleShape is the cluster TestBenchScale builds: idle pools of CPU nodes running services, and
// one pool of GPU nodes with single-replica models that is updated to make stalls.
type scaleShape struct {
	idlePools, idleNodesPerPool int
	stallNodes, models          int
	services, serviceReplicas   int // PDB allowing one disruption
	singles                     int // single-replica services on idle pools, PDB allowing none
	namespaces                  int
	// gpuSlices nodes, the first ones, publish a ResourceSlice of eight DRA GPUs each: what the
	// guardian's DRA caches hold (the models keep their nvidia.com/gpu requests).
	gpuSlices int
}

func (s scaleShape) nodes() int { return s.idlePools*s.idleNodesPerPool + s.stallNodes }
func (s scaleShape) pods() int  { return s.models + s.services*s.serviceReplicas + s.singles }
func (s scaleShape) pdbs() int  { return s.models + s.services + s.singles }

// fleet is 1,000 nodes, 30,000 pods, 3,000 PDBs and 1,000 ResourceSlices.
var fleet = scaleShape{
	idlePools: 3, idleNodesPerPool: 325, stallNodes: 25, models: 20,
	services: 2700, serviceReplicas: 11, singles: 280, namespaces: 50, gpuSlices: 1000,
}

// TestBenchScale builds a large cluster on the test bed (1,000 kwok nodes in four pools, 30,000 pods,
// 3,000 PDBs, with a bounded-rate client), runs one guardian with its default flags over all of it,
// and measures: time to cache sync, heap after sync, CPU over an idle window (E2E_SCALE_IDLE,
// default 5m), detection → surge-write latency over the stalls of one pool's update (20 models,
// one per node), API writes per resolved stall, and peak RSS. It writes a Markdown table. It runs
// only under make bench-scale; its figures are read, not asserted (the pool must still finish).
func TestBenchScale(t *testing.T) {
	if os.Getenv(scaleEnv) == "" {
		t.Skipf("set %s=1 (make bench-scale) to run the scale benchmark", scaleEnv)
	}
	idle := 5 * time.Minute
	if v := os.Getenv(scaleIdleEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration", scaleIdleEnv, v)
		}
		idle = d
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Minute)
	defer cancel()
	shape := fleet
	b := &scaleBed{t: t, ctx: ctx, shape: shape, kube: boundedClient(t, 300)}

	setupStart := time.Now()
	b.createNodesAndPools()
	t.Logf("setup: %d nodes in %d pools after %v", shape.nodes(), shape.idlePools+1, time.Since(setupStart).Round(time.Second))
	b.createWorkloads()
	t.Logf("setup: %d Deployments and %d PDBs created after %v", shape.models+shape.services+shape.singles, shape.pdbs(), time.Since(setupStart).Round(time.Second))
	b.waitModelPDBs()
	setup := time.Since(setupStart)
	t.Logf("setup: %d pods Ready after %v", shape.pods(), setup.Round(time.Second))

	// The guardian's log goes next to the table and the profiles (see profile), to be read after the run.
	logPath := filepath.Join(b.outDir(), "guardian-scale.log")
	start := time.Now()
	// Default flags, but --lookahead=0: a look-ahead surge starts before the MCO targets the node,
	// and the latency measured here is from the MCO's targeting to the guardian's write.
	// --profiling: the heap and CPU profiles below say what the figures are made of.
	g, err := testbed.StartGuardian(testBed.GuardianBinary, logPath, "--kubeconfig="+testBed.CP.GuardianKubeconfig(), "--leader-elect=false", "--log-level=info", "--lookahead=0", "--profiling")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	if err := g.WaitReady(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	synced := time.Since(start)
	hwmSync := procStatusKiB(t, g.Pid(), "VmHWM")
	heapAfterSync := b.metric(g, "go_memstats_heap_alloc_bytes")
	t.Logf("guardian ready (caches synced) after %v, heap %.0f MiB, peak RSS %.0f MiB", synced.Round(100*time.Millisecond), heapAfterSync/(1<<20), hwmSync/1024)
	// The heap profile's gc=1 collects first: the heap right after it is what the caches hold.
	b.profile(g, "heap", "gc=1", "scale-heap-sync.pb.gz")
	liveAfterSync := b.metric(g, "go_memstats_heap_alloc_bytes")
	t.Logf("live heap after a GC: %.0f MiB", liveAfterSync/(1<<20))

	// The CPU profile covers the idle window; sampling costs in proportion to the CPU used.
	cpuStart, wallStart := procCPU(t, g.Pid()), time.Now()
	t.Logf("idle window of %v...", idle)
	profiled := make(chan struct{})
	go func() {
		defer close(profiled)
		b.profile(g, "profile", fmt.Sprintf("seconds=%d", int(idle.Seconds())), "scale-cpu-idle.pb.gz")
	}()
	select {
	case <-time.After(idle):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	idleCPU := (procCPU(t, g.Pid()) - cpuStart).Seconds() / time.Since(wallStart).Seconds()
	heapIdle := b.metric(g, "go_memstats_heap_alloc_bytes")
	t.Logf("idle CPU %.2f%% of a core, heap %.0f MiB", 100*idleCPU, heapIdle/(1<<20))
	<-profiled

	latencies := b.stalls()
	resolved := b.metric(g, "drain_guardian_stalls_resolved_total")
	writes := b.series(g, "drain_guardian_api_writes_total")
	hwm := procStatusKiB(t, g.Pid(), "VmHWM")

	table := formatScale(shape, setup, synced, [3]float64{heapAfterSync, liveAfterSync, heapIdle}, [2]float64{hwmSync, hwm}, idle, idleCPU, latencies, resolved, writes)
	t.Logf("scale benchmark:\n%s", table)
	out := os.Getenv(scaleOutEnv)
	if out == "" {
		out = filepath.Join(testBed.CP.Dir(), "bench-scale.md")
	}
	if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("table written to %s", out)
}

// scaleBed builds and drives the large cluster.
type scaleBed struct {
	t      *testing.T
	ctx    context.Context
	shape  scaleShape
	kube   kubernetes.Interface
	models []string // namespace/name of each model Deployment
}

const (
	scaleStallPool = "scale-stall"
	scaleModelNS   = "scale-models"
	scaleLabel     = "e2e.drain-guardian.io/scale"
)

// boundedClient is an admin client limited to qps requests per second: the setup must not starve
// the control plane it is measuring on a 2-core machine.
func boundedClient(t *testing.T, qps float32) kubernetes.Interface {
	cfg := testBed.CP.RESTConfig()
	cfg.QPS, cfg.Burst = qps, int(qps)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// parallel runs fn for 0..n-1 on a few workers, failing the test on the first error.
func (b *scaleBed) parallel(n, workers int, fn func(i int) error) {
	b.t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || b.ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		b.t.Fatal(first)
	}
}

func (b *scaleBed) poolName(p int) string {
	if p == b.shape.idlePools {
		return scaleStallPool
	}
	return fmt.Sprintf("scale-idle-%d", p+1)
}

// createNodesAndPools adds the nodes (GPU nodes in the stall pool), then one MachineConfigPool per
// group, and waits until the MCO simulator has adopted every node.
func (b *scaleBed) createNodesAndPools() {
	s := b.shape
	type spec struct {
		name, pool string
		gpus       int
	}
	var nodes []spec
	for p := range s.idlePools {
		for i := range s.idleNodesPerPool {
			nodes = append(nodes, spec{fmt.Sprintf("%s-%d", b.poolName(p), i+1), b.poolName(p), 0})
		}
	}
	for i := range s.stallNodes {
		nodes = append(nodes, spec{fmt.Sprintf("%s-%d", scaleStallPool, i+1), scaleStallPool, 1})
	}
	b.parallel(len(nodes), 16, func(i int) error {
		n := nodes[i]
		l := map[string]string{testbed.PoolLabel: n.pool, "node-role.kubernetes.io/" + n.pool: ""}
		_, err := testBed.CP.AddFakeNode(b.ctx, n.name, l, []string{"zone-a", "zone-b", "zone-c"}[i%3], n.gpus, "64", "256Gi")
		return err
	})
	if s.gpuSlices > 0 {
		if err := testBed.CP.CreateGPUDeviceClass(b.ctx); err != nil && !apierrors.IsAlreadyExists(err) {
			b.t.Fatal(err)
		}
		b.parallel(min(s.gpuSlices, len(nodes)), 16, func(i int) error {
			_, err := testBed.CP.PublishGPUDevices(b.ctx, nodes[i].name, 8)
			return err
		})
	}
	for p := range s.idlePools + 1 {
		name := b.poolName(p)
		sel := map[string]string{testbed.PoolLabel: name}
		pool := &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: sel},
			Spec: mcfgv1.MachineConfigPoolSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: sel}}}
		pool.Spec.Configuration.Name = initialConfig
		if _, err := testBed.MCFG.MachineconfigurationV1().MachineConfigPools().Create(b.ctx, pool, metav1.CreateOptions{}); err != nil {
			b.t.Fatalf("creating pool %s: %v", name, err)
		}
	}
	for p := range s.idlePools + 1 {
		want := s.idleNodesPerPool
		if p == s.idlePools {
			want = s.stallNodes
		}
		if err := testBed.WaitPool(b.ctx, b.poolName(p), 10*time.Minute, func(pool *mcfgv1.MachineConfigPool) bool {
			return mcosim.PoolUpdated(pool) && int(pool.Status.MachineCount) == want
		}); err != nil {
			b.t.Fatal(err)
		}
	}
}

// servicePod is the pod of a CPU service: a few env vars, a probe and a volume, as real pods carry.
func servicePod(pool string, labels map[string]string) corev1.PodSpec {
	env := make([]corev1.EnvVar, 8)
	for i := range env {
		env[i] = corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", i), Value: fmt.Sprintf("value-%d", i)}
	}
	return corev1.PodSpec{
		NodeSelector: map[string]string{testbed.PoolLabel: pool},
		Containers: []corev1.Container{{
			Name: "server", Image: "registry.example.com/services/api:2.3.1", Env: env,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromInt32(8080)}}},
			Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
			VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}},
		}},
		Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}
}

// createWorkloads creates the namespaces, Deployments and PDBs; the controllers make the pods.
func (b *scaleBed) createWorkloads() {
	s := b.shape
	for i := range s.namespaces {
		if err := testBed.CreateNamespace(b.ctx, fmt.Sprintf("scale-%d", i)); err != nil {
			b.t.Fatal(err)
		}
	}
	if err := testBed.CreateNamespace(b.ctx, scaleModelNS); err != nil {
		b.t.Fatal(err)
	}
	var all []scaleWorkload
	for i := range s.models {
		all = append(all, scaleWorkload{scaleModelNS, fmt.Sprintf("model-%d", i+1), scaleStallPool, 1, 0, true})
		b.models = append(b.models, scaleModelNS+"/"+fmt.Sprintf("model-%d", i+1))
	}
	for i := range s.services {
		all = append(all, scaleWorkload{fmt.Sprintf("scale-%d", i%s.namespaces), fmt.Sprintf("svc-%d", i), b.poolName(i % s.idlePools), int32(s.serviceReplicas), 1, false})
	}
	for i := range s.singles {
		all = append(all, scaleWorkload{fmt.Sprintf("scale-%d", i%s.namespaces), fmt.Sprintf("single-%d", i), b.poolName(i % s.idlePools), 1, 0, false})
	}
	// In batches, each waited for until its pods are Ready: the controller-manager, the scheduler and
	// kwok handle a few thousand pods in flight on two cores, not thirty thousand at once.
	pods := 0
	for lo := 0; lo < len(all); lo += scaleBatch {
		batch := all[lo:min(lo+scaleBatch, len(all))]
		for _, w := range batch {
			pods += int(w.replicas)
		}
		b.createBatch(batch)
		b.waitPodsReady(pods)
	}
}

// scaleBatch is how many Deployments (and PDBs) createWorkloads creates before it waits for their pods.
const scaleBatch = 300

// scaleWorkload is one Deployment of the benchmark with its PDB.
type scaleWorkload struct {
	ns, name, pool string
	replicas       int32
	allowed        int32
	model          bool
}

// createBatch creates the Deployments and PDBs of workloads with a few workers.
func (b *scaleBed) createBatch(all []scaleWorkload) {
	b.parallel(len(all), 8, func(i int) error {
		w := all[i]
		labels := map[string]string{"app": w.name, scaleLabel: "true"}
		spec := servicePod(w.pool, map[string]string{"app": w.name})
		annotations := map[string]string{}
		if w.model {
			spec = testbed.ModelPodSpec(w.pool, map[string]string{"app": w.name})
			annotations[controlplane.ReadyDelayAnnotation] = "2s"
		}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: w.ns},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(w.replicas), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}, Spec: spec}},
		}
		if _, err := b.kube.AppsV1().Deployments(w.ns).Create(b.ctx, d, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating deployment %s/%s: %w", w.ns, w.name, err)
		}
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: w.ns},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(w.replicas - w.allowed)),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}}}}
		if _, err := b.kube.PolicyV1().PodDisruptionBudgets(w.ns).Create(b.ctx, pdb, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating PDB %s/%s: %w", w.ns, w.name, err)
		}
		return nil
	})
}

// waitPodsReady polls, in pages, until want pods of the benchmark are Ready.
func (b *scaleBed) waitPodsReady(want int) {
	deadline := time.Now().Add(15 * time.Minute)
	last := -1
	for {
		ready := 0
		opts := metav1.ListOptions{LabelSelector: scaleLabel + "=true", Limit: 5000}
		for {
			list, err := b.kube.CoreV1().Pods("").List(b.ctx, opts)
			if err != nil {
				break
			}
			for i := range list.Items {
				if testbed.PodReady(&list.Items[i]) {
					ready++
				}
			}
			if list.Continue == "" {
				break
			}
			opts.Continue = list.Continue
		}
		if ready != last {
			b.t.Logf("setup: %d/%d pods Ready", ready, want)
			last = ready
		}
		if ready >= want {
			break
		}
		if time.Now().After(deadline) || b.ctx.Err() != nil {
			b.t.Fatalf("only %d/%d pods Ready", ready, want)
		}
		time.Sleep(5 * time.Second)
	}
}

// waitModelPDBs waits until every model's PDB has seen its pod and allows no disruption.
func (b *scaleBed) waitModelPDBs() {
	for _, m := range b.models {
		ns, name, _ := strings.Cut(m, "/")
		if err := waitFor(b.ctx, time.Minute, func() bool {
			p, err := b.kube.PolicyV1().PodDisruptionBudgets(ns).Get(b.ctx, name, metav1.GetOptions{})
			return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 1 && p.Status.DisruptionsAllowed == 0
		}); err != nil {
			b.t.Fatalf("PDB %s: %v", m, err)
		}
	}
}

// stalls updates the stall pool, whose nodes the MCO updates one at a time, each carrying one
// blocked model, and returns, per model, the time from the MCO targeting its node to the guardian's
// write raising its replicas, as two watches of this process see them.
func (b *scaleBed) stalls() []time.Duration {
	kube := testBed.CP.Client()
	var mu sync.Mutex
	targeted, surged := map[string]time.Time{}, map[string]time.Time{}
	nodeInf := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = testbed.PoolLabel + "=" + scaleStallPool
	})).Core().V1().Nodes().Informer()
	_, _ = nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		n := obj.(*corev1.Node)
		if n.Annotations[mcosim.DesiredConfigAnnotation] == nextConfig {
			mu.Lock()
			if _, ok := targeted[n.Name]; !ok {
				targeted[n.Name] = time.Now()
			}
			mu.Unlock()
		}
	}})
	depInf := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(scaleModelNS)).Apps().V1().Deployments().Informer()
	_, _ = depInf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		d := obj.(*appsv1.Deployment)
		if d.Spec.Replicas != nil && *d.Spec.Replicas > 1 {
			mu.Lock()
			if _, ok := surged[d.Name]; !ok {
				surged[d.Name] = time.Now()
			}
			mu.Unlock()
		}
	}})
	go nodeInf.Run(b.ctx.Done())
	go depInf.Run(b.ctx.Done())
	if !cache.WaitForCacheSync(b.ctx.Done(), nodeInf.HasSynced, depInf.HasSynced) {
		b.t.Fatal("watches did not sync")
	}
	nodeOf := map[string]string{}
	pods, err := kube.CoreV1().Pods(scaleModelNS).List(b.ctx, metav1.ListOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	for _, p := range pods.Items {
		nodeOf[p.Labels["app"]] = p.Spec.NodeName
	}
	start := time.Now()
	if err := testBed.UpdatePool(b.ctx, scaleStallPool, nextConfig); err != nil {
		b.t.Fatal(err)
	}
	if err := testBed.WaitPool(b.ctx, scaleStallPool, 30*time.Minute, func(p *mcfgv1.MachineConfigPool) bool {
		return mcosim.PoolUpdated(p) && p.Status.Configuration.Name == nextConfig
	}); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("stall pool (%d nodes, %d models) updated in %v", b.shape.stallNodes, b.shape.models, time.Since(start).Round(time.Second))
	mu.Lock()
	defer mu.Unlock()
	var out []time.Duration
	for model, node := range nodeOf {
		t, ok1 := targeted[node]
		s, ok2 := surged[model]
		if ok1 && ok2 {
			out = append(out, s.Sub(t))
		}
	}
	slices.Sort(out)
	return out
}

// metric reads one metric (summed over its series) from the guardian's /metrics.
func (b *scaleBed) metric(g *testbed.Guardian, name string) float64 {
	var sum float64
	for _, v := range b.series(g, name) {
		sum += v
	}
	return sum
}

// outDir is where the table goes (make bench-scale: .cluster/), which outlives the test bed's
// directory; the test bed's log directory without E2E_SCALE_OUT.
func (b *scaleBed) outDir() string {
	if out := os.Getenv(scaleOutEnv); out != "" {
		return filepath.Dir(out)
	}
	return testBed.CP.LogDir()
}

// profile saves one of the guardian's Go profiles and logs its top
// entries (go tool pprof -top): what the memory and the idle CPU are spent on.
func (b *scaleBed) profile(g *testbed.Guardian, name, query, file string) {
	path := filepath.Join(b.outDir(), file)
	if err := g.SaveProfile(b.ctx, name, query, path); err != nil {
		b.t.Errorf("%s profile: %v", name, err)
		return
	}
	top, err := exec.CommandContext(b.ctx, "go", "tool", "pprof", "-top", "-nodecount=25", path).CombinedOutput()
	if err != nil {
		b.t.Logf("%s profile saved to %s (go tool pprof: %v)", name, path, err)
		return
	}
	b.t.Logf("%s profile saved to %s:\n%s", name, path, top)
}

// series reads one metric's series from the guardian's /metrics, keyed by their label sets.
func (b *scaleBed) series(g *testbed.Guardian, name string) map[string]float64 {
	text, err := g.Metrics(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	out := map[string]float64{}
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		if v, err := strconv.ParseFloat(m[2], 64); err == nil {
			out[m[1]] += v
		}
	}
	return out
}

// procCPU is the CPU time (user + system) the process has used.
func procCPU(t *testing.T, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may contain spaces.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// procStatusKiB reads a "Vm..." line of /proc/<pid>/status, in KiB.
func procStatusKiB(t *testing.T, pid int, field string) float64 {
	v, err := readProcStatusKiB(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// readProcStatusKiB is procStatusKiB for a caller that is not the test's goroutine.
func readProcStatusKiB(pid int, field string) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", field, pid)
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

// formatScale writes the table: heap is after sync, live after sync (after a GC) and after the idle
// window; hwmKiB the peak RSS at cache sync and at the end.
func formatScale(s scaleShape, setup, synced time.Duration, heap [3]float64, hwmKiB [2]float64, idle time.Duration, idleCPU float64,
	lat []time.Duration, resolved float64, writes map[string]float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d nodes (%d pools), %d pods, %d PDBs (%d blocking), %d ResourceSlices of 8 DRA GPUs; setup with a 300 requests/s client took %v. MCO simulator TIME_SCALE %v.\n\n",
		s.nodes(), s.idlePools+1, s.pods(), s.pdbs(), s.models+s.singles, s.gpuSlices, setup.Round(time.Second), suiteTimeScale)
	b.WriteString("| measure | value | goal |\n| --- | ---: | ---: |\n")
	total, perStall := 0.0, 0.0
	keys := make([]string, 0, len(writes))
	for k, v := range writes {
		total += v
		keys = append(keys, k)
	}
	if resolved > 0 {
		perStall = total / resolved
	}
	slices.Sort(keys)
	var breakdown []string
	for _, k := range keys {
		breakdown = append(breakdown, fmt.Sprintf("%s %.0f", k, writes[k]))
	}
	rows := [][3]string{
		{"peak RSS (VmHWM)", fmt.Sprintf("%.0f MiB", hwmKiB[1]/1024), "≤ 150 MiB"},
		{"peak RSS at cache sync", fmt.Sprintf("%.0f MiB", hwmKiB[0]/1024), "-"},
		{"heap after cache sync", fmt.Sprintf("%.0f MiB", heap[0]/(1<<20)), "-"},
		{"live heap after cache sync (after a GC)", fmt.Sprintf("%.0f MiB", heap[1]/(1<<20)), "-"},
		{"heap after the idle window", fmt.Sprintf("%.0f MiB", heap[2]/(1<<20)), "-"},
		{"time to cache sync", fmt.Sprintf("%.1f s", synced.Seconds()), "-"},
		{fmt.Sprintf("CPU over %v idle", idle), fmt.Sprintf("%.2f %% of a core", 100*idleCPU), "< 2 %"},
		{fmt.Sprintf("detection → surge write, p50 (%d stalls)", len(lat)), fmt.Sprintf("%.0f ms", float64(percentile(lat, 0.5).Microseconds())/1000), "-"},
		{fmt.Sprintf("detection → surge write, p99 (%d stalls)", len(lat)), fmt.Sprintf("%.0f ms", float64(percentile(lat, 0.99).Microseconds())/1000), "< 1 s"},
		{"API writes per resolved stall", fmt.Sprintf("%.1f (%.0f writes, %.0f stalls)", perStall, total, resolved), "≤ 6"},
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r[0], r[1], r[2])
	}
	fmt.Fprintf(&b, "\nWrites by resource and verb: %s.\n", strings.Join(breakdown, ", "))
	return b.String()
}

// waitFor polls cond every 200 ms until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
	return nil
}
