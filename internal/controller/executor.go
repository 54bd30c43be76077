package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// executor is the one place the guardian writes to the API: target patches, Surge create, status and
// delete, evictions and pod deletion costs. It owns dry-run (nothing is written; each decision is
// reported once as a DryRun Event), the admission of new Surges (see admit), the field manager,
// optimistic concurrency (every write is conditional on the resourceVersion the decision was made
// on) and the write-error metric, in the way descheduler's PodEvictor owns evictions. It is built on
// its own (newExecutor) and knows nothing of the controller.
type executor struct {
	kube    kubernetes.Interface
	surges  dynamic.NamespaceableResourceInterface
	targets targetPatcher
	metrics *metrics.Metrics
	events  *eventer
	reports *reports
	dryRun  bool
	// admission serializes admit: the decision that books capacity and slots, and the creation of
	// the Surges it decided.
	admission sync.Mutex
	flight    *flight
}

// targetPatcher writes a JSON patch on a surge target; *workload.Store implements it.
type targetPatcher interface {
	Patch(ctx context.Context, ref workload.Ref, data []byte) error
}

// executorConfig is what an executor is built from.
type executorConfig struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	Targets targetPatcher
	Metrics *metrics.Metrics
	Events  *eventer
	Reports *reports
	Flight  *flight
	DryRun  bool
}

func newExecutor(cfg executorConfig) *executor {
	return &executor{
		kube: cfg.Kube, surges: cfg.Dynamic.Resource(v1alpha1.SurgesResource), targets: cfg.Targets, metrics: cfg.Metrics,
		events: cfg.Events, reports: cfg.Reports, flight: cfg.Flight, dryRun: cfg.DryRun,
	}
}

// surgeStart is a Surge to create and the replacements it books until the cache shows it.
type surgeStart struct {
	surge        *v1alpha1.Surge
	replacements []*podinfo.Pod
	// err is what creating it answered: nil, errDryRun, or the API's refusal.
	err error
}

// admit runs decide under the admission lock, then creates the Surges it returns, still under the
// lock, and counts each one created as in flight (see flight.created) before the lock is released:
// two workers cannot book the same capacity or the same slot, even before the informer delivers
// the first one's Surge. decide reads the in-flight Surges from flight itself.
func (e *executor) admit(ctx context.Context, decide func() []*surgeStart) []*surgeStart {
	e.admission.Lock()
	defer e.admission.Unlock()
	starts := decide()
	for _, st := range starts {
		if st.err = e.createSurge(ctx, st.surge); st.err == nil {
			e.flight.created(st.surge, st.replacements)
		}
	}
	return starts
}

// errDryRun is returned by every write in dry-run mode: the caller stops there.
var errDryRun = fmt.Errorf("dry run: not written")

// dryRun reports a write not made, once per object version and action.
func (e *executor) reportDryRun(regarding runtime.Object, key, format string, args ...any) error {
	if e.reports.once("", ReasonDryRun+"/"+key) {
		e.events.event(regarding, corev1.EventTypeNormal, ReasonDryRun, actionSurge, "Dry run: would "+format, args...)
	}
	return errDryRun
}

// open is the executor's one door: every API write passes it first, and nothing else in the
// guardian writes. It counts the write about to be made, or, in dry-run, refuses it (false): a
// guardian switched to --dry-run with Surges, prepared pools or stale state left from an earlier run
// leaves them all as they are.
func (e *executor) open(resource, verb string) bool {
	if e.dryRun {
		return false
	}
	e.metrics.APIWrites.WithLabelValues(resource, verb).Inc()
	return true
}

