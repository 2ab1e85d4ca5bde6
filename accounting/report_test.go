package accounting

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"
)

// packFile is the built-in rule file whose gpuscope.accounting group the
// report integrates.
const packFile = "../rules/pack/accounting.yml"

// evalAccounting runs the real gpuscope.accounting group (and, before
// it, any extra rules) over st every interval from start to end, as the
// rule manager would, so that the report reads what gpuscope records.
func evalAccounting(t *testing.T, st storage.Storage, engine *promql.Engine, start, end time.Time, interval time.Duration, extra ...rules.Rule) {
	t.Helper()
	var times []time.Time
	for ts := start; !ts.After(end); ts = ts.Add(interval) {
		times = append(times, ts)
	}
	evalPackGroup(t, st, engine, accountingGroup, interval, times, extra...)
}

// evalPackGroup evaluates the recording rules of the pack's group name
// (its alerts have unit tests of their own in rules/pack/tests) at each
// of times, with the group's query offset, after any extra rules.
func evalPackGroup(t *testing.T, st storage.Storage, engine *promql.Engine, name string, interval time.Duration, times []time.Time, extra ...rules.Rule) {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	rgs, errs := rulefmt.ParseFile(packFile, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	rs := append([]rules.Rule(nil), extra...)
	var offset *time.Duration
	for _, g := range rgs.Groups {
		if g.Name != name {
			continue
		}
		if g.Interval != 0 {
			require.Equal(t, model.Duration(interval), g.Interval, "the group's interval, which the report is told")
		}
		if g.QueryOffset != nil {
			o := time.Duration(*g.QueryOffset)
			offset = &o
		}
		for _, r := range g.Rules {
			if r.Record == "" {
				continue
			}
			expr, err := p.ParseExpr(r.Expr)
			require.NoError(t, err)
			rs = append(rs, rules.NewRecordingRule(r.Record, expr, labels.EmptyLabels()))
		}
	}
	require.NotEmpty(t, rs)
	ctx := context.Background()
	g := rules.NewGroup(rules.GroupOptions{
		Name: name, File: packFile, Interval: interval, Rules: rs, QueryOffset: offset,
		Opts: &rules.ManagerOptions{
			QueryFunc:    rules.EngineQueryFunc(engine, st),
			AppendableV2: st,
			Queryable:    st,
			Context:      ctx,
			Logger:       slog.New(slog.DiscardHandler),
		},
	})
	for _, ts := range times {
		g.Eval(ctx, ts)
	}
	for _, r := range g.Rules() {
		require.NoError(t, r.LastError(), "rule %s", r.Name())
	}
}

// runningGroups stands for the rule manager: it runs the groups named,
// at their intervals, without rules (the report reads only names and
// intervals).
type runningGroups map[string]time.Duration

func (rg runningGroups) RuleGroups() []*rules.Group {
	var gs []*rules.Group
	for _, name := range slices.Sorted(maps.Keys(rg)) {
		gs = append(gs, rules.NewGroup(rules.GroupOptions{Name: name, File: packFile, Interval: rg[name]}))
	}
	return gs
}

func newReporter(t *testing.T, st storage.Storage, engine *promql.Engine, interval time.Duration, prices Prices) *Reporter {
	t.Helper()
	r, err := New(Options{
		Engine: engine, Queryable: st,
		Rules:  runningGroups{accountingGroup: interval},
		Prices: func() Prices { return prices },
	})
	require.NoError(t, err)
	return r
}

// TestReportNumbers: two hours of a workload alone on a GPU drawing a
// known power, and two workloads sharing another GPU, recorded by the
// real rules and integrated by the report, come out as GPU-hours within
// 1 % and energy within 2 % of what was put in.
func TestReportNumbers(t *testing.T) {
	const (
		steps  = 480 // 2 h of 15 s scrapes
		gib    = 1 << 30
		watts0 = 300.0
		watts1 = 200.0
	)
	// Counters in millijoules per 15 s scrape.
	load := fmt.Sprintf(`
load 15s
  gpuscope_gpu_container_processes{instance="n1", id="/docker/aaa", workload="train", runtime="docker", image="trainer:1", gpu="0", UUID="GPU-0"} _x240 1x%[1]d stale
  gpuscope_gpu_container_sm_utilization_percent{instance="n1", id="/docker/aaa", workload="train", runtime="docker", image="trainer:1", gpu="0", UUID="GPU-0"} _x240 80x%[1]d stale
  gpuscope_gpu_container_memory_used_bytes{instance="n1", id="/docker/aaa", workload="train", runtime="docker", image="trainer:1", gpu="0", UUID="GPU-0"} _x240 %[2]dx%[1]d stale
  gpuscope_gpu_container_processes{instance="n1", id="/docker/bbb", workload="big", runtime="docker", gpu="1", UUID="GPU-1"} _x240 1x%[1]d stale
  gpuscope_gpu_container_sm_utilization_percent{instance="n1", id="/docker/bbb", workload="big", runtime="docker", gpu="1", UUID="GPU-1"} _x240 60x%[1]d stale
  gpuscope_gpu_container_memory_used_bytes{instance="n1", id="/docker/bbb", workload="big", runtime="docker", gpu="1", UUID="GPU-1"} _x240 %[2]dx%[1]d stale
  gpuscope_gpu_container_processes{instance="n1", id="/docker/ccc", workload="small", runtime="docker", gpu="1", UUID="GPU-1"} _x240 1x%[1]d stale
  gpuscope_gpu_container_sm_utilization_percent{instance="n1", id="/docker/ccc", workload="small", runtime="docker", gpu="1", UUID="GPU-1"} _x240 20x%[1]d stale
  gpuscope_gpu_container_memory_used_bytes{instance="n1", id="/docker/ccc", workload="small", runtime="docker", gpu="1", UUID="GPU-1"} _x240 %[2]dx%[1]d stale
  DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{instance="n1", gpu="0", UUID="GPU-0"} 0+%[3]gx%[5]d
  DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{instance="n1", gpu="1", UUID="GPU-1"} 0+%[4]gx%[5]d
  DCGM_FI_DEV_FB_TOTAL{instance="n1", gpu="0", UUID="GPU-0"} 81559x%[5]d
  container_last_seen{instance="n1", id="/docker/aaa", workload="train", runtime="docker", image="trainer:1"} _x240 3600+15x%[1]d stale
  container_start_time_seconds{instance="n1", id="/docker/aaa", workload="train", runtime="docker", image="trainer:1"} _x240 3600x%[1]d stale
  container_cpu_usage_seconds_total{instance="n1", id="/docker/aaa", workload="train", runtime="docker", image="trainer:1", cpu="total"} _x240 0+7.5x%[1]d stale
  container_memory_working_set_bytes{instance="n1", id="/docker/aaa", workload="train", runtime="docker", image="trainer:1"} _x240 %[2]dx%[1]d stale
  container_oom_events_total{instance="n1", id="/docker/aaa", workload="train", runtime="docker", image="trainer:1"} _x240 3600x%[1]d stale
`, steps-1, 10*gib, watts0*15*1000, watts1*15*1000, 4*240)
	st := promqltest.LoadedStorage(t, load)
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 50_000_000)
	start := time.Unix(0, 0).UTC()
	end := start.Add(4 * time.Hour)
	evalAccounting(t, st, engine, start, end, time.Minute)

	rep, err := newReporter(t, st, engine, time.Minute, Prices{PerKWh: 0.30, Currency: "EUR", GramsCO2PerKWh: 400}).
		Report(context.Background(), Query{Start: start, End: end})
	require.NoError(t, err)
	byName := map[string]Run{}
	for _, r := range rep.Runs {
		byName[r.Workload] = r
	}
	require.Len(t, byName, 3, "%+v", rep.Runs)
	for _, r := range rep.Runs {
		t.Logf("%s: %.4f GPU-h, %.4f kWh, %.1f CPU-s", r.Workload, r.GPUHours, *r.EnergyKWh, r.CPUCoreSeconds)
	}

	train := byName["train"]
	require.InEpsilon(t, 2.0, train.GPUHours, 0.01, "GPU-hours of a workload alone on one GPU for 2 h")
	wantKWh := watts0 * 2 / 1000
	require.NotNil(t, train.EnergyKWh)
	require.InEpsilon(t, wantKWh, *train.EnergyKWh, 0.02, "kWh = ∫power dt")
	require.InEpsilon(t, wantKWh*0.30, *train.Cost, 0.02)
	require.Equal(t, "EUR", train.Currency)
	require.InEpsilon(t, wantKWh*400, *train.CO2Grams, 0.02)
	require.InEpsilon(t, 0.8, train.SMShareAvg, 1e-9)
	require.InEpsilon(t, 0.8, train.SMShareMax, 1e-9)
	require.InEpsilon(t, float64(10*gib), train.GPUMemoryMaxBytes, 1e-9)
	require.InEpsilon(t, 81559.0*1048576, train.GPUMemoryTotalBytes, 1e-9)
	require.Equal(t, []string{"0"}, train.GPUs)
	require.InEpsilon(t, 0.5*7200, train.CPUCoreSeconds, 0.02, "half a core for 2 h")
	require.InEpsilon(t, float64(10*gib), train.MemoryMaxBytes, 1e-9)
	require.False(t, train.Running)
	require.NotNil(t, train.End)
	require.Equal(t, start.Add(time.Hour), train.Start)
	require.InDelta(t, 7200, train.DurationSeconds, 15, "from the container's start to its last sighting")
	require.Equal(t, "trainer:1", train.Image)

	// GPU 1's energy split 3:1 by SM share.
	big, small := byName["big"], byName["small"]
	require.InEpsilon(t, 2.0, big.GPUHours, 0.01)
	require.InEpsilon(t, 2.0, small.GPUHours, 0.01)
	require.InEpsilon(t, watts1*2/1000*0.75, *big.EnergyKWh, 0.02)
	require.InEpsilon(t, watts1*2/1000*0.25, *small.EnergyKWh, 0.02)
	require.InEpsilon(t, 3.0, *big.EnergyKWh / *small.EnergyKWh, 1e-6, "split by SM share")
	requireOneWorkload(t, newReporter(t, st, engine, time.Minute, Prices{PerKWh: 0.30, Currency: "EUR", GramsCO2PerKWh: 400}), Query{Start: start, End: end}, rep)
}

