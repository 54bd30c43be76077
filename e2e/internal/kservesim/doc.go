// Package kservesim is a stand-in for the KServe controller on the local test
// bed. It reconciles InferenceServices (RawDeployment / "Standard" mode) and
// LLMInferenceServices into the Deployments and HorizontalPodAutoscalers the
// real controller creates, with the same names, labels, owner references and
// replica ownership, so that the guardian meets the same objects and the same
// pushback as on a cluster:
//
//   - An InferenceService becomes the Deployment <isvc>-predictor. With the
//     default autoscaler class "hpa" an HPA of the same name owns the replica
//     count (min = max(minReplicas, 1), max = max(maxReplicas, min)); with
//     "none" and "keda" the Deployment's replicas are minReplicas (absent
//     means 1); with "external" they are left alone.
//   - An LLMInferenceService becomes <name>-kserve, plus <name>-kserve-prefill
//     when spec.prefill is set, with replicas from spec.replicas and
//     spec.prefill.replicas. What an absent field means depends on the
//     release being imitated; see [Options].
//   - A multi-node LLMInferenceService (spec.worker, spec.prefill.worker)
//     becomes the LeaderWorkerSet <name>-kserve-mn (-prefill): groups of
//     spec.parallelism's size, its count from the replicas field or, absent,
//     the set's own; created, then replaced by a full update whenever what
//     KServe sets differs (llmisvc_multinode.go). The sets are not watched:
//     a multi-node service is reconciled again every few seconds instead.
//
// InferenceServices are written the way KServe's raw-deployment reconcilers
// write (see reconcilePredictor and reconcileHPA for the upstream sources),
// which decides what survives on the objects the guardian meets:
//
//   - The predictor Deployment is created when missing. Otherwise it is left
//     untouched while its spec matches the desired one (replicas ignored
//     unless the class is "none"), so annotations and labels others put on
//     it survive; when the spec differs, a strategic merge patch from the
//     whole existing object to the desired one is sent, which also deletes
//     every annotation and label KServe did not set. Deployment events
//     reconcile their InferenceService, so with class "none" a direct change
//     of the replica count is reverted at once (and the foreign metadata
//     with it). With "keda" a stand-in for KEDA holds the count at
//     minReplicas through the scale subresource; with "hpa" and "external"
//     the simulator leaves the count alone.
//   - The HPA is created when missing and overwritten with a full update
//     (spec and metadata) whenever its InferenceService is reconciled; HPA
//     events reconcile nothing,
//     so a direct edit of the HPA stays until the InferenceService is next
//     reconciled for another reason.
//   - The InferenceService's annotations (but a few KServe filters out) are
//     copied to the Deployment and its pod template: annotating the
//     InferenceService rolls the predictor's pods.
//
// The guardian therefore has to scale through the InferenceService. The
// LLMInferenceService Deployments and all status writes are forced
// server-side applies with field manager "kserve-sim": an edit of a field
// the simulator sets is put back on the next reconcile, and fields it does
// not set are left alone.
//
// What is not simulated: Services, routes, ServingRuntimes, transformers and
// explainers, multi-node InferenceServices (spec.predictor.workerSpec),
// KEDA ScaledObjects and the WVA autoscaler of spec.scaling. Pod readiness
// comes from the fake kubelets of the control plane, not from this package.
package kservesim
