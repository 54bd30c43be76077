package controller

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/drain-guardian/drain-guardian/api/v1alpha1"
)

// The workqueue's side of the controller: the workers that take keys off it, and the ways keys get
// on it.

func (c *Controller) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(k)
	var after time.Duration
	var err error
	switch {
	case k.Node != "":
		after, err = c.syncNode(ctx, k.Node)
	case k.Pool != "":
		after, err = c.syncPool(ctx, k.Pool)
	default:
		after, err = c.syncSurge(ctx, k.Surge)
	}
	switch {
	case errors.Is(err, errDryRun), errors.Is(err, errSurgeGone):
		// A write the dry run refused (the decision was reported), or a Surge someone deleted first
		// (they reported it): nothing more to do for this key until something changes.
		c.queue.Forget(k)
	case err != nil:
		c.log.Info("sync failed, retrying", zap.Stringer("key", k), zap.Error(err), zap.Int("retries", c.queue.NumRequeues(k)))
		c.queue.AddRateLimited(k)
	case after > 0:
		c.queue.Forget(k)
		c.queue.AddAfter(k, after)
	default:
		c.queue.Forget(k)
	}
	return true
}

func (c *Controller) enqueueNode(name string) { c.queue.Add(key{Node: name}) }

func (c *Controller) enqueueSurge(s *v1alpha1.Surge) { c.queue.Add(key{Surge: keyOf(s)}) }

func (c *Controller) enqueuePool(name string) { c.queue.Add(key{Pool: name}) }

// enqueueSurges queues the Surges that match.
func (c *Controller) enqueueSurges(match func(*v1alpha1.Surge) bool) {
	for _, s := range c.surgesMatching(match) {
		c.enqueueSurge(s)
	}
}

// enqueueAll queues every node, every pool and every Surge.
func (c *Controller) enqueueAll() {
	nodes, _ := c.nodes.List(labels.Everything())
	for _, n := range nodes {
		c.enqueueNode(n.Name)
	}
	if c.pools != nil {
		pools, _ := c.pools.List(labels.Everything())
		for _, p := range pools {
			c.enqueuePool(p.Name)
		}
	}
	c.enqueueSurges(func(*v1alpha1.Surge) bool { return true })
}

// handler adapts one callback to informer events, unwrapping deletion tombstones.
func (c *Controller) handler(f func(obj any)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: f,
		UpdateFunc: func(old, obj any) {
			if changed(old, obj) {
				f(obj)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			f(obj)
		},
	}
}
