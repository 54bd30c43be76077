package guardian

// StallReason says why a blocked pod is not surged now. It is the one vocabulary of the stall path:
// its String is the verdict of `drain-guardian check` and of drain_guardian_predicted_blocks, and
// EventReason names the daemon's Event and its stall metrics' reason label.
type StallReason int

// The stall reasons.
const (
	// StallNone: the pod is surged, or an existing Surge serves it.
	StallNone StallReason = iota
	// StallOutOfScope: the namespace does not match --namespace-selector (or cannot be read), or the
	// pool does not match --pool-selector.
	StallOutOfScope
	// StallOptedOut: the workload, its pod owner or its namespace carries drain-guardian.io/ignore=true.
	StallOptedOut
	// StallUnknown: the owner could not be read now (a cache miss, a timeout): look again. Never
	// reported as unresolvable.
	StallUnknown
	// StallUnsupportedOwner: the pod has no owner whose replica count the guardian can raise.
	StallUnsupportedOwner
	// StallMissingRBAC: the owner has a /scale subresource the guardian may not use.
	StallMissingRBAC
	// StallMultiplePDBs: several PDBs select the pod; the Eviction API refuses it whatever the budgets.
	StallMultiplePDBs
	// StallUnsatisfiablePDB: no number of added replicas makes the PDB allow a disruption.
	StallUnsatisfiablePDB
	// StallNoCapacity: the replacements fit on no other schedulable node.
	StallNoCapacity
	// StallSurgeFailed: the workload's Surge for this very drain failed; it was reported then.
	StallSurgeFailed
	// StallDeferred: --max-concurrent-surges stalls are being served, the namespace holds
	// --max-concurrent-surges-per-namespace of them, or the free slots go first to other namespaces.
	StallDeferred
	// StallLookaheadSkipped: a look-ahead surge waits for spare capacity or a spare slot.
	StallLookaheadSkipped
	// StallPDBStatusBehind: the PDB's status lags behind a pod that just turned Ready.
	StallPDBStatusBehind
	// StallSurgeTooLarge: the PDB needs more added replicas than --max-surge-replicas allows.
	StallSurgeTooLarge
	// StallPrepareQueued: a prepared surge waits for a slot (the last one stays for a stall; its
	// namespace's share is in use). It starts when a surge in flight turns Ready or ends, with
	// nothing else to change: the workload is being prepared, behind others.
	StallPrepareQueued
	// StallNotSteady: the workload does not run what it asks for (replicas missing or not Ready, a
	// rollout, an HPA scaling it): the replicas a surge adds would not come either. It is decided
	// again when the workload settles.
	StallNotSteady
)

type reasonNames struct{ verdict, event string }

// reasonTable names every reason once. Event names keep the daemon's published Event reasons
// (alerts and runbooks grep them): a multiple-PDB pod is an UnsatisfiablePDB Event, a missing
// /scale permission an UnsupportedOwner Event, with the detail saying which.
var reasonTable = map[StallReason]reasonNames{
	StallNone:             {"resolvable", ""},
	StallOutOfScope:       {"out-of-scope", ""},
	StallOptedOut:         {"opted-out", ""},
	StallUnknown:          {"unknown", ""},
	StallUnsupportedOwner: {"unsupported-owner", ReasonUnsupported},
	StallMissingRBAC:      {"missing-rbac", ReasonUnsupported},
	StallMultiplePDBs:     {"multiple-pdbs", ReasonUnsatisfiable},
	StallUnsatisfiablePDB: {"unsatisfiable-pdb", ReasonUnsatisfiable},
	StallNoCapacity:       {"no-capacity", ReasonNoCapacity},
	StallSurgeFailed:      {"surge-failed", "SurgeFailed"},
	StallDeferred:         {"deferred", "SurgeDeferred"},
	StallLookaheadSkipped: {"lookahead-skipped", ""},
	StallPDBStatusBehind:  {"pdb-status-behind", ""},
	StallSurgeTooLarge:    {"surge-too-large", ReasonSurgeTooLarge},
	StallPrepareQueued:    {"prepare-queued", ""},
	StallNotSteady:        {"not-steady", ReasonNotSteady},
}

// String is the reason's verdict, as `check` prints it.
func (r StallReason) String() string { return reasonTable[r].verdict }

// EventReason is the reason of the daemon's Event (and of its stall metrics); "" when none is recorded.
func (r StallReason) EventReason() string { return reasonTable[r].event }

// Unresolvable reports whether no surge will help a pod with this reason unless something changes
// (the PDB, the owner, the capacity, a permission): it counts in drain_guardian_unresolvable_blocked_pods
// and stalls a predicted drain.
func (r StallReason) Unresolvable() bool {
	switch r {
	case StallUnsupportedOwner, StallMissingRBAC, StallMultiplePDBs, StallUnsatisfiablePDB, StallNoCapacity, StallSurgeFailed, StallSurgeTooLarge,
		StallNotSteady:
		return true
	}
	return false
}
