// Package dashboards holds the tests of drain-guardian's Grafana dashboard, which ships both to Grafana
// and to the OpenShift console (Observe > Dashboards).
package dashboards

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/drain-guardian/drain-guardian/manifests/promcheck"
)

const dashboardFile = "drain-guardian.json"

type target struct {
	Expr       string     `json:"expr"`
	RefID      string     `json:"refId"`
	Datasource datasource `json:"datasource"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int        `json:"id"`
	Type        string     `json:"type"`
	Title       string     `json:"title"`
	Description string     `json:"description"`
	Datasource  datasource `json:"datasource"`
	Targets     []target   `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	// Units as the OpenShift console reads them, per panel type.
	Yaxes  []struct{ Format string } `json:"yaxes"`  // graph
	Format string                    `json:"format"` // singlestat
	Styles []struct {                // table
		Pattern string `json:"pattern"`
		Type    string `json:"type"`
		Unit    string `json:"unit"`
	} `json:"styles"`
	Panels []panel `json:"panels"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// consolePanelTypes are the panel types the OpenShift console renders; it silently skips any other
// (timeseries, stat, ...), so the dashboard uses these, which Grafana migrates on load.
var consolePanelTypes = map[string]bool{"graph": true, "singlestat": true, "table": true, "gauge": true, "row": true}

// rateWindow stands in for $__rate_interval when parsing: an unusual duration, so that a range
// written by hand (for example [5m]) is told apart from the variable.
const rateWindow = "17m3s"

// substitute replaces the dashboard variables with values PromQL can parse.
func substitute(expr string) string {
	return strings.NewReplacer(
		"$__rate_interval", rateWindow,
		"${__rate_interval}", rateWindow,
		"$__range", "1d",
		"$pool", "worker",
		"${pool}", "worker",
	).Replace(expr)
}

func load(t *testing.T) (dashboard, []panel) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s is not valid dashboard JSON: %v", dashboardFile, err)
	}
	var flat []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			flat = append(flat, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return d, flat
}

func TestDashboardStructure(t *testing.T) {
	d, panels := load(t)
	if d.UID == "" || d.Title == "" {
		t.Error("the dashboard needs a uid and a title")
	}
	hasDatasource := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDatasource = true
		}
	}
	if !hasDatasource {
		t.Error("no datasource variable of type prometheus: the dashboard would be bound to one Grafana's data source")
	}
	ids := map[int]bool{}
	for _, p := range panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		if !consolePanelTypes[p.Type] {
			t.Errorf("panel %q has type %q, which the OpenShift console does not render", p.Title, p.Type)
		}
		if p.Type == "row" {
			continue
		}
		if strings.TrimSpace(p.Description) == "" {
			t.Errorf("panel %q has no description", p.Title)
		}
		unit := p.FieldConfig.Defaults.Unit
		if unit == "" {
			t.Errorf("panel %q has no unit", p.Title)
		}
		// The console reads the unit from the legacy fields; Grafana from fieldConfig.
		var legacy []string
		switch p.Type {
		case "graph":
			if len(p.Yaxes) > 0 {
				legacy = []string{p.Yaxes[0].Format}
			}
		case "singlestat", "gauge":
			legacy = []string{p.Format}
		case "table":
			for _, s := range p.Styles {
				if s.Type == "number" {
					legacy = append(legacy, s.Unit)
				}
			}
		}
		if len(legacy) == 0 {
			t.Errorf("panel %q has no unit the console can read", p.Title)
		}
		for _, u := range legacy {
			if u != unit {
				t.Errorf("panel %q: console unit %q differs from Grafana unit %q", p.Title, u, unit)
			}
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, ds := range append([]datasource{p.Datasource}, targetDatasources(p)...) {
			if ds.UID != "${datasource}" {
				t.Errorf("panel %q uses data source %+v, want the ${datasource} variable", p.Title, ds)
			}
		}
	}
}

func targetDatasources(p panel) []datasource {
	var out []datasource
	for _, tg := range p.Targets {
		out = append(out, tg.Datasource)
	}
	return out
}

// TestDashboardQueries parses every query and checks that it selects only metrics the daemon exports,
// that counters and histogram series are read through rate() or increase(), and that every range
// follows the $__rate_interval variable.
func TestDashboardQueries(t *testing.T) {
	catalog, err := promcheck.DaemonCatalog()
	if err != nil {
		t.Fatal(err)
	}
	_, panels := load(t)
	wantRange, err := time.ParseDuration(rateWindow)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, p := range panels {
		for _, tg := range p.Targets {
			expr := substitute(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q: unknown variable in %q", p.Title, tg.Expr)
				continue
			}
			for _, err := range catalog.Check(expr, nil, true) {
				t.Errorf("panel %q query %s: %v", p.Title, tg.RefID, err)
			}
			sels, err := promcheck.Selectors(expr)
			if err != nil {
				continue // reported by Check
			}
			for _, s := range sels {
				if family, ok := catalog.Family(s.Name); ok {
					used[family] = true
				}
				if s.Range != 0 && s.Range != wantRange {
					t.Errorf("panel %q: range [%s] on %s, want [$__rate_interval]", p.Title, s.Range, s.Name)
				}
			}
		}
	}

	// What an operator looks for on this dashboard.
	for _, family := range []string{
		"drain_guardian_stalls_detected_total",
		"drain_guardian_stalls_resolved_total",
		"drain_guardian_stalls_failed_total",
		"drain_guardian_stall_resolution_duration_seconds",
		"drain_guardian_replacement_ready_duration_seconds",
		"drain_guardian_surges_active",
		"drain_guardian_surge_start_time_seconds",
		"drain_guardian_blocked_pods",
		"drain_guardian_unresolvable_blocked_pods",
		"drain_guardian_evictions_total",
		"drain_guardian_leader",
		"drain_guardian_surges",
		"drain_guardian_surge_extra_resources",
		"drain_guardian_missing_capacity",
		"drain_guardian_surge_held_seconds",
		"drain_guardian_write_errors_total",
		"drain_guardian_surges_rejected_total",
		"drain_guardian_predicted_blocks",
		"drain_guardian_predicted_missing_capacity",
	} {
		if !used[family] {
			t.Errorf("no panel shows %s", family)
		}
	}
}