// requireOneWorkload: the report of one workload (Query.Workload) is
// that workload's row of the whole report, for each workload in it, and
// nothing for a workload that does not exist.
func requireOneWorkload(t *testing.T, r *Reporter, q Query, all Report) {
	t.Helper()
	for _, want := range all.Runs {
		t.Run("workload="+want.Workload, func(t *testing.T) {
			q := q
			q.Workload = want.Workload
			rep, err := r.Report(context.Background(), q)
			require.NoError(t, err)
			require.Equal(t, []Run{want}, rep.Runs)
		})
	}
	q.Workload = "no-such-workload"
	rep, err := r.Report(context.Background(), q)
	require.NoError(t, err)
	require.Empty(t, rep.Runs)
}

// TestReportEvents: what happened to a run while it ran (XIDs on its
// GPU, OOM kills in its cgroup, alerts that named it, its GPU's
// bottleneck class) is in its row; a run still there at the end is
// running; a systemd unit is listed only when it held a GPU, or for All.
func TestReportEvents(t *testing.T) {
	st := promqltest.LoadedStorage(t, `
load 15s
  gpuscope_gpu_container_processes{instance="n1", id="/docker/aaa", workload="infer", runtime="docker", gpu="0", UUID="GPU-0"} _x40 1x200
  gpuscope_gpu_container_sm_utilization_percent{instance="n1", id="/docker/aaa", workload="infer", runtime="docker", gpu="0", UUID="GPU-0"} _x40 30x200
  gpuscope_gpu_container_processes{instance="n1", id="/system.slice/render.service", workload="render.service", runtime="systemd", gpu="1", UUID="GPU-1"} 1x240
  gpuscope_gpu_xid_errors_total{instance="n1", gpu="0", UUID="GPU-0", err_code="13"} _x100 1x20 2x120
  gpuscope_gpu_xid_errors_total{instance="n1", gpu="0", UUID="GPU-0", err_code="79"} _x200 1x40
  gpuscope_gpu_xid_errors_total{instance="n1", gpu="1", UUID="GPU-1", err_code="48"} 1x10 5x230
  gpu_workload:bottleneck:class{instance="n1", id="/docker/aaa", workload="infer", runtime="docker", gpu="0", UUID="GPU-0", class="compute-bound"} _x40 1x60
  gpu_workload:bottleneck:class{instance="n1", id="/docker/aaa", workload="infer", runtime="docker", gpu="0", UUID="GPU-0", class="input-bound"} _x101 1x139
  container_last_seen{instance="n1", id="/docker/aaa", workload="infer", runtime="docker"} _x40 600+15x200
  container_start_time_seconds{instance="n1", id="/docker/aaa", workload="infer", runtime="docker"} _x40 600x200
  container_oom_events_total{instance="n1", id="/docker/aaa", workload="infer", runtime="docker"} _x40 0x50 1x50 3x100
  container_last_seen{instance="n1", id="/system.slice/cron.service", workload="cron.service", runtime="systemd"} 0+15x240
  container_start_time_seconds{instance="n1", id="/system.slice/cron.service", workload="cron.service", runtime="systemd"} 0x240
  ALERTS{instance="n1", id="/docker/aaa", workload="infer", alertname="ContainerOOMKilled", alertstate="firing"} _x100 1x50
  ALERTS{instance="n1", id="/docker/aaa", workload="infer", alertname="GPUHeldIdle", alertstate="pending"} _x100 1x50
  ALERTS{instance="n1", gpu="0", alertname="GPUXIDErrorCritical", alertstate="firing"} _x200 1x40
  ALERTS{instance="n1", gpu="1", alertname="GPUTemperatureHigh", alertstate="firing"} _x100 1x140
`)
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 50_000_000)
	start := time.Unix(0, 0).UTC()
	end := start.Add(time.Hour)
	evalAccounting(t, st, engine, start, end, time.Minute)
	r := newReporter(t, st, engine, time.Minute, Prices{})

	rep, err := r.Report(context.Background(), Query{Start: start, End: end})
	require.NoError(t, err)
	require.Len(t, rep.Runs, 2, "the docker container and the GPU-holding unit, not cron: %+v", rep.Runs)
	infer, render := rep.Runs[0], rep.Runs[1]
	require.Equal(t, "infer", infer.Workload, "newest first")
	require.Equal(t, "render.service", render.Workload)

	require.True(t, infer.Running)
	require.Nil(t, infer.End)
	require.Equal(t, start.Add(10*time.Minute), infer.Start)
	require.InDelta(t, 50*60, infer.DurationSeconds, 1, "running: until the report's end")
	require.Equal(t, 3, infer.OOMKills)
	require.Equal(t, 3, infer.XIDErrors, "two XID 13 and one XID 79 while it held GPU 0")
	require.Equal(t, []string{"ContainerOOMKilled", "GPUXIDErrorCritical"}, infer.Alerts, "firing alerts that named its cgroup, and those that began on its GPU while it held it; pending ones are not its")
	require.Equal(t, []string{"GPUTemperatureHigh"}, render.Alerts, "the alert on its GPU, not the other's")
	require.Equal(t, "input-bound", infer.Bottleneck, "the class its GPU was in longest while it held it")
	require.Nil(t, infer.Cost, "no price, no cost")
	require.Nil(t, infer.CO2Grams)
	require.WithinDuration(t, start, render.Start, time.Minute, "a run cAdvisor does not know starts at its first GPU sample")
	require.Equal(t, 4, render.XIDErrors, "XID 48: 1 when it was first seen holding GPU 1, 5 at the end")
	requireOneWorkload(t, r, Query{Start: start, End: end}, rep)
}

