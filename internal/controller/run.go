package controller

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The controller's run: its workers only while it leads (the informers start on every replica, see
// Informers.Start).

// Run processes the queue with the configured number of workers until ctx ends. Call it only while
// leading, after Informers.Start returned.
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
	c.reconcile.surge.verifySurges()
	c.enqueueAll()
}

// verifySurges verifies every cached Surge; verify writes nothing (the syncs act). A Surge counts
// (its slot, the capacity its replacements take) only once this process has verified it: a node
// synced, or a prediction made, before the Surges would find their GPUs free and surge a second
// workload onto capacity a surge in flight holds.
func (b *base) verifySurges() {
	for _, s := range b.surges.List() {
		if _, _, err := b.verify(s); err != nil && !errors.Is(err, errTargetGone) {
			b.log.Info("cannot verify a Surge yet; its sync retries", zap.String("surge", s.Namespace+"/"+s.Name), zap.Error(err))
		}
	}
}
