package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// The controller's run: its caches started on every replica, its workers only while it leads.

// Start starts the informers and waits for their caches; it returns an error if ctx ends first. It runs
// on every replica, leader or not, so that a new leader acts on a warm cache.
func (c *Controller) Start(ctx context.Context) error {
	c.kubeFactory.Start(ctx.Done())
	c.dynamicFactory.Start(ctx.Done())
	if c.mcoFactory != nil {
		c.mcoFactory.Start(ctx.Done())
	}
	if c.draFactory != nil {
		c.draFactory.Start(ctx.Done())
	}
	if err := c.kserve.discover(ctx); err != nil {
		c.log.Warn("KServe discovery failed; retrying in the background", zap.Error(err))
	}
	c.log.Info("waiting for informer caches to sync")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("informer caches did not sync: %w", ctx.Err())
	}
	c.kserve.waitForSync(ctx)
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := c.kserve.discover(ctx); err != nil {
			c.log.Debug("KServe discovery failed", zap.Error(err))
		}
	}, kserveDiscoveryPeriod)
	c.ready.Store(true)
	c.log.Info("informer caches synced")
	return nil
}

// Ready reports whether the caches have synced.
func (c *Controller) Ready() bool { return c.ready.Load() }

// Run processes the queue with the configured number of workers until ctx ends. Call it only while
// leading, after Start returned.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	c.takeOver()
	c.gauges.setLeading(true)
	defer c.gauges.setLeading(false)
	c.log.Info("starting workers", zap.Int("workers", c.opts.Workers), zap.Bool("dryRun", c.opts.DryRun))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.runPredictions(ctx)
	}()
	for i := 0; i < c.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, c.worker, time.Second)
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

// takeOver is what a new leader does before its workers start. Every node and every Surge is
// looked at once: this resumes or restores the surges a previous leader left. And every cached Surge
// is verified first (see verifySurges), so that no node sync finds the capacity of a surge in
// flight free.
func (c *Controller) takeOver() {
	c.verifySurges()
	c.enqueueAll()
}

// verifySurges verifies every cached Surge; verify writes nothing (the syncs act). A Surge counts
// (its slot, the capacity its replacements take) only once this process has verified it: a node
// synced, or a prediction made, before the Surges would find their GPUs free and surge a second
// workload onto capacity a surge in flight holds.
func (c *Controller) verifySurges() {
	for _, s := range c.surges.List() {
		if _, _, err := c.verify(s); err != nil && !errors.Is(err, errTargetGone) {
			c.log.Info("cannot verify a Surge yet; its sync retries", zap.String("surge", s.Namespace+"/"+s.Name), zap.Error(err))
		}
	}
}
