// Package rbac is the single list of every Kubernetes API call drain-guardian makes.
//
// The ClusterRole and Role shipped in manifests/ must grant exactly these rules: a test renders the
// manifests and compares them with this list, so a new API call in the code fails the build until the
// shipped RBAC (and the README's table) says so too.
package rbac

import (
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
)

var (
	readOnly  = []string{"get", "list", "watch"}
	readPatch = []string{"get", "list", "watch", "patch"}
	// draResources are what the device count reads (internal/dra).
	draResources = []string{"resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses"}
)

// ClusterRoleRules returns the cluster-wide permissions the daemon needs.
func ClusterRoleRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		// Nodes are watched for the MCO drain protocol and cordons; never written.
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: readOnly},
		// Namespaces are read for --namespace-selector and the opt-out annotation.
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: readOnly},
		// Pods are patched only to set controller.kubernetes.io/pod-deletion-cost before a scale-down.
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: readPatch},
		// The blocked pod is evicted through the Eviction API, never deleted.
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: readOnly},
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: readOnly},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets"}, Verbs: readPatch},
		{APIGroups: []string{"autoscaling"}, Resources: []string{"horizontalpodautoscalers"}, Verbs: readPatch},
		{APIGroups: []string{"machineconfiguration.openshift.io"}, Resources: []string{"machineconfigpools", "machineconfignodes"}, Verbs: readOnly},
		// Dynamic Resource Allocation: the devices a replacement can be given (read only when served).
		{APIGroups: []string{"resource.k8s.io"}, Resources: draResources, Verbs: readOnly},
		// The other drains of a node, read only (package trigger): the GPU Operator's ClusterPolicy for
		// its driver upgrade policy, and NodeMaintenance requests of medik8s and of NVIDIA's
		// maintenance operator.
		{APIGroups: []string{"nvidia.com"}, Resources: []string{"clusterpolicies"}, Verbs: readOnly},
		{APIGroups: []string{"nodemaintenance.medik8s.io", "maintenance.nvidia.com"}, Resources: []string{"nodemaintenances"}, Verbs: readOnly},
		{APIGroups: []string{"serving.kserve.io"}, Resources: []string{"inferenceservices", "llminferenceservices"}, Verbs: readPatch},
		// LeaderWorkerSets (multi-node models) are read live, never listed or watched, and patched
		// only in spec.replicas (the number of groups).
		{APIGroups: []string{"leaderworkerset.x-k8s.io"}, Resources: []string{"leaderworkersets"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		// Surges are the guardian's only persisted state, one per surged workload: created before the
		// target's fields are written, deleted once they are restored (a failed one is kept). Only this
		// ServiceAccount may write them; namespace users read them through drain-guardian-surges-reader.
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"surges"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
		// A Surge's phase, reason and times are written through its status subresource; its spec is immutable.
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"surges/status"}, Verbs: []string{"update"}},
		// TokenReview and SubjectAccessReview authenticate and authorize scrapes of the metrics endpoint.
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
}

// LeaderElectionRules returns the permissions on the leader-election Lease, granted by a Role in the
// guardian's own namespace only.
func LeaderElectionRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}
}

// CheckRules returns the permissions of `drain-guardian check`: read-only access to what the daemon
// reads (ClusterRoleRules without any write), shipped as the ClusterRole drain-guardian-check. An
// owner with a /scale subresource needs get on that subresource too; without it, check reports the
// ReadMachineConfigsRules are the reads of --read-machineconfigs, granted only by the opt-in
// kustomize component read-machineconfigs (ClusterRole drain-guardian-read-machineconfigs):
// rendered MachineConfigs carry secrets.
func ReadMachineConfigsRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"machineconfiguration.openshift.io"}, Resources: []string{"machineconfigs"}, Verbs: readOnly},
		{APIGroups: []string{"operator.openshift.io"}, Resources: []string{"machineconfigurations"}, Verbs: readOnly},
	}
}

// pod as missing-rbac, as it would for the daemon.
func CheckRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes", "namespaces", "pods"}, Verbs: readOnly},
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: readOnly},
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "deployments", "statefulsets"}, Verbs: readOnly},
		{APIGroups: []string{"autoscaling"}, Resources: []string{"horizontalpodautoscalers"}, Verbs: readOnly},
		{APIGroups: []string{"machineconfiguration.openshift.io"}, Resources: []string{"machineconfigpools", "machineconfignodes"}, Verbs: readOnly},
		{APIGroups: []string{"resource.k8s.io"}, Resources: draResources, Verbs: readOnly},
		// The stalls a driver upgrade would meet (the ClusterPolicy's upgrade policy); check runs the
		// daemon's informers, NodeMaintenances included.
		{APIGroups: []string{"nvidia.com"}, Resources: []string{"clusterpolicies"}, Verbs: readOnly},
		{APIGroups: []string{"nodemaintenance.medik8s.io", "maintenance.nvidia.com"}, Resources: []string{"nodemaintenances"}, Verbs: readOnly},
		{APIGroups: []string{"serving.kserve.io"}, Resources: []string{"inferenceservices", "llminferenceservices"}, Verbs: readOnly},
		{APIGroups: []string{"leaderworkerset.x-k8s.io"}, Resources: []string{"leaderworkersets"}, Verbs: []string{"get"}},
		// In-flight Surges: their pending replacements take capacity first.
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"surges"}, Verbs: readOnly},
	}
}
