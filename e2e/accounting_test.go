//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app/apptest"
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

// tableRows parses `gpuscope workloads`' table (apptest's).
var tableRows = apptest.TableRows

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
