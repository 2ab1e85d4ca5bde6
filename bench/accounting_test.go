package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	promrules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/accounting"
	"github.com/gpuscope/gpuscope/query"
	"github.com/gpuscope/gpuscope/rules"
	"github.com/gpuscope/gpuscope/workload"
)

// The week the run report covers by default, on the source document's
// small cluster: 16 nodes of 8 GPUs scraped every 15 s, the accounting
// and diagnosis groups evaluated every minute, 500 finished runs.
const (
	acctNodes    = 16
	acctGPUs     = 8
	acctRuns     = 500
	acctScrape   = 15 * time.Second
	acctInterval = time.Minute // gpuscope.accounting's interval
	acctSpan     = 7 * 24 * time.Hour
	// cgroups every node has all week that hold no GPU (systemd units and
	// the root): cAdvisor reports them, the report reads their
	// container_* series and leaves them out.
	acctSystemUnits = 8
	// serve's --query.max-samples and --query.timeout defaults.
	serveMaxSamples = 50_000_000
	serveTimeout    = 2 * time.Minute
)

// reportEngine is the query engine as serve builds it for the run report:
// serve's max samples, timeout, concurrency and lookback.
func reportEngine(b *testing.B) *query.Engine {
	engine, err := query.NewEngine(query.EngineOptions{
		DataDir:        b.TempDir(),
		Timeout:        serveTimeout,
		MaxSamples:     serveMaxSamples,
		MaxConcurrency: min(20, runtime.GOMAXPROCS(0)),
		LookbackDelta:  5 * time.Minute,
	})
	require.NoError(b, err)
	return engine
}

// BenchmarkAccountingReport measures the run report (accounting.Reporter,
// /api/v1/workloads, `gpuscope workloads`) over its default range, the last
// 7 days, with the query engine as serve builds it (default max samples,
// timeout and lookback) over a TSDB laid out as the appliance would have
// it after the week (compacted blocks).
//
//	go test -run '^$' -bench BenchmarkAccountingReport -benchtime 3x -count 3 -timeout 60m ./bench/
//
// The first run generates the data into $TMPDIR/gpuscope-bench-accounting-v3
// and reuses it after. The series of the gpuscope.accounting and
// gpuscope.diagnosis groups are generated directly, with the names and
// labels those rules record, rather than evaluated from raw GPU series:
// the benchmark measures the report, not the rules.
//
// Two sub-benchmarks: rollup=1h reads the gpuscope.accounting.hourly
// group's series for the week's whole hours, as serve does; rollup=none
// reads every minute (the group disabled).
func BenchmarkAccountingReport(b *testing.B) {
	db, end, runs := accountingData(b)
	engine := reportEngine(b)
	for _, rollup := range []time.Duration{0, time.Hour} {
		name := "rollup=none"
		if rollup > 0 {
			name = "rollup=" + model.Duration(rollup).String()
		}
		b.Run(name, func(b *testing.B) { benchReport(b, engine, db, end, runs, rollup) })
	}
}

func benchReport(b *testing.B, engine promql.QueryEngine, db storage.Queryable, end time.Time, runs []acctRun, rollup time.Duration) {
	q := accounting.Query{Start: end.Add(-acctSpan), End: end}
	running := acctGroups{promrules.NewGroup(promrules.GroupOptions{Name: "gpuscope.accounting", Interval: acctInterval})}
	if rollup > 0 {
		running = append(running, promrules.NewGroup(promrules.GroupOptions{Name: "gpuscope.accounting.hourly", Interval: rollup}))
	}
	opts := func(e promql.QueryEngine) accounting.Options {
		return accounting.Options{Engine: e, Queryable: db, Rules: running}
	}

	// Untimed, in the first call (b.N is 1 there): a report that says
	// what the data says, and every query's time and samples (peak: what
	// --query.max-samples bounds).
	if b.N == 1 {
		stats := &statsEngine{QueryEngine: engine}
		reporter, err := accounting.New(opts(stats))
		require.NoError(b, err)
		rep, err := reporter.Report(context.Background(), q)
		require.NoError(b, err)
		checkReport(b, rep, runs)
		var total int64
		for _, s := range stats.byCost() {
			total += s.total
		}
		b.Logf("%d queries read %d samples", len(stats.byCost()), total)
		for _, s := range stats.byCost() {
			b.Logf("%6.0f ms  peak %6d  total %9d samples  %s", s.d.Seconds()*1000, s.peak, s.total, s.expr)
			require.Less(b, s.peak, int64(serveMaxSamples), s.expr)
		}
	}

	reporter, err := accounting.New(opts(engine))
	require.NoError(b, err)
	// CPU time as well as wall time: on a shared machine the wall time
	// is mostly waiting for a core.
	var rep accounting.Report
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err = reporter.Report(context.Background(), q)
		require.NoError(b, err)
	}
	b.StopTimer()
	b.ReportMetric((processCPU(b)-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(len(rep.Runs)), "runs")
}

