// Package check predicts, before a MachineConfigPool update, which pods will block which node's
// drain, whether drain-guardian can resolve each of them, and what the surges will take in spare
// resources and time.
//
// Everything here is pure: Analyze reads a snapshot the caller took from informer listers, and the
// renderers only format the Report. The `drain-guardian check` command prints it once; the daemon
// computes it on a timer and exports it as the drain_guardian_predicted_* gauges.
package check

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/drain-guardian/drain-guardian/internal/guardian"
)

// Verdict says what will happen to one pod that blocks a drain.
type Verdict string

// The verdicts. Only Resolvable and ResolvableWithCapacity let the drain go through; every other
// verdict names why the drain will stall on that pod, and is the String of the daemon's own stall
// reason (guardian.StallReason): the daemon and `check` decide with the same function.
var (
	// Resolvable: the guardian will surge the workload (or a Surge in flight serves it) and the
	// replacement fits on the nodes' free cpu and memory; it needs no extended resource.
	Resolvable = Verdict("resolvable")
	// ResolvableWithCapacity: the guardian will surge the workload, and the replacement takes extended
	// resources (GPUs, ...) that are free now. The drain stalls if that capacity is used up first.
	ResolvableWithCapacity = Verdict("resolvable-with-capacity")
	// UnsatisfiablePDB: no number of added replicas makes the PDB allow a disruption (maxUnavailable,
	// minAvailable 100%, or more than blocking.MaxSurge replicas needed).
	UnsatisfiablePDB = verdictOf(guardian.StallUnsatisfiablePDB)
	// MultiplePDBs: several PDBs select the pod; the Eviction API refuses such a pod whatever the budgets.
	MultiplePDBs = verdictOf(guardian.StallMultiplePDBs)
	// UnsupportedOwner: the pod has no owner whose replica count the guardian can raise (a bare pod, a
	// Job, a controller without /scale, a KServe API this cluster does not serve).
	UnsupportedOwner = verdictOf(guardian.StallUnsupportedOwner)
	// OptedOut: the workload, its pod owner or its namespace carries drain-guardian.io/ignore=true.
	OptedOut = verdictOf(guardian.StallOptedOut)
	// OutOfScope: the namespace does not match --namespace-selector, or the pool --pool-selector.
	OutOfScope = verdictOf(guardian.StallOutOfScope)
	// MissingRBAC: the owner has a /scale subresource the guardian is not allowed to use.
	MissingRBAC = verdictOf(guardian.StallMissingRBAC)
	// NoCapacity: the replacement fits on no other schedulable node, counting the replacements of the
	// other blocked pods drained at the same time (or, with --restore=pool, earlier in the update).
	NoCapacity = verdictOf(guardian.StallNoCapacity)
	// SurgeFailed: the workload's Surge for this very update failed (its status says why); the
	// guardian does not surge it again for the same drain.
	SurgeFailed = verdictOf(guardian.StallSurgeFailed)
	// SurgeTooLarge: the PDB needs more added replicas than --max-surge-replicas allows.
	SurgeTooLarge = verdictOf(guardian.StallSurgeTooLarge)
	// NotSteady: the workload does not run what it asks for (replicas missing or not Ready, a
	// rollout, an HPA scaling): the guardian surges it only once it does.
	NotSteady = verdictOf(guardian.StallNotSteady)
	// Unknown: the pod's owner could not be read now (a cache miss, a timeout); the daemon looks
	// again, and so should whoever runs `check`.
	Unknown = verdictOf(guardian.StallUnknown)
)

func verdictOf(r guardian.StallReason) Verdict { return Verdict(r.String()) }

// Verdicts lists every verdict, resolvable ones first.
func Verdicts() []Verdict {
	return []Verdict{Resolvable, ResolvableWithCapacity, UnsatisfiablePDB, MultiplePDBs, UnsupportedOwner, OptedOut, OutOfScope, MissingRBAC, NoCapacity, SurgeFailed, SurgeTooLarge, NotSteady, Unknown}
}

// Resolvable reports whether the guardian will resolve a pod with this verdict.
func (v Verdict) Resolvable() bool { return v == Resolvable || v == ResolvableWithCapacity }

// Exit codes of `drain-guardian check`.
const (
	// ExitClear: no pod blocks any drain.
	ExitClear = 0
	// ExitResolvable: pods block drains, and the guardian will resolve every one of them.
	ExitResolvable = 1
	// ExitStall: at least one pod will stall a drain.
	ExitStall = 2
	// ExitError: the cluster could not be read.
	ExitError = 3
)

// NoPool names the pseudo-pool of every node when MachineConfigPools are not used (cordon mode).
const NoPool = "(no pool)"

// Report is the prediction for the whole cluster.
type Report struct {
	// Mode is "mco" (nodes grouped by MachineConfigPool, in the MCO's update order) or "cordon" (no
	// pools: every node in one pseudo-pool, by name).
	Mode  string `json:"mode"`
	Pools []Pool `json:"pools"`
}

// Pool is the prediction for one MachineConfigPool.
type Pool struct {
	Name string `json:"name"`
	// MaxUnavailable is how many nodes drain at the same time (1 in cordon mode).
	MaxUnavailable int `json:"maxUnavailable"`
	// Nodes are the pool's nodes still to update, in the MCO's update order.
	Nodes []Node `json:"nodes"`
	Plan  Plan   `json:"plan"`
	// Prepare is set for a pool the guardian is asked to prepare (drain-guardian.io/prepare).
	Prepare *Prepare `json:"prepare,omitempty"`
	// Drain says, for a pool with an update pending, whether that update drains its nodes: "drain",
	// "no-drain" (the nodes are updated without cordon or drain: nothing stalls, and Nodes is
	// empty) or "drain-unknown" (nothing has said yet; the stalls are predicted as if it drained,
	// as the machine-config daemon drains for any change it does not know). Empty for a pool with
	// nothing pending, whose next update is predicted as one that drains.
	Drain string `json:"drain,omitempty"`
	// DrainReason says who answered and how ("MachineConfigNode w1: Drain Required: false"), or why
	// nothing is known.
	DrainReason string `json:"drainReason,omitempty"`
}

