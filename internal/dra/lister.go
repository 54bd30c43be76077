package dra

import (
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
)

// Listers reads what the count needs from the informers' caches (whose transform is Slim).
type Listers struct {
	Slices    resourcelisters.ResourceSliceLister
	Claims    resourcelisters.ResourceClaimLister
	Templates resourcelisters.ResourceClaimTemplateLister
	Classes   resourcelisters.DeviceClassLister
}

// Inventory builds an Inventory from everything cached now.
func (l Listers) Inventory() (*Inventory, error) {
	slices, err := l.Slices.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	claims, err := l.Claims.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	classes, err := l.Classes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	return NewInventory(slices, claims, classes), nil
}

// ResourceClaim implements Objects.
func (l Listers) ResourceClaim(namespace, name string) (*resourcev1.ResourceClaim, bool) {
	c, err := l.Claims.ResourceClaims(namespace).Get(name)
	return c, err == nil
}

// ResourceClaimTemplate implements Objects.
func (l Listers) ResourceClaimTemplate(namespace, name string) (*resourcev1.ResourceClaimTemplate, bool) {
	t, err := l.Templates.ResourceClaimTemplates(namespace).Get(name)
	return t, err == nil
}
