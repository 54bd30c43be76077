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
		after, err = c.reconcile.node.sync(ctx, k.Node)
	case k.Pool != "":
		after, err = c.reconcile.pool.sync(ctx, k.Pool)
	default:
		after, err = c.reconcile.surge.sync(ctx, k.Surge)
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

// keys puts work on the queue: the controller's event handlers, and a reconciler waking another kind's
// (a stall starting a Surge, a failed Surge sending its node back to the stall path).
type keys struct {
	queue interface{ Add(key) }
	// cached lists the Surges enqueueSurges matches.
	cached *surgeLister
}

func (k keys) enqueueNode(name string) { k.queue.Add(key{Node: name}) }

func (k keys) enqueueSurge(s *v1alpha1.Surge) { k.queue.Add(key{Surge: keyOf(s)}) }

func (k keys) enqueuePool(name string) { k.queue.Add(key{Pool: name}) }

// enqueueSurges queues the cached Surges that match.
func (k keys) enqueueSurges(match func(*v1alpha1.Surge) bool) {
	for _, s := range k.cached.List() {
		if match(s) {
			k.enqueueSurge(s)
		}
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
