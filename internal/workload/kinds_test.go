package workload

import (
	"strings"
	"testing"
)

// CheckPaths is what keeps a hand-written or tampered Surge from making the guardian write an
// arbitrary field of a workload (a securityContext, an annotation): only the paths the kind's own plan
// writes pass.
func TestCheckPaths(t *testing.T) {
	deployment := &Target{Ref: Ref{Kind: KindDeployment, Namespace: storeNS, Name: "d"}}
	statefulSet := &Target{Ref: Ref{Kind: KindStatefulSet, Namespace: storeNS, Name: "s"}}
	hpa := &Target{Ref: Ref{Kind: KindHPA, Namespace: storeNS, Name: "h"}}
	isvc := &Target{Ref: Ref{Kind: KindInferenceService, Namespace: storeNS, Name: "i"}}
	llmMain := &Target{Ref: Ref{Kind: KindLLMInferenceService, Namespace: storeNS, Name: "l"}, Component: ComponentMain}
	llmPrefill := &Target{Ref: Ref{Kind: KindLLMInferenceService, Namespace: storeNS, Name: "l"}, Component: ComponentPrefill}
	scale := &Target{Ref: Ref{Kind: Kind("Notebook"), Namespace: storeNS, Name: "nb", APIVersion: "example.io/v1", Resource: "notebooks"}}
	unknown := &Target{Ref: Ref{Kind: Kind("ReplicaSet"), Namespace: storeNS, Name: "rs"}}

	tests := []struct {
		name    string
		target  *Target
		paths   []string
		wantErr string // "" means accepted
	}{
		{name: "Deployment replicas", target: deployment, paths: []string{"/spec/replicas"}},
		{name: "StatefulSet replicas", target: statefulSet, paths: []string{"/spec/replicas"}},
		{name: "HPA min and max", target: hpa, paths: []string{"/spec/minReplicas", "/spec/maxReplicas"}},
		{name: "HPA min only", target: hpa, paths: []string{"/spec/minReplicas"}},
		{name: "InferenceService min and max", target: isvc, paths: []string{"/spec/predictor/minReplicas", "/spec/predictor/maxReplicas"}},
		{name: "LLMInferenceService main", target: llmMain, paths: []string{"/spec/replicas"}},
		{name: "LLMInferenceService prefill", target: llmPrefill, paths: []string{"/spec/prefill/replicas"}},
		{name: "owner through /scale", target: scale, paths: []string{"/spec/replicas"}},

		{name: "Deployment securityContext", target: deployment, paths: []string{"/spec/template/spec/securityContext/runAsUser"}, wantErr: "/spec/template/spec/securityContext/runAsUser"},
		{name: "Deployment annotations", target: deployment, paths: []string{"/metadata/annotations"}, wantErr: "/metadata/annotations"},
		{name: "a refused path after an accepted one", target: deployment, paths: []string{"/spec/replicas", "/spec/paused"}, wantErr: "/spec/paused"},
		{name: "duplicated path", target: deployment, paths: []string{"/spec/replicas", "/spec/replicas"}, wantErr: "twice"},
		{name: "HPA duplicated max", target: hpa, paths: []string{"/spec/minReplicas", "/spec/maxReplicas", "/spec/maxReplicas"}, wantErr: "twice"},
		{name: "StatefulSet HPA path", target: statefulSet, paths: []string{"/spec/minReplicas"}, wantErr: "/spec/minReplicas"},
		{name: "HPA replicas of its target", target: hpa, paths: []string{"/spec/replicas"}, wantErr: "/spec/replicas"},
		{name: "InferenceService top-level replicas", target: isvc, paths: []string{"/spec/replicas"}, wantErr: "/spec/replicas"},
		{name: "InferenceService HPA-style path", target: isvc, paths: []string{"/spec/minReplicas"}, wantErr: "/spec/minReplicas"},
		{name: "LLMInferenceService main path on the prefill target", target: llmPrefill, paths: []string{"/spec/replicas"}, wantErr: "/spec/replicas"},
		{name: "LLMInferenceService prefill path on the main target", target: llmMain, paths: []string{"/spec/prefill/replicas"}, wantErr: "/spec/prefill/replicas"},
		{name: "owner through /scale, another path", target: scale, paths: []string{"/spec/template/spec/containers"}, wantErr: "/spec/template/spec/containers"},
		{name: "unknown kind", target: unknown, paths: []string{"/spec/replicas"}, wantErr: "ReplicaSet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fields []Field
			for _, p := range tt.paths {
				fields = append(fields, Field{Path: p, Set: 2})
			}
			err := CheckPaths(tt.target, fields)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("CheckPaths(%v) = %v, want accepted", tt.paths, err)
			case tt.wantErr != "" && err == nil:
				t.Errorf("CheckPaths(%v) = nil, want refused", tt.paths)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("CheckPaths(%v) = %q, want it to name %q", tt.paths, err, tt.wantErr)
			}
		})
	}
}
