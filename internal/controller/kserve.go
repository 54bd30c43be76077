package controller

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// kserveDiscoveryPeriod is how often the guardian looks for KServe APIs installed after it started.
const kserveDiscoveryPeriod = time.Minute

type kserveAPI struct {
	gvr schema.GroupVersionResource
	inf cache.SharedIndexInformer
}

// kserveAPIs tracks which KServe kinds the cluster serves and their dynamic informers. Clusters
// without KServe simply have none.
type kserveAPIs struct {
	discovery discovery.DiscoveryInterface
	factory   dynamicinformer.DynamicSharedInformerFactory
	// nilSemantics is --llm-nil-semantics.
	nilSemantics options.LLMNilSemantics
	// handler watches a kind's objects; synced runs once a kind found after start-up has synced.
	handler func(workload.Kind) cache.ResourceEventHandler
	synced  func()
	log     *zap.Logger

	mu       sync.RWMutex
	apis     map[workload.Kind]*kserveAPI
	v1alpha2 bool
}

// newKServeAPIs discovers KServe kinds through d and watches them through factory. The controller
// sets handler and synced before Start (see New); a one-off `check` sets neither.
func newKServeAPIs(d discovery.DiscoveryInterface, factory dynamicinformer.DynamicSharedInformerFactory, opts *options.Options, log *zap.Logger) *kserveAPIs {
	return &kserveAPIs{
		discovery: d, factory: factory, nilSemantics: options.LLMNilSemantics(opts.LLMNilSemantics),
		log: log, apis: map[workload.Kind]*kserveAPI{},
	}
}

// lister implements workload.KServeLister: a kind is usable once its informer has synced.
func (k *kserveAPIs) lister(kind workload.Kind) (cache.GenericLister, schema.GroupVersionResource, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	api, ok := k.apis[kind]
	if !ok || !api.inf.HasSynced() {
		return nil, schema.GroupVersionResource{}, false
	}
	return cache.NewGenericLister(api.inf.GetIndexer(), api.gvr.GroupResource()), api.gvr, true
}

// nilKeepsCount reports whether an absent LLMInferenceService replica field keeps the Deployment's count.
func (k *kserveAPIs) nilKeepsCount() bool {
	switch k.nilSemantics {
	case options.LLMNilKeep:
		return true
	case options.LLMNilOne:
		return false
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.v1alpha2
}

// discover starts an informer for every KServe kind the cluster newly serves.
func (k *kserveAPIs) discover(ctx context.Context) error {
	for _, kind := range workload.KServeKinds() {
		api, _ := workload.KServeAPIOf(kind)
		k.mu.RLock()
		_, known := k.apis[kind]
		k.mu.RUnlock()
		for _, v := range api.Versions {
			gv := schema.GroupVersion{Group: workload.KServeGroup, Version: v}
			list, err := k.discovery.ServerResourcesForGroupVersion(gv.String())
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			served := false
			for _, r := range list.APIResources {
				served = served || r.Name == api.Resource
			}
			if !served {
				continue
			}
			// OpenShift AI 3.4 stores LLMInferenceService as v1alpha2, and there an absent replica
			// field keeps the Deployment's count.
			if kind == workload.KindLLMInferenceService && v == "v1alpha2" {
				k.mu.Lock()
				k.v1alpha2 = true
				k.mu.Unlock()
			}
			if !known {
				k.start(ctx, kind, gv.WithResource(api.Resource))
			}
			break
		}
	}
	return nil
}

func (k *kserveAPIs) start(ctx context.Context, kind workload.Kind, gvr schema.GroupVersionResource) {
	inf := k.factory.ForResource(gvr).Informer()
	_ = inf.SetTransform(slimKServe)
	if k.handler != nil {
		if _, err := inf.AddEventHandler(k.handler(kind)); err != nil {
			k.log.Error("cannot watch KServe kind", zap.String("kind", string(kind)), zap.Error(err))
			return
		}
	}
	api := &kserveAPI{gvr: gvr, inf: inf}
	k.mu.Lock()
	k.apis[kind] = api
	k.mu.Unlock()
	k.factory.Start(ctx.Done())
	k.log.Info("watching KServe kind", zap.String("kind", string(kind)), zap.String("version", gvr.Version))
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) && k.synced != nil {
			k.synced()
		}
	}()
}

// waitForSync waits for the informers found at start-up, so that surges on KServe objects resume.
func (k *kserveAPIs) waitForSync(ctx context.Context) {
	k.mu.RLock()
	var synced []cache.InformerSynced
	for _, api := range k.apis {
		synced = append(synced, api.inf.HasSynced)
	}
	k.mu.RUnlock()
	cache.WaitForCacheSync(ctx.Done(), synced...)
}
