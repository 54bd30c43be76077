package controller

import (
	"fmt"

	"go.uber.org/zap"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/drain-guardian/drain-guardian/internal/blocking"
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
	return nil
}

// devices is the DRA side of the capacity ledger (see blocking.Devices), read from the caches now;
// nil when the cluster serves no DRA or a cache cannot be listed (the ledger then counts node
// allocatable only, as before DRA).
func (c *Controller) devices() *blocking.Devices {
	if c.dra == nil {
		return nil
	}
	inv, err := c.dra.Inventory()
	if err != nil {
		c.log.Info("listing the DRA caches failed: devices are not counted", zap.Error(err))
		return nil
	}
	return &blocking.Devices{Inventory: inv, Objects: *c.dra, UnknownFits: c.opts.DRAUnknownFits}
}
