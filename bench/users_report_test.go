package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	promrules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/accounting"
)

// Issue 28's goal: a per-user report over 30 days of 16 nodes × 8 GPUs
// and 200 users in under 2 s, using the hourly roll-up.
const (
	usersSpan  = 30 * 24 * time.Hour
	usersCount = 200
)

// usersRun is one job of the 30 days: one GPU, one user, whole hours.
type usersRun struct {
	node, gpu, user int
	job             int
	first, hours    int // its first hour (index from the span's start) and how many
	sm              float64
}

// usersRuns fills every GPU of the 16 nodes with jobs back to back, each
// 2 to 30 hours long, of a user drawn from the 200, with a gap of 0 to 3
// hours between jobs, from the span's second hour (the first is read
// from the minute series, which are not written) to its last.
func usersRuns() []usersRun {
	rng := rand.New(rand.NewPCG(28, 2))
	hours := int(usersSpan / time.Hour)
	var runs []usersRun
	job := 100000
	for n := 1; n <= acctNodes; n++ {
		for g := 0; g < acctGPUs; g++ {
			for h := 1 + rng.IntN(4); h < hours-1; {
				d := min(2+rng.IntN(29), hours-1-h)
				runs = append(runs, usersRun{node: n, gpu: g, user: rng.IntN(usersCount), job: job, first: h, hours: d, sm: 0.03 + 0.9*rng.Float64()})
				job++
				h += d + rng.IntN(4)
			}
		}
	}
	return runs
}

// labels are the run's identity as the roll-up's per-workload series
// carry it (a Slurm job of its user, named from passwd).
func (r usersRun) labels(name string, kv ...string) labels.Labels {
	uid := 1000 + r.user
	b := labels.NewScratchBuilder(12)
	b.Add("__name__", name)
	b.Add("instance", fmt.Sprintf("node-%02d", r.node))
	b.Add("id", fmt.Sprintf("/slurm/uid_%d/job_%d/step_0/task_0", uid, r.job))
	b.Add("workload", fmt.Sprintf("job %d.0", r.job))
	b.Add("runtime", "slurm")
	b.Add("slurm_job_id", fmt.Sprint(r.job))
	b.Add("slurm_step", "0")
	b.Add("slurm_user", fmt.Sprintf("user%03d", r.user))
	b.Add("user", fmt.Sprintf("user%03d", r.user))
	for i := 0; i < len(kv); i += 2 {
		b.Add(kv[i], kv[i+1])
	}
	b.Sort()
	return b.Labels()
}

// usersData writes (on first use, into $TMPDIR/gpuscope-bench-users-v2)
// the 30 days as the gpuscope.accounting.hourly group records them: each
// run's hourly sums, maxima and minima, stamped 17 minutes past each
// hour, with the group's heartbeat. The minute series are not written:
// the report reads them only at the range's edges, which are placed at
// the roll-up's stamps, as a range ending at an hour's evaluation is.
func usersData(b *testing.B) (*tsdb.DB, time.Time, []usersRun) {
	dir := filepath.Join(os.TempDir(), "gpuscope-bench-users-v2")
	stamp := filepath.Join(dir, "complete")
	runs := usersRuns()
	opts := tsdb.DefaultOptions()
	opts.RetentionDuration = (60 * 24 * time.Hour).Milliseconds()
	opts.MaxBlockDuration = opts.RetentionDuration / 10
	var end time.Time
	if t, err := os.ReadFile(stamp); err == nil {
		end, err = time.Parse(time.RFC3339, string(t))
		require.NoError(b, err)
	} else {
		end = time.Now().UTC().Truncate(time.Hour).Add(-time.Hour + 17*time.Minute)
		require.NoError(b, os.RemoveAll(dir))
		require.NoError(b, os.MkdirAll(dir, 0o755))
		start := time.Now()
		series, samples := writeUsersRollup(b, dir, end, runs)
		b.Logf("wrote %d series, %d samples in %s", series, samples, time.Since(start).Round(time.Second))
		compactAccounting(b, dir, opts)
		require.NoError(b, os.WriteFile(stamp, []byte(end.Format(time.RFC3339)), 0o644))
	}
	db, err := tsdb.Open(dir, nil, nil, opts, nil)
	require.NoError(b, err)
	b.Cleanup(func() { db.Close() })
	return db, end, runs
}

