package app_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/accounting"
	"github.com/gpuscope/gpuscope/app/apptest"
	"github.com/gpuscope/gpuscope/gpu/sim"
)

// tableRows parses `gpuscope workloads`' table.
var tableRows = apptest.TableRows

// workloadsCLI is what `gpuscope workloads args...` prints and exits
// with (--url, --since and --format): the command's accounting.Print.
func workloadsCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	flags := map[string]string{"--format": "table"}
	for i := 0; i+1 < len(args); i += 2 {
		flags[args[i]] = args[i+1]
	}
	var out, errOut strings.Builder
	err := accounting.Print(context.Background(), &out, &errOut, accounting.PrintRequest{
		Server: flags["--url"], Since: flags["--since"], Format: flags["--format"], Now: time.Now(),
	})
	if err != nil {
		return out.String(), errOut.String() + err.Error(), 1
	}
	return out.String(), errOut.String(), 0
}

// figures are a run's integrated accounting figures as PromQL gives them.
type figures struct{ gpuHours, kWh, cpuSeconds float64 }

// accountingFigures runs the report's integrals itself at at, over rng:
// every recorded sample of the gpuscope.accounting group stands for one
// group interval (interval seconds), keyed by the run's cgroup id.
func accountingFigures(t *testing.T, p *process, at time.Time, rng string, interval float64) map[string]figures {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]figures{}
	for _, c := range []struct {
		expr  string
		scale float64
		set   func(*figures, float64)
	}{
		{`sum by (id) (sum_over_time(gpu_workload:gpu_held:present[` + rng + `]))`, interval / 3600, func(f *figures, v float64) { f.gpuHours = v }},
		{`sum by (id) (sum_over_time(gpu_workload:gpu_power_watts:apportioned[` + rng + `]))`, interval / 3.6e6, func(f *figures, v float64) { f.kWh = v }},
		// CPU: the kernel's counter, which counts from the cgroup's creation.
		{`sum by (id) (max by (id, cpu) (max_over_time(container_cpu_usage_seconds_total{id!="/"}[` + rng + `])))`, 1, func(f *figures, v float64) { f.cpuSeconds = v }},
	} {
		v, _, _, err := p.api().Query(ctx, c.expr, at)
		require.NoError(t, err, c.expr)
		for _, s := range v.(model.Vector) {
			f := out[string(s.Metric["id"])]
			c.set(&f, float64(s.Value)*c.scale)
			out[string(s.Metric["id"])] = f
		}
	}
	return out
}

// requireBetween checks that each run's figures lie between PromQL's at
// two times around the CLI's own query (which ends at the second it ran):
// every figure only grows as the range's end moves on.
func requireBetween(t *testing.T, format, id string, got figures, lo, hi map[string]figures) {
	t.Helper()
	const eps = 1e-9
	l, h := lo[id], hi[id]
	for _, c := range []struct {
		name          string
		got, min, max float64
	}{
		{"GPU-hours", got.gpuHours, l.gpuHours, h.gpuHours},
		{"kWh", got.kWh, l.kWh, h.kWh},
		{"CPU core-seconds", got.cpuSeconds, l.cpuSeconds, h.cpuSeconds},
	} {
		require.GreaterOrEqual(t, c.got, c.min*(1-eps)-eps, "%s: %s of %s below PromQL's before the CLI ran", format, c.name, id)
		require.LessOrEqual(t, c.got, c.max*(1+eps)+eps, "%s: %s of %s above PromQL's after the CLI ran", format, c.name, id)
	}
}

