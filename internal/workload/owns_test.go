package workload

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestOwns(t *testing.T) {
	plain := deployment("plain", "plain-uid", nil, nil)
	other := deployment("other", "other-uid", nil, nil)
	s := newTestStore(t, nil, plain, other, replicaSet("plain-5d9", "rs-uid", plain), replicaSet("other-7f8", "other-rs-uid", other))
	tests := []struct {
		name string
		kind Kind
		uid  types.UID
		pod  *corev1.Pod
		want bool
	}{
		{name: "pod of the Deployment's ReplicaSet", kind: KindDeployment, uid: "plain-uid",
			pod: pod("plain-5d9-x", ctrlRef("apps/v1", "ReplicaSet", "plain-5d9", "rs-uid")), want: true},
		{name: "bare pod with the labels", kind: KindDeployment, uid: "plain-uid", pod: pod("decoy")},
		{name: "pod of another Deployment", kind: KindDeployment, uid: "plain-uid",
			pod: pod("other-7f8-x", ctrlRef("apps/v1", "ReplicaSet", "other-7f8", "other-rs-uid"))},
		{name: "ReplicaSet named like the owner's, another UID", kind: KindDeployment, uid: "plain-uid",
			pod: pod("plain-5d9-y", ctrlRef("apps/v1", "ReplicaSet", "plain-5d9", "forged-uid"))},
		{name: "ReplicaSet of another API group", kind: KindDeployment, uid: "plain-uid",
			pod: pod("plain-5d9-z", ctrlRef("example.com/v1", "ReplicaSet", "plain-5d9", "rs-uid"))},
		{name: "non-controller owner reference", kind: KindDeployment, uid: "plain-uid",
			pod: pod("plain-5d9-w", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "plain-5d9", UID: "rs-uid"})},
		{name: "pod of the StatefulSet", kind: KindStatefulSet, uid: "db-uid",
			pod: pod("db-0", ctrlRef("apps/v1", "StatefulSet", "db", "db-uid")), want: true},
		{name: "pod of another StatefulSet", kind: KindStatefulSet, uid: "db-uid",
			pod: pod("db2-0", ctrlRef("apps/v1", "StatefulSet", "db2", "db2-uid"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.Owns(tc.kind, tc.uid, tc.pod); got != tc.want {
				t.Fatalf("Owns = %v, want %v", got, tc.want)
			}
		})
	}
}
