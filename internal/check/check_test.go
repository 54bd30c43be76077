package check

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/drain-guardian/drain-guardian/internal/mco"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// verdicts maps "namespace/pod" to its verdict.
func verdicts(r *Report) map[string]Verdict {
	out := map[string]Verdict{}
	for _, b := range r.Blocks() {
		out[b.Namespace+"/"+b.Pod] = b.Verdict
	}
	return out
}

func block(t *testing.T, r *Report, pod string) Block {
	t.Helper()
	for _, b := range r.Blocks() {
		if b.Pod == pod {
			return b
		}
	}
	t.Fatalf("no block for pod %s in %+v", pod, r.Blocks())
	return Block{}
}

func TestEveryVerdict(t *testing.T) {
	r := Analyze(mixed(t).build(), Config{})
	want := map[string]Verdict{
		"models/granite": ResolvableWithCapacity,
		"models/llama":   NoCapacity,
		"models/mistral": OptedOut,
		"models/web":     Resolvable,
		"models/web-2":   Resolvable,
		"models/db":      UnsatisfiablePDB,
		"models/batch":   UnsupportedOwner,
		"models/shared":  MultiplePDBs,
		"models/canary":  MissingRBAC,
	}
	got := verdicts(r)
	for pod, v := range want {
		if got[pod] != v {
			t.Errorf("%s: verdict %q, want %q", pod, got[pod], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("blocks %v, want exactly %v", got, want)
	}
	if r.ExitCode() != ExitStall {
		t.Errorf("exit code %d, want %d", r.ExitCode(), ExitStall)
	}

	granite := block(t, r, "granite")
	if granite.Workload != "InferenceService granite" || len(granite.Changes) != 1 ||
		granite.Changes[0].Path != "/spec/predictor/minReplicas" || *granite.Changes[0].From != 1 || granite.Changes[0].To != 2 {
		t.Errorf("granite: workload %q changes %+v, want InferenceService granite minReplicas 1->2", granite.Workload, granite.Changes)
	}
	if granite.Extra["nvidia.com/gpu"] != 1 {
		t.Errorf("granite extra %v, want 1 GPU", granite.Extra)
	}
	if llama := block(t, r, "llama"); llama.Missing["nvidia.com/gpu"] != "1" || len(llama.Changes) != 0 {
		t.Errorf("llama: missing %v changes %v, want 1 GPU missing and nothing written", llama.Missing, llama.Changes)
	}
	for pod, fragment := range map[string]string{
		"mistral": workload.IgnoreAnnotation, "db": "maxUnavailable 0", "batch": "no controller",
		"shared": "more than one PDB", "canary": "grant get and patch on rollouts/scale",
	} {
		if d := block(t, r, pod).Detail; !strings.Contains(d, fragment) {
			t.Errorf("%s: detail %q does not mention %q", pod, d, fragment)
		}
	}
}

func TestScopeVerdicts(t *testing.T) {
	t.Run("namespace outside --namespace-selector", func(t *testing.T) {
		r := Analyze(mixed(t).build(), Config{NamespaceSelector: labels.SelectorFromSet(labels.Set{"team": "web"})})
		for pod, v := range verdicts(r) {
			if v != OutOfScope {
				t.Errorf("%s: %s, want %s", pod, v, OutOfScope)
			}
		}
	})
	t.Run("platform namespace", func(t *testing.T) {
		// The daemon's decision and check read the same exclusion: here every namespace is the platform's.
		r := Analyze(mixed(t).build(), Config{Excludes: func(string) bool { return true }})
		for _, b := range r.Blocks() {
			if b.Verdict != OutOfScope || !strings.Contains(b.Detail, "--platform-namespaces") {
				t.Errorf("%s: %s (%s), want %s naming --platform-namespaces", b.Pod, b.Verdict, b.Detail, OutOfScope)
			}
		}
	})
	t.Run("namespace opted out", func(t *testing.T) {
		c := mixed(t)
		c.snap.Namespaces[0].Annotations = map[string]string{workload.IgnoreAnnotation: "true"}
		for pod, v := range verdicts(Analyze(c.build(), Config{})) {
			if v != OptedOut {
				t.Errorf("%s: %s, want %s", pod, v, OptedOut)
			}
		}
	})
	t.Run("untrusted annotation values do not opt out", func(t *testing.T) {
		c := mixed(t)
		c.snap.Namespaces[0].Annotations = map[string]string{workload.IgnoreAnnotation: "yes please"}
		if v := verdicts(Analyze(c.build(), Config{}))["models/web"]; v != Resolvable {
			t.Errorf("web: %s, want %s", v, Resolvable)
		}
	})
	t.Run("pool outside --pool-selector", func(t *testing.T) {
		r := Analyze(mixed(t).build(), Config{PoolSelector: labels.SelectorFromSet(labels.Set{"gpu": "true"})})
		for pod, v := range verdicts(r) {
			if v != OutOfScope {
				t.Errorf("%s: %s, want %s", pod, v, OutOfScope)
			}
		}
	})
}

func TestUnsatisfiablePDBs(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		minAvailable, maxUnavl *intstr.IntOrString
		fragment               string
	}{
		{"maxUnavailable", nil, ptr.To(intstr.FromInt32(0)), "maxUnavailable 0"},
		{"minAvailable 100%", ptr.To(intstr.FromString("100%")), nil, "requires every replica"},
		{"more than MaxSurge replicas", ptr.To(intstr.FromInt32(20)), nil, "more than 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.node("a", 0)
			c.node("b", 0)
			c.deployment("web", "a", 0, nil)
			c.snap.PDBs[0].Spec.MinAvailable, c.snap.PDBs[0].Spec.MaxUnavailable = tc.minAvailable, tc.maxUnavl
			b := block(t, Analyze(c.build(), Config{}), "web")
			if b.Verdict != UnsatisfiablePDB || !strings.Contains(b.Detail, tc.fragment) {
				t.Errorf("verdict %s detail %q, want %s mentioning %q", b.Verdict, b.Detail, UnsatisfiablePDB, tc.fragment)
			}
		})
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(c *cluster)
		want  int
	}{
		{"nothing blocks", func(c *cluster) {
			c.deployment("web", "a", 0, nil)
			c.snap.PDBs[0].Status.DisruptionsAllowed = 1
		}, ExitClear},
		{"no pods at all", func(*cluster) {}, ExitClear},
		{"everything resolvable", func(c *cluster) {
			c.deployment("web", "a", 0, nil)
			c.inferenceService("granite", "a", 1)
		}, ExitResolvable},
		{"one stall among resolvable ones", func(c *cluster) {
			c.deployment("web", "a", 0, nil)
			c.pod("batch", "a", 0, nil)
			c.pdb("batch", "batch", nil, nil)
		}, ExitStall},
		{"opted out stalls", func(c *cluster) {
			c.deployment("web", "a", 0, nil).Annotations = map[string]string{workload.IgnoreAnnotation: "true"}
		}, ExitStall},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.node("a", 1)
			c.node("b", 1)
			tc.build(c)
			if got := Analyze(c.build(), Config{}).ExitCode(); got != tc.want {
				t.Errorf("exit code %d, want %d", got, tc.want)
			}
		})
	}
}

