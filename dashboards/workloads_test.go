package dashboards

import (
	"context"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/stretchr/testify/require"
)

// TestWorkloadsDashboard: the Containers dashboard became the Workloads
// dashboard under the same uid, picks workloads by name, filtered by
// runtime, and opens on the "Workloads on GPUs" table.
func TestWorkloadsDashboard(t *testing.T) {
	set, err := Build()
	require.NoError(t, err)
	d, ok := set.Dashboard(UIDWorkloads)
	require.True(t, ok)
	require.Equal(t, "gpuscope-containers", *d.Uid, "the old uid, so bookmarks and provisioned copies carry over")
	require.Equal(t, "gpuscope / Workloads", *d.Title)

	var names []string
	queries := map[string]string{}
	for _, v := range d.Templating.List {
		names = append(names, v.Name)
		if v.Query != nil && v.Query.String != nil {
			queries[v.Name] = *v.Query.String
		}
	}
	require.Equal(t, []string{"datasource", "instance", "runtime", "workload"}, names)
	for _, c := range []struct{ name, label, selector string }{
		{"runtime", "runtime", `instance=~"$instance"`},
		{"workload", "workload", `runtime=~"$runtime"`},
	} {
		sel, label, err := LabelValuesQuery(queries[c.name])
		require.NoError(t, err)
		require.Equal(t, c.label, label)
		require.Contains(t, sel, c.selector, "%s is filtered by the variables before it", c.name)
	}

	require.NotNil(t, d.Panels[0].RowPanel, "the dashboard opens on a row")
	table := d.Panels[1].Panel
	require.NotNil(t, table)
	require.Equal(t, "Workloads on GPUs", *table.Title)
	var ids []string
	for _, tr := range table.Transformations {
		ids = append(ids, tr.Id)
	}
	require.Equal(t, []string{"merge", "organize"}, ids, "one row per workload and GPU, columns named")
}

// TestLegendsNameWorkloads: no legend of any dashboard shows a cgroup id,
// and every graph of the Workloads dashboard names the workload.
func TestLegendsNameWorkloads(t *testing.T) {
	set, err := Build()
	require.NoError(t, err)
	for _, s := range set.List() {
		d, _ := set.Dashboard(s.UID)
		for _, panel := range allPanels(&d) {
			for _, tg := range panel.Targets {
				q := tg.(prometheus.Dataquery)
				if q.LegendFormat == nil {
					continue
				}
				require.NotContains(t, *q.LegendFormat, "{{id}}", "%s / %s", s.UID, *panel.Title)
				if s.UID == UIDWorkloads && panel.Type == "timeseries" {
					require.Contains(t, *q.LegendFormat, "{{workload}}", "%s / %s", s.UID, *panel.Title)
				}
			}
		}
	}
}

