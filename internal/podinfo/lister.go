package podinfo

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// Lister reads the Pods of an informer whose transform makes them with From: client-go's generated
// PodLister would expect *corev1.Pod.
type Lister struct {
	Indexer cache.Indexer
}

// List returns every cached pod that matches selector.
func (l Lister) List(selector labels.Selector) ([]*Pod, error) {
	var out []*Pod
	err := cache.ListAll(l.Indexer, selector, func(o any) {
		if p, ok := o.(*Pod); ok {
			out = append(out, p)
		}
	})
	return out, err
}

// Pods lists and gets the cached pods of one namespace.
func (l Lister) Pods(namespace string) NamespaceLister {
	return NamespaceLister{indexer: l.Indexer, namespace: namespace}
}

// NamespaceLister reads the cached pods of one namespace.
type NamespaceLister struct {
	indexer   cache.Indexer
	namespace string
}

// List returns the namespace's cached pods that match selector.
func (l NamespaceLister) List(selector labels.Selector) ([]*Pod, error) {
	var out []*Pod
	err := cache.ListAllByNamespace(l.indexer, l.namespace, selector, func(o any) {
		if p, ok := o.(*Pod); ok {
			out = append(out, p)
		}
	})
	return out, err
}

// Get returns the cached pod name of the namespace, or a NotFound error.
func (l NamespaceLister) Get(name string) (*Pod, error) {
	o, exists, err := l.indexer.GetByKey(l.namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	p, ok := o.(*Pod)
	if !exists || !ok {
		return nil, errors.NewNotFound(corev1.Resource("pods"), name)
	}
	return p, nil
}