// TestReportRunKilledByXID: a job killed by an XID (the demo's xid
// scenario, the newcomer trial's M1) has the XID and the GPU's alerts in
// its row although its last sample holding the GPU came before them, and
// an end at that sample, so its duration does not grow with the report's
// end (m1). The job that starts on the GPU later is charged neither the
// XID nor the alerts still firing then.
func TestReportRunKilledByXID(t *testing.T) {
	// /crashy holds GPU 7 until 4m45s; XID 79 is counted from 5m, and
	// GPUXIDErrorCritical and GPUFellOffBus fire from 5m30s for an hour.
	// /next starts on GPU 7 at 20m. cAdvisor knows neither (the sim's
	// containers are no cgroups).
	st := promqltest.LoadedStorage(t, `
load 15s
  gpuscope_gpu_container_processes{instance="n1", id="/demo/crashy", workload="/demo/crashy", runtime="cgroup", gpu="7", UUID="GPU-7"} 1x19 stale
  gpuscope_gpu_container_processes{instance="n1", id="/demo/next", workload="/demo/next", runtime="cgroup", gpu="7", UUID="GPU-7"} _x80 1x200
  gpuscope_gpu_xid_errors_total{instance="n1", gpu="7", UUID="GPU-7", err_code="79"} _x20 1x260
  ALERTS{instance="n1", gpu="7", UUID="GPU-7", err_code="79", alertname="GPUXIDErrorCritical", alertstate="firing"} _x22 1x240
  ALERTS{instance="n1", gpu="7", alertname="GPUFellOffBus", alertstate="firing"} _x22 1x240
`)
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 50_000_000)
	start := time.Unix(0, 0).UTC()
	evalAccounting(t, st, engine, start, start.Add(time.Hour), time.Minute)
	r := newReporter(t, st, engine, time.Minute, Prices{})

	var durations []float64
	for _, end := range []time.Time{start.Add(30 * time.Minute), start.Add(50 * time.Minute)} {
		rep, err := r.Report(context.Background(), Query{Start: start.Add(-time.Minute), End: end})
		require.NoError(t, err)
		require.Len(t, rep.Runs, 2, "%+v", rep.Runs)
		next, crashy := rep.Runs[0], rep.Runs[1]
		require.Equal(t, "/demo/crashy", crashy.ID)
		require.Equal(t, 1, crashy.XIDErrors, "the XID that killed it, counted after its last sample")
		require.Equal(t, []string{"GPUFellOffBus", "GPUXIDErrorCritical"}, crashy.Alerts)
		require.False(t, crashy.Running)
		require.NotNil(t, crashy.End, "a run that is not running has an end")
		require.Equal(t, start.Add(4*time.Minute), *crashy.End, "its last sample holding the GPU")
		require.Equal(t, start, crashy.Start)
		durations = append(durations, crashy.DurationSeconds)

		require.Equal(t, "/demo/next", next.ID)
		require.True(t, next.Running)
		require.Nil(t, next.End)
		require.Zero(t, next.XIDErrors, "the XID came before it")
		require.Empty(t, next.Alerts, "the alerts began before it")
	}
	require.Equal(t, []float64{240, 240}, durations, "a fixed duration, whatever the report's end")
}