// TestWorkloadsOnGPUsTable runs the table's queries as Grafana sends them
// and checks what its merge transformation needs: every query returns the
// same rows, one per workload and GPU, with the same labels, so each row
// joins into one line with every column filled.
func TestWorkloadsOnGPUsTable(t *testing.T) {
	storage := promqltest.LoadedStorage(t, `
load 1m
  gpu_workload:bottleneck:class{instance="n1",gpu="0",UUID="GPU-a",id="/docker/abc",name="llama-train",workload="llama-train",runtime="docker",image="pytorch:2.3",class="input-bound"} 1x5
  gpu_workload:bottleneck:class{instance="n1",gpu="1",UUID="GPU-b",id="/docker/abc",name="llama-train",workload="llama-train",runtime="docker",image="pytorch:2.3",class="compute-bound"} 1x5
  gpu_workload:bottleneck:class{instance="n1",gpu="2",UUID="GPU-c",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb",id="/slurm/uid_1000/job_42/step_0",workload="job 42",runtime="slurm",slurm_job_id="42",slurm_step="0",slurm_user="alice",class="idle"} 1x5
  gpuscope_gpu_container_memory_used_bytes{instance="n1",job="gpu",gpu="0",UUID="GPU-a",id="/docker/abc",name="llama-train",workload="llama-train",runtime="docker",image="pytorch:2.3"} 4e9x5
  gpuscope_gpu_container_memory_used_bytes{instance="n1",job="gpu",gpu="1",UUID="GPU-b",id="/docker/abc",name="llama-train",workload="llama-train",runtime="docker",image="pytorch:2.3"} 6e9x5
  gpuscope_gpu_container_memory_used_bytes{instance="n1",job="gpu",gpu="2",UUID="GPU-c",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb",id="/slurm/uid_1000/job_42/step_0",workload="job 42",runtime="slurm",slurm_job_id="42",slurm_step="0",slurm_user="alice"} 1e9x5
  gpuscope_gpu_container_sm_utilization_percent{instance="n1",job="gpu",gpu="0",UUID="GPU-a",id="/docker/abc",name="llama-train",workload="llama-train",runtime="docker",image="pytorch:2.3"} 30x5
  gpuscope_gpu_container_sm_utilization_percent{instance="n1",job="gpu",gpu="1",UUID="GPU-b",id="/docker/abc",name="llama-train",workload="llama-train",runtime="docker",image="pytorch:2.3"} 90x5
  gpuscope_gpu_container_sm_utilization_percent{instance="n1",job="gpu",gpu="2",UUID="GPU-c",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb",id="/slurm/uid_1000/job_42/step_0",workload="job 42",runtime="slurm",slurm_job_id="42",slurm_step="0",slurm_user="alice"} 2x5
  instance_id:container_cpu_saturation:ratio{instance="n1",job="cadvisor",id="/docker/abc",name="llama-train",workload="llama-train",runtime="docker",image="pytorch:2.3"} 0.9x5
  instance_id:container_cpu_saturation:ratio{instance="n1",job="cadvisor",id="/slurm/uid_1000/job_42/step_0",workload="job 42",runtime="slurm",slurm_job_id="42",slurm_step="0",slurm_user="alice"} 0.1x5
  instance_id:container_cpu_saturation:ratio{instance="n1",job="cadvisor",id="/idle",workload="idle",runtime="docker"} 0.01x5
`)
	t.Cleanup(func() { storage.Close() })
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute})

	set, err := Build()
	require.NoError(t, err)
	d, _ := set.Dashboard(UIDWorkloads)
	table := d.Panels[1].Panel
	require.Equal(t, "Workloads on GPUs", *table.Title)

	at := time.Unix(0, 0).Add(4 * time.Minute)
	r := TimeRange{From: at.Add(-time.Hour), To: at, MaxDataPoints: 1000, ScrapeInterval: 15 * time.Second}
	variable := func(name string) Variable {
		for _, v := range d.Templating.List {
			if v.Name == name {
				av := ""
				if v.AllValue != nil {
					av = *v.AllValue
				}
				return Variable{Name: name, Multi: v.Multi != nil && *v.Multi, IncludeAll: v.IncludeAll != nil && *v.IncludeAll, AllValue: av}
			}
		}
		t.Fatalf("no variable %s", name)
		return Variable{}
	}
	const (
		trainGPU0 = `GPU_I_ID="", GPU_I_PROFILE="", class="input-bound", gpu="0", id="/docker/abc", image="pytorch:2.3", instance="n1", slurm_job_id="", workload="llama-train"`
		trainGPU1 = `GPU_I_ID="", GPU_I_PROFILE="", class="compute-bound", gpu="1", id="/docker/abc", image="pytorch:2.3", instance="n1", slurm_job_id="", workload="llama-train"`
		job42     = `GPU_I_ID="1", GPU_I_PROFILE="3g.40gb", class="idle", gpu="2", id="/slurm/uid_1000/job_42/step_0", image="", instance="n1", slurm_job_id="42", workload="job 42"`
	)
	for _, c := range []struct {
		name     string
		workload Selection
		want     map[string][]float64 // row → the values of queries A, B, C, D
	}{
		{"every workload", Selection{Variable: variable("workload"), Values: []string{"idle", "job 42", "llama-train"}, All: true}, map[string][]float64{
			trainGPU0: {2, 4e9, 30, 0.9},
			trainGPU1: {2, 6e9, 90, 0.9},
			job42:     {1, 1e9, 2, 0.1},
		}},
		{"one workload picked", Selection{Variable: variable("workload"), Values: []string{"llama-train"}}, map[string][]float64{
			trainGPU0: {2, 4e9, 30, 0.9},
			trainGPU1: {2, 6e9, 90, 0.9},
		}},
		{"a Slurm job picked", Selection{Variable: variable("workload"), Values: []string{"job 42"}}, map[string][]float64{
			job42: {1, 1e9, 2, 0.1},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			vars := map[string]Selection{
				"instance": {Variable: variable("instance"), Values: []string{"n1"}, All: true},
				"runtime":  {Variable: variable("runtime"), Values: []string{"docker", "slurm"}, All: true},
				"workload": c.workload,
			}
			got := map[string][]float64{}
			require.Len(t, table.Targets, 4)
			for i, tg := range table.Targets {
				q := tg.(prometheus.Dataquery)
				require.True(t, q.Instant != nil && *q.Instant, "instant queries, one value per cell")
				expr := Interpolate(q.Expr, vars, r)
				qry, err := engine.NewInstantQuery(context.Background(), storage, nil, expr, at)
				require.NoError(t, err, expr)
				res := qry.Exec(context.Background())
				require.NoError(t, res.Err, expr)
				vec, err := res.Vector()
				require.NoError(t, err)
				var rows []string
				for _, s := range vec {
					s.Metric.Range(func(l labels.Label) {
						require.Contains(t, rowLabels, l.Name, "query %s: a label merge would make a column of", *q.RefId)
					})
					row := rowKey(s.Metric)
					rows = append(rows, row)
					if got[row] == nil {
						got[row] = make([]float64, len(table.Targets))
					}
					got[row][i] = s.F
				}
				sort.Strings(rows)
				require.Len(t, rows, len(c.want), "query %s: one row per workload and GPU\n%s", *q.RefId, expr)
				qry.Close()
			}
			require.Equal(t, c.want, got)
		})
	}
}

