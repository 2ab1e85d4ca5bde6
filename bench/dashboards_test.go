// Package bench holds benchmarks that need a whole appliance's worth of
// data; scripts beside it measure running processes.
package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/parser/posrange"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/dashboards"
	"github.com/gpuscope/gpuscope/rules"
)

// The appliance the source document's small cluster would have: 16 nodes
// of 8 GPUs, ten containers per node, scraped every 15 s for 24 hours.
const (
	gpusPerNode    = 8
	containersNode = 10
	scrape         = 15 * time.Second
	span           = 24 * time.Hour
	// Grafana panels are about this many pixels wide; maxDataPoints is
	// the panel width, so a 24 h view asks for a 1m step.
	maxDataPoints = 1000
	// Browsers run about six requests to one host at a time.
	concurrency = 6
)

// benchNodes is the number of nodes BenchmarkDashboardLoad holds: 16, or
// GPUSCOPE_BENCH_NODES to see how a dashboard grows with the cluster (the
// data of each count is generated once, into its own directory).
func benchNodes(b *testing.B) int {
	s := os.Getenv("GPUSCOPE_BENCH_NODES")
	if s == "" {
		return 16
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 512 {
		b.Fatalf("GPUSCOPE_BENCH_NODES: want a whole number from 1 to 512, got %q", s)
	}
	return n
}

// BenchmarkDashboardLoad measures the time to run every query Grafana runs
// when it opens each built-in dashboard over 24 h (Grafana's default
// resolution, variables on All, six queries in flight; collapsed rows not
// opened), once as shipped (reading the recording rules) and once with
// every recording rule expanded into its raw expression, as Grafana's
// "expand recording rules" would; for a dashboard with collapsed rows, a
// third time with every row open.
//
//	go test -run '^$' -bench BenchmarkDashboardLoad -benchtime 5x -count 3 -timeout 60m ./bench/
//
// The first run generates the data (33 M scraped and 8 M recorded samples)
// into $TMPDIR/gpuscope-bench-dashboards-v9 and reuses it after.
func BenchmarkDashboardLoad(b *testing.B) {
	db, end := benchData(b)
	engine := promql.NewEngine(promql.EngineOpts{
		MaxSamples:               500_000_000,
		Timeout:                  10 * time.Minute,
		LookbackDelta:            5 * time.Minute,
		EnableAtModifier:         true,
		EnableNegativeOffset:     true,
		NoStepSubqueryIntervalFn: func(int64) int64 { return scrape.Milliseconds() },
	})
	set, err := dashboards.Build()
	require.NoError(b, err)
	records := recordingRules(b)
	r := dashboards.TimeRange{From: end.Add(-span), To: end, MaxDataPoints: maxDataPoints, ScrapeInterval: scrape}

	for _, s := range set.List() {
		qs := dashboardQueries(b, set, s.UID, db, engine, r, false)
		all := dashboardQueries(b, set, s.UID, db, engine, r, true)
		requireData(b, engine, db, s.UID, all, r)
		variants := []string{"recorded", "raw"}
		if len(all) > len(qs) {
			variants = append(variants, "every-row-open")
		}
		for _, variant := range variants {
			run := qs
			switch variant {
			case "every-row-open":
				run = all
			case "raw":
				run = make([]benchQuery, len(qs))
				for i, q := range qs {
					run[i] = q
					run[i].expr = expandRecordingRules(b, q.expr, records)
				}
			}
			b.Run(s.UID+"/"+variant, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					loadDashboard(b, engine, db, run, r)
				}
				b.ReportMetric(float64(len(run)), "queries")
			})
		}
	}
}

type benchQuery struct {
	panel, expr string
	instant     bool
	// maxDataPoints is the panel's own, if it sets one: Grafana's step
	// comes from it instead of the panel's width.
	maxDataPoints int
}

// query is the panel's query as Grafana sends it: instant at the end of
// the range, or over the range at its interval.
func (q benchQuery) query(engine *promql.Engine, db *tsdb.DB, r dashboards.TimeRange) (promql.Query, error) {
	if q.instant {
		return engine.NewInstantQuery(context.Background(), db, nil, q.expr, r.To)
	}
	if q.maxDataPoints > 0 {
		r.MaxDataPoints = q.maxDataPoints
	}
	return engine.NewRangeQuery(context.Background(), db, nil, q.expr, r.From, r.To, r.Interval())
}

