package rbac

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
)

// TestNoWildcardsAndDeletesOnlySurges keeps the promise the shipped RBAC makes: no wildcard, and the
// only delete is on the guardian's own Surges (it never deletes pods and never edits PDBs or nodes).
func TestNoWildcardsAndDeletesOnlySurges(t *testing.T) {
	for _, rules := range [][]rbacv1.PolicyRule{ClusterRoleRules(), LeaderElectionRules()} {
		for _, r := range rules {
			for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs} {
				if slices.Contains(list, "*") {
					t.Errorf("wildcard in %+v", r)
				}
			}
			if slices.Contains(r.Verbs, "delete") || slices.Contains(r.Verbs, "deletecollection") {
				if !slices.Equal(r.APIGroups, []string{v1alpha1.GroupName}) || !slices.Equal(r.Resources, []string{v1alpha1.SurgesResource.Resource}) {
					t.Errorf("rule %+v deletes something other than Surges", r)
				}
			}
			for _, res := range r.Resources {
				if res == "nodes" || res == "poddisruptionbudgets" {
					for _, v := range r.Verbs {
						if v != "get" && v != "list" && v != "watch" {
							t.Errorf("rule %+v writes %s", r, res)
						}
					}
				}
			}
		}
	}
}

// TestCheckIsReadOnlySubsetOfDaemon keeps check's promise: it reads only, and only what the daemon
// reads, so its prediction sees what the daemon sees.
func TestCheckIsReadOnlySubsetOfDaemon(t *testing.T) {
	daemon := map[string]bool{}
	for _, r := range ClusterRoleRules() {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					daemon[g+" "+res+" "+v] = true
				}
			}
		}
	}
	for _, r := range CheckRules() {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if v != "get" && v != "list" && v != "watch" {
						t.Errorf("check may %s %s in %q: it must only read", v, res, g)
					}
					if !daemon[g+" "+res+" "+v] {
						t.Errorf("check may %s %s in %q, which the daemon does not", v, res, g)
					}
				}
			}
		}
	}
}
