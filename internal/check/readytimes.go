package check

import (
	"fmt"
	"io"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ReadyMetric is the histogram of observed replacement-ready times, by workload kind.
const ReadyMetric = "drain_guardian_replacement_ready_duration_seconds"

// ReadyTimes returns the mean observed replacement-ready time per workload kind from the
// drain_guardian_replacement_ready_duration_seconds histogram in families; kinds without an
// observation are absent.
func ReadyTimes(families []*dto.MetricFamily) map[string]time.Duration {
	out := map[string]time.Duration{}
	sums, counts := map[string]float64{}, map[string]uint64{}
	for _, f := range families {
		if f.GetName() != ReadyMetric || f.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range f.GetMetric() {
			kind := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					kind = l.GetValue()
				}
			}
			h := m.GetHistogram()
			sums[kind] += h.GetSampleSum()
			counts[kind] += h.GetSampleCount()
		}
	}
	for kind, n := range counts {
		if n > 0 && kind != "" {
			out[kind] = time.Duration(sums[kind] / float64(n) * float64(time.Second)).Round(time.Second)
		}
	}
	return out
}

// ReadyTimesFromText reads ReadyTimes from a Prometheus text exposition: the daemon's /metrics, or a
// Prometheus /federate?match[]=drain_guardian_replacement_ready_duration_seconds_count answer (which
// carries _sum and _count as untyped samples; they are recognised too).
func ReadyTimesFromText(r io.Reader) (map[string]time.Duration, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	list := make([]*dto.MetricFamily, 0, len(families))
	for _, f := range families {
		list = append(list, f)
	}
	out := ReadyTimes(list)
	// Federation drops the histogram's type: sum the untyped _sum and _count series.
	sums, counts := untyped(families[ReadyMetric+"_sum"]), untyped(families[ReadyMetric+"_count"])
	for kind, n := range counts {
		if _, ok := out[kind]; !ok && n > 0 && kind != "" {
			out[kind] = time.Duration(sums[kind] / n * float64(time.Second)).Round(time.Second)
		}
	}
	return out, nil
}

func untyped(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "kind" {
				out[l.GetValue()] += m.GetUntyped().GetValue() + m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return out
}
