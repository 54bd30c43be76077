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
//
// Every write is a forced server-side apply with field manager "kserve-sim":
// like KServe's reconcilers, the simulator owns the fields it sets and puts
// them back on the next reconcile when someone else changes them (a direct
// edit of the Deployment's replicas or of the HPA's bounds is reverted; the
// guardian has to scale through the InferenceService or LLMInferenceService).
//
// What is not simulated: Services, routes, ServingRuntimes, transformers and
// explainers, multi-node workloads (spec.predictor.workerSpec, spec.worker),
// KEDA ScaledObjects and the WVA autoscaler of spec.scaling. Pod readiness
// comes from the fake kubelets of the control plane, not from this package.
package kservesim