// TestCapacityPerWave checks the capacity model: one spare GPU serves one surge per wave; with
// maxUnavailable 1 and the default restore, the next node's surge finds it again, while with
// --restore=pool every surge holds its GPU until the pool is done.
func TestCapacityPerWave(t *testing.T) {
	build := func(t *testing.T) *cluster {
		c := newCluster(t)
		c.pool()
		c.node("gpu-a", 1)
		c.node("gpu-b", 1)
		c.node("spare", 1)
		c.snap.Nodes[2].Labels = map[string]string{corev1.LabelHostname: "spare"} // in no pool
		c.inferenceService("granite", "gpu-a", 1)
		c.inferenceService("llama", "gpu-b", 1)
		return c
	}
	r := Analyze(build(t).build(), Config{})
	if got := verdicts(r); got["models/granite"] != ResolvableWithCapacity || got["models/llama"] != ResolvableWithCapacity {
		t.Errorf("restore auto: %v, want both resolvable-with-capacity", got)
	}
	if res := r.Pools[0].Plan.Resources; len(res) != 1 || res[0] != (Resource{Name: "nvidia.com/gpu", Peak: 1, Free: 1}) {
		t.Errorf("restore auto: resources %+v, want a peak of 1 GPU of 1 free", res)
	}
	r = Analyze(build(t).build(), Config{HoldAll: true})
	if got := verdicts(r); got["models/granite"] != ResolvableWithCapacity || got["models/llama"] != NoCapacity {
		t.Errorf("restore pool: %v, want granite resolvable-with-capacity, llama no-capacity", got)
	}
	if res := r.Pools[0].Plan.Resources; len(res) != 1 || res[0] != (Resource{Name: "nvidia.com/gpu", Peak: 2, Free: 1, Missing: 1}) {
		t.Errorf("restore pool: resources %+v, want a peak of 2 GPUs, 1 free, 1 missing", res)
	}
}

