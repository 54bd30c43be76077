package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgfake "github.com/openshift/client-go/machineconfiguration/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/drain-guardian/drain-guardian/internal/guardian"
)

// prepare sets the annotation as the admin's field manager, keeps the pool's other annotations, and
// --undo removes it.
func TestSetPrepare(t *testing.T) {
	pool := &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Annotations: map[string]string{"team": "ai"}}}
	pool.Spec.Paused = true
	pool.Spec.Configuration.Name, pool.Status.Configuration.Name = "rendered-gpu-2", "rendered-gpu-1"
	client := mcfgfake.NewSimpleClientset(pool)
	ctx := context.Background()
	get := func() map[string]string {
		p, err := client.MachineconfigurationV1().MachineConfigPools().Get(ctx, "gpu", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Annotations
	}

	var out bytes.Buffer
	if err := setPrepare(ctx, client, &out, "gpu", true); err != nil {
		t.Fatal(err)
	}
	if a := get(); a[guardian.PrepareAnnotation] != "true" || a["team"] != "ai" {
		t.Fatalf("annotations after prepare: %v", a)
	}
	if !strings.Contains(out.String(), "pending update to rendered-gpu-2 (paused)") {
		t.Errorf("output %q does not say what is pending", out.String())
	}
	patched := 0
	for _, a := range client.Actions() {
		if p, ok := a.(k8stesting.PatchActionImpl); ok {
			patched++
			if fm := p.PatchOptions.FieldManager; fm != prepareFieldManager {
				t.Errorf("patch field manager %q, want %q", fm, prepareFieldManager)
			}
		}
	}
	if patched != 1 {
		t.Errorf("%d patches, want 1", patched)
	}

	if err := setPrepare(ctx, client, &out, "gpu", false); err != nil {
		t.Fatal(err)
	}
	if a := get(); a[guardian.PrepareAnnotation] != "" || a["team"] != "ai" {
		t.Fatalf("annotations after --undo: %v", a)
	}
	if err := setPrepare(ctx, client, &out, "missing", true); err == nil {
		t.Error("no error for a pool that does not exist")
	}
}