// Prepare is how far the guardian has prepared a pool for its next update: the workloads that
// would stall it, by state. A prepared workload no longer blocks (its PDB allows a disruption).
type Prepare struct {
	// Prepared counts the workloads whose extra replica is Ready; Preparing those surged, not Ready yet.
	Prepared  int `json:"prepared"`
	Preparing int `json:"preparing"`
	// Waiting lists the workloads that still block a drain of the pool and wait for capacity, a slot
	// or a change, as "Kind namespace/name on node: why".
	Waiting []string `json:"waiting,omitempty"`
	// Unresolvable lists those no surge helps, as "Kind namespace/name on node: reason: why".
	Unresolvable []string `json:"unresolvable,omitempty"`
}

// The stages of a node still to update (Node.Stage).
const (
	StageUpdating = "updating"
	StageNext     = "next"
	StageLater    = "later"
	StageSkipped  = "skipped"
)

// Node is one node still to update and the pods that would block its drain.
type Node struct {
	Name string `json:"name"`
	// Stage is where the MCO has the node: updating, next (targeted at its next sync), later, or
	// skipped (not a candidate now: cordoned, not Ready, paused pool); empty in cordon mode.
	Stage string `json:"stage,omitempty"`
	// Wave counts the groups of maxUnavailable nodes drained together, from 1.
	Wave   int     `json:"wave"`
	Blocks []Block `json:"blocks,omitempty"`
}

// Block is one pod that a PDB keeps on its node, and what will happen to it.
type Block struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	PDB       string `json:"pdb"`
	// Workload is the object whose replica count the guardian would raise, as "Kind name"; empty
	// when there is none.
	Workload string  `json:"workload,omitempty"`
	Verdict  Verdict `json:"verdict"`
	// Detail says why, for every verdict but the resolvable ones.
	Detail string `json:"detail,omitempty"`
	// Changes are the fields the guardian will write, for the resolvable verdicts.
	Changes []Change `json:"changes,omitempty"`
	// Replicas is how many replicas the surge adds.
	Replicas int32 `json:"replicas,omitempty"`
	// Extra is what the added replicas request (or, for NoCapacity, would request) in extended
	// resources (nvidia.com/gpu, ...). A second blocked pod of the same workload on the node has none:
	// one surge serves both.
	Extra map[string]int64 `json:"extra,omitempty"`
	// Missing is what the replicas that fit nowhere request, for NoCapacity.
	Missing map[string]string `json:"missing,omitempty"`
	// Regarding is the object an Event about this block is recorded against: the workload, else the pod.
	Regarding *corev1.ObjectReference `json:"-"`
}

// Change is one field the guardian will write.
type Change struct {
	// Path is the JSON pointer of the field, e.g. /spec/predictor/minReplicas.
	Path string `json:"path"`
	// From is the current value; nil when the field is absent.
	From *int64 `json:"from"`
	To   int64  `json:"to"`
}

// Plan sums up one pool.
type Plan struct {
	// Blocking counts the pods that would block a drain; Resolvable those the guardian will resolve.
	Blocking   int `json:"blocking"`
	Resolvable int `json:"resolvable"`
	// Stalls counts the pods the update will stall on, by verdict.
	Stalls map[Verdict]int `json:"stalls,omitempty"`
	// Resources compares, per extended resource and per DeviceClass (see capacity.DeviceClassResource),
	// the peak the surges take at once with what is free.
	Resources []Resource `json:"resources,omitempty"`
	// AddedTime estimates how much longer the update takes because drains wait for replacements to be
	// Ready: per wave, the slowest replacement, summed. Zero with AddedTimeSource unknown.
	AddedTime Duration `json:"addedTime"`
	// AddedTimeSource says where the replacement-ready times come from: "observed" (the daemon's
	// drain_guardian_replacement_ready_duration_seconds), "estimate" (--ready-estimate), "none" (no
	// surge) or "unknown" (no observation and no estimate).
	AddedTimeSource string `json:"addedTimeSource"`
}

// Resource compares an extended resource, or the devices of a DeviceClass, the surges need with what is free.
type Resource struct {
	Name string `json:"name"`
	// Peak is the most the surges hold at the same time: per wave with --restore auto or node (each
	// wave's surges give theirs back before the next), the whole update's with --restore=pool.
	Peak int64 `json:"peak"`
	// Free is the allocatable minus what pods request, over every schedulable, Ready node; for devices,
	// those reachable from such a node and not allocated.
	Free int64 `json:"free"`
	// Missing is what the replacements that fit nowhere request.
	Missing int64 `json:"missing,omitempty"`
}

// Duration is a time.Duration that reads as "4m0s" in JSON and YAML.
type Duration time.Duration

// String is the duration as time.Duration prints it.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// Blocks returns every block of the report, pool by pool and node by node.
func (r *Report) Blocks() []Block {
	var out []Block
	for _, p := range r.Pools {
		for _, n := range p.Nodes {
			out = append(out, n.Blocks...)
		}
	}
	return out
}

// ExitCode is the exit code `drain-guardian check` ends with for this report.
func (r *Report) ExitCode() int {
	code := ExitClear
	for _, b := range r.Blocks() {
		if !b.Verdict.Resolvable() {
			return ExitStall
		}
		code = ExitResolvable
	}
	return code
}
