package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

// An admission policy that refuses the surge's patch every time is retried (with the workqueue's
// backoff) but not silently: each refusal is counted, and one Warning Event says what was refused
// and why. A conflict, which the next read cures, is counted but not reported.
func TestPersistentWriteRefusalIsReportedOnce(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.kube.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "model",
			errorString(`admission webhook "quota.example.com" denied the request: GPU quota exceeded`))
	})
	h.syncNode("w1")
	h.refresh()
	key := types.NamespacedName{Namespace: ns, Name: depSurge}
	for range 3 {
		if _, err := h.c.reconcile.surge.sync(context.Background(), key); err == nil {
			t.Fatal("a refused patch returned no error: it would not be retried")
		}
	}
	if v := testutil.ToFloat64(h.metrics.WriteErrors.WithLabelValues("deployment", "Forbidden")); v != 3 {
		t.Fatalf("write_errors_total{deployment,Forbidden} = %v, want 3", v)
	}
	var refused []string
	for _, e := range h.events() {
		if strings.Contains(e, ReasonWriteRefused) {
			refused = append(refused, e)
		}
	}
	if len(refused) != 1 || !strings.HasPrefix(refused[0], "Warning") || !strings.Contains(refused[0], "GPU quota exceeded") {
		t.Fatalf("WriteRefused Events %q, want one Warning quoting the webhook", refused)
	}
}

func TestTransientWriteErrorsAreNotReported(t *testing.T) {
	h := newHarness(t, nil, stalled()...)
	h.kube.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "model", errorString("changed"))
	})
	h.syncNode("w1")
	h.refresh()
	if _, err := h.c.reconcile.surge.sync(context.Background(), types.NamespacedName{Namespace: ns, Name: depSurge}); err != nil {
		t.Fatalf("a conflict is decided again, not an error: %v", err)
	}
	for _, e := range h.events() {
		if strings.Contains(e, ReasonWriteRefused) {
			t.Fatalf("a conflict was reported: %s", e)
		}
	}
	if v := testutil.ToFloat64(h.metrics.WriteErrors.WithLabelValues("deployment", "Conflict")); v != 1 {
		t.Fatalf("write_errors_total{deployment,Conflict} = %v, want 1", v)
	}
}

// Another sync creating the Surge first is no refusal to report: the caller looks again.
func TestAlreadyExistsIsTransient(t *testing.T) {
	err := apierrors.NewAlreadyExists(schema.GroupResource{Group: "drain-guardian.io", Resource: "surges"}, "deployment-model")
	if r := writeErrorReason(err); r != "AlreadyExists" || !transientWriteError(r) {
		t.Fatalf("AlreadyExists classified %q (transient %v)", r, transientWriteError(r))
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
