package main

import (
	"os"

	clientfeatures "k8s.io/client-go/features"
)

// watchListEnv is client-go's own switch for streaming lists; set, it decides.
const watchListEnv = "KUBE_FEATURE_" + string(clientfeatures.WatchListClient)

// streamingLists are client-go's feature gates with WatchListClient on unless watchListEnv says
// otherwise. With it the informers' initial lists arrive as a stream of watch events
// (sendInitialEvents), each slimmed by the informer's transform as it arrives; without it an initial
// list is one LIST response decoded whole before any transform runs, which at 30,000 pods is
// hundreds of megabytes for the moment of the list and sets the process's peak memory. An API
// server without streaming lists (before Kubernetes 1.32, or with its WatchList gate off) answers
// the first such watch with an error and client-go's reflector falls back to LIST.
type streamingLists struct{ clientfeatures.Gates }

// Enabled implements clientfeatures.Gates.
func (g streamingLists) Enabled(f clientfeatures.Feature) bool {
	if f == clientfeatures.WatchListClient {
		if _, set := os.LookupEnv(watchListEnv); !set {
			return true
		}
	}
	return g.Gates.Enabled(f)
}

// enableStreamingLists installs streamingLists; call it before any client is built.
func enableStreamingLists() {
	clientfeatures.ReplaceFeatureGates(streamingLists{clientfeatures.FeatureGates()})
}
