package observability

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// strictErr is err, or nil for the SDK's empty error list: its strict
// unmarshalling returns a nil cog.BuildErrors as a non-nil error.
func strictErr(err error) error {
	if be, ok := err.(cog.BuildErrors); ok && len(be) == 0 {
		return nil
	}
	return err
}

// loadDashboard reads dashboard.json strictly into the Grafana Foundation
// SDK's dashboard types (an unknown field, or one of the wrong type, in
// the dashboard, a panel, its options or a Prometheus query is an error).
// Its panels and their targets are read one by one as well: the SDK's
// PanelOrRowPanel and Panel take that empty error list for a failure and
// drop the panel or the query.
func loadDashboard(t *testing.T) (dashboard.Dashboard, []panel) {
	t.Helper()
	raw, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	plugins.RegisterDefaultPlugins()
	var d dashboard.Dashboard
	if err := strictErr(d.UnmarshalJSONStrict(raw)); err != nil {
		t.Fatalf("dashboard.json does not load in Grafana's dashboard schema: %v", err)
	}
	var doc struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var panels []panel
	for i, pr := range doc.Panels {
		p := panel{Panel: &dashboard.Panel{}}
		if err := strictErr(p.UnmarshalJSONStrict(pr)); err != nil {
			t.Fatalf("dashboard.json panel %d does not load in Grafana's panel schema: %v", i, err)
		}
		if p.Type != "timeseries" {
			t.Fatalf("dashboard.json panel %d is a %q: the dashboard has time series only", i, p.Type)
		}
		var targets struct {
			Targets []json.RawMessage `json:"targets"`
		}
		if err := json.Unmarshal(pr, &targets); err != nil {
			t.Fatal(err)
		}
		for j, raw := range targets.Targets {
			q := &prometheus.Dataquery{}
			if err := strictErr(q.UnmarshalJSONStrict(raw)); err != nil {
				t.Fatalf("dashboard.json panel %d target %d is not a Prometheus query: %v", i, j, err)
			}
			p.queries = append(p.queries, q)
		}
		panels = append(panels, p)
	}
	return d, panels
}

// panel is a dashboard panel and its Prometheus queries.
type panel struct {
	*dashboard.Panel
	queries []*prometheus.Dataquery
}

// dashboardQuery is one panel target's query.
type dashboardQuery struct {
	Panel, RefID, Expr string
}

// dashboardQueries lists the Prometheus queries of the panels, checking
// that each panel and target reads the dashboard's Prometheus data source.
func dashboardQueries(panels []panel) ([]dashboardQuery, error) {
	var qs []dashboardQuery
	for _, p := range panels {
		title := ""
		if p.Title != nil {
			title = *p.Title
		}
		if !isPromDatasource(p.Datasource) {
			return nil, fmt.Errorf("panel %q: datasource %+v, want the ${datasource} Prometheus", title, p.Datasource)
		}
		if len(p.queries) == 0 {
			return nil, fmt.Errorf("panel %q has no target", title)
		}
		refs := map[string]bool{}
		for i, q := range p.queries {
			if !isPromDatasource(q.Datasource) {
				return nil, fmt.Errorf("panel %q target %d: datasource %+v, want the ${datasource} Prometheus", title, i, q.Datasource)
			}
			ref := ""
			if q.RefId != nil {
				ref = *q.RefId
			}
			if ref == "" || refs[ref] {
				return nil, fmt.Errorf("panel %q target %d: refId %q empty or repeated", title, i, ref)
			}
			refs[ref] = true
			if strings.TrimSpace(q.Expr) == "" {
				return nil, fmt.Errorf("panel %q target %s: no expr", title, ref)
			}
			qs = append(qs, dashboardQuery{Panel: title, RefID: ref, Expr: q.Expr})
		}
	}
	return qs, nil
}

func isPromDatasource(ds *common.DataSourceRef) bool {
	return ds != nil && ds.Type != nil && *ds.Type == "prometheus" && ds.Uid != nil && *ds.Uid == "${datasource}"
}

// sluiceMetric finds the Sluice series a query or rule reads.
var sluiceMetric = regexp.MustCompile(`\bsluice_[a-z_]+\b`)

// The dashboard loads in Grafana's schema, every panel reads the
// templated Prometheus data source, and every query is of the jobs the
// $job variable selects (so one job's view shows only that job).
func TestDashboardSchema(t *testing.T) {
	d, panels := loadDashboard(t)
	if d.SchemaVersion < 41 {
		t.Errorf("schemaVersion %d: want Grafana's current (41 or later)", d.SchemaVersion)
	}
	if d.Uid == nil || *d.Uid != "sluice-jobs" {
		t.Errorf("uid %v, want sluice-jobs (links and provisioning name it)", d.Uid)
	}
	vars := map[string]dashboard.VariableModel{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != dashboard.VariableTypeDatasource {
		t.Errorf("no datasource variable of type datasource: %+v", v)
	}
	job, ok := vars["job"]
	if !ok || job.Type != dashboard.VariableTypeQuery || job.Definition == nil ||
		!strings.Contains(*job.Definition, "label_values(sluice_controller_job_tasks, job)") {
		t.Errorf("job variable %+v: want a query of the running jobs' ids", job)
	}
	qs, err := dashboardQueries(panels)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 10 {
		t.Errorf("%d queries, want a panel each for stall, data wait, samples/s, replicas, backlog, S3 bytes, cache hits, redeliveries, failed samples", len(qs))
	}
	for _, q := range qs {
		names := sluiceMetric.FindAllString(q.Expr, -1)
		if len(names) == 0 {
			t.Errorf("panel %q %s reads no Sluice series: %s", q.Panel, q.RefID, q.Expr)
		}
		if n := strings.Count(q.Expr, `job=~"$job"`); n != len(names) {
			t.Errorf("panel %q %s: %d of its %d selectors filter by $job: %s", q.Panel, q.RefID, n, len(names), q.Expr)
		}
	}
}