// processCPU is the CPU time the process has used (user and system, all
// threads: the engine, the TSDB's readers and the GC).
// acctGroups stands for the rule manager: the groups the report reads,
// as serve runs them.
type acctGroups []*promrules.Group

func (g acctGroups) RuleGroups() []*promrules.Group { return g }

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// checkReport refuses to time a report that does not find the week's
// runs with the figures they were generated with.
func checkReport(b *testing.B, rep accounting.Report, runs []acctRun) {
	require.Len(b, rep.Runs, acctRuns, "the report lists the generated runs and no system unit")
	want := map[string]acctRun{}
	for _, r := range runs {
		want[r.instance+" "+r.id] = r
	}
	for _, got := range rep.Runs {
		r, ok := want[got.Instance+" "+got.ID]
		require.True(b, ok, "unknown run %s %s", got.Instance, got.ID)
		require.Positive(b, got.GPUHours, got.Workload)
		require.InDelta(b, r.gpuHours(), got.GPUHours, 1e-9, got.Workload)
		require.False(b, got.Running, got.Workload)
		require.True(b, r.start.Equal(got.Start), "%s: start %s, want %s", got.Workload, got.Start, r.start)
		require.NotNil(b, got.End, got.Workload)
		require.True(b, r.end.Equal(*got.End), "%s: end %s, want %s", got.Workload, *got.End, r.end)
		require.Len(b, got.GPUs, len(r.gpus), got.Workload)
		require.NotNil(b, got.EnergyKWh, got.Workload)
		require.Positive(b, *got.EnergyKWh, got.Workload)
		require.InDelta(b, 2*r.end.Sub(r.start).Seconds(), got.CPUCoreSeconds, 1e-6, got.Workload)
		require.Equal(b, float64(81559*1048576), got.GPUMemoryTotalBytes, got.Workload)
		require.Equal(b, r.oomKills(), got.OOMKills, got.Workload)
		require.Equal(b, r.xids(), got.XIDErrors, got.Workload)
		require.Equal(b, r.alerts(), got.Alerts, got.Workload)
		require.Equal(b, r.class, got.Bottleneck, got.Workload)
	}
}

// statsEngine records each query's time and samples (peak: what
// --query.max-samples bounds).
type statsEngine struct {
	promql.QueryEngine
	mu      sync.Mutex
	queries []queryStats
}

type queryStats struct {
	expr        string
	d           time.Duration
	peak, total int64
}

func (e *statsEngine) NewInstantQuery(ctx context.Context, q storage.Queryable, opts promql.QueryOpts, qs string, ts time.Time) (promql.Query, error) {
	qry, err := e.QueryEngine.NewInstantQuery(ctx, q, opts, qs, ts)
	if err != nil {
		return nil, err
	}
	return &statsQuery{Query: qry, e: e, expr: qs}, nil
}

func (e *statsEngine) byCost() []queryStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := append([]queryStats(nil), e.queries...)
	sort.Slice(out, func(i, j int) bool { return out[i].d > out[j].d })
	return out
}

type statsQuery struct {
	promql.Query
	e    *statsEngine
	expr string
}

func (q *statsQuery) Exec(ctx context.Context) *promql.Result {
	start := time.Now()
	res := q.Query.Exec(ctx)
	s := queryStats{expr: q.expr, d: time.Since(start)}
	if st := q.Query.Stats(); st != nil && st.Samples != nil {
		s.peak, s.total = int64(st.Samples.PeakSamples), st.Samples.TotalSamples
	}
	q.e.mu.Lock()
	q.e.queries = append(q.e.queries, s)
	q.e.mu.Unlock()
	return res
}

