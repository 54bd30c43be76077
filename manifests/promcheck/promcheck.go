// Package promcheck checks the PromQL shipped with drain-guardian (alerts, dashboards) against the
// metrics the daemon really exports, so that renaming a metric in internal/metrics breaks the build
// instead of silently emptying a dashboard panel or muting an alert.
package promcheck

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/drain-guardian/drain-guardian/internal/metrics"
)

// Type is the kind of a metric family.
type Type string

// The metric types the daemon exports.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// Catalog maps every series name a query may select to the family it belongs to.
type Catalog struct {
	// families maps a family name to its type.
	families map[string]Type
	// series maps a selectable series name (histograms: _bucket, _sum, _count) to its family.
	series map[string]string
}

// descName extracts the fully-qualified name from a prometheus.Desc. Desc has no accessor for it;
// its String form has been stable across client_golang releases.
var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// DaemonCatalog builds the catalog from the daemon's own metrics package: the type of each family
// comes from the collector that defines it, not from naming conventions. It fails if the families
// found differ from metrics.Names(), the list the daemon documents.
func DaemonCatalog() (*Catalog, error) {
	m := metrics.New()
	c := &Catalog{families: map[string]Type{}, series: map[string]string{}}

	// Vector collectors export no family until a child exists, so their type comes from their Go type.
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if !f.CanInterface() {
			continue
		}
		var typ Type
		switch f.Interface().(type) {
		case *prometheus.CounterVec:
			typ = Counter
		case *prometheus.GaugeVec:
			typ = Gauge
		case *prometheus.HistogramVec:
			typ = Histogram
		default:
			continue
		}
		descs := make(chan *prometheus.Desc, 4)
		f.Interface().(prometheus.Collector).Describe(descs)
		close(descs)
		for d := range descs {
			match := descName.FindStringSubmatch(d.String())
			if match == nil {
				return nil, fmt.Errorf("cannot read the metric name from %s", d)
			}
			c.add(match[1], typ)
		}
	}

	// The workqueue families are unexported; create one child of each and gather them, together with
	// the plain (non-vector) collectors.
	p := m.NewWorkqueueProvider()
	p.NewDepthMetric("probe")
	p.NewAddsMetric("probe")
	p.NewLatencyMetric("probe")
	p.NewWorkDurationMetric("probe")
	p.NewUnfinishedWorkSecondsMetric("probe")
	p.NewLongestRunningProcessorSecondsMetric("probe")
	p.NewRetriesMetric("probe")
	families, err := m.Registry.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering the daemon's metrics: %w", err)
	}
	for _, mf := range families {
		if !strings.HasPrefix(mf.GetName(), metrics.Namespace+"_") {
			continue // go_* and process_* collectors
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			c.add(mf.GetName(), Counter)
		case dto.MetricType_GAUGE:
			c.add(mf.GetName(), Gauge)
		case dto.MetricType_HISTOGRAM:
			c.add(mf.GetName(), Histogram)
		default:
			return nil, fmt.Errorf("metric %s has unsupported type %s", mf.GetName(), mf.GetType())
		}
	}

	found := c.Families()
	documented := append([]string(nil), metrics.Names()...)
	sort.Strings(documented)
	if !reflect.DeepEqual(found, documented) {
		return nil, fmt.Errorf("metrics.Names() lists %v, but the registry defines %v", documented, found)
	}
	return c, nil
}

func (c *Catalog) add(name string, t Type) {
	c.families[name] = t
	if t == Histogram {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			c.series[name+suffix] = name
		}
		return
	}
	c.series[name] = name
}

// Families returns the sorted family names.
func (c *Catalog) Families() []string {
	names := make([]string, 0, len(c.families))
	for n := range c.families {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Family returns the family a selectable series name belongs to.
func (c *Catalog) Family(series string) (string, bool) {
	f, ok := c.series[series]
	return f, ok
}

// cumulative reports whether a series only ever grows (a counter, or a histogram's buckets, sum
// and count), so that only its rate or increase means anything on a graph.
func (c *Catalog) cumulative(series string) bool {
	f, ok := c.series[series]
	if !ok {
		return false
	}
	return c.families[f] == Counter || c.families[f] == Histogram
}

// Selector is one metric selected by an expression.
type Selector struct {
	Name string
	// InRateFunc says whether the selector is the argument of rate() or increase().
	InRateFunc bool
	// Range is the range of a range-vector selector (zero for an instant selector).
	Range time.Duration
}

// Selectors parses expr and returns every metric it selects.
func Selectors(expr string) ([]Selector, error) {
	node, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []Selector
	var walk func(n parser.Node, inRate bool)
	walk = func(n parser.Node, inRate bool) {
		switch n := n.(type) {
		case *parser.Call:
			rateFunc := n.Func.Name == "rate" || n.Func.Name == "increase"
			for _, arg := range n.Args {
				walk(arg, rateFunc)
			}
			return
		case *parser.MatrixSelector:
			vs := n.VectorSelector.(*parser.VectorSelector)
			out = append(out, Selector{Name: metricName(vs), InRateFunc: inRate, Range: n.Range})
			return
		case *parser.SubqueryExpr:
			walk(n.Expr, false)
			return
		case *parser.VectorSelector:
			out = append(out, Selector{Name: metricName(n), InRateFunc: inRate})
			return
		}
		for _, child := range parser.Children(n) {
			walk(child, false)
		}
	}
	walk(node, false)
	return out, nil
}

func metricName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == "__name__" {
			return m.Value
		}
	}
	return ""
}

// Check parses expr and reports every problem: a metric the daemon does not export (unless listed in
// external, such as Prometheus' own up), and, when countersInRate is set, a counter or histogram
// series used outside rate() or increase().
func (c *Catalog) Check(expr string, external map[string]bool, countersInRate bool) []error {
	sels, err := Selectors(expr)
	if err != nil {
		return []error{fmt.Errorf("parse: %w", err)}
	}
	var errs []error
	for _, s := range sels {
		if external[s.Name] {
			continue
		}
		if _, ok := c.series[s.Name]; !ok {
			errs = append(errs, fmt.Errorf("metric %q is not exported by drain-guardian", s.Name))
			continue
		}
		if countersInRate && c.cumulative(s.Name) && !s.InRateFunc {
			errs = append(errs, fmt.Errorf("cumulative series %q is used outside rate() or increase()", s.Name))
		}
	}
	return errs
}
