package controller

import (
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"github.com/drain-guardian/drain-guardian/internal/guardian"
)

// Event reasons, one per transition of a stall's life.
const (
	ReasonStallDetected       = "StallDetected"
	ReasonStallPredicted      = "StallPredicted"
	ReasonNoCapacity          = "NoCapacity"
	ReasonUnsatisfiablePDB    = "UnsatisfiablePDB"
	ReasonUnsupportedOwner    = "UnsupportedOwner"
	ReasonSurgeStarted        = "SurgeStarted"
	ReasonReplacementReady    = "ReplacementReady"
	ReasonPodEvicted          = "PodEvicted"
	ReasonStallResolved       = "StallResolved"
	ReasonSurgeRestored       = "SurgeRestored"
	ReasonSurgeFailed         = "SurgeFailed"
	ReasonSurgeExpired        = "SurgeExpired"
	ReasonExternalChange      = "ExternalChange"
	ReasonUntrustedSurge      = "UntrustedSurge"
	ReasonDryRun              = "DryRun"
	ReasonSurgeDeferred       = "SurgeDeferred"
	ReasonWorkloadDeleted     = "WorkloadDeleted"
	ReasonWriteRefused        = "WriteRefused"
	ReasonDrainFailed         = "DrainFailed"
	actionDetect, actionSurge = "Detect", "Surge"
	actionEvict, actionReport = "Evict", "Report"
	actionRestore             = "Restore"
)

// Event reasons of the deadlines that keep a tenant from holding a --max-concurrent-surges slot.
const (
	// ReasonSurgeNotWritten: a Pending Surge's fields could not be written within a minute.
	ReasonSurgeNotWritten = "SurgeNotWritten"
	// ReasonEvictionRefused: a Ready surge's blocked pod did not leave within --evict-timeout.
	ReasonEvictionRefused = "EvictionRefused"
	// ReasonReplacementRefused: the pod owner's controller was refused the replacement pods (quota,
	// LimitRange, admission) for guardian.ReplacementRefusedTimeout.
	ReasonReplacementRefused = guardian.ReasonReplacementRefused
	// ReasonMultiplePDBs: a Ready surge's blocked pod is selected by another PDB as well, which the
	// Eviction API refuses whatever the budgets.
	ReasonMultiplePDBs = guardian.ReasonMultiplePDBs
)

// eventer records Kubernetes Events and logs them, so that logs and Events tell one story.
type eventer struct {
	recorder events.EventRecorder
	log      *zap.Logger
}

// event records a Kubernetes Event on regarding and logs it.
func (e *eventer) event(regarding runtime.Object, eventType, reason, action, format string, args ...any) {
	note := fmt.Sprintf(format, args...)
	e.recorder.Eventf(regarding, nil, eventType, reason, action, "%s", note)
	level := e.log.Info
	if eventType == corev1.EventTypeWarning {
		level = e.log.Warn
	}
	level(note, zap.String("reason", reason), zap.String("regarding", describe(regarding)))
}

// event records an Event through the controller's eventer.
func (b *base) event(regarding runtime.Object, eventType, reason, action, format string, args ...any) {
	b.events.event(regarding, eventType, reason, action, format, args...)
}

func describe(obj runtime.Object) string {
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		return fmt.Sprintf("%s %s/%s", ref.Kind, ref.Namespace, ref.Name)
	}
	if m, ok := obj.(interface {
		GetNamespace() string
		GetName() string
	}); ok {
		return fmt.Sprintf("%T %s/%s", obj, m.GetNamespace(), m.GetName())
	}
	return fmt.Sprintf("%T", obj)
}
