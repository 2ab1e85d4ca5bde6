package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app/apptest"
	"github.com/gpuscope/gpuscope/gpu/sim"
	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// reportRun is the part of /api/v1/workloads' rows these tests read.
type reportRun = apptest.ReportRun

// workloadsCLI runs `gpuscope workloads args...` and returns its stdout,
// stderr and exit code.
func workloadsCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary, append([]string{"workloads"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("gpuscope workloads %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// reportAPI asks p's /api/v1/workloads for the runs between start and end.
func reportAPI(t *testing.T, p *process, start, end time.Time) []reportRun {
	return p.client().Report(start, end)
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
	p := serve(t, "", "--demo")
	_, demo := sim.DemoConfig()
	interval := time.Minute.Seconds() / demo.TimeScale

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
		for _, g := range demo.GPUs {
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

// tableRows parses `gpuscope workloads`' table by its header's column
// offsets (tabwriter pads every cell to its column; cells hold spaces,
// "23.4 GiB", so fields cannot be split on them), by workload.
func tableRows(t *testing.T, table string) map[string]map[string]string {
	t.Helper()
	if table == "No workloads in this range.\n" {
		return nil
	}
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	header := lines[0]
	require.True(t, strings.HasPrefix(header, "WORKLOAD"), "the table's header: %q", header)
	type column struct {
		name       string
		start, end int
	}
	var cols []column
	for i := 0; i < len(header); {
		j := i
		// A column's name ends where two spaces begin (names like
		// "SM AVG/MAX" hold one).
		for j < len(header) && !(header[j] == ' ' && j+1 < len(header) && header[j+1] == ' ') {
			j++
		}
		k := j
		for k < len(header) && header[k] == ' ' {
			k++
		}
		cols = append(cols, column{name: header[i:j], start: i, end: k})
		i = k
	}
	cols[len(cols)-1].end = math.MaxInt
	rows := map[string]map[string]string{}
	for _, l := range lines[1:] {
		r := map[string]string{}
		for _, c := range cols {
			if c.start >= len(l) {
				continue
			}
			r[c.name] = strings.TrimSpace(l[c.start:min(c.end, len(l))])
		}
		rows[r["WORKLOAD"]] = r
	}
	return rows
}

// acctDockerConfig is dockerConfig with the built-in rules 15 times
// faster: the accounting group's CPU series, a 1-minute rate every minute,
// becomes a 4 s rate every 4 s, four 1 s scrapes as a 1-minute rate holds
// four of the default 15 s ones.
const acctDockerConfig = `
global:
  scrape_interval: 1s
  evaluation_interval: 1s
cadvisor:
  docker_endpoint: %s
gpu: {backend: none}
rules:
  builtin:
    time_scale: 15
`

// TestWorkloadsReportDocker: a finished real Docker container is in the
// run report with its name, image, start and end, its duration and the CPU
// it used. The container burns half a core (--cpus 0.5) for 40 s, exits
// and is removed; the report then has it as not running, 40 s long, with
// the CPU core-seconds the kernel counted (about 20).
//
// Not parallel, as TestDocker: it measures CPU time, which a busy 2-core
// machine's other tests would take from the burner.
func TestWorkloadsReportDocker(t *testing.T) {
	pkgtest.Require(t, true, "dockerd", "docker", "busybox")
	d := pkgtest.StartDockerd(t, pkgtest.DockerdOptions{})
	img := d.BusyboxImage(t, dockerImage)
	p := serveFavoured(t, "--config.file="+writeConfig(t, t.TempDir(), fmt.Sprintf(acctDockerConfig, d.Host())))

	const (
		name  = "acct-burner"
		burn  = 40 * time.Second
		cores = 0.5
	)
	ran := time.Now()
	id, _ := dockerRun(t, d, p, name, "--cpus", strconv.FormatFloat(cores, 'f', -1, 64), "--cpu-shares", maxCPUShares, img,
		"sh", "-c", fmt.Sprintf("yes >/dev/null & y=$!; sleep %d; kill $y; wait $y; %s", int(burn.Seconds()), ownCPUUsage))
	seen := time.Now() // its series are in: its cgroup exists
	maxCPUWeight(t, "docker")
	code := strings.TrimSpace(pkgtest.Run(t, pkgtest.Cmd{Env: d.Env(), Timeout: burn + time.Minute}, d.CLI, "wait", name))
	exited := time.Now()
	require.Equal(t, "0", code, "the burner's exit code")
	// Docker's own account of the container's life, to hold the report
	// against: on a loaded machine its start and stop take seconds more
	// than the 40 s the burner sleeps.
	var life [2]time.Time
	for i, f := range strings.Fields(d.Inspect(t, name, "{{.State.StartedAt}} {{.State.FinishedAt}}")) {
		var err error
		life[i], err = time.Parse(time.RFC3339Nano, f)
		require.NoError(t, err)
	}
	kernel := parseCPUUsage(t, d.Run(t, "logs", name))
	d.Run(t, "rm", name)
	t.Logf("docker run to docker wait returning: %s; docker's StartedAt %s, FinishedAt %s (%s)", exited.Sub(ran).Round(time.Millisecond),
		life[0].Format(time.RFC3339Nano), life[1].Format(time.RFC3339Nano), life[1].Sub(life[0]).Round(time.Millisecond))

	// Finished: not running once its series are gone (stale within a
	// scrape of the removal).
	var run reportRun
	eventually(t, 30*time.Second, name+" in the report, finished", func() error {
		for _, r := range reportAPI(t, p, ran.Add(-time.Hour), time.Now()) {
			if r.Workload == name {
				run = r
				if r.Running {
					return fmt.Errorf("%s still running: %+v", name, r)
				}
				return nil
			}
		}
		return fmt.Errorf("no run of %s", name)
	})
	t.Logf("report: %+v", run)
	require.Equal(t, "docker", run.Runtime)
	require.Equal(t, dockerImage, run.Image)
	require.Equal(t, "/docker/"+id, run.ID)
	require.False(t, run.Running)
	require.NotNil(t, run.End, "a finished run has an end")
	require.WithinRange(t, run.Start, ran.Add(-time.Second), seen, "start: the container's cgroup creation, in whole seconds")
	require.WithinRange(t, *run.End, exited.Add(-burn/4), exited.Add(time.Second), "end: the last scrape that saw it")
	// Duration: the start is the cgroup's creation (runc's, just before
	// docker's StartedAt), the end the last 1 s scrape that saw it
	// (cAdvisor's container_last_seen, up to a scrape before docker's
	// FinishedAt, or after it while docker removes the cgroup), both in
	// whole seconds: within 3 s of docker's.
	// Docker stamps StartedAt after runc has started the process, so a
	// 40 s sleep can show as 39.99 s: a second of slack.
	require.GreaterOrEqual(t, life[1].Sub(life[0]), burn-time.Second, "docker's life of a container that sleeps %s", burn)
	require.InDelta(t, life[1].Sub(life[0]).Seconds(), run.DurationSeconds, 3, "duration against docker's")
	// CPU: cAdvisor's counter (the cgroup counts from its creation, so
	// its last value is the container's whole CPU time) against the
	// kernel's own count, which the container printed as it ended: equal
	// but for what the burner used after cAdvisor's last scrape of it,
	// 0.5 core × 2 s (1 s housekeeping, 1 s scrape) and a few missed
	// scrapes on a loaded machine. The quota bounds both by 0.5 core ×
	// its life. (A fixed 20 core-s would fail on a loaded VM: the highest
	// CPU weight does not win back time the hypervisor steals.)
	counter, err := p.instant(fmt.Sprintf(`max_over_time(container_cpu_usage_seconds_total{id="/docker/%s"}[1h])`, id))
	require.NoError(t, err)
	require.Len(t, counter, 1)
	used := float64(counter[0].Value)
	t.Logf("CPU: report %.3f core-s, cAdvisor's counter %.3f s, the kernel's at the end %.3f s", run.CPUCoreSeconds, used, kernel)
	require.Positive(t, used, "the burner burned")
	require.InDelta(t, kernel, used, cores*5, "the burner's CPU time: cAdvisor's last scrape against the kernel's count at its end")
	require.LessOrEqual(t, kernel, cores*life[1].Sub(life[0]).Seconds()+0.5, "the quota bounds it")
	// The report reads the same counter: the whole CPU time, to the
	// counter's last scrape.
	require.InDelta(t, used, run.CPUCoreSeconds, 1e-9, "CPU core-seconds in the report against the kernel's")

	stdout, stderr, exit := workloadsCLI(t, "--url", p.URL, "--since", "1h", "--format", "json")
	require.Equal(t, 0, exit, stderr)
	var runs []reportRun
	require.NoError(t, json.Unmarshal([]byte(stdout), &runs), stdout)
	i := slices.IndexFunc(runs, func(r reportRun) bool { return r.Workload == name })
	require.GreaterOrEqual(t, i, 0, "the CLI lists %s:\n%s", name, stdout)
	require.Equal(t, run, runs[i], "the CLI reports what the API does")

	stdout, stderr, exit = workloadsCLI(t, "--url", p.URL, "--since", "1h")
	require.Equal(t, 0, exit, stderr)
	r, ok := tableRows(t, stdout)[name]
	require.True(t, ok, "the table lists %s:\n%s", name, stdout)
	require.Equal(t, "docker", r["RUNTIME"])
	require.Equal(t, dockerImage, r["IMAGE/JOB"])
	require.NotContains(t, r["DURATION"], "running")
	t.Logf("gpuscope workloads --since 1h:\n%s", stdout)
}

// TestWorkloadsBadInput: `gpuscope workloads` with a --since it cannot
// read, or pointed at a port nothing listens on, exits 1 and says why on
// stderr.
func TestWorkloadsBadInput(t *testing.T) {
	t.Parallel()
	closed := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"since unparsable", []string{"--since", "yesterday", "--url", closed}, 1, `gpuscope workloads: --since "yesterday" is not a positive duration (e.g. 30m, 24h, 7d)` + "\n"},
		{"since zero", []string{"--since", "0s", "--url", closed}, 1, `gpuscope workloads: --since "0s" is not a positive duration (e.g. 30m, 24h, 7d)` + "\n"},
		{"url not http", []string{"--url", "localhost:9089"}, 1, `gpuscope workloads: --url "localhost:9089" is not an http:// or https:// address (e.g. http://localhost:9089)` + "\n"},
		{"nothing listens", []string{"--url", closed}, 1, "gpuscope workloads: cannot reach gpuscope at " + closed + ": "},
		// A usage error, as every command's: kingpin exits 2.
		{"format unknown", []string{"--url", closed, "--format", "xml"}, 2, "enum value must be one of table,csv,json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := workloadsCLI(t, c.args...)
			require.Equal(t, c.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			require.Empty(t, stdout)
			if strings.HasSuffix(c.want, "\n") {
				require.Equal(t, c.want, stderr)
			} else {
				require.Contains(t, stderr, c.want)
			}
		})
	}
}

// ownCPUUsage prints the CPU time of the cgroup the shell runs in, as
// the container sees it: cpuacct.usage (ns) on cgroup v1, cpu.stat's
// usage_usec on v2.
const ownCPUUsage = `cat /sys/fs/cgroup/cpu,cpuacct/cpuacct.usage 2>/dev/null || cat /sys/fs/cgroup/cpuacct/cpuacct.usage 2>/dev/null || grep usage_usec /sys/fs/cgroup/cpu.stat`

// parseCPUUsage reads ownCPUUsage's output, in seconds.
func parseCPUUsage(t *testing.T, out string) float64 {
	t.Helper()
	f := strings.Fields(out)
	require.NotEmpty(t, f, "the container's CPU usage: %q", out)
	v, err := strconv.ParseFloat(f[len(f)-1], 64)
	require.NoError(t, err, "the container's CPU usage: %q", out)
	if f[0] == "usage_usec" {
		return v / 1e6
	}
	return v / 1e9
}
