package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/dashboards"
)

// panelQuery is one target of one panel, as found in the dashboard JSON.
type panelQuery struct {
	dashboard, panel string
	expr             string
	instant          bool
}

type dashboardJSON struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []dashboards.Variable `json:"list"`
	} `json:"templating"`
	Panels []panelJSON `json:"panels"`
}

type panelJSON struct {
	Title   string      `json:"title"`
	Type    string      `json:"type"`
	Panels  []panelJSON `json:"panels"` // a collapsed row's panels
	Targets []struct {
		Expr    string `json:"expr"`
		Instant bool   `json:"instant"`
	} `json:"targets"`
}

func (d dashboardJSON) queries() []panelQuery {
	var out []panelQuery
	var walk func([]panelJSON)
	walk = func(ps []panelJSON) {
		for _, p := range ps {
			walk(p.Panels)
			for _, t := range p.Targets {
				out = append(out, panelQuery{dashboard: d.UID, panel: p.Title, expr: t.Expr, instant: t.Instant})
			}
		}
	}
	walk(d.Panels)
	return out
}

// kernelDependent are cAdvisor families a kernel may not provide at all
// (per-cgroup block I/O statistics). A target on one of them may be empty
// only when the appliance has no series of that name anywhere.
// The map goes from what a panel reads (the raw family or the built-in
// rule recording it) to the raw family.
var kernelDependent = map[string]string{
	"container_fs_reads_bytes_total":               "container_fs_reads_bytes_total",
	"container_fs_writes_bytes_total":              "container_fs_writes_bytes_total",
	"instance_id:container_fs_reads_bytes:rate2m":  "container_fs_reads_bytes_total",
	"instance_id:container_fs_writes_bytes:rate2m": "container_fs_writes_bytes_total",
}

// TestDashboardsHaveData: every target of every panel of every built-in
// dashboard, with its variables expanded as Grafana expands them (All, and
// every value picked as a multi-value regex alternation), parses as PromQL
// and returns data from `serve --demo` within a few minutes of start.
func TestDashboardsHaveData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := serve(t, "", demo, configFile(writeConfig(t, dir, fastConfig)))

	code, body := p.get("/api/dashboards")
	require.Equal(t, 200, code, body)
	var list []struct{ UID, Title string }
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list, 4)
	var boards []dashboardJSON
	for _, d := range list {
		code, body := p.get("/api/dashboards/" + d.UID)
		require.Equal(t, 200, code, d.UID)
		var b dashboardJSON
		require.NoError(t, json.Unmarshal([]byte(body), &b))
		require.Equal(t, d.UID, b.UID)
		boards = append(boards, b)
	}
	code, _ = p.get("/api/dashboards/no-such-dashboard")
	require.Equal(t, 404, code)

	promql := parser.NewParser(parser.Options{})
	deadline := time.Now().Add(4 * time.Minute)
	for {
		empty, err := emptyTargets(t, p, boards, promql)
		require.NoError(t, err)
		if len(empty) == 0 {
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(empty)
			t.Fatalf("%d targets without data after 4 minutes of --demo:\n%s", len(empty), strings.Join(empty, "\n"))
		}
		time.Sleep(5 * time.Second)
	}
}

// emptyTargets expands and runs every target and lists those without data.
func emptyTargets(t *testing.T, p *process, boards []dashboardJSON, promql parser.Parser) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	now := time.Now()
	r := dashboards.TimeRange{From: now.Add(-5 * time.Minute), To: now, MaxDataPoints: 1000, ScrapeInterval: time.Second}
	var empty []string
	for _, b := range boards {
		// Two ways a user looks at a dashboard: the default (All), and
		// every value ticked by hand, which Grafana sends as a regex
		// alternation of escaped values.
		for _, mode := range []string{"All", "each value"} {
			vars := map[string]dashboards.Selection{}
			for _, v := range b.Templating.List {
				if v.Type != "query" {
					continue
				}
				vals, err := p.resolve(ctx, v, vars, r)
				if err != nil {
					return nil, err
				}
				if len(vals) == 0 {
					empty = append(empty, fmt.Sprintf("%s: variable %s has no values", b.UID, v.Name))
					vals = []string{"no-value"}
				}
				vars[v.Name] = dashboards.Selection{Variable: v, Values: vals, All: mode == "All"}
			}
			for _, q := range b.queries() {
				expr := dashboards.Interpolate(q.expr, vars, r)
				if _, err := promql.ParseExpr(expr); err != nil {
					return nil, fmt.Errorf("%s / %s: expanded query does not parse: %w\n%s", q.dashboard, q.panel, err, expr)
				}
				n, err := p.count(ctx, expr, q.instant, r)
				if err != nil {
					return nil, fmt.Errorf("%s / %s: %w\n%s", q.dashboard, q.panel, err, expr)
				}
				if n > 0 {
					continue
				}
				if absent := p.absentKernelFamily(ctx, expr); absent != "" {
					t.Logf("%s / %s: no data, and no %s series exist at all: this kernel keeps no per-cgroup block I/O statistics", q.dashboard, q.panel, absent)
					continue
				}
				empty = append(empty, fmt.Sprintf("%s / %s (%s): %s", q.dashboard, q.panel, mode, expr))
			}
		}
	}
	return empty, nil
}

// count runs a target as Grafana would (range query at $__interval steps,
// or instant at the end) and counts the series returned.
func (p *process) count(ctx context.Context, expr string, instant bool, r dashboards.TimeRange) (int, error) {
	if instant {
		v, _, _, err := p.api().Query(ctx, expr, r.To)
		if err != nil {
			return 0, err
		}
		return len(v.(model.Vector)), nil
	}
	v, _, _, err := p.api().QueryRange(ctx, expr, promv1.Range{Start: r.From, End: r.To, Step: r.Interval()})
	if err != nil {
		return 0, err
	}
	return len(v.(model.Matrix)), nil
}

func (p *process) absentKernelFamily(ctx context.Context, expr string) string {
	for read, name := range kernelDependent {
		if !strings.Contains(expr, read) {
			continue
		}
		v, _, _, err := p.api().Query(ctx, fmt.Sprintf(`count({__name__=%q})`, name), time.Now())
		if err == nil && len(v.(model.Vector)) == 0 {
			return name
		}
	}
	return ""
}
