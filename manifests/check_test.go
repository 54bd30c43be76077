package manifests

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/drain-guardian/drain-guardian/internal/rbac"
)

// TestCheckRBAC checks that every installable kustomization ships the read-only ClusterRole of
// `drain-guardian check` with exactly the rules the code documents, bound to no one.
func TestCheckRBAC(t *testing.T) {
	for _, dir := range installable {
		t.Run(dir, func(t *testing.T) {
			r, _ := render(t, dir)
			role := find[*rbacv1.ClusterRole](t, r, "drain-guardian-check")
			compareRules(t, "ClusterRole drain-guardian-check", role.Rules, rbac.CheckRules())
			if role.AggregationRule != nil || len(role.Labels) != 1 {
				t.Errorf("drain-guardian-check labels %v aggregation %v: it must be granted explicitly", role.Labels, role.AggregationRule)
			}
			for _, o := range r.objects {
				if b, ok := o.(*rbacv1.ClusterRoleBinding); ok && b.RoleRef.Name == role.Name {
					t.Errorf("ClusterRoleBinding %s binds drain-guardian-check: who plans updates is the admin's choice", b.Name)
				}
			}
		})
	}
}