// acctRun is one generated run: a cgroup of a workload on one node.
type acctRun struct {
	instance, id string
	name         string // cAdvisor's name label (docker only)
	identity     []workload.Label
	start, end   time.Time // on scrape times; end is the last sample
	gpus         []int
	class        string    // the bottleneck class of most of its minutes
	oomAt, xidAt time.Time // zero: none
	alert        string    // an alert that named it, "" for none
	smShare      float64
}

// minutes are the accounting group's evaluations while the run lived.
func (r acctRun) minutes() int {
	first := r.start.Truncate(acctInterval)
	if first.Before(r.start) {
		first = first.Add(acctInterval)
	}
	return int(r.end.Sub(first)/acctInterval) + 1
}

func (r acctRun) gpuHours() float64 {
	return float64(r.minutes()*len(r.gpus)) * acctInterval.Seconds() / 3600
}

func (r acctRun) oomKills() int {
	if r.oomAt.IsZero() {
		return 0
	}
	return 1
}

func (r acctRun) xids() int {
	if r.xidAt.IsZero() {
		return 0
	}
	return 2 * len(r.gpus) // two XIDs on each of its GPUs
}

func (r acctRun) alerts() []string {
	if r.alert == "" {
		return nil
	}
	return []string{r.alert}
}

func (r acctRun) labels(kv ...string) labels.Labels {
	b := labels.NewScratchBuilder(len(kv)/2 + 2 + len(r.identity))
	for i := 0; i < len(kv); i += 2 {
		b.Add(kv[i], kv[i+1])
	}
	b.Add("instance", r.instance)
	b.Add("id", r.id)
	for _, l := range r.identity {
		b.Add(l.Name, l.Value)
	}
	b.Sort()
	return b.Labels()
}

// acctRunsOf places the week's runs: node by turn, 1–24 h long on 1–8
// consecutive GPUs (GPUs may be shared, as under MPS or time-slicing),
// anywhere in the week, all finished 10 minutes or more before its end.
func acctRunsOf(end time.Time) []acctRun {
	rng := rand.New(rand.NewPCG(15, 5))
	begin := end.Add(-acctSpan)
	images := []string{"nvcr.io/nvidia/pytorch:24.10-py3", "vllm/vllm-openai:v0.6.4", "ghcr.io/example/trainer:1.8"}
	classes := []string{"compute-bound", "memory-bound", "input-bound", "idle"}
	runs := make([]acctRun, acctRuns)
	for i := range runs {
		d := time.Hour + time.Duration(rng.Int64N(int64(23*time.Hour)))
		d = d.Truncate(acctScrape)
		room := acctSpan - d - 10*time.Minute - 2*acctInterval
		start := begin.Add(2 * acctInterval).Add(time.Duration(rng.Int64N(int64(room)))).Truncate(acctScrape)
		r := acctRun{
			instance: fmt.Sprintf("node-%02d", i%acctNodes+1),
			start:    start,
			end:      start.Add(d),
			class:    classes[i%len(classes)],
			smShare:  0.2 + 0.7*rng.Float64(),
		}
		first, n := rng.IntN(acctGPUs), 1+rng.IntN(acctGPUs)
		for g := 0; g < n; g++ {
			r.gpus = append(r.gpus, (first+g)%acctGPUs)
		}
		sort.Ints(r.gpus)
		var md workload.Metadata
		if i%2 == 0 {
			r.name = fmt.Sprintf("train-%03d", i)
			r.id = fmt.Sprintf("/system.slice/docker-%016x%016x%016x%016x.scope", rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64())
			md = workload.Metadata{Name: r.name, Image: images[i%len(images)]}
			if i%6 == 0 {
				md.Labels = map[string]string{"com.docker.compose.project": "lab", "com.docker.compose.service": fmt.Sprintf("svc%d", i%5)}
			}
		} else {
			r.id = fmt.Sprintf("/slurm/uid_%d/job_%d/step_0/task_0", 1000+i%7, 40000+i)
		}
		r.identity = workload.Resolve(r.id, md).Labels()
		if i%17 == 0 {
			r.oomAt = r.start.Add(d / 2).Truncate(acctScrape)
		}
		if i%23 == 0 {
			r.xidAt = r.start.Add(d / 3).Truncate(acctInterval)
		}
		switch {
		case i%10 == 0:
			r.alert = "GPUHeldIdle"
		case i%15 == 0:
			r.alert = "ContainerMemoryNearLimit"
		}
		runs[i] = r
	}
	return runs
}

