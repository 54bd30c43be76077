package controller

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// verify checks everything the Surge says against the live objects: the namespace is in scope, the
// target exists with the recorded UID, the pod owner is controlled by the target (the same owner
// chain the guardian resolves for a blocked pod), and every field path is one the guardian's code
// writes for that kind. A Surge that fails a check is reported once and left alone. A nil case with
// no error means "look again later" (retry) or "nothing to do". It writes nothing: a Surge whose
// target is gone is errTargetGone, which its sync acts on.
func (b *base) verify(s *v1alpha1.Surge) (*surgeCase, time.Duration, error) {
	t := targetOf(s)
	reject := func(reason, format string, args ...any) (*surgeCase, time.Duration, error) {
		b.rejectSurge(s, reason, fmt.Sprintf(format, args...))
		return nil, 0, nil
	}
	if !b.inScope(s.Namespace) {
		return reject("OutOfScope", "namespace %s is outside --namespace-selector or opted out", s.Namespace)
	}
	if err := workload.CheckPaths(t, s.Spec.Fields); err != nil {
		return reject("UnknownField", "%v", err)
	}
	// Read by name, then compare UIDs: a namesake is not the object the surge was made on.
	byName := t.Ref
	byName.UID = ""
	obj, err := b.store.Get(byName)
	var notServed *workload.NotServedError
	switch {
	case errors.As(err, &notServed):
		// Never conclude "deleted" from an API that is not served or not synced yet: wait.
		b.log.Info("target API not available yet; keeping the Surge", zap.String("surge", s.Namespace+"/"+s.Name), zap.Error(err))
		return nil, notServedRetry, nil
	case apierrors.IsNotFound(err):
		return nil, 0, errTargetGone
	case err != nil:
		return nil, 0, fmt.Errorf("reading %s: %w", t.Ref, err)
	}
	if obj.Ref.UID != t.Ref.UID {
		return reject("UIDMismatch", "%s has UID %s, the Surge names %s", t.Ref, obj.Ref.UID, t.Ref.UID)
	}
	if obj.Ignored() {
		return reject("OptedOut", "%s carries %s=true", t.Ref, workload.IgnoreAnnotation)
	}
	return b.verifyOwner(&surgeCase{s: s, target: t, obj: obj}, reject)
}

// verifyOwner checks that the Surge's pod owner is still controlled by its target and reads the
// owner's pods. A pod owner that is gone is no error: the lifecycle restores what it surged.
func (b *base) verifyOwner(sc *surgeCase, reject func(reason, format string, args ...any) (*surgeCase, time.Duration, error)) (*surgeCase, time.Duration, error) {
	s, t := sc.s, sc.target
	owner, err := b.store.PodOwner(t.PodOwner)
	switch {
	case apierrors.IsNotFound(err):
		return sc, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("reading %s: %w", t.PodOwner, err)
	}
	if workload.IgnoredByAnnotation(owner.Annotations) {
		return reject("OptedOut", "%s carries %s=true", t.PodOwner, workload.IgnoreAnnotation)
	}
	resolved, err := b.store.ResolveOwner(t.PodOwner)
	var notServed *workload.NotServedError
	if errors.As(err, &notServed) {
		return nil, notServedRetry, nil
	}
	if err != nil || resolved.Ref.Kind != t.Ref.Kind || resolved.Ref.Name != t.Ref.Name || resolved.Ref.UID != t.Ref.UID ||
		resolved.Ref.Resource != t.Ref.Resource || resolved.Component != t.Component {
		return reject("OwnerMismatch", "%s does not control %s (resolved: %v)", t.Ref, t.PodOwner, describeResolved(resolved, err))
	}
	sc.owner = owner
	if sc.pods, err = b.podsOf(s.Namespace, t.PodOwner.Kind, owner); err != nil {
		return nil, 0, err
	}
	b.flight.verified(s)
	return sc, 0, nil
}

func describeResolved(t *workload.Target, err error) string {
	if err != nil {
		return err.Error()
	}
	return t.Ref.String()
}

// rejectSurge reports, once per Surge version, a Surge the guardian will not act on.
func (b *base) rejectSurge(s *v1alpha1.Surge, reason, detail string) {
	b.flight.rejected(s)
	if b.reports.once("", fmt.Sprintf("%s/%s/%s", ReasonUntrustedSurge, s.UID, s.ResourceVersion)) {
		b.metrics.SurgesRejected.WithLabelValues(reason).Inc()
		b.event(surgeRef(s), corev1.EventTypeWarning, ReasonUntrustedSurge, actionReport,
			"Surge %s/%s is not acted on (%s): %s. Its fields are left as they are; check them and delete the Surge by hand",
			s.Namespace, s.Name, reason, detail)
	}
}

// errTargetGone: verify found the Surge's target deleted, its API served and synced (see targetGone).
var errTargetGone = errors.New("the Surge's target is gone")