// TestReportAll: All lists every cgroup, systemd units without a GPU
// included.
func TestReportAll(t *testing.T) {
	st := promqltest.LoadedStorage(t, `
load 15s
  container_last_seen{instance="n1", id="/system.slice/cron.service", workload="cron.service", runtime="systemd"} 0+15x40
  container_start_time_seconds{instance="n1", id="/system.slice/cron.service", workload="cron.service", runtime="systemd"} 0x40
  container_last_seen{instance="n1", id="/docker/abc", workload="docker-abc", runtime="docker"} 0+15x10
  container_last_seen{instance="n1", id="/docker/abc", workload="web", runtime="docker", image="nginx"} _x10 150+15x30
`)
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 50_000_000)
	start := time.Unix(0, 0).UTC()
	r := newReporter(t, st, engine, time.Minute, Prices{})
	rep, err := r.Report(context.Background(), Query{Start: start, End: start.Add(10 * time.Minute)})
	require.NoError(t, err)
	require.Len(t, rep.Runs, 1)
	require.Equal(t, "web", rep.Runs[0].Workload, "the name the runtime gave once it knew the container, not the short id of its first scrape")
	require.Equal(t, "nginx", rep.Runs[0].Image)
	rep, err = r.Report(context.Background(), Query{Start: start, End: start.Add(10 * time.Minute), All: true})
	require.NoError(t, err)
	require.Len(t, rep.Runs, 2)
}

