// Package scenarios runs drain-guardian end to end: a real control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok), the MachineConfig operator and KServe simulators,
// and the drain-guardian binary as a separate process with the shipped RBAC. Each scenario has its
// own namespace, MachineConfigPool and nodes, and its own guardian watching only that pool, so that
// scenarios never see each other's drains.
//
// Every scenario that updates a pool with the guardian samples the model's Ready pods every 100 ms
// (and on every pod change) and requires at least one Ready replica at every observation, the pool
// Updated, and the workload back to its original replica settings. On failure the test logs a
// timeline of the scenario (Events, node MCO states, pool status, pods, replica counts), the
// guardian's log and the MCO simulator's lines about the pool's nodes.
//
// Run with `go test -v -timeout 40m ./scenarios/` from e2e/. The first run builds the control plane
// (several minutes); the suite then takes about six minutes on two cores. TIME_SCALE (default 0.05)
// scales the MCO's delays; E2E_TIMELINE=1 logs the timeline of passing scenarios too. The suite is
// skipped with -short.
package scenarios