// rowLabels are the labels of the table's rows, in rowKey's order.
var rowLabels = []string{"GPU_I_ID", "GPU_I_PROFILE", "class", "gpu", "id", "image", "instance", "slurm_job_id", "workload"}

// rowKey renders every label of the row key, empty ones too, so rows
// with different label sets (which merge would not join) differ.
func rowKey(m labels.Labels) string {
	parts := make([]string, 0, len(rowLabels))
	for _, name := range rowLabels {
		parts = append(parts, name+`="`+m.Get(name)+`"`)
	}
	return strings.Join(parts, ", ")
}

// TestRunsTable runs the "Runs" table's queries as Grafana sends them over
// a 2-hour range of the gpuscope.accounting group's per-minute samples and
// checks the report's figures: a job alone on a GPU for 2 h at 300 W is
// 2.00 GPU-hours and 0.600 kWh; a container without a GPU has a row with
// its CPU core-seconds; a systemd unit without a GPU has none. Every query
// returns the same row labels, so merge makes one line per run.
func TestRunsTable(t *testing.T) {
	const (
		job  = `instance="n1", id="/slurm/uid_1000/job_7/step_0", workload="job 7", runtime="slurm", slurm_job_id="7", slurm_step="0", slurm_user="alice"`
		web  = `instance="n1", id="/docker/web", workload="web", runtime="docker", image="nginx:1"`
		unit = `instance="n1", id="/system.slice/cron.service", workload="cron.service", runtime="systemd"`
		raw  = `instance="n2", id="/gpu-box", workload="/gpu-box", runtime="cgroup"`
	)
	storage := promqltest.LoadedStorage(t, `
load 1m
  gpu_workload:gpu_held:present{`+job+`, gpu="0", UUID="GPU-a"} 1x120
  gpu_workload:gpu_sm_share:ratio{`+job+`, gpu="0", UUID="GPU-a"} 0.8x120
  gpu_workload:gpu_memory_used_bytes:max1m{`+job+`, gpu="0", UUID="GPU-a"} 0+1e8x120
  gpu_workload:gpu_power_watts:apportioned{`+job+`, gpu="0", UUID="GPU-a"} 300x120
  workload:cpu_usage_cores:rate1m{`+job+`} 2x120
  workload:cpu_usage_cores:rate1m{`+web+`} 0.5x120
  workload:cpu_usage_cores:rate1m{`+unit+`} 0.1x120
  gpu_workload:gpu_held:present{`+raw+`, gpu="1", UUID="GPU-b"} _x60 1x59
  gpu_workload:gpu_sm_share:ratio{`+raw+`, gpu="1", UUID="GPU-b"} _x60 0.2x29 0.4x29
  gpu_workload:gpu_memory_used_bytes:max1m{`+raw+`, gpu="1", UUID="GPU-b"} _x60 5e9x59
  gpu_workload:gpu_power_watts:apportioned{`+raw+`, gpu="1", UUID="GPU-b"} _x60 100x59
`)
	t.Cleanup(func() { storage.Close() })
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute})

	set, err := Build()
	require.NoError(t, err)
	d, _ := set.Dashboard(UIDWorkloads)
	var table *dashboard.Panel
	for _, p := range allPanels(&d) {
		if *p.Title == "Runs" {
			table = p
		}
	}
	require.NotNil(t, table, "a Runs table")
	require.Equal(t, "table", table.Type)
	var ids []string
	for _, tr := range table.Transformations {
		ids = append(ids, tr.Id)
	}
	require.Equal(t, []string{"merge", "organize"}, ids, "one row per run, columns named")

	at := time.Unix(0, 0).Add(120 * time.Minute)
	r := TimeRange{From: at.Add(-2 * time.Hour), To: at, MaxDataPoints: 1000, ScrapeInterval: 15 * time.Second}
	all := func(name string, values ...string) Selection {
		return Selection{Variable: Variable{Name: name, Multi: true, IncludeAll: true, AllValue: ".*"}, Values: values, All: true}
	}
	vars := map[string]Selection{
		"instance": {Variable: Variable{Name: "instance", Multi: true, IncludeAll: true}, Values: []string{"n1", "n2"}, All: true},
		"runtime":  all("runtime", "cgroup", "docker", "slurm", "systemd"),
		"workload": all("workload"),
	}
	// GPU-hours, SM share, GPU memory, kWh, CPU core-seconds; NaN: no cell.
	nan := math.NaN()
	want := map[string][]float64{
		"job 7":    {2, 0.8, 120e8, 0.6, 2 * 60 * 120},
		"web":      {nan, nan, nan, nan, 0.5 * 60 * 120},
		"/gpu-box": {1, 0.3, 5e9, 100 * 60 * 60 / 3.6e6, nan},
	}
	got := map[string][]float64{}
	rowLabels := []string{"id", "image", "instance", "runtime", "slurm_job_id", "workload"}
	require.Len(t, table.Targets, 5)
	for i, tg := range table.Targets {
		q := tg.(prometheus.Dataquery)
		require.True(t, q.Instant != nil && *q.Instant, "instant queries, one value per cell")
		require.Contains(t, q.Expr, "[$__range]", "over the dashboard's range")
		expr := Interpolate(q.Expr, vars, r)
		qry, err := engine.NewInstantQuery(context.Background(), storage, nil, expr, at)
		require.NoError(t, err, expr)
		res := qry.Exec(context.Background())
		require.NoError(t, res.Err, expr)
		vec, err := res.Vector()
		require.NoError(t, err)
		for _, s := range vec {
			s.Metric.Range(func(l labels.Label) {
				require.Contains(t, rowLabels, l.Name, "query %s: a label merge would make a column of", *q.RefId)
			})
			w := s.Metric.Get("workload")
			if got[w] == nil {
				got[w] = []float64{nan, nan, nan, nan, nan}
			}
			got[w][i] = s.F
		}
		qry.Close()
	}
	require.Len(t, got, len(want), "rows: %v", got)
	for w, values := range want {
		require.Contains(t, got, w)
		for i, v := range values {
			if math.IsNaN(v) {
				require.True(t, math.IsNaN(got[w][i]), "%s column %d: %v", w, i, got[w][i])
				continue
			}
			require.InDelta(t, v, got[w][i], 1e-9*math.Max(1, v), "%s column %d: %v", w, i, got)
		}
	}
}
