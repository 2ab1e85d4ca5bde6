package accounting

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"
)

// evalRollup runs the real gpuscope.accounting.hourly group at each of
// times, as the rule manager would at its interval, with its query
// offset: what it records is stamped five minutes before each time.
func evalRollup(t *testing.T, st storage.Storage, engine *promql.Engine, times ...time.Time) {
	t.Helper()
	evalPackGroup(t, st, engine, rollupGroup, time.Hour, times)
}

// steps is a promqltest series that is blank for `from` 15 s steps,
// then has `values` (a promqltest expansion), then goes stale.
func steps(from int, values string) string {
	if from == 0 {
		return values + " stale"
	}
	return fmt.Sprintf("_x%d %s stale", from, values)
}

// queryLog records the queries an engine ran.
type queryLog struct {
	promql.QueryEngine
	mu      sync.Mutex
	queries []string
}

func (l *queryLog) NewInstantQuery(ctx context.Context, q storage.Queryable, opts promql.QueryOpts, qs string, ts time.Time) (promql.Query, error) {
	l.mu.Lock()
	l.queries = append(l.queries, qs)
	l.mu.Unlock()
	return l.QueryEngine.NewInstantQuery(ctx, q, opts, qs, ts)
}

// TestReportRollup: a report that reads the hourly roll-up for its whole
// hours and the minute and cAdvisor series at its edges says exactly
// what the report from the minute series alone says, for ranges aligned
// with the hours or not, starting before runs or inside them, and with
// an hour the group missed (the appliance down across its evaluation).
func TestReportRollup(t *testing.T) {
	const hour = 240 // 15 s steps
	docker := `instance="n1", id="/docker/aaa", workload="train", runtime="docker", image="trainer:1"`
	big := `instance="n1", id="/docker/bbb", workload="big", runtime="docker"`
	small := `instance="n1", id="/docker/ccc", workload="small", runtime="docker"`
	job := `instance="n2", id="/slurm/uid_1000/job_7/step_0/task_0", workload="job7", runtime="slurm", slurm_job_id="7"`
	unit := `instance="n1", id="/system.slice/cron.service", workload="cron.service", runtime="systemd"`
	var b strings.Builder
	b.WriteString("load 15s\n")
	line := func(metric, ls, series string) { fmt.Fprintf(&b, "  %s{%s} %s\n", metric, ls, series) }
	gpu := func(ls, g string) string { return ls + `, gpu="` + g + `", UUID="GPU-` + g + `"` }
	// train: GPU 0 from 0:30 to 6:10; an OOM kill at 2:00, XIDs at 3:00.
	from, n := hour/2, 5*hour+hour/6
	line("gpuscope_gpu_container_processes", gpu(docker, "0"), steps(from, fmt.Sprintf("1x%d", n)))
	line("gpuscope_gpu_container_sm_utilization_percent", gpu(docker, "0"), steps(from, fmt.Sprintf("10+0.05x%d", n)))
	line("gpuscope_gpu_container_memory_used_bytes", gpu(docker, "0"), steps(from, fmt.Sprintf("1e9+1e6x%d", n)))
	line("container_last_seen", docker, steps(from, fmt.Sprintf("1800+15x%d", n)))
	line("container_start_time_seconds", docker, steps(from, fmt.Sprintf("1800x%d", n)))
	line("container_cpu_usage_seconds_total", docker+`, cpu="total"`, steps(from, fmt.Sprintf("0+7.5x%d", n)))
	line("container_memory_working_set_bytes", docker, steps(from, fmt.Sprintf("2e9+1e5x%d", n)))
	line("container_oom_events_total", docker, steps(from, fmt.Sprintf("0x%d 1x%d", 3*hour/2, n-3*hour/2-1)))
	line("gpu_workload:bottleneck:class", gpu(docker, "0")+`, class="compute-bound"`, steps(from, fmt.Sprintf("1x%d", 2*hour)))
	line("gpu_workload:bottleneck:class", gpu(docker, "0")+`, class="input-bound"`, steps(from+2*hour+1, fmt.Sprintf("1x%d", n-2*hour-1)))
	line("gpuscope_gpu_xid_errors_total", `instance="n1", gpu="0", UUID="GPU-0", err_code="13"`, fmt.Sprintf("0x%d 2x%d", 3*hour, 5*hour))
	// big and small share GPU 1: big 1:00–7:45, small 2:20–4:00.
	from, n = hour, 6*hour+3*hour/4
	line("gpuscope_gpu_container_processes", gpu(big, "1"), steps(from, fmt.Sprintf("1x%d", n)))
	line("gpuscope_gpu_container_sm_utilization_percent", gpu(big, "1"), steps(from, fmt.Sprintf("60-0.01x%d", n)))
	line("container_last_seen", big, steps(from, fmt.Sprintf("3600+15x%d", n)))
	line("container_start_time_seconds", big, steps(from, fmt.Sprintf("3600x%d", n)))
	line("container_cpu_usage_seconds_total", big+`, cpu="total"`, steps(from, fmt.Sprintf("0+3x%d", n)))
	from, n = 2*hour+hour/3, hour+2*hour/3
	line("gpuscope_gpu_container_processes", gpu(small, "1"), steps(from, fmt.Sprintf("1x%d", n)))
	line("gpuscope_gpu_container_sm_utilization_percent", gpu(small, "1"), steps(from, fmt.Sprintf("20x%d", n)))
	line("container_last_seen", small, steps(from, fmt.Sprintf("8400+15x%d", n)))
	line("container_start_time_seconds", small, steps(from, fmt.Sprintf("8400x%d", n)))
	// job7 on n2 all along, started before the data (its counters too).
	line("gpuscope_gpu_container_processes", gpu(job, "0"), fmt.Sprintf("1x%d", 8*hour))
	line("gpuscope_gpu_container_sm_utilization_percent", gpu(job, "0"), fmt.Sprintf("90x%d", 8*hour))
	line("container_last_seen", job, fmt.Sprintf("0+15x%d", 8*hour))
	line("container_start_time_seconds", job, fmt.Sprintf("-600x%d", 8*hour))
	line("container_cpu_usage_seconds_total", job+`, cpu="total"`, fmt.Sprintf("500+14x%d", 8*hour))
	line("container_oom_events_total", job, fmt.Sprintf("2x%d 3x%d", 4*hour, 4*hour))
	line("container_last_seen", unit, fmt.Sprintf("0+15x%d", 8*hour))
	line("container_start_time_seconds", unit, fmt.Sprintf("-3600x%d", 8*hour))
	for _, g := range []string{"0", "1"} {
		for _, inst := range []string{"n1", "n2"} {
			ls := `instance="` + inst + `", gpu="` + g + `", UUID="GPU-` + g + `"`
			line("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", ls, fmt.Sprintf("0+%dx%d", 4500+int(g[0]-'0')*1500, 8*hour))
			line("DCGM_FI_DEV_FB_TOTAL", ls, fmt.Sprintf("81559x%d", 8*hour))
		}
	}

	st := promqltest.LoadedStorage(t, b.String())
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 50_000_000)
	t0 := time.Unix(0, 0).UTC()
	evalAccounting(t, st, engine, t0, t0.Add(8*time.Hour), time.Minute)
	// The hourly group at 22 minutes past, as a group's hash may place it,
	// five minutes behind (its samples stamped 17 past); 4:22 missed.
	var evals []time.Time
	for h := 0; h < 8; h++ {
		if h != 4 {
			evals = append(evals, t0.Add(time.Duration(h)*time.Hour+22*time.Minute))
		}
	}
	evalRollup(t, st, engine, evals...)

	log := &queryLog{QueryEngine: engine}
	minutes := newReporter(t, st, engine, time.Minute, Prices{PerKWh: 0.3})
	hourly, err := New(Options{
		Engine: log, Queryable: st,
		Rules:  runningGroups{accountingGroup: time.Minute, rollupGroup: time.Hour},
		Prices: func() Prices { return Prices{PerKWh: 0.3} },
	})
	require.NoError(t, err)

	at := func(h, m int) time.Time { return t0.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	for _, rng := range []struct{ start, end time.Time }{
		{at(0, 0), at(8, 0)},
		{at(0, 5), at(7, 50)},
		{at(2, 0), at(8, 0)},  // starts inside train's, big's and job7's runs
		{at(2, 30), at(5, 0)}, // across the missed hour
		{at(1, 17), at(3, 17)},
		{at(0, 0), at(0, 40)}, // under an hour: no roll-up
		{at(3, 40), at(6, 20)},
	} {
		t.Run(rng.start.Format("15:04")+"-"+rng.end.Format("15:04"), func(t *testing.T) {
			q := Query{Start: rng.start, End: rng.end}
			want, err := minutes.Report(context.Background(), q)
			require.NoError(t, err)
			require.NotEmpty(t, want.Runs)
			got, err := hourly.Report(context.Background(), q)
			require.NoError(t, err)
			require.Len(t, got.Runs, len(want.Runs))
			for i := range want.Runs {
				w, g := want.Runs[i], got.Runs[i]
				require.Equal(t, w.Workload, g.Workload)
				require.InDelta(t, w.GPUHours, g.GPUHours, 1e-9, w.Workload)
				require.InDelta(t, w.SMShareAvg, g.SMShareAvg, 1e-9, w.Workload)
				require.InDelta(t, *w.EnergyKWh, *g.EnergyKWh, 1e-9, w.Workload)
				require.InDelta(t, *w.Cost, *g.Cost, 1e-9, w.Workload)
				require.InDelta(t, w.CPUCoreSeconds, g.CPUCoreSeconds, 1e-6, w.Workload)
				// The rest is exact: maxima, minima, counts, times.
				w.GPUHours, w.SMShareAvg, w.EnergyKWh, w.Cost, w.CPUCoreSeconds = 0, 0, nil, nil, 0
				g.GPUHours, g.SMShareAvg, g.EnergyKWh, g.Cost, g.CPUCoreSeconds = 0, 0, nil, nil, 0
				require.Equal(t, w, g)
			}
		})
	}
	rolled := 0
	for _, q := range log.queries {
		if strings.Contains(q, ":sum1h") {
			rolled++
		}
	}
	require.Positive(t, rolled, "the reports read the hourly sums")

	// The segments of the whole 8 h: minutes up to the first whole hour
	// (0:17), the hours to 3:17, the missed hour's minutes, the hours to
	// 7:17, minutes to the end.
	e := &evaluator{r: hourly, ctx: context.Background()}
	segs := e.segments(at(0, 0), at(8, 0), time.Hour)
	require.NoError(t, e.err)
	require.Equal(t, []segment{
		{end: at(0, 17), length: 17 * time.Minute},
		{first: at(1, 17), end: at(3, 17), length: 3 * time.Hour, hourly: true},
		{end: at(4, 17), length: time.Hour},
		{first: at(5, 17), end: at(7, 17), length: 3 * time.Hour, hourly: true},
		{end: at(8, 0), length: 43 * time.Minute},
	}, segs)
}