// accountingData opens (generating on first use) the week, with the
// hourly roll-up that the gpuscope.accounting.hourly group would have
// recorded over it.
func accountingData(b *testing.B) (*tsdb.DB, time.Time, []acctRun) {
	dir := filepath.Join(os.TempDir(), "gpuscope-bench-accounting-v3")
	opts := tsdb.DefaultOptions()
	opts.RetentionDuration = (15 * 24 * time.Hour).Milliseconds()
	opts.MaxBlockDuration = opts.RetentionDuration / 10
	stamp, rollupStamp := filepath.Join(dir, "complete"), filepath.Join(dir, "rollup-complete")
	var end time.Time
	if t, err := os.ReadFile(stamp); err == nil {
		end, err = time.Parse(time.RFC3339, string(t))
		require.NoError(b, err)
	} else {
		end = time.Now().UTC().Truncate(2 * time.Hour)
		require.NoError(b, os.RemoveAll(dir))
		require.NoError(b, os.MkdirAll(dir, 0o755))
		start := time.Now()
		n := generateAccounting(b, dir, end, acctRunsOf(end))
		b.Logf("generated %d samples in %s", n, time.Since(start).Round(time.Second))
		compactAccounting(b, dir, opts)
		require.NoError(b, os.WriteFile(stamp, []byte(end.Format(time.RFC3339)), 0o644))
	}
	if _, err := os.Stat(rollupStamp); err != nil {
		start := time.Now()
		n := generateRollup(b, dir, opts, end)
		b.Logf("rolled up %d samples in %s", n, time.Since(start).Round(time.Second))
		compactAccounting(b, dir, opts)
		require.NoError(b, os.WriteFile(rollupStamp, nil, 0o644))
	}
	db, err := tsdb.Open(dir, nil, nil, opts, nil)
	require.NoError(b, err)
	b.Cleanup(func() { db.Close() })
	return db, end, acctRunsOf(end)
}

// compactAccounting levels the blocks up as the appliance's compactor
// would have (and merges the roll-up's block into them).
func compactAccounting(b *testing.B, dir string, opts *tsdb.Options) {
	start := time.Now()
	db, err := tsdb.Open(dir, nil, nil, opts, nil)
	require.NoError(b, err)
	require.NoError(b, db.Compact(context.Background()))
	b.Logf("compacted to %d blocks in %s", len(db.Blocks()), time.Since(start).Round(time.Second))
	require.NoError(b, db.Close())
}

// generateRollup evaluates the real gpuscope.accounting.hourly rules over
// the week at 17 minutes past each hour (where a group's hash may place
// it) and writes what they record as one block.
func generateRollup(b *testing.B, dir string, opts *tsdb.Options, end time.Time) int {
	p := parser.NewParser(parser.Options{})
	var rs []*promrules.RecordingRule
	for _, f := range rules.Pack() {
		if f.Name != "accounting.yml" {
			continue
		}
		rgs, errs := rulefmt.Parse(f.Data, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
		require.Empty(b, errs)
		for _, g := range rgs.Groups {
			if g.Name != "gpuscope.accounting.hourly" {
				continue
			}
			require.Equal(b, model.Duration(time.Hour), g.Interval)
			for _, r := range g.Rules {
				expr, err := p.ParseExpr(r.Expr)
				require.NoError(b, err)
				rs = append(rs, promrules.NewRecordingRule(r.Record, expr, labels.EmptyLabels()))
			}
		}
	}
	require.NotEmpty(b, rs)
	db, err := tsdb.Open(dir, nil, nil, opts, nil)
	require.NoError(b, err)
	defer db.Close()
	engine, err := query.NewEngine(query.EngineOptions{DataDir: b.TempDir(), Timeout: serveTimeout, MaxSamples: serveMaxSamples, MaxConcurrency: 2, LookbackDelta: 5 * time.Minute})
	require.NoError(b, err)
	queryFunc := promrules.EngineQueryFunc(engine, db)

	bw, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), dir, (acctSpan + 2*time.Hour).Milliseconds())
	require.NoError(b, err)
	samples := 0
	for t := end.Add(-acctSpan).Add(17 * time.Minute); !t.After(end); t = t.Add(time.Hour) {
		app := bw.Appender(context.Background())
		for _, r := range rs {
			v, err := r.Eval(context.Background(), 0, t, queryFunc, nil, 0)
			require.NoError(b, err, r.Name())
			for _, s := range v {
				_, err := app.Append(0, s.Metric, t.UnixMilli(), s.F)
				require.NoError(b, err)
				samples++
			}
		}
		require.NoError(b, app.Commit())
	}
	_, err = bw.Flush(context.Background())
	require.NoError(b, err)
	require.NoError(b, bw.Close())
	return samples
}

