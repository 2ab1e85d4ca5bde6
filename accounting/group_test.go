package accounting

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/stretchr/testify/require"
)

// TestGroupRunsSumsRuns: eight hours of four runs of two users and one
// whose user is not known, on two nodes and three GPU models, recorded
// by the real rules and their hourly roll-up. The report grouped by user
// (and by compose project, and by a label of a target's) sums the
// per-run report it comes from: each run in exactly one group, so a
// group that dropped or double-counted a run would not add up to its
// runs, nor to what was put in (alice's 3 + 2 GPU-hours, 2 of them idle,
// bob's 4, the unknown user's 1), nor to the price per GPU-hour of each
// model.
func TestGroupRunsSumsRuns(t *testing.T) {
	const hour = 240 // 15 s steps
	a1 := `instance="n1", id="/docker/a1", workload="train", runtime="docker", user="alice"`
	a2 := `instance="n2", id="/slurm/uid_1000/job_9/step_0", workload="job9", runtime="slurm", slurm_job_id="9", slurm_user="alice", user="alice"`
	b1 := `instance="n1", id="/docker/b1", workload="shop/serve", runtime="docker", compose_project="shop", user="bob"`
	d1 := `instance="n1", id="/docker/d1", workload="old", runtime="docker"`
	var b strings.Builder
	b.WriteString("load 15s\n")
	line := func(metric, ls, series string) { fmt.Fprintf(&b, "  %s{%s} %s\n", metric, ls, series) }
	// n+1 samples: promqltest's 1x3 is four.
	run := func(ls, gpu, team string, from, n int, sm string) {
		g := ls + `, gpu="` + gpu + `", UUID="GPU-` + gpu + `"`
		line("gpuscope_gpu_container_processes", g, steps(from, fmt.Sprintf("1x%d", n)))
		line("gpuscope_gpu_container_sm_utilization_percent", g, steps(from, fmt.Sprintf("%sx%d", sm, n)))
		line("gpuscope_gpu_container_memory_used_bytes", g, steps(from, fmt.Sprintf("1e9+1e6x%d", n)))
		seen := ls
		if team != "" {
			seen += `, team="` + team + `"` // a target's label, which the accounting series do not keep
		}
		line("container_last_seen", seen, steps(from, fmt.Sprintf("%d+15x%d", from*15, n)))
		line("container_start_time_seconds", seen, steps(from, fmt.Sprintf("%dx%d", from*15, n)))
	}
	run(a1, "0", "vision", hour/2, 3*hour, "50")
	run(a2, "0", "", hour, 2*hour, "2") // held idle all along
	run(b1, "1", "vision", 2*hour, 4*hour, "80")
	run(d1, "2", "", 0, hour, "30")
	for _, g := range []struct{ inst, gpu, model string }{
		{"n1", "0", "NVIDIA H100 80GB HBM3"}, {"n1", "1", "NVIDIA H100 80GB HBM3"}, {"n1", "2", "Tesla T4"}, {"n2", "0", "NVIDIA A100-SXM4-40GB"},
	} {
		ls := `instance="` + g.inst + `", gpu="` + g.gpu + `", UUID="GPU-` + g.gpu + `", modelName="` + g.model + `"`
		line("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", ls, fmt.Sprintf("0+4500000x%d", 8*hour)) // mJ: 300 W
		line("DCGM_FI_DEV_FB_TOTAL", ls, fmt.Sprintf("81559x%d", 8*hour))
	}

	st := promqltest.LoadedStorage(t, b.String())
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 50_000_000)
	t0 := time.Unix(0, 0).UTC()
	evalAccounting(t, st, engine, t0, t0.Add(8*time.Hour), time.Minute)
	var evals []time.Time
	for h := range 8 {
		evals = append(evals, t0.Add(time.Duration(h)*time.Hour+22*time.Minute))
	}
	evalRollup(t, st, engine, evals...)
	prices := Prices{PerKWh: 0.3, Currency: "EUR", PerGPUHour: map[string]float64{DefaultModel: 1, "NVIDIA H100 80GB HBM3": 2.5}}
	r, err := New(Options{
		Engine: engine, Queryable: st,
		Rules:  runningGroups{accountingGroup: time.Minute, rollupGroup: time.Hour},
		Prices: func() Prices { return prices },
	})
	require.NoError(t, err)

	by, extra, err := ParseGroupBy([]string{"label:team"})
	require.NoError(t, err)
	require.Equal(t, []string{"label:team"}, by)
	rep, err := r.Report(context.Background(), Query{Start: t0, End: t0.Add(8 * time.Hour), Labels: extra})
	require.NoError(t, err)
	require.Len(t, rep.Runs, 4)

	// What was put in, within the accounting's one-sample grain.
	users := GroupRuns(rep.Runs, []string{"user"})
	require.Len(t, users, 3)
	want := []struct {
		user              string
		runs              int
		gpuHours, idle    float64
		sm                float64
		gpuHourCost       float64 // the GPU-hours at their models' prices
		gpuMemoryMaxBytes float64
	}{
		{"alice", 2, 5, 2, (0.5*3 + 0.02*2) / 5, 3*2.5 + 2*1, 1e9 + 1e6*3*hour},
		{"bob", 1, 4, 0, 0.8, 4 * 2.5, 1e9 + 1e6*4*hour},
		{"", 1, 1, 0, 0.3, 1 * 1, 1e9 + 1e6*hour},
	}
	for i, w := range want {
		g := users[i]
		require.Equal(t, map[string]string{"user": w.user}, g.Key, "groups by GPU-hours, most first")
		require.Equal(t, w.runs, g.Runs, w.user)
		require.InDelta(t, w.gpuHours, g.GPUHours, 0.02*w.gpuHours, w.user)
		require.InDelta(t, w.idle, g.IdleGPUHours, 0.02, w.user)
		require.InDelta(t, w.sm, g.SMShareAvg, 0.01, w.user)
		require.Equal(t, w.gpuMemoryMaxBytes, g.GPUMemoryMaxBytes, w.user)
		require.NotNil(t, g.EnergyKWh, w.user)
		require.InDelta(t, 0.3*w.gpuHours, *g.EnergyKWh, 0.02*0.3*w.gpuHours, "300 W alone on its GPU: %s", w.user)
		require.NotNil(t, g.Cost, w.user)
		require.InDelta(t, w.gpuHourCost, *g.Cost-0.3**g.EnergyKWh, 0.02*w.gpuHourCost, "cost = energy at 0.3/kWh + GPU-hours at the model's price: %s", w.user)
		require.Equal(t, "EUR", g.Currency)
	}

	// Exactly the runs' sums, for every grouping.
	for _, by := range [][]string{{"user"}, {"compose_project"}, {"label:team"}, {"user", "instance"}} {
		groups := GroupRuns(rep.Runs, by)
		total := 0
		for _, g := range groups {
			var gpuHours, idle, kwh, cost, weighted, peak float64
			n := 0
			for _, run := range rep.Runs {
				match := true
				for _, name := range by {
					match = match && groupValue(&run, name) == g.Key[name]
				}
				if !match {
					continue
				}
				n++
				gpuHours += run.GPUHours
				idle += run.IdleGPUHours
				kwh += *run.EnergyKWh
				cost += *run.Cost
				weighted += run.SMShareAvg * run.GPUHours
				peak = max(peak, run.GPUMemoryMaxBytes)
			}
			require.Equal(t, n, g.Runs, "%v %v", by, g.Key)
			require.InDelta(t, gpuHours, g.GPUHours, 1e-9, "%v %v", by, g.Key)
			require.InDelta(t, idle, g.IdleGPUHours, 1e-9, "%v %v", by, g.Key)
			require.InDelta(t, kwh, *g.EnergyKWh, 1e-9, "%v %v", by, g.Key)
			require.InDelta(t, cost, *g.Cost, 1e-9, "%v %v", by, g.Key)
			require.InDelta(t, weighted/gpuHours, g.SMShareAvg, 1e-9, "%v %v", by, g.Key)
			require.Equal(t, peak, g.GPUMemoryMaxBytes, "%v %v", by, g.Key)
			total += g.Runs
		}
		require.Equal(t, len(rep.Runs), total, "%v: every run in one group", by)
	}
	projects := GroupRuns(rep.Runs, []string{"compose_project"})
	require.Len(t, projects, 2)
	teams := GroupRuns(rep.Runs, []string{"label:team"})
	require.Len(t, teams, 2)
	require.Equal(t, "vision", teams[0].Key["label:team"], "train and shop/serve, from cAdvisor's series")
	require.Equal(t, 2, teams[0].Runs)
}

// TestParseGroupBy: the names a report groups by, and what a bad one
// gets.
func TestParseGroupBy(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         []string
		by, labels []string
		err        string
	}{
		{name: "none"},
		{name: "user", in: []string{"user"}, by: []string{"user"}},
		{name: "comma-separated and repeated", in: []string{"user, compose_project", "label:team"}, by: []string{"user", "compose_project", "label:team"}, labels: []string{"team"}},
		{name: "label of the identity", in: []string{"label:user"}, by: []string{"user"}},
		{name: "unknown", in: []string{"team"}, err: `cannot group by "team": one of compose_project, compose_service, image, instance, runtime, slurm_job_id, slurm_user, user, workload, or label:<name> for any label`},
		{name: "bad label", in: []string{"label:a-b"}, err: `group by "label:a-b": "a-b" is not a label name`},
		{name: "reserved label", in: []string{"label:__name__"}, err: `group by "label:__name__": "__name__" is not a label name`},
		{name: "twice", in: []string{"user", "label:user"}, err: `group by "user" given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			by, labels, err := ParseGroupBy(tc.in)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.by, by)
			require.Equal(t, tc.labels, labels)
		})
	}
}