// TestReportBadInput: what each bad query gets.
func TestReportBadInput(t *testing.T) {
	st := promqltest.LoadedStorage(t, "load 15s\n  up 1x10\n")
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 50_000_000)
	r := newReporter(t, st, engine, time.Minute, Prices{})
	at := time.Unix(3600, 0).UTC()
	_, err := r.Report(context.Background(), Query{Start: at, End: at})
	require.EqualError(t, err, "empty range: start 1970-01-01T01:00:00Z is not at least a second before end 1970-01-01T01:00:00Z")
	_, err = r.Report(context.Background(), Query{Start: at.Add(time.Hour), End: at})
	require.EqualError(t, err, "empty range: start 1970-01-01T02:00:00Z is not at least a second before end 1970-01-01T01:00:00Z")
	rep, err := r.Report(context.Background(), Query{Start: at.Add(-time.Hour), End: at})
	require.NoError(t, err)
	require.Empty(t, rep.Runs, "a range with no workloads is an empty report, not an error")
	require.NotNil(t, rep.Runs, "and encodes as [], not null")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = r.Report(ctx, Query{Start: at.Add(-time.Hour), End: at})
	require.ErrorIs(t, err, context.Canceled)

	_, err = New(Options{Engine: engine, Queryable: st})
	require.EqualError(t, err, "accounting: the rule manager is required")

	off, err := New(Options{Engine: engine, Queryable: st, Rules: runningGroups{rollupGroup: time.Hour}})
	require.NoError(t, err)
	rep, err = off.Report(context.Background(), Query{Start: at.Add(-time.Hour), End: at})
	require.NoError(t, err)
	require.Len(t, rep.Warnings, 1)
	require.Contains(t, rep.Warnings[0], "gpuscope.accounting is disabled")
}

