package controller

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/drain-guardian/drain-guardian/internal/check"
	"github.com/drain-guardian/drain-guardian/internal/metrics"
)

// ReasonUpdateWillStall is the Event recorded on a workload (or a pod without one) the first time
// the prediction finds that it will stall its node's drain at the next update.
const ReasonUpdateWillStall = "UpdateWillStall"

const actionPredict = "Predict"

const (
	// predictInterval is how often the prediction is renewed without any change: free capacity and
	// the pools' progress move without an event on the objects watched for it.
	predictInterval = 5 * time.Minute
	// predictSettle is how long a change waits before the prediction runs, so that the events of a
	// minute cost one analysis: a large cluster always has a pod or a PDB changing, and one analysis
	// of 1,000 nodes and 30,000 pods costs about a third of a CPU-second (BenchmarkScalePredict).
	// DrainGuardianUpdateWillStall waits 15 minutes, so a minute's delay changes nothing it says.
	predictSettle = time.Minute
	// notSteadyReportAfter is how long a workload must stay not steady before its finding is reported
	// as an Event: one mid-rollout, or just Ready while its controller's status lags (a LeaderWorkerSet
	// counts its groups a few seconds after their pods turn Ready), settles sooner and is surged as
	// soon as it does. The gauge counts it at once.
	notSteadyReportAfter = predictInterval
)

// predictor keeps what the periodic prediction reported, so that each unresolvable workload gets
// one Event per finding.
type predictor struct {
	analyze func(PredictOptions) (*check.Report, error)
	metrics *metrics.Metrics
	log     *zap.Logger
	events  *eventer
	// reported holds the keys (see reportKey) of the stalls already reported; a key no longer
	// predicted is forgotten, so that a stall that comes back is reported again.
	reported map[string]bool
	// unsteady holds when each not-steady finding not reported yet was first predicted (see
	// notSteadyReportAfter); forgotten as reported is.
	unsteady map[string]time.Time
	now      func() time.Time
}

// runPredictions renews the prediction of the next update on a timer and after changes to what it
// reads, until ctx ends; it exports the drain_guardian_predicted_* gauges meanwhile. It runs only
// while leading, like every other gauge.
func (c *Controller) runPredictions(ctx context.Context) {
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	defer c.watchPredictionInputs(poke)()
	defer c.metrics.PredictedBlocks.Reset()
	defer c.metrics.PredictedMissingCapacity.Reset()

	p := c.newPredictor()
	ticker := time.NewTicker(predictInterval)
	defer ticker.Stop()
	for {
		p.predict()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-changed:
			select {
			case <-ctx.Done():
				return
			case <-time.After(predictSettle):
			}
		}
	}
}

// watchPredictionInputs calls poke on every change of what a prediction reads; the returned
// function removes the handlers.
func (c *Controller) watchPredictionInputs(poke func(any)) (stop func()) {
	f := c.informers.kubeFactory
	informers := []cache.SharedIndexInformer{
		f.Core().V1().Nodes().Informer(), f.Core().V1().Pods().Informer(),
		f.Policy().V1().PodDisruptionBudgets().Informer(), f.Core().V1().Namespaces().Informer(),
	}
	if mcoFactory := c.informers.mcoFactory; mcoFactory != nil {
		informers = append(informers, mcoFactory.Machineconfiguration().V1().MachineConfigPools().Informer())
	}
	var removes []func()
	for _, inf := range informers {
		reg, err := inf.AddEventHandler(c.handler(poke))
		if err != nil {
			c.log.Warn("cannot watch for prediction changes; predicting on the timer only", zap.Error(err))
			continue
		}
		removes = append(removes, func() { _ = inf.RemoveEventHandler(reg) })
	}
	return func() {
		for _, remove := range removes {
			remove()
		}
	}
}

// newPredictor builds the periodic prediction over the controller's caches.
func (c *Controller) newPredictor() *predictor {
	pool := c.reconcile.pool
	return &predictor{
		analyze: pool.predict, metrics: c.metrics, log: c.log, events: pool.events, now: pool.clock.Now,
		reported: map[string]bool{}, unsteady: map[string]time.Time{},
	}
}

