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
func (c *Controller) watchDevices() error {
	served, err := servesResource(c.clients.Discovery, resourcev1.SchemeGroupVersion.String(), "resourceslices")
	if err != nil {
		return fmt.Errorf("discovering %s: %w", resourcev1.SchemeGroupVersion, err)
	}
	if !served {
		c.log.Info("Dynamic Resource Allocation is not served by this cluster: capacity counts node allocatable only",
			zap.String("groupVersion", resourcev1.SchemeGroupVersion.String()))
		return nil
	}
	c.draFactory = informers.NewSharedInformerFactoryWithOptions(c.clients.Kube, c.opts.ResyncPeriod, informers.WithTransform(dra.Slim))
	r := c.draFactory.Resource().V1()
	c.dra = &dra.Listers{
		Slices: r.ResourceSlices().Lister(), Claims: r.ResourceClaims().Lister(),
		Templates: r.ResourceClaimTemplates().Lister(), Classes: r.DeviceClasses().Lister(),
	}
	for _, inf := range []cache.SharedIndexInformer{
		r.ResourceSlices().Informer(), r.ResourceClaims().Informer(), r.ResourceClaimTemplates().Informer(), r.DeviceClasses().Informer(),
	} {
		c.synced = append(c.synced, inf.HasSynced)
	}
	if _, err := r.ResourceClaims().Informer().AddEventHandler(c.claimHandler()); err != nil {
		return err
	}
	if _, err := r.ResourceSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.onDevicesFreed() },
		UpdateFunc: func(any, any) { c.onDevicesFreed() },
	}); err != nil {
		return err
	}
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

// devices is the capacity source of DRA devices (see capacity.Devices), read from the caches now;
// nil when the cluster serves no DRA or a cache cannot be listed (the ledger then counts node
// allocatable only, as before DRA).
func (c *Controller) devices() *capacity.Devices {
	if c.dra == nil {
		return nil
	}
	inv, err := c.inventory.Inventory(*c.dra)
	if err != nil {
		c.log.Info("listing the DRA caches failed: devices are not counted", zap.Error(err))
		return nil
	}
	return &capacity.Devices{Inventory: inv, Objects: *c.dra, UnknownFits: c.opts.DRAUnknownFits}
}
