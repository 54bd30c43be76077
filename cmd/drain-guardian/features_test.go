package main

import (
	"os"
	"testing"

	clientfeatures "k8s.io/client-go/features"
)

// fixedGates answers every feature with one value, as client-go's gates would after reading the
// environment.
type fixedGates bool

func (g fixedGates) Enabled(clientfeatures.Feature) bool { return bool(g) }

func TestStreamingListsOnByDefault(t *testing.T) {
	t.Setenv(watchListEnv, "") // restored when the test ends
	if err := os.Unsetenv(watchListEnv); err != nil {
		t.Fatal(err)
	}
	if !(streamingLists{fixedGates(false)}).Enabled(clientfeatures.WatchListClient) {
		t.Error("WatchListClient off with the environment silent")
	}
	if (streamingLists{fixedGates(false)}).Enabled(clientfeatures.InformerResourceVersion) {
		t.Error("another feature was turned on")
	}
}

func TestStreamingListsTheEnvironmentDecides(t *testing.T) {
	t.Setenv(watchListEnv, "false")
	if (streamingLists{fixedGates(false)}).Enabled(clientfeatures.WatchListClient) {
		t.Errorf("WatchListClient on although %s=false", watchListEnv)
	}
}