// TestUpdateOrder checks that nodes come in the MCO's order (oldest first for an up-to-date pool),
// in waves of maxUnavailable, and that a pool mid-update lists the updating node first.
func TestUpdateOrder(t *testing.T) {
	c := newCluster(t)
	p := c.pool()
	p.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(2))
	for _, n := range []string{"w3", "w1", "w2"} {
		c.node(n, 0)
	}
	r := Analyze(c.build(), Config{})
	var got []string
	for _, n := range r.Pools[0].Nodes {
		got = append(got, n.Name+":"+n.Stage+":"+string(rune('0'+n.Wave)))
	}
	if want := "w3:next:1 w1:next:1 w2:later:2"; strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}

	c = newCluster(t)
	p = c.pool()
	p.Spec.Configuration.Name = "rendered-2"
	c.node("w1", 0)
	w2 := c.node("w2", 0)
	w2.Annotations["machineconfiguration.openshift.io/desiredConfig"] = "rendered-2"
	w2.Annotations["machineconfiguration.openshift.io/state"] = "Working"
	r = Analyze(c.build(), Config{})
	got = nil
	for _, n := range r.Pools[0].Nodes {
		got = append(got, n.Name+":"+n.Stage)
	}
	if want := "w2:updating w1:later"; strings.Join(got, " ") != want {
		t.Errorf("mid-update order %v, want %s", got, want)
	}
}

func TestCordonModeIsOnePoolByName(t *testing.T) {
	c := newCluster(t)
	c.node("b", 0)
	c.node("a", 0)
	c.deployment("web", "b", 0, nil)
	r := Analyze(c.build(), Config{})
	if r.Mode != "cordon" || len(r.Pools) != 1 || r.Pools[0].Name != NoPool {
		t.Fatalf("mode %s pools %+v, want one %s pool", r.Mode, r.Pools, NoPool)
	}
	if n := r.Pools[0].Nodes; n[0].Name != "a" || n[1].Name != "b" || n[1].Blocks[0].Verdict != Resolvable {
		t.Errorf("nodes %+v, want a then b, web resolvable", n)
	}
}

func TestAddedTime(t *testing.T) {
	build := func(t *testing.T) Cluster {
		c := newCluster(t)
		c.pool()
		c.node("a", 1)
		c.node("b", 1)
		c.node("c", 1)
		c.inferenceService("granite", "a", 1)
		c.deployment("web", "b", 0, nil)
		return c.build()
	}
	for _, tc := range []struct {
		name       string
		cfg        Config
		wantTime   time.Duration
		wantSource string
	}{
		{"no observation, no estimate", Config{}, 0, "unknown"},
		{"estimate", Config{ReadyEstimate: 3 * time.Minute}, 6 * time.Minute, "estimate"},
		{"observed for one kind, estimate for the other", Config{ReadyTimes: map[string]time.Duration{"InferenceService": 10 * time.Minute}, ReadyEstimate: time.Minute}, 11 * time.Minute, "estimate"},
		{"observed for both", Config{ReadyTimes: map[string]time.Duration{"InferenceService": 10 * time.Minute, "Deployment": 30 * time.Second}}, 10*time.Minute + 30*time.Second, "observed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := Analyze(build(t), tc.cfg).Pools[0].Plan
			if time.Duration(plan.AddedTime) != tc.wantTime || plan.AddedTimeSource != tc.wantSource {
				t.Errorf("added time %s (%s), want %s (%s)", plan.AddedTime, plan.AddedTimeSource, tc.wantTime, tc.wantSource)
			}
		})
	}
}

func TestRenderGolden(t *testing.T) {
	cordon := newCluster(t)
	cordon.node("gpu-b", 1)
	cordon.node("gpu-a", 1)
	cordon.inferenceService("granite", "gpu-a", 1)
	reports := map[string]*Report{
		"mixed":  Analyze(mixed(t).build(), Config{ReadyTimes: map[string]time.Duration{"InferenceService": 4 * time.Minute}, ReadyEstimate: 2 * time.Minute}),
		"cordon": Analyze(cordon.build(), Config{}),
	}
	for name, r := range reports {
		for _, format := range Formats {
			if name == "cordon" && format != "table" {
				continue
			}
			t.Run(name+"/"+format, func(t *testing.T) {
				var out bytes.Buffer
				if err := Render(&out, r, format); err != nil {
					t.Fatal(err)
				}
				golden := filepath.Join("testdata", name+"."+format)
				if *update {
					if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test ./internal/check -update to create it)", err)
				}
				if out.String() != string(want) {
					t.Errorf("%s output differs from %s (go test ./internal/check -update rewrites it):\n%s", format, golden, out.String())
				}
			})
		}
	}
}