// acctSeries is one generated series: a sample every `every` from `from`
// to `to` (inclusive), valued by `value`.
type acctSeries struct {
	ls    labels.Labels
	every time.Duration
	from  time.Time // first sample at or after
	to    time.Time // last sample at or before
	value func(t time.Time) float64
}

// generateAccounting writes the week as 2 h blocks, each filled in time
// order as scrapes and rule evaluations would.
func generateAccounting(b *testing.B, dir string, end time.Time, runs []acctRun) int {
	begin := end.Add(-acctSpan)
	var all []acctSeries
	add := func(ls labels.Labels, every time.Duration, from, to time.Time, v func(time.Time) float64) {
		all = append(all, acctSeries{ls: ls, every: every, from: from, to: to, value: v})
	}
	constant := func(v float64) func(time.Time) float64 { return func(time.Time) float64 { return v } }
	unix := func(t time.Time) float64 { return float64(t.Unix()) }
	step := func(at time.Time, before, after float64) func(time.Time) float64 {
		return func(t time.Time) float64 {
			if !at.IsZero() && !t.Before(at) {
				return after
			}
			return before
		}
	}
	wave := func(period time.Duration, phase, lo, hi float64) func(time.Time) float64 {
		return func(t time.Time) float64 {
			x := math.Sin(2*math.Pi*float64(t.Unix())/period.Seconds() + phase)
			return lo + (hi-lo)*(0.5+0.5*x)
		}
	}

	for n := 1; n <= acctNodes; n++ {
		inst := fmt.Sprintf("node-%02d", n)
		for g := 0; g < acctGPUs; g++ {
			add(labels.FromStrings("__name__", "DCGM_FI_DEV_FB_TOTAL", "instance", inst, "job", "node-gpu",
				"gpu", fmt.Sprint(g), "UUID", fmt.Sprintf("GPU-%02d-%d", n, g), "pci_bus_id", fmt.Sprintf("00000000:%02X:00.0", 0x18+g),
				"device", fmt.Sprintf("nvidia%d", g), "modelName", "NVIDIA H100 80GB HBM3", "Hostname", inst, "DCGM_FI_DRIVER_VERSION", "580.105.08"),
				acctScrape, begin, end, constant(81559))
		}
		units := []string{"/"}
		for u := 0; u < acctSystemUnits; u++ {
			units = append(units, fmt.Sprintf("/system.slice/unit-%d.service", u))
		}
		for _, id := range units {
			r := acctRun{instance: inst, id: id}
			r.identity = workload.Resolve(id, workload.Metadata{}).Labels()
			boot := begin.Add(-30 * 24 * time.Hour)
			add(r.labels("__name__", "container_last_seen", "job", "node-cadvisor"), acctScrape, begin, end, unix)
			add(r.labels("__name__", "container_start_time_seconds", "job", "node-cadvisor"), acctScrape, begin, end, constant(unix(boot)))
			add(r.labels("__name__", "container_oom_events_total", "job", "node-cadvisor"), acctScrape, begin, end, constant(0))
		}
	}
	for i, r := range runs {
		cadv := []string{"job", "node-cadvisor"}
		if r.name != "" {
			cadv = append(cadv, "name", r.name)
		}
		raw := func(name string, v func(time.Time) float64) {
			add(r.labels(append([]string{"__name__", name}, cadv...)...), acctScrape, r.start, r.end, v)
		}
		raw("container_last_seen", unix)
		raw("container_start_time_seconds", constant(unix(r.start)))
		raw("container_oom_events_total", step(r.oomAt, 0, 1))
		// Two cores all along: the kernel's counter from the cgroup's start.
		add(r.labels(append([]string{"__name__", "container_cpu_usage_seconds_total", "cpu", "total"}, cadv...)...), acctScrape, r.start, r.end,
			func(t time.Time) float64 { return 2 * t.Sub(r.start).Seconds() })

		rec := func(name string, v func(time.Time) float64, kv ...string) {
			add(r.labels(append([]string{"__name__", name}, kv...)...), acctInterval, r.start, r.end, v)
		}
		for _, g := range r.gpus {
			gl := []string{"gpu", fmt.Sprint(g), "UUID", fmt.Sprintf("GPU-%s-%d", r.instance[len("node-"):], g)}
			sm := wave(2*time.Hour, float64(i+g), r.smShare-0.15, r.smShare+0.1)
			rec("gpu_workload:gpu_held:present", constant(1), gl...)
			rec("gpu_workload:gpu_sm_share:ratio", sm, gl...)
			rec("gpu_workload:gpu_memory_used_bytes:max1m", wave(3*time.Hour, float64(i), 2e10, 7.5e10), gl...)
			rec("gpu_workload:gpu_power_watts:apportioned", func(t time.Time) float64 { return 100 + 600*sm(t) }, gl...)
			rec("gpu_workload:xid_errors_total:sum", step(r.xidAt, 3, 5), gl...) // the GPU had 3 XIDs before
			// The class of most minutes, after a first tenth input-bound.
			early := r.start.Add(r.end.Sub(r.start) / 10)
			cl := append([]string{"class", r.class}, gl...)
			if r.name != "" {
				cl = append(cl, "name", r.name)
			}
			add(r.labels(append([]string{"__name__", "gpu_workload:bottleneck:class"}, cl...)...), acctInterval, early, r.end, constant(1))
			if r.class != "input-bound" {
				cl[1] = "input-bound"
				add(r.labels(append([]string{"__name__", "gpu_workload:bottleneck:class"}, cl...)...), acctInterval, r.start, early.Add(-time.Second), constant(1))
			}
			if r.alert == "GPUHeldIdle" {
				from := r.start.Add(r.end.Sub(r.start) / 2).Truncate(acctInterval)
				add(r.labels("__name__", "ALERTS", "alertname", r.alert, "alertstate", "pending", "severity", "warning", gl[0], gl[1], gl[2], gl[3]),
					acctInterval, from, from.Add(30*time.Minute-time.Second), constant(1))
				add(r.labels("__name__", "ALERTS", "alertname", r.alert, "alertstate", "firing", "severity", "warning", gl[0], gl[1], gl[2], gl[3]),
					acctInterval, from.Add(30*time.Minute), from.Add(time.Hour), constant(1))
			}
		}
		rec("workload:cpu_usage_cores:rate1m", wave(time.Hour, float64(i), 0.5, 6))
		rec("workload:memory_working_set_bytes:max1m", wave(2*time.Hour, float64(i), 4e9, 3.2e10))
		if r.alert == "ContainerMemoryNearLimit" {
			from := r.start.Add(r.end.Sub(r.start) / 2).Truncate(acctInterval)
			add(r.labels("__name__", "ALERTS", "alertname", r.alert, "alertstate", "firing", "severity", "warning"),
				acctInterval, from, from.Add(20*time.Minute), constant(1))
		}
	}

	// By 2 h window (blocks as the head cuts them), then by time within
	// it across series, as scrapes would: a block writer's head takes
	// samples only near its newest one.
	samples := 0
	blockSize := 2 * time.Hour
	refs := make([]storage.SeriesRef, len(all))
	for w := begin; w.Before(end.Add(time.Second)); w = w.Add(blockSize) {
		wEnd := w.Add(blockSize)
		var active []int
		for i, s := range all {
			if s.from.Before(wEnd) && !s.to.Before(w) {
				active = append(active, i)
			}
		}
		if len(active) == 0 {
			continue
		}
		bw, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), dir, blockSize.Milliseconds())
		require.NoError(b, err)
		clear(refs)
		for t := w; t.Before(wEnd) && !t.After(end); t = t.Add(acctScrape) {
			app := bw.Appender(context.Background())
			for _, i := range active {
				s := &all[i]
				if t.Before(s.from) || t.After(s.to) || t.UnixMilli()%s.every.Milliseconds() != 0 {
					continue
				}
				ref, err := app.Append(refs[i], s.ls, t.UnixMilli(), s.value(t))
				require.NoError(b, err)
				refs[i] = ref
				samples++
			}
			require.NoError(b, app.Commit())
		}
		_, err = bw.Flush(context.Background())
		require.NoError(b, err)
		require.NoError(b, bw.Close())
	}
	return samples
}
