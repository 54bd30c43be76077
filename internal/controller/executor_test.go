package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// newTestExecutor builds an executor on its own, over fake clients, as the controller builds it.
func newTestExecutor(dryRun bool, surges ...runtime.Object) (*executor, *flight) {
	clk := clocktesting.NewFakeClock(t0)
	m := metrics.New()
	f := newFlight(clk, newGauges(m))
	e := newExecutor(executorConfig{
		Kube: fake.NewClientset(), Dynamic: newSurgeClient(surges...), Metrics: m,
		Events: &eventer{recorder: events.NewFakeRecorder(10), log: zap.NewNop()}, Reports: newReports(clk), Flight: f, DryRun: dryRun,
	})
	return e, f
}

func testSurge(name string) *v1alpha1.Surge {
	return &v1alpha1.Surge{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.SurgeSpec{Delta: 1}}
}

// Several workers admit at once, each deciding "surge if nothing is in flight": exactly one Surge is
// created, because each decision sees the Surges created before it, cached or not.
func TestAdmitDecidesAndCreatesUnderOneLock(t *testing.T) {
	e, f := newTestExecutor(false)
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			starts := e.admit(context.Background(), func() []*surgeStart {
				if f.view(nil).count > 0 {
					return nil
				}
				return []*surgeStart{{surge: testSurge(fmt.Sprintf("s%d", i)), replacements: []*podinfo.Pod{{}}}}
			})
			mu.Lock()
			defer mu.Unlock()
			for _, s := range starts {
				if s.err == nil {
					created++
				}
			}
		}()
	}
	wg.Wait()
	if created != 1 {
		t.Fatalf("%d Surges created, want 1", created)
	}
	if v := f.view(nil); v.count != 1 || len(v.unverified) != 1 {
		t.Fatalf("in flight %d with %d replacements booked, want the one Surge and its replacement", v.count, len(v.unverified))
	}
}

// A create the API refuses (a Surge of that name exists: another guardian, or a sync whose cache was
// behind) counts nothing; the caller looks again.
func TestAdmitCountsNoRefusedCreate(t *testing.T) {
	existing, _ := surgeObject(testSurge("s"))
	e, f := newTestExecutor(false, existing)
	starts := e.admit(context.Background(), func() []*surgeStart { return []*surgeStart{{surge: testSurge("s")}} })
	if !apierrors.IsAlreadyExists(starts[0].err) {
		t.Fatalf("create answered %v, want AlreadyExists", starts[0].err)
	}
	if n := f.view(nil).count; n != 0 {
		t.Fatalf("a refused create counts %d in flight", n)
	}
}

// In dry-run the executor writes nothing and counts nothing: the caller reports the decision.
func TestAdmitInDryRunWritesNothing(t *testing.T) {
	e, f := newTestExecutor(true)
	starts := e.admit(context.Background(), func() []*surgeStart { return []*surgeStart{{surge: testSurge("s")}} })
	if !errors.Is(starts[0].err, errDryRun) {
		t.Fatalf("create answered %v, want the dry-run error", starts[0].err)
	}
	list, err := e.surges.Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 || f.view(nil).count != 0 {
		t.Fatalf("dry run wrote %d Surges (err %v), %d in flight", len(list.Items), err, f.view(nil).count)
	}
}
