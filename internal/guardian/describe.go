package guardian

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// The words a Surge's status and its Events use for what the guardian does. They live next to the
// lifecycle because the status messages are composed here (see Next); the controller's Events
// reuse them so that both tell the same story.

// DescribeFields says what a surge writes: each field from its original value to the surged one.
func DescribeFields(fields []workload.Field) string {
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		from := "unset"
		if f.Original != nil {
			from = fmt.Sprint(*f.Original)
		}
		parts = append(parts, fmt.Sprintf("%s from %s to %d", FieldName(f.Path), from, f.Set))
	}
	return strings.Join(parts, ", ")
}

// DescribeRestore says what a restore writes back: each field to its original value, except the
// kept ones, which someone else changed during the surge.
func DescribeRestore(fields, kept []workload.Field) string {
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		if slices.ContainsFunc(kept, func(k workload.Field) bool { return k.Path == f.Path }) {
			parts = append(parts, fmt.Sprintf("%s kept as changed by someone else", FieldName(f.Path)))
			continue
		}
		to := "unset"
		if f.Original != nil {
			to = fmt.Sprint(*f.Original)
		}
		parts = append(parts, fmt.Sprintf("%s to %s", FieldName(f.Path), to))
	}
	return strings.Join(parts, ", ")
}

// FieldName turns a JSON pointer into the dotted form people write.
func FieldName(pointer string) string {
	return strings.ReplaceAll(strings.TrimPrefix(pointer, "/"), "/", ".")
}

// Groups reports whether the Surge's replicas are groups of pods (a LeaderWorkerSet's).
func Groups(s *v1alpha1.Surge) bool {
	return s.Spec.PodOwner.Kind == string(workload.KindLeaderWorkerSet)
}

// Units names what the Surge's replicas are.
func Units(s *v1alpha1.Surge) string {
	if Groups(s) {
		return "group(s)"
	}
	return "replica(s)"
}

// Unblocked says why a Surge is Resolved (ActMarkResolved, with the action's reason): its node holds
// no pod of the workload any more, or the drain it was made for is over.
func Unblocked(s *v1alpha1.Surge, reason string) string {
	if reason == ReasonDrainOver {
		return fmt.Sprintf("The drain of node %s is over", s.Spec.Node)
	}
	return fmt.Sprintf("No pod of this workload is left on node %s", s.Spec.Node)
}

// RestoreDetail is what the decision to restore observed (Action.Detail), read back from the
// Restoring condition's message, where it follows the reason (see restoring); the reason when there
// is none.
func RestoreDetail(s *v1alpha1.Surge) string {
	c := meta.FindStatusCondition(s.Status.Conditions, ConditionRestoring)
	if c == nil {
		return s.Status.Reason
	}
	if _, detail, ok := strings.Cut(c.Message, "("+s.Status.Reason+"): "); ok {
		return detail
	}
	return s.Status.Reason
}