func writeUsersRollup(b *testing.B, dir string, end time.Time, runs []usersRun) (series, samples int) {
	begin := end.Add(-usersSpan)
	at := func(h int) int64 { return begin.Add(time.Duration(h+1) * time.Hour).UnixMilli() } // hour h's stamp
	bw, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), dir, (usersSpan + 2*time.Hour).Milliseconds())
	require.NoError(b, err)
	app := bw.Appender(context.Background())
	add := func(ls labels.Labels, from, n int, v func(h int) float64) {
		series++
		for h := from; h < from+n; h++ {
			_, err := app.Append(0, ls, at(h), v(h))
			require.NoError(b, err)
			samples++
		}
	}
	hours := int(usersSpan / time.Hour)
	add(labels.FromStrings("__name__", "gpuscope:accounting_rollup:present"), 0, hours, func(int) float64 { return 1 })
	for n := 1; n <= acctNodes; n++ {
		for g := 0; g < acctGPUs; g++ {
			add(labels.FromStrings("__name__", "gpu:dcgm_fi_dev_fb_total:max1h", "instance", fmt.Sprintf("node-%02d", n),
				"gpu", fmt.Sprint(g), "UUID", fmt.Sprintf("GPU-%02d-%d", n, g), "modelName", "NVIDIA H100 80GB HBM3"),
				0, hours, func(int) float64 { return 81559 })
		}
	}
	c := func(v float64) func(int) float64 { return func(int) float64 { return v } }
	for _, r := range runs {
		gl := []string{"gpu", fmt.Sprint(r.gpu), "UUID", fmt.Sprintf("GPU-%02d-%d", r.node, r.gpu)}
		idle := 0.0
		if r.sm < 0.05 {
			idle = 60
		}
		start := float64(at(r.first)/1000 - 3600)
		add(r.labels("gpu_workload:gpu_held:sum1h", gl...), r.first, r.hours, c(60))
		add(r.labels("gpu_workload:gpu_held_idle:sum1h", gl...), r.first, r.hours, c(idle))
		add(r.labels("gpu_workload:gpu_sm_share:sum1h", gl...), r.first, r.hours, c(60*r.sm))
		add(r.labels("gpu_workload:gpu_sm_share:count1h", gl...), r.first, r.hours, c(60))
		add(r.labels("gpu_workload:gpu_sm_share:max1h", gl...), r.first, r.hours, c(r.sm))
		add(r.labels("gpu_workload:gpu_memory_used_bytes:max1h", gl...), r.first, r.hours, func(h int) float64 { return float64(1+h%40) * 1e9 })
		add(r.labels("gpu_workload:gpu_power_watts:sum1h", gl...), r.first, r.hours, c(60*(100+500*r.sm)))
		add(r.labels("gpu_workload:xid_errors_total:max1h", gl...), r.first, r.hours, c(0))
		add(r.labels("gpu_workload:xid_errors_total:min1h", gl...), r.first, r.hours, c(0))
		add(r.labels("gpu_workload:bottleneck:count1h", append(gl, "class", "compute-bound")...), r.first, r.hours, c(60))
		add(r.labels("workload:memory_working_set_bytes:max1h"), r.first, r.hours, c(8e9))
		add(r.labels("workload:container_last_seen:max1h"), r.first, r.hours, func(h int) float64 { return float64(at(h) / 1000) })
		add(r.labels("workload:container_start_time_seconds:min1h"), r.first, r.hours, c(start))
		add(r.labels("workload:container_oom_events_total:max1h"), r.first, r.hours, c(0))
		add(r.labels("workload:container_oom_events_total:min1h"), r.first, r.hours, c(0))
		add(r.labels("workload:container_cpu_usage_seconds_total:max1h", "cpu", "total"), r.first, r.hours, func(h int) float64 { return float64(h-r.first+1) * 7200 })
		add(r.labels("workload:container_cpu_usage_seconds_total:min1h", "cpu", "total"), r.first, r.hours, func(h int) float64 { return float64(h-r.first) * 7200 })
	}
	require.NoError(b, app.Commit())
	_, err = bw.Flush(context.Background())
	require.NoError(b, err)
	require.NoError(b, bw.Close())
	return series, samples
}

// BenchmarkUserReport30d: the report of the last 30 days grouped by user
// (/api/v1/workloads?by=user, `gpuscope workloads --by user --since
// 30d`), on 16 nodes × 8 GPUs kept busy by 200 users' jobs, from the
// hourly roll-up, with the query engine as serve builds it. Goal: under
// 2 s.
//
//	go test -run '^$' -bench BenchmarkUserReport30d -benchtime 1x -count 7 -timeout 60m ./bench/
func BenchmarkUserReport30d(b *testing.B) {
	db, end, runs := usersData(b)
	engine := reportEngine(b)
	reporter, err := accounting.New(accounting.Options{Engine: engine, Queryable: db, Rules: acctGroups{
		promrules.NewGroup(promrules.GroupOptions{Name: "gpuscope.accounting", Interval: acctInterval}),
		promrules.NewGroup(promrules.GroupOptions{Name: "gpuscope.accounting.hourly", Interval: time.Hour}),
	}})
	require.NoError(b, err)
	q := accounting.Query{Start: end.Add(-usersSpan), End: end}

	var groups []accounting.Group
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := reporter.Report(context.Background(), q)
		require.NoError(b, err)
		groups = accounting.GroupRuns(rep.Runs, []string{"user"})
	}
	b.StopTimer()
	b.ReportMetric((processCPU(b)-cpu0).Seconds()/float64(b.N), "cpu-s/op")

	// What was written: every user, every run, every GPU-hour.
	want := map[string]float64{}
	for _, r := range runs {
		want[fmt.Sprintf("user%03d", r.user)] += float64(r.hours)
	}
	require.Len(b, groups, len(want))
	total := 0
	for _, g := range groups {
		require.InDelta(b, want[g.Key["user"]], g.GPUHours, 1e-6, g.Key["user"])
		total += g.Runs
	}
	require.Equal(b, len(runs), total)
	b.ReportMetric(float64(len(groups)), "users")
	b.ReportMetric(float64(total), "runs")
}