// TestWorkloadsReportDemo is the "done when": `gpuscope workloads`
// against `serve --demo` prints the demo's workloads, each simulated
// container holding a GPU with its GPU(s), GPU-hours and kWh; its JSON and
// CSV agree with the integrals the test runs itself in PromQL over the
// same appliance (value × the accounting group's interval, 1m / the
// demo's time_scale of 30 = 2 s), and the API with a fixed range agrees
// exactly.
func TestWorkloadsReportDemo(t *testing.T) {
	t.Parallel()
	p := serve(t, "", demo)
	_, demoSim := sim.DemoConfig()
	interval := time.Minute.Seconds() / demoSim.TimeScale

	// The workloads holding a GPU (instance) and their GPUs, from the
	// recorded series themselves.
	holders := func() map[string][]string {
		v, err := p.instant(`group by (id, workload, gpu, GPU_I_ID) (last_over_time(gpu_workload:gpu_held:present[1h]))`)
		require.NoError(t, err)
		out := map[string][]string{}
		for _, s := range v {
			g := string(s.Metric["gpu"])
			if gi := s.Metric["GPU_I_ID"]; gi != "" {
				g += "/" + string(gi)
			}
			out[string(s.Metric["workload"])] = append(out[string(s.Metric["workload"])], g)
		}
		for _, g := range out {
			slices.Sort(g)
		}
		return out
	}

	// The table, polled until every container of the demo is in it with
	// non-zero GPU-hours and kWh (GPU-hours show two decimals: 18 s of a
	// GPU held; the demo scrapes the GPUs every 15 s).
	var (
		table string
		held  map[string][]string
	)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var missing []string
		held = holders()
		for _, g := range demoSim.GPUs {
			found := false
			for w := range held {
				found = found || w == g.Container || strings.HasPrefix(w, g.Container+"/") // MIG: one per instance
			}
			if !found {
				missing = append(missing, g.Container+" holds no GPU in gpu_workload:gpu_held:present")
			}
		}
		stdout, stderr, code := workloadsCLI(t, "--url", p.URL, "--since", "1h")
		require.Equal(t, 0, code, stderr)
		table = stdout
		rows := tableRows(t, table)
		for w, gpus := range held {
			r, ok := rows[w]
			switch {
			case !ok:
				missing = append(missing, w+": no row")
			case r["GPUS"] != strings.Join(gpus, ","):
				missing = append(missing, fmt.Sprintf("%s: GPUS %q, want %q", w, r["GPUS"], strings.Join(gpus, ",")))
			case r["KWH"] == "0.000" || r["KWH"] == "-":
				missing = append(missing, w+": KWH "+r["KWH"])
			// The XID scenario's GPU falls off the bus 20 s after the
			// start: its container may hold it for less than 18 s.
			case r["GPU-H"] == "0.00" && !strings.Contains(r["DURATION"], "running"):
			case r["GPU-H"] == "0.00":
				missing = append(missing, w+": GPU-H 0.00")
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes of --demo:\n%s\n%s", strings.Join(missing, "\n"), table)
		}
		time.Sleep(5 * time.Second)
	}
	t.Logf("gpuscope workloads --since 1h:\n%s", table)

	t.Run("api agrees with PromQL", func(t *testing.T) {
		end := time.Now().Add(-time.Second).Truncate(time.Second)
		runs := reportAPI(t, p, end.Add(-time.Hour), end)
		want := accountingFigures(t, p, end, "1h", interval)
		checked := 0
		for _, r := range runs {
			if _, ok := held[r.Workload]; !ok {
				continue
			}
			checked++
			w := want[r.ID]
			require.Positive(t, r.GPUHours, r.Workload)
			require.NotNil(t, r.EnergyKWh, r.Workload)
			require.Positive(t, *r.EnergyKWh, r.Workload)
			require.InDelta(t, w.gpuHours, r.GPUHours, 1e-9, r.Workload)
			require.InDelta(t, w.kWh, *r.EnergyKWh, 1e-9, r.Workload)
			require.InDelta(t, w.cpuSeconds, r.CPUCoreSeconds, 1e-6, r.Workload)
		}
		require.Equal(t, len(held), checked, "one run per workload holding a GPU")
	})

	// The newcomer trial's M1 and m1: the demo's job on GPU 7 dies of XID
	// 79 twenty seconds in; its last sample holding the GPU comes before
	// the XID and the alerts. Its row has them, an end, and a duration
	// that does not grow.
	t.Run("the run killed by an XID", func(t *testing.T) {
		crashy := func(end time.Time) (reportRun, error) {
			for _, r := range reportAPI(t, p, end.Add(-time.Hour), end) {
				if r.ID == "/gpuscope-demo/crashy" {
					return r, nil
				}
			}
			return reportRun{}, errors.New("no run of /gpuscope-demo/crashy")
		}
		var (
			r     reportRun
			ended time.Time // a report end by which the run was over
		)
		eventually(t, 90*time.Second, "the XID and its alerts in crashy's row", func() error {
			var err error
			ended = time.Now().Truncate(time.Second)
			if r, err = crashy(ended); err != nil {
				return err
			}
			if r.XIDErrors < 1 || !slices.Contains(r.Alerts, "GPUXIDErrorCritical") || !slices.Contains(r.Alerts, "GPUFellOffBus") {
				return fmt.Errorf("xid_errors %d, alerts %v", r.XIDErrors, r.Alerts)
			}
			return nil
		})
		require.Equal(t, 1, r.XIDErrors, "one XID 79")
		require.False(t, r.Running)
		require.NotNil(t, r.End, "a run that is over has an end")
		require.Equal(t, []string{"7"}, r.GPUs)
		// Two ends after it was over, five seconds or more apart (an
		// end before the run was over, while it ran, would see it
		// shorter).
		time.Sleep(time.Until(ended.Add(5 * time.Second)))
		a, err := crashy(ended)
		require.NoError(t, err)
		require.False(t, a.Running)
		b, err := crashy(time.Now())
		require.NoError(t, err)
		require.Equal(t, a.DurationSeconds, b.DurationSeconds, "the duration does not grow with the report's end")
		require.Equal(t, a.End, b.End)
	})

	t.Run("api bad input", func(t *testing.T) {
		for _, c := range []struct{ query, want string }{
			{"start=2000&end=1000", "empty range: start 1970-01-01T00:33:20Z is not at least a second before end 1970-01-01T00:16:40Z"},
			{"start=yesterday", `invalid parameter "start": cannot parse "yesterday" to a valid timestamp (Unix seconds or RFC 3339)`},
			{"all=maybe", `invalid parameter "all": "maybe" is not true or false`},
		} {
			code, body := p.get("/api/v1/workloads?" + c.query)
			require.Equal(t, 400, code, body)
			var env struct{ Status, ErrorType, Error string }
			require.NoError(t, json.Unmarshal([]byte(body), &env), body)
			require.Equal(t, "error", env.Status)
			require.Equal(t, "bad_data", env.ErrorType)
			require.Equal(t, c.want, env.Error)
		}
	})

	t.Run("json", func(t *testing.T) {
		before := accountingFigures(t, p, time.Now().Truncate(time.Second), "1h", interval)
		stdout, stderr, code := workloadsCLI(t, "--url", p.URL, "--since", "1h", "--format", "json")
		after := accountingFigures(t, p, time.Now(), "1h", interval)
		require.Equal(t, 0, code, stderr)
		var runs []reportRun
		require.NoError(t, json.Unmarshal([]byte(stdout), &runs), stdout)
		seen := map[string]bool{}
		for _, r := range runs {
			gpus, ok := held[r.Workload]
			if !ok {
				continue
			}
			seen[r.Workload] = true
			require.Equal(t, gpus, r.GPUs, r.Workload)
			require.Equal(t, "cgroup", r.Runtime, "the demo's containers are cgroups of no runtime")
			require.Equal(t, "e2e-node", r.Instance)
			require.NotNil(t, r.EnergyKWh, r.Workload)
			requireBetween(t, "json", r.ID, figures{r.GPUHours, *r.EnergyKWh, r.CPUCoreSeconds}, before, after)
		}
		require.Len(t, seen, len(held), "every workload holding a GPU\n%s", stdout)
	})

	t.Run("csv", func(t *testing.T) {
		before := accountingFigures(t, p, time.Now().Truncate(time.Second), "1h", interval)
		stdout, stderr, code := workloadsCLI(t, "--url", p.URL, "--since", "1h", "--format", "csv")
		after := accountingFigures(t, p, time.Now(), "1h", interval)
		require.Equal(t, 0, code, stderr)
		records, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
		require.NoError(t, err, stdout)
		require.NotEmpty(t, records)
		col := map[string]int{}
		for i, name := range records[0] {
			col[name] = i
		}
		for _, name := range []string{"workload", "node", "id", "gpus", "gpu_hours", "energy_kwh", "cpu_core_seconds"} {
			require.Contains(t, col, name, "CSV header %v", records[0])
		}
		number := func(rec []string, name string) float64 {
			v, err := strconv.ParseFloat(rec[col[name]], 64)
			require.NoError(t, err, "%s of %v", name, rec)
			return v
		}
		seen := map[string]bool{}
		for _, rec := range records[1:] {
			w := rec[col["workload"]]
			gpus, ok := held[w]
			if !ok {
				continue
			}
			seen[w] = true
			require.Equal(t, strings.Join(gpus, " "), rec[col["gpus"]], w)
			require.Equal(t, "e2e-node", rec[col["node"]])
			requireBetween(t, "csv", rec[col["id"]], figures{number(rec, "gpu_hours"), number(rec, "energy_kwh"), number(rec, "cpu_core_seconds")}, before, after)
		}
		require.Len(t, seen, len(held), "every workload holding a GPU\n%s", stdout)
	})
}
