package controller

import (
	"fmt"

	"go.uber.org/zap"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/drain-guardian/drain-guardian/internal/capacity"
	"github.com/drain-guardian/drain-guardian/internal/dra"
)

// watchDevices registers the informers of Dynamic Resource Allocation (resource.k8s.io/v1) when the
// cluster serves it: ResourceSlices, ResourceClaims, ResourceClaimTemplates and DeviceClasses,
// slimmed to what the device count reads. A cluster without DRA costs nothing: no informer, and
// the capacity ledger counts node allocatable only.
func (i *Informers) watchDevices() error {
	served, err := servesResource(i.clients.Discovery, resourcev1.SchemeGroupVersion.String(), "resourceslices")
	if err != nil {
		return fmt.Errorf("discovering %s: %w", resourcev1.SchemeGroupVersion, err)
	}
	if !served {
		i.log.Info("Dynamic Resource Allocation is not served by this cluster: capacity counts node allocatable only",
			zap.String("groupVersion", resourcev1.SchemeGroupVersion.String()))
		return nil
	}
	i.draFactory = informers.NewSharedInformerFactoryWithOptions(i.clients.Kube, i.opts.ResyncPeriod, informers.WithTransform(dra.Slim))
	r := i.draFactory.Resource().V1()
	i.view.dra = &draCaches{listers: dra.Listers{
		Slices: r.ResourceSlices().Lister(), Claims: r.ResourceClaims().Lister(),
		Templates: r.ResourceClaimTemplates().Lister(), Classes: r.DeviceClasses().Lister(),
	}}
	i.register(r.ResourceClaims().Informer(), (*Controller).claimHandler)
	i.register(r.ResourceSlices().Informer(), func(c *Controller) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.onDevicesFreed() },
			UpdateFunc: func(any, any) { c.onDevicesFreed() },
		}
	})
	i.register(r.ResourceClaimTemplates().Informer(), nil)
	i.register(r.DeviceClasses().Informer(), nil)
	return nil
}

// claimHandler re-examines the stalls deferred for capacity when a claim is deallocated or deleted:
// the resource claim controller does so after the claim's pod is gone, so the pod's own deletion
// event came too early to see the device free.
func (c *Controller) claimHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			if allocated(old) && !allocated(obj) {
				c.onDevicesFreed()
			}
		},
		DeleteFunc: func(any) { c.onDevicesFreed() },
	}
}

// onDevicesFreed re-examines the stalls deferred for capacity: a device may be free now.
func (c *Controller) onDevicesFreed() {
	for _, n := range c.drains.wantingNodes() {
		c.enqueueNode(n)
	}
}

func allocated(obj any) bool {
	claim, ok := obj.(*resourcev1.ResourceClaim)
	return ok && claim.Status.Allocation != nil
}

// draCaches is what the view reads of DRA: the listers, and the device inventory rebuilt when they
// change.
type draCaches struct {
	listers   dra.Listers
	inventory dra.InventoryCache
}

// devices is the capacity source of DRA devices (see capacity.Devices), read from the caches now;
// nil when the cluster serves no DRA or a cache cannot be listed (the ledger then counts node
// allocatable only, as before DRA).
func (b *base) devices() *capacity.Devices {
	if b.dra == nil {
		return nil
	}
	inv, err := b.dra.inventory.Inventory(b.dra.listers)
	if err != nil {
		b.log.Info("listing the DRA caches failed: devices are not counted", zap.Error(err))
		return nil
	}
	return &capacity.Devices{Inventory: inv, Objects: b.dra.listers, UnknownFits: b.opts.DRAUnknownFits}
}