// dashboardQueries expands a dashboard's targets with every variable on
// All, its values read from the data as Grafana's label_values does. Those
// of collapsed rows are left out, as Grafana runs them only once the row is
// opened, unless openRows.
func dashboardQueries(b *testing.B, set *dashboards.Set, uid string, db *tsdb.DB, engine *promql.Engine, r dashboards.TimeRange, openRows bool) []benchQuery {
	d, _ := set.Dashboard(uid)
	vars := map[string]dashboards.Selection{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		sel, label, err := dashboards.LabelValuesQuery(*v.Query.String)
		require.NoError(b, err)
		vals := labelValues(b, db, engine, dashboards.Interpolate(sel, vars, r), label, r.To)
		vars[v.Name] = dashboards.Selection{Variable: dashboards.Variable{Name: v.Name, Multi: true, IncludeAll: true}, Values: vals, All: true}
	}
	var out []benchQuery
	add := func(p *dashboard.Panel) {
		for _, t := range p.Targets {
			q := t.(prometheus.Dataquery)
			bq := benchQuery{panel: *p.Title, instant: q.Instant != nil && *q.Instant}
			pr := r
			if p.MaxDataPoints != nil {
				bq.maxDataPoints = int(*p.MaxDataPoints)
				pr.MaxDataPoints = bq.maxDataPoints
			}
			bq.expr = dashboards.Interpolate(q.Expr, vars, pr)
			out = append(out, bq)
		}
	}
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			add(p.Panel)
		case p.RowPanel != nil && openRows:
			for i := range p.RowPanel.Panels {
				add(&p.RowPanel.Panels[i])
			}
		}
	}
	return out
}

func labelValues(b *testing.B, db *tsdb.DB, engine *promql.Engine, selector, label string, at time.Time) []string {
	if selector == "" {
		selector = fmt.Sprintf("{%s!=\"\"}", label)
	}
	q, err := engine.NewInstantQuery(context.Background(), db, nil, fmt.Sprintf("count by (%s) (%s)", label, selector), at)
	require.NoError(b, err)
	res := q.Exec(context.Background())
	require.NoError(b, res.Err)
	vec, _ := res.Vector()
	var vals []string
	for _, s := range vec {
		vals = append(vals, s.Metric.Get(label))
	}
	sort.Strings(vals)
	q.Close()
	return vals
}

// requireData fails the benchmark if the dashboard would show nothing:
// timing queries over missing data would measure nothing. Only the
// targets that are empty by nature here (no alert, no XID) may be empty.
func requireData(b *testing.B, engine *promql.Engine, db *tsdb.DB, uid string, qs []benchQuery, r dashboards.TimeRange) {
	for _, q := range qs {
		pq, err := q.query(engine, db, r)
		require.NoError(b, err)
		res := pq.Exec(context.Background())
		require.NoError(b, res.Err, q.expr)
		n := 0
		switch v := res.Value.(type) {
		case promql.Matrix:
			n = len(v)
		case promql.Vector:
			n = len(v)
		}
		pq.Close()
		if n == 0 && !strings.Contains(q.expr, "ALERTS") && !strings.Contains(q.expr, "xid_errors_total") {
			b.Fatalf("%s / %s returns no data over the benchmark's 24 h:\n%s", uid, q.panel, q.expr)
		}
	}
}