// TestMachineReadableRoundTrip checks that json and yaml carry the whole report.
func TestMachineReadableRoundTrip(t *testing.T) {
	r := Analyze(mixed(t).build(), Config{ReadyEstimate: time.Minute})
	for format, unmarshal := range map[string]func([]byte, any) error{"json": json.Unmarshal, "yaml": func(b []byte, v any) error { return yaml.Unmarshal(b, v) }} {
		var out bytes.Buffer
		if err := Render(&out, r, format); err != nil {
			t.Fatal(err)
		}
		var back Report
		if err := unmarshal(out.Bytes(), &back); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if back.ExitCode() != r.ExitCode() || len(back.Blocks()) != len(r.Blocks()) || back.Pools[0].Plan.AddedTime != r.Pools[0].Plan.AddedTime {
			t.Errorf("%s: round trip lost data: %+v", format, back)
		}
	}
}

func TestRenderRejectsUnknownFormat(t *testing.T) {
	err := Render(&bytes.Buffer{}, &Report{}, "xml")
	if err == nil || !strings.Contains(err.Error(), "table, json, yaml") {
		t.Errorf("error %v, want it to list the formats", err)
	}
}

// A pool whose pending update the machine-config daemon applies without a drain stalls nothing:
// check says so instead of predicting the stalls; an update known to drain, or not known at all,
// is predicted as before and says which it is.
func TestPendingUpdateDrainAnswer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		need       mco.Need
		wantDrain  string
		wantBlocks int
	}{
		{"no-drain", mco.NeedNoDrain, "no-drain", 0},
		{"drain", mco.NeedDrain, "drain", len(verdicts(Analyze(mixed(t).build(), Config{})))},
		{"unknown", mco.NeedUnknown, "drain-unknown", len(verdicts(Analyze(mixed(t).build(), Config{})))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := mixed(t).build()
			cl.DrainNeed = func(*corev1.Node, *mcfgv1.MachineConfigPool) mco.Answer {
				return mco.Answer{Need: tc.need, Source: "MachineConfigNode cpu-a", Reason: "Drain Required: …"}
			}
			r := Analyze(cl, Config{})
			var worker *Pool
			for i := range r.Pools {
				if r.Pools[i].Name == "worker" {
					worker = &r.Pools[i]
				}
			}
			if worker == nil || worker.Drain != tc.wantDrain || !strings.HasPrefix(worker.DrainReason, "MachineConfigNode cpu-a: ") {
				t.Fatalf("worker pool %+v, want drain %q with the answer's source", worker, tc.wantDrain)
			}
			if got := len(verdicts(r)); got != tc.wantBlocks {
				t.Errorf("%d blocks predicted, want %d", got, tc.wantBlocks)
			}
			var out strings.Builder
			if err := Render(&out, r, "table"); err != nil {
				t.Fatal(err)
			}
			if tc.need == mco.NeedNoDrain && !strings.Contains(out.String(), "POOL worker: no-drain: its update is applied without cordon or drain (MachineConfigNode cpu-a") {
				t.Errorf("table does not say no-drain:\n%s", out.String())
			}
		})
	}
}

// A workload that does not run what it asks for is not surged (the daemon's NotSteady): `check`
// says so, and the update will stall on it.
func TestNotSteadyVerdict(t *testing.T) {
	c := newCluster(t)
	c.pool()
	c.node("gpu-a", 1)
	c.node("gpu-b", 1)
	d := c.deployment("huge", "gpu-a", 1, nil)
	d.Spec.Replicas = ptr.To[int32](2_000_000_000)
	r := Analyze(c.build(), Config{})
	b := block(t, r, "huge")
	if b.Verdict != NotSteady || !strings.Contains(b.Detail, "2000000000 replicas wanted, 1 running") {
		t.Fatalf("huge: verdict %q (%s), want %q saying what runs", b.Verdict, b.Detail, NotSteady)
	}
	if r.ExitCode() != ExitStall {
		t.Errorf("exit code %d, want %d", r.ExitCode(), ExitStall)
	}
}