// TestConfigValidate: what each bad accounting setting gets.
func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{}.Validate())
	require.NoError(t, Config{PricePerKWh: 0.3, Currency: "€", GramsCO2PerKWh: 380}.Validate())
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{PricePerKWh: -0.3}, "accounting.price_per_kwh: -0.3 is not a price or amount per kWh (0 or more, e.g. 0.30)"},
		{Config{GramsCO2PerKWh: math.Inf(1)}, "accounting.grams_co2_per_kwh: +Inf is not a price or amount per kWh (0 or more, e.g. 380)"},
		{Config{Currency: "EUR\n"}, `accounting.currency: "EUR\n" has a control character (a code or symbol, e.g. EUR)`},
		{Config{Currency: "Euros of the European Union"}, `accounting.currency: "Euros of the European Union" is longer than 16 bytes (a code or symbol, e.g. EUR)`},
	} {
		require.EqualError(t, tc.c.Validate(), tc.want)
	}
}

// TestGroups: the report takes its intervals from the groups as they run,
// and the time scale only while gpuscope.accounting does not.
func TestGroups(t *testing.T) {
	for _, tc := range []struct {
		name    string
		running runningGroups
		scale   func() float64
		want    accountingGroups
	}{
		{"both", runningGroups{accountingGroup: time.Minute, rollupGroup: time.Hour}, nil,
			accountingGroups{interval: time.Minute, enabled: true, rollup: time.Hour}},
		{"scaled", runningGroups{accountingGroup: time.Second, rollupGroup: time.Minute, "other": time.Hour}, func() float64 { return 60 },
			accountingGroups{interval: time.Second, enabled: true, rollup: time.Minute}},
		{"no roll-up", runningGroups{accountingGroup: 2 * time.Second}, func() float64 { return 60 },
			accountingGroups{interval: 2 * time.Second, enabled: true}},
		{"none", runningGroups{}, nil, accountingGroups{interval: time.Minute}},
		{"none, scaled", runningGroups{rollupGroup: time.Minute}, func() float64 { return 60 },
			accountingGroups{interval: time.Second, rollup: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := promqltest.LoadedStorage(t, "")
			r, err := New(Options{Engine: promqltest.NewTestEngine(t, false, 5*time.Minute, 1000), Queryable: st, Rules: tc.running, TimeScale: tc.scale})
			require.NoError(t, err)
			require.Equal(t, tc.want, r.groups())
		})
	}

	// *rules.Manager, as serve passes it, lists the groups it runs.
	m := rules.NewManager(&rules.ManagerOptions{Context: context.Background(), Logger: slog.New(slog.DiscardHandler)})
	r, err := New(Options{Engine: promqltest.NewTestEngine(t, false, 5*time.Minute, 1000), Queryable: promqltest.LoadedStorage(t, ""), Rules: m})
	require.NoError(t, err)
	require.Equal(t, accountingGroups{interval: time.Minute}, r.groups(), "no groups loaded")
}

// TestPackInterval: the interval the report falls back on is the pack's.
func TestPackInterval(t *testing.T) {
	rgs, errs := rulefmt.ParseFile(packFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	var names []string
	for _, g := range rgs.Groups {
		names = append(names, g.Name)
		if g.Name == accountingGroup {
			require.Equal(t, model.Duration(accountingInterval), g.Interval)
		}
	}
	require.Subset(t, names, []string{accountingGroup, rollupGroup})
}
