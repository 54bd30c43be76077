package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of drain-guardian's own kinds.
const GroupName = "drain-guardian.io"

var (
	// SchemeGroupVersion is the group and version of the kinds in this package.
	SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}
	// SurgesResource is the resource of the Surge kind.
	SurgesResource = SchemeGroupVersion.WithResource("surges")

	// SchemeBuilder registers the kinds of this package in a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &Surge{}, &SurgeList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