// predict renews the prediction once: gauges, then Events.
func (p *predictor) predict() {
	report, err := p.analyze(PredictOptions{ReadyTimes: check.ReadyTimes(p.gather())})
	if err != nil {
		p.log.Warn("predicting the next update failed", zap.Error(err))
		return
	}
	p.export(report)
	p.reportStalls(report)
}

// gather reads this process's own observations of replacement-ready times.
func (p *predictor) gather() []*dto.MetricFamily {
	families, err := p.metrics.Registry.Gather()
	if err != nil {
		p.log.Debug("gathering metrics for the prediction", zap.Error(err))
	}
	return families
}

// export sets the predicted gauges: every verdict of every pool, zeros included, so that a query
// sees a pool whose stalls were fixed drop to 0 instead of vanish.
func (p *predictor) export(r *check.Report) {
	m := p.metrics
	m.PredictedBlocks.Reset()
	m.PredictedMissingCapacity.Reset()
	for _, pool := range r.Pools {
		name := poolLabel(pool.Name)
		for _, v := range check.Verdicts() {
			m.PredictedBlocks.WithLabelValues(name, string(v)).Set(0)
		}
		for _, n := range pool.Nodes {
			for _, b := range n.Blocks {
				m.PredictedBlocks.WithLabelValues(name, string(b.Verdict)).Inc()
			}
		}
		for _, res := range pool.Plan.Resources {
			if res.Missing > 0 {
				m.PredictedMissingCapacity.WithLabelValues(name, res.Name).Set(float64(res.Missing))
			}
		}
	}
}

// poolLabel is the pool label of the gauges: the other gauges name nodes outside any pool "".
func poolLabel(pool string) string {
	if pool == check.NoPool {
		return ""
	}
	return pool
}

// reportStalls records a Warning Event the first time a workload is found to stall its drain.
// Workloads opted out, or out of the guardian's scope, get none: their owners chose that, and the
// guardian writes nothing in namespaces outside its scope. Nor does an owner that could not be read
// (check.Unknown): the next prediction reads it again. A workload not steady is reported once it has
// stayed so for notSteadyReportAfter.
func (p *predictor) reportStalls(r *check.Report) {
	seen, now := map[string]bool{}, p.now()
	for _, pool := range r.Pools {
		for _, n := range pool.Nodes {
			for _, b := range n.Blocks {
				if b.Verdict.Resolvable() || b.Verdict == check.OptedOut || b.Verdict == check.OutOfScope || b.Verdict == check.Unknown || b.Regarding == nil {
					continue
				}
				key := reportKey(b)
				seen[key] = true
				if p.reported[key] || !p.lasting(key, b.Verdict, now) {
					continue
				}
				p.reported[key] = true
				p.events.event(b.Regarding, corev1.EventTypeWarning, ReasonUpdateWillStall, actionPredict,
					"Pod %s would stall the drain of node %s (%s) at the next update: %s: %s",
					b.Pod, n.Name, describePool(pool.Name), b.Verdict, b.Detail)
			}
		}
	}
	maps.DeleteFunc(p.reported, func(key string, _ bool) bool { return !seen[key] })
	maps.DeleteFunc(p.unsteady, func(key string, _ time.Time) bool { return !seen[key] })
}

// lasting reports whether a finding is to be reported now: at once, but a not-steady one only once it
// was first predicted notSteadyReportAfter ago.
func (p *predictor) lasting(key string, v check.Verdict, now time.Time) bool {
	if v != check.NotSteady {
		return true
	}
	first, ok := p.unsteady[key]
	if !ok {
		p.unsteady[key], first = now, now
	}
	return now.Sub(first) >= notSteadyReportAfter
}

func reportKey(b check.Block) string {
	ref := b.Regarding
	return fmt.Sprintf("%s/%s/%s/%s/%s", b.Verdict, ref.Kind, ref.Namespace, ref.Name, ref.UID)
}

// describePool names a pool of the report in an Event: a MachineConfigPool, no pool, or the
// pseudo-pool of another source's rollout (trigger.Rollout names them in parentheses).
func describePool(pool string) string {
	switch {
	case pool == check.NoPool:
		return "no MachineConfigPool"
	case strings.HasPrefix(pool, "("):
		return strings.Trim(pool, "()")
	}
	return "pool " + pool
}
