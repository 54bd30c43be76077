// Package v1alpha1 holds drain-guardian's own API, group drain-guardian.io: the Surge, one per
// workload the guardian has scaled up for a drain. Surges are the guardian's only persisted state;
// only its ServiceAccount may write them.
//
// +kubebuilder:object:generate=true
// +groupName=drain-guardian.io
package v1alpha1