// loadDashboard runs all queries, six at a time, as a browser would.
func loadDashboard(b *testing.B, engine *promql.Engine, db *tsdb.DB, qs []benchQuery, r dashboards.TimeRange) {
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	errs := make(chan error, len(qs))
	for _, q := range qs {
		wg.Add(1)
		sem <- struct{}{}
		go func(q benchQuery) {
			defer wg.Done()
			defer func() { <-sem }()
			pq, err := q.query(engine, db, r)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", q.panel, err)
				return
			}
			if res := pq.Exec(context.Background()); res.Err != nil {
				errs <- fmt.Errorf("%s: %w\n%s", q.panel, res.Err, q.expr)
			}
			pq.Close()
		}(q)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// recordingRule is one definition of a recorded series.
type recordingRule struct {
	expr   string
	labels map[string]string
}

func recordingRules(b testing.TB) map[string][]recordingRule {
	p := parser.NewParser(parser.Options{})
	out := map[string][]recordingRule{}
	for _, f := range rules.Pack() {
		rgs, errs := rulefmt.Parse(f.Data, false, model.UTF8Validation, p, nil)
		require.Empty(b, errs, f.Name)
		for _, g := range rgs.Groups {
			for _, r := range g.Rules {
				if r.Record != "" {
					out[r.Record] = append(out[r.Record], recordingRule{expr: r.Expr, labels: r.Labels})
				}
			}
		}
	}
	return out
}

// expandRecordingRules replaces every recorded series in expr by the
// expression that records it, with the selector's label matchers pushed
// into that expression's selectors; a series recorded by several rules
// (one per label value) becomes their union. One under a range selector
// stays.
func expandRecordingRules(b testing.TB, expr string, records map[string][]recordingRule) string {
	p := parser.NewParser(parser.Options{})
	for depth := 0; depth < 10; depth++ {
		e, err := p.ParseExpr(expr)
		require.NoError(b, err, expr)
		type edit struct {
			pos  posrange.PositionRange
			text string
		}
		var edits []edit
		parser.Inspect(e, func(n parser.Node, path []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok || records[vs.Name] == nil {
				return nil
			}
			if len(path) > 0 {
				// Under a range selector (the Runs table's integrals of
				// the gpuscope.accounting group's samples) a recorded
				// series has no raw form: what it sums is the rule's
				// samples. It stays.
				if _, inRange := path[len(path)-1].(*parser.MatrixSelector); inRange {
					return nil
				}
			}
			var parts []string
			for _, r := range records[vs.Name] {
				re, err := p.ParseExpr(r.expr)
				require.NoError(b, err)
				parser.Inspect(re, func(n parser.Node, _ []parser.Node) error {
					if inner, ok := n.(*parser.VectorSelector); ok {
						for _, m := range vs.LabelMatchers {
							if m.Name != labels.MetricName {
								inner.LabelMatchers = append(inner.LabelMatchers, m)
							}
						}
					}
					return nil
				})
				text := "(" + re.String() + ")"
				for k, v := range r.labels {
					text = fmt.Sprintf(`label_replace(%s, %q, %q, "", "")`, text, k, v)
				}
				parts = append(parts, text)
			}
			edits = append(edits, edit{pos: vs.PositionRange(), text: "(" + strings.Join(parts, " or ") + ")"})
			return nil
		})
		if len(edits) == 0 {
			return expr
		}
		sort.Slice(edits, func(i, j int) bool { return edits[i].pos.Start > edits[j].pos.Start })
		for _, ed := range edits {
			expr = expr[:ed.pos.Start] + ed.text + expr[ed.pos.End:]
		}
	}
	b.Fatalf("recording rules nest deeper than 10 levels: %s", expr)
	return ""
}

// benchData opens (generating on first use) the 24-hour data set with the
// recording rules backfilled. It is laid out as a Prometheus with 15 days
// of retention would have it after a day: compacted blocks up to 36 h long
// (a tenth of the retention).
func benchData(b *testing.B) (*tsdb.DB, time.Time) {
	nodes := benchNodes(b)
	dir := filepath.Join(os.TempDir(), "gpuscope-bench-dashboards-v9")
	if nodes != 16 {
		dir += fmt.Sprintf("-%dnodes", nodes)
	}
	opts := tsdb.DefaultOptions()
	opts.RetentionDuration = (15 * 24 * time.Hour).Milliseconds()
	opts.MaxBlockDuration = opts.RetentionDuration / 10
	// bench/dayload.sh reads the directory from this line.
	b.Logf("day of data in %s", dir)
	stamp := filepath.Join(dir, "complete")
	if t, err := os.ReadFile(stamp); err == nil {
		end, err := time.Parse(time.RFC3339, string(t))
		require.NoError(b, err)
		db, err := tsdb.Open(dir, nil, nil, opts, nil)
		require.NoError(b, err)
		b.Cleanup(func() { db.Close() })
		return db, end
	}

	end := time.Now().Truncate(time.Hour)
	require.NoError(b, os.RemoveAll(dir))
	db, err := tsdb.Open(dir, nil, nil, opts, nil)
	require.NoError(b, err)
	start := time.Now()
	n := generate(b, db, end, nodes)
	b.Logf("generated %d samples in %s", n, time.Since(start).Round(time.Second))
	// Persist the head too: blocks backfilled over the head's time range
	// would make the next open drop the head's samples below their end.
	h := db.Head()
	require.NoError(b, db.CompactHead(tsdb.NewRangeHead(h, h.MinTime(), h.MaxTime())))
	require.NoError(b, db.Close())

	start = time.Now()
	n = backfill(b, dir, opts, end)
	b.Logf("backfilled %d recording-rule samples in %s", n, time.Since(start).Round(time.Second))

	// Merge the backfilled blocks into the raw ones and level them up,
	// as the running appliance's compactor would have.
	db, err = tsdb.Open(dir, nil, nil, opts, nil)
	require.NoError(b, err)
	require.NoError(b, db.Compact(context.Background()))
	require.NoError(b, os.WriteFile(stamp, []byte(end.Format(time.RFC3339)), 0o644))
	b.Cleanup(func() { db.Close() })
	return db, end
}

type series struct {
	ls    labels.Labels
	value func(t time.Time, step int) float64
}

// generate appends 24 h of synthetic samples in time order, as scrapes
// would, for the series the dashboards and rules read.
func generate(b *testing.B, db *tsdb.DB, end time.Time, nodes int) int {
	var all []series
	add := func(value func(t time.Time, step int) float64, kv ...string) {
		all = append(all, series{ls: labels.FromStrings(kv...), value: value})
	}
	wave := func(period time.Duration, phase, lo, hi float64) func(time.Time, int) float64 {
		return func(t time.Time, _ int) float64 {
			x := math.Sin(2*math.Pi*float64(t.Unix())/period.Seconds() + phase)
			return lo + (hi-lo)*(0.5+0.5*x)
		}
	}
	constant := func(v float64) func(time.Time, int) float64 { return func(time.Time, int) float64 { return v } }
	counter := func(perSecond float64) func(time.Time, int) float64 {
		return func(_ time.Time, step int) float64 { return perSecond * scrape.Seconds() * float64(step) }
	}
	when := func(v func(time.Time, int) float64, cond func(float64) bool) func(time.Time, int) float64 {
		return func(t time.Time, step int) float64 {
			if cond(v(t, step)) {
				return 1
			}
			return 0
		}
	}
	reasons := []string{"gpu_idle", "clocks_setting", "power_cap", "hw_slowdown", "sync_boost", "sw_thermal", "hw_thermal", "hw_power_brake", "display_clocks"}
	for n := 1; n <= nodes; n++ {
		inst := fmt.Sprintf("node-%02d", n)
		add(constant(64), "__name__", "machine_cpu_cores", "instance", inst, "job", "node-cadvisor")
		for job, path := range map[string]string{"node-gpu": "/metrics/gpu", "node-cadvisor": "/metrics/cadvisor", "node-agent": "/metrics"} {
			_ = path
			add(constant(1), "__name__", "up", "instance", inst, "job", job)
			add(wave(time.Hour, float64(n), 0.005, 0.05), "__name__", "scrape_duration_seconds", "instance", inst, "job", job)
			add(constant(800), "__name__", "scrape_samples_scraped", "instance", inst, "job", job)
		}
		for g := 0; g < gpusPerNode; g++ {
			phase := float64(n*gpusPerNode + g)
			util := wave(3*time.Hour, phase, 5, 98)
			gl := []string{"instance", inst, "job", "node-gpu", "gpu", fmt.Sprint(g), "UUID", fmt.Sprintf("GPU-%02d-%d", n, g),
				"pci_bus_id", fmt.Sprintf("00000000:%02X:00.0", 0x18+g), "device", fmt.Sprintf("nvidia%d", g),
				"modelName", "NVIDIA H100 80GB HBM3", "Hostname", inst, "DCGM_FI_DRIVER_VERSION", "580.105.08"}
			gpu := func(name string, v func(time.Time, int) float64, extra ...string) {
				add(v, append(append([]string{"__name__", name}, gl...), extra...)...)
			}
			gpu("DCGM_FI_DEV_GPU_UTIL", util)
			gpu("DCGM_FI_DEV_FB_TOTAL", constant(81559))
			gpu("DCGM_FI_DEV_FB_USED", wave(6*time.Hour, phase, 10000, 78000))
			gpu("DCGM_FI_DEV_FB_FREE", wave(6*time.Hour, phase+math.Pi, 3000, 71000))
			temp := wave(3*time.Hour, phase, 35, 80)
			gpu("DCGM_FI_DEV_GPU_TEMP", temp)
			gpu("DCGM_FI_DEV_MEMORY_TEMP", wave(3*time.Hour, phase, 40, 85))
			power := wave(3*time.Hour, phase, 90, 690)
			gpu("DCGM_FI_DEV_POWER_USAGE", power)
			gpu("DCGM_FI_DEV_SM_CLOCK", constant(1980))
			gpu("DCGM_FI_DEV_MEM_CLOCK", constant(2619))
			gpu("DCGM_FI_DEV_MEM_COPY_UTIL", wave(3*time.Hour, phase, 2, 60))
			gpu("DCGM_FI_DEV_XID_ERRORS", constant(0), "err_code", "0", "err_msg", "No Error")
			gpu("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", wave(time.Hour, phase, 0, 4000))
			gpu("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", wave(3*time.Hour, phase, 0, 0.8))
			gpu("DCGM_FI_PROF_DRAM_ACTIVE", wave(3*time.Hour, phase, 0.05, 0.7))
			gpu("gpuscope_gpu_pcie_tx_bytes_per_second", wave(time.Hour, phase, 1e8, 2e10))
			gpu("gpuscope_gpu_pcie_rx_bytes_per_second", wave(time.Hour, phase+1, 1e8, 2e10))
			gpu("gpuscope_gpu_pcie_max_bandwidth_bytes_per_second", constant(63.008e9))
			// Reasons are active as on a real GPU: power cap near the
			// power limit, thermal slowdown when hot, idle when idle; the
			// others never.
			for _, reason := range reasons {
				active := constant(0)
				switch reason {
				case "power_cap":
					active = when(power, func(w float64) bool { return w > 650 })
				case "sw_thermal":
					active = when(temp, func(c float64) bool { return c > 78 })
				case "gpu_idle":
					active = when(util, func(u float64) bool { return u < 10 })
				}
				gpu("gpuscope_gpu_clock_event_active", active, "reason", reason)
			}
			id := fmt.Sprintf("/gpuscope-bench/c%d", g%containersNode)
			gpu("gpuscope_gpu_container_memory_used_bytes", wave(6*time.Hour, phase, 1e10, 7.8e10), "id", id, "name", "", "image", "")
			gpu("gpuscope_gpu_container_sm_utilization_percent", util, "id", id, "name", "", "image", "")
			gpu("gpuscope_gpu_container_processes", constant(1), "id", id, "name", "", "image", "")
		}
		for c := 0; c < containersNode; c++ {
			id := fmt.Sprintf("/gpuscope-bench/c%d", c)
			cl := []string{"instance", inst, "job", "node-cadvisor", "id", id}
			ctr := func(name string, v func(time.Time, int) float64, extra ...string) {
				add(v, append(append([]string{"__name__", name}, cl...), extra...)...)
			}
			ctr("container_cpu_usage_seconds_total", counter(1.2+0.1*float64(c)), "cpu", "total")
			ctr("container_spec_cpu_quota", constant(200000))
			ctr("container_spec_cpu_period", constant(100000))
			ctr("container_memory_working_set_bytes", wave(2*time.Hour, float64(c), 1e9, 7e9))
			ctr("container_spec_memory_limit_bytes", constant(8<<30))
			ctr("container_network_receive_bytes_total", counter(5e6), "interface", "eth0")
			ctr("container_network_transmit_bytes_total", counter(2e6), "interface", "eth0")
			ctr("container_fs_reads_bytes_total", counter(1e7), "device", "/dev/nvme0n1")
			ctr("container_fs_writes_bytes_total", counter(3e6), "device", "/dev/nvme0n1")
			ctr("container_cpu_cfs_periods_total", counter(10))
			ctr("container_cpu_cfs_throttled_periods_total", counter(2))
			ctr("container_pressure_io_waiting_seconds_total", counter(0.05))
		}
	}
	self := []string{"instance", "appliance", "job", "gpuscope"}
	for name, v := range map[string]func(time.Time, int) float64{
		"prometheus_tsdb_head_series":             constant(6500),
		"prometheus_tsdb_storage_blocks_bytes":    wave(24*time.Hour, 0, 1e8, 1e9),
		"prometheus_tsdb_wal_storage_size_bytes":  wave(2*time.Hour, 0, 1e7, 1e8),
		"prometheus_tsdb_retention_limit_seconds": constant(15 * 86400),
		"prometheus_tsdb_lowest_timestamp_seconds": func(t time.Time, _ int) float64 {
			return float64(end.Add(-span).Unix())
		},
		"process_cpu_seconds_total":     counter(0.05),
		"process_resident_memory_bytes": wave(time.Hour, 0, 3e8, 4e8),
		"go_memstats_heap_inuse_bytes":  wave(time.Hour, 0, 1e8, 2e8),
	} {
		add(v, append([]string{"__name__", name}, self...)...)
	}
	add(counter(430), append([]string{"__name__", "prometheus_tsdb_head_samples_appended_total", "type", "float"}, self...)...)
	for _, g := range []string{"gpuscope.container", "gpuscope.diagnosis", "gpuscope.gpu"} {
		add(wave(time.Hour, 0, 0.001, 0.02), append([]string{"__name__", "prometheus_rule_group_last_duration_seconds", "rule_group", g}, self...)...)
		add(constant(0), append([]string{"__name__", "prometheus_rule_evaluation_failures_total", "rule_group", g}, self...)...)
	}

	steps := int(span / scrape)
	samples := 0
	refs := make([]uint64, len(all))
	for step := 0; step <= steps; step++ {
		t := end.Add(-span).Add(time.Duration(step) * scrape)
		app := db.Appender(context.Background())
		for i, s := range all {
			ref, err := app.Append(storageRef(refs[i]), s.ls, t.UnixMilli(), s.value(t, step))
			require.NoError(b, err)
			refs[i] = uint64(ref)
			samples++
		}
		require.NoError(b, app.Commit())
	}
	return samples
}

// backfill evaluates the pack's recording rules over the 24 hours at each
// group's interval, in dependency order, and writes the results as blocks
// (what promtool tsdb create-blocks-from rules does); each group's blocks
// are in place before the next group, which may read them, is evaluated.
func backfill(b *testing.B, dir string, opts *tsdb.Options, end time.Time) int {
	engine := promql.NewEngine(promql.EngineOpts{
		MaxSamples: 500_000_000, Timeout: time.Hour, LookbackDelta: 5 * time.Minute,
		NoStepSubqueryIntervalFn: func(int64) int64 { return scrape.Milliseconds() },
	})
	p := parser.NewParser(parser.Options{})
	groups := map[string]rulefmt.RuleGroup{}
	for _, f := range rules.Pack() {
		rgs, errs := rulefmt.Parse(f.Data, false, model.UTF8Validation, p, nil)
		require.Empty(b, errs)
		for _, g := range rgs.Groups {
			groups[g.Name] = g
		}
	}
	n := 0
	for _, name := range []string{"gpuscope.dashboard", "gpuscope.container", "gpuscope.accounting", "gpuscope.diagnosis", "gpuscope.baseline.hourly", "gpuscope.baseline.weekly"} {
		g, ok := groups[name]
		require.True(b, ok, "rule group %s not in the pack", name)
		interval := time.Duration(g.Interval)
		if interval == 0 {
			interval = scrape
		}
		for _, r := range g.Rules {
			if r.Record == "" {
				continue
			}
			n += backfillRule(b, dir, opts, engine, r, end, interval)
		}
	}
	return n
}

// backfillRule evaluates one recording rule and writes its series as
// blocks, one per 2 h window as the TSDB cuts them. Rules read the
// recorded series of rules before them, even in their own group, so each
// rule's blocks are in place before the next rule runs.
func backfillRule(b *testing.B, dir string, opts *tsdb.Options, engine *promql.Engine, r rulefmt.Rule, end time.Time, interval time.Duration) int {
	db, err := tsdb.Open(dir, nil, nil, opts, nil)
	require.NoError(b, err)
	q, err := engine.NewRangeQuery(context.Background(), db, nil, r.Expr, end.Add(-span), end, interval)
	require.NoError(b, err, r.Record)
	res := q.Exec(context.Background())
	require.NoError(b, res.Err, r.Record)
	m, _ := res.Matrix()

	blockSize := (2 * time.Hour).Milliseconds()
	writers := map[int64]*tsdb.BlockWriter{}
	appenders := map[int64]storage.Appender{}
	appender := func(t int64) storage.Appender {
		w := t - t%blockSize
		if a, ok := appenders[w]; ok {
			return a
		}
		bw, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), dir, blockSize)
		require.NoError(b, err)
		writers[w] = bw
		appenders[w] = bw.Appender(context.Background())
		return appenders[w]
	}
	// A block writer's head takes samples only near its newest one, so
	// append in time order across series, as scrapes would.
	type point struct {
		t      int64
		v      float64
		series int
	}
	var (
		sets   []labels.Labels
		points []point
	)
	for _, s := range m {
		lb := labels.NewBuilder(s.Metric)
		lb.Set(labels.MetricName, r.Record)
		for k, v := range r.Labels {
			lb.Set(k, v)
		}
		sets = append(sets, lb.Labels())
		for i, pt := range s.Floats {
			points = append(points, point{pt.T, pt.F, len(sets) - 1})
			// A staleness marker where the series stops, as the rule
			// manager writes one: without it the series would linger for
			// the 5-minute lookback beside its successor (a GPU's
			// bottleneck class changing), which a one-to-one match on the
			// GPU refuses.
			next := pt.T + interval.Milliseconds()
			if (i+1 == len(s.Floats) || s.Floats[i+1].T != next) && next <= end.UnixMilli() {
				points = append(points, point{next, math.Float64frombits(value.StaleNaN), len(sets) - 1})
			}
		}
	}
	sort.SliceStable(points, func(i, j int) bool { return points[i].t < points[j].t })
	for _, pt := range points {
		_, err := appender(pt.t).Append(0, sets[pt.series], pt.t, pt.v)
		require.NoError(b, err, r.Record)
	}
	n := len(points)
	q.Close()
	require.NoError(b, db.Close())
	for w, a := range appenders {
		require.NoError(b, a.Commit())
		_, err := writers[w].Flush(context.Background())
		require.NoError(b, err)
		require.NoError(b, writers[w].Close())
	}
	return n
}

func storageRef(r uint64) storage.SeriesRef { return storage.SeriesRef(r) }

// TestExpandRecordingRules: the raw variant of a panel query is the
// recording rule's own expression with the panel's matchers inside it.
func TestExpandRecordingRules(t *testing.T) {
	records := recordingRules(t)
	got := expandRecordingRules(t, `gpu:dcgm_fi_dev_fb_used:ratio{gpu=~"(0|1)"} > 0.9`, records)
	require.Equal(t, `((DCGM_FI_DEV_FB_USED{gpu=~"(0|1)"} / DCGM_FI_DEV_FB_TOTAL{gpu=~"(0|1)"})) > 0.9`, got)

	got = expandRecordingRules(t, `count by (class) (gpu:bottleneck:class{instance="a"})`, records)
	require.NotContains(t, got, "gpu:", "nested recording rules are expanded too: %s", got)
	require.Contains(t, got, `label_replace(`)
	require.Contains(t, got, `"class", "input-bound"`)
	_, err := parser.NewParser(parser.Options{}).ParseExpr(got)
	require.NoError(t, err)
}