// failed counts a refused write and wraps the error for the retry log. A refusal that retrying
// will not cure by itself (Forbidden, Invalid: a missing permission, an admission webhook or
// policy saying no) is also told once, as a Warning Event on what the write was about: the
// workqueue's backoff keeps retrying it, but someone has to look.
func (e *executor) failed(regarding runtime.Object, resource, what string, err error) error {
	reason := writeErrorReason(err)
	e.metrics.WriteErrors.WithLabelValues(resource, reason).Inc()
	if !transientWriteError(reason) && e.reports.once("", fmt.Sprintf("%s/%s/%s/%s", ReasonWriteRefused, resource, describe(regarding), reason)) {
		e.events.event(regarding, corev1.EventTypeWarning, ReasonWriteRefused, actionReport,
			"The API server refused %s (%s): %v. The guardian keeps retrying with backoff; a missing permission or an admission policy rejecting this write needs an admin",
			what, reason, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// transientWriteError reports whether a refusal of this class goes away by itself: anything but
// an authorization or admission refusal — a stale read (decided again), an object gone or already
// there (another sync got there first), throttling, a server in trouble, a broken connection.
func transientWriteError(reason string) bool {
	return reason != "Forbidden" && reason != "Invalid"
}

// writeErrorReason classifies a refused write for drain_guardian_write_errors_total.
func writeErrorReason(err error) string {
	switch {
	case isConflict(err):
		return "Conflict"
	case apierrors.IsNotFound(err):
		return "NotFound"
	case apierrors.IsAlreadyExists(err):
		return "AlreadyExists"
	case apierrors.IsForbidden(err):
		return "Forbidden"
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return "Invalid"
	case apierrors.IsTooManyRequests(err):
		return "TooManyRequests"
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err):
		return "ServerError"
	}
	return "Other"
}

// isConflict reports a write made against a stale object: a 409, or the 422 the API server answers
// when a JSON patch cannot be applied (k8s.io/apiserver pkg/endpoints/handlers/patch.go answers any
// apply error, a failed resourceVersion test included, with a bare 422 that names no object and no
// cause). Every guardian patch tests the resourceVersion and touches only paths it saw, so such a
// 422 means the object changed since it was read: read again and decide again. A validation 422
// (admission, schema) names the object and its causes and is not a conflict.
func isConflict(err error) bool {
	if apierrors.IsConflict(err) {
		return true
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) {
		return false
	}
	d := status.Status().Details
	return d == nil || (d.Name == "" && len(d.Causes) == 0)
}

// patchTarget writes a JSON patch (whose first operation tests the resourceVersion) on the target.
func (e *executor) patchTarget(ctx context.Context, obj *workload.Object, patch []byte, what string) error {
	if !e.open(strings.ToLower(string(obj.Ref.Kind)), "patch") {
		return e.reportDryRun(obj.ObjectReference(), fmt.Sprintf("%s/%s/%s", obj.Ref.UID, obj.Meta.GetResourceVersion(), what), "%s", what)
	}
	if err := e.targets.Patch(ctx, obj.Ref, patch); err != nil {
		return e.failed(obj.ObjectReference(), strings.ToLower(string(obj.Ref.Kind)), fmt.Sprintf("%s on %s", what, obj.Ref), err)
	}
	return nil
}

// createSurge persists a new Surge (phase Pending). AlreadyExists means another guardian (or an
// earlier sync whose cache was behind) created it first: the caller looks again. In dry-run it writes
// nothing and returns errDryRun; the caller reports the decision.
func (e *executor) createSurge(ctx context.Context, s *v1alpha1.Surge) error {
	u, err := surgeObject(s)
	if err != nil {
		return err
	}
	if !e.open("surges", "create") {
		return errDryRun
	}
	_, err = e.surges.Namespace(s.Namespace).Create(ctx, u, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil {
		return e.failed(surgeRef(s), "surges", "creating Surge "+s.Namespace+"/"+s.Name, err)
	}
	return nil
}

// updateStatus writes the Surge's status; s carries the resourceVersion it was read at, so a stale
// write fails with a conflict.
func (e *executor) updateStatus(ctx context.Context, s *v1alpha1.Surge) error {
	s.Status.ObservedGeneration = s.Generation
	u, err := surgeObject(s)
	if err != nil {
		return err
	}
	if !e.open("surges/status", "update") {
		return e.reportDryRun(surgeRef(s), fmt.Sprintf("%s/%s/status/%s", s.UID, s.ResourceVersion, s.Status.Phase),
			"move Surge %s/%s to %s", s.Namespace, s.Name, s.Status.Phase)
	}
	_, err = e.surges.Namespace(s.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return e.failed(surgeRef(s), "surges/status", fmt.Sprintf("moving Surge %s/%s to %s", s.Namespace, s.Name, s.Status.Phase), err)
	}
	return nil
}

// deleteSurge deletes exactly the Surge read (UID and resourceVersion preconditions).
func (e *executor) deleteSurge(ctx context.Context, s *v1alpha1.Surge) error {
	rv := s.ResourceVersion
	if !e.open("surges", "delete") {
		return e.reportDryRun(surgeRef(s), fmt.Sprintf("%s/%s/delete", s.UID, s.ResourceVersion), "delete Surge %s/%s", s.Namespace, s.Name)
	}
	err := e.surges.Namespace(s.Namespace).Delete(ctx, s.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID, ResourceVersion: &rv}})
	switch {
	case apierrors.IsNotFound(err):
		return errSurgeGone
	case err != nil:
		return e.failed(surgeRef(s), "surges", "deleting Surge "+s.Namespace+"/"+s.Name, err)
	}
	return nil
}

// errSurgeGone is deleteSurge's answer for a Surge already deleted: by an earlier sync that acted on
// a cache not yet showing its delete, or by someone else. Whoever deleted it reported it; the caller
// reports nothing, so that one restore is told once.
var errSurgeGone = errors.New("the Surge is already deleted")

// evictResult is what the Eviction API answered.
type evictResult int

const (
	evicted evictResult = iota
	evictRefused
	evictGone
)

// evict asks the Eviction API to remove a pod; the guardian never deletes one. A refusal by the
// pod's budgets (a 429: the PDB does not allow it yet; or more than one PDB selects the pod) is no
// error: the caller retries on its own schedule, within --evict-timeout.
func (e *executor) evict(ctx context.Context, regarding runtime.Object, p *podinfo.Pod, node string) (evictResult, error) {
	if !e.open("pods/eviction", "create") {
		return evictRefused, e.reportDryRun(regarding, "evict/"+string(p.UID), "evict pod %s from node %s", p.Name, node)
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}}
	err := e.kube.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
	switch {
	case err == nil:
		e.metrics.Evictions.WithLabelValues("success").Inc()
		return evicted, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return evictGone, nil
	case apierrors.IsTooManyRequests(err), refusedForMultiplePDBs(err):
		e.metrics.Evictions.WithLabelValues("blocked").Inc()
		return evictRefused, nil
	}
	e.metrics.Evictions.WithLabelValues("error").Inc()
	return evictRefused, e.failed(regarding, "pods/eviction", fmt.Sprintf("evicting pod %s/%s", p.Namespace, p.Name), err)
}

// refusedForMultiplePDBs reports whether the Eviction API refused the pod because more than one PDB
// selects it. The API server answers that with a 500 whatever the budgets allow (guardPDB in
// kubernetes pkg/registry/core/pod/storage/eviction.go), and only the tenant removing a PDB changes
// it: the budgets refuse the eviction, as with a 429, and the API server is not in trouble. Handled
// as a write error, it would be retried with the queue's growing backoff (up to 1000 s), and
// --evict-timeout would end the surge that much late.
func refusedForMultiplePDBs(err error) bool {
	return apierrors.IsInternalError(err) && strings.Contains(err.Error(), "more than one PodDisruptionBudget")
}

// setDeletionCost marks a pod as the first one its ReplicaSet removes on scale-down.
func (e *executor) setDeletionCost(ctx context.Context, p *podinfo.Pod, cost string) error {
	if !e.open("pods", "patch") {
		return errDryRun
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": p.ResourceVersion,
		"annotations":     map[string]string{podinfo.DeletionCostAnnotation: cost},
	}})
	_, err := e.kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsNotFound(err) {
		return e.failed(p.Ref(), "pods", fmt.Sprintf("setting the deletion cost of pod %s/%s", p.Namespace, p.Name), err)
	}
	return nil
}
