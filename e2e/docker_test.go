//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// dockerConfig is gpuscope's config for the Docker tests: 1 s scrapes and
// rule evaluations, cAdvisor asking the test's private dockerd (%s), no
// GPUs, and the built-in rules 30 times faster, so that the container
// alerts' 5-minute windows and `for` take 10 s.
const dockerConfig = `
global:
  scrape_interval: 1s
  evaluation_interval: 1s
cadvisor:
  docker_endpoint: %s
gpu: {backend: none}
rules:
  builtin:
    time_scale: 30
`

// dockerScrape is dockerConfig's scrape interval.
const dockerScrape = time.Second

// dockerImage is the busybox image the tests build on the private daemon;
// the tag checks that the image label is the reference as given to
// docker run.
const dockerImage = "gpuscope-e2e/busybox:1"

// TestDocker runs real Docker containers on a private dockerd and one
// gpuscope that asks it for names: each container's series carry its
// name, image and compose labels within two scrapes of its start; a
// `--cpus 0.5` burner uses 0.4-0.6 cores and fires ContainerCPUSaturated
// naming it; a process killed by the container's memory limit raises
// ContainerOOMKilled naming it; a removed container's series go stale.
// Beside it, a gpuscope whose Docker socket is absent, and one run as an
// ordinary user whom the socket refuses, name the same containers by
// their short id and say so in one log line.
//
// Not parallel, as TestServeContainerCPU: it measures a CPU rate over 10 s
// of 1 s scrapes of cAdvisor's timestamped samples, and with other tests'
// gpuscopes walking every cgroup beside it cAdvisor's housekeeping fell
// seconds behind (a loaded 2-core machine: no two samples in the window).
func TestDocker(t *testing.T) {
	pkgtest.Require(t, true, "dockerd", "docker", "docker-compose", "busybox", "setpriv")
	d := pkgtest.StartDockerd(t, pkgtest.DockerdOptions{})
	img := d.BusyboxImage(t, dockerImage)

	dir := t.TempDir()
	p := serveFavoured(t, "--config.file="+writeConfig(t, t.TempDir(), fmt.Sprintf(dockerConfig, d.Host())))

	// Docker allows [a-zA-Z0-9][a-zA-Z0-9_.-]+: a name with each of them,
	// doubled, that a path cleaner or a label sanitiser could change.
	const burnerName = "0dd.Name__with..dots-and-_dashes-"
	var (
		burnerID      string
		burnerStarted time.Time
	)
	t.Run("names", func(t *testing.T) {
		// The burner: two busy processes under --cpus 0.5, with the
		// highest CPU weight there is, so that a busy machine does not
		// decide its rate: one process at ten times the default weight got
		// 0.41-0.45 cores with a load of 10-15 on two cores (other tests'
		// favoured cgroups have that weight too), and
		// ContainerCPUSaturated's 0.8 of the limit came and went. The
		// quota bounds what the weight can take from others to half a core.
		id, took := dockerRun(t, d, p, burnerName, "--cpus", "0.5", "--memory", "32m", "--cpu-shares", maxCPUShares, img, "sh", "-c", "yes >/dev/null & yes >/dev/null")
		burnerID, burnerStarted = id, time.Now().Add(-took)
		t.Logf("%s's series %s after docker run returned", burnerName, took.Round(time.Millisecond))
		require.LessOrEqual(t, took, 2*dockerScrape+dockerScrape/2,
			"series with the workload within two scrapes (plus the poll's own time) of docker run")
	})
	require.NotEmpty(t, burnerID, "the burner runs")
	maxCPUWeight(t, "docker")

	t.Run("compose", func(t *testing.T) {
		const project = "e2e-proj_1"
		compose := filepath.Join(dir, "compose.yml")
		// network_mode none: the daemon has no bridge, and compose would
		// create a network for the project otherwise.
		require.NoError(t, os.WriteFile(compose, []byte(fmt.Sprintf(`version: "2.4"
services:
  web.api:
    image: %s
    command: ["sleep", "3600"]
    network_mode: none
`, img)), 0o644))
		up := time.Now()
		pkgtest.Run(t, pkgtest.Cmd{Env: d.Env(), Timeout: 2 * time.Minute}, "docker-compose", "-p", project, "-f", compose, "up", "-d")
		took := time.Since(up)
		// No `docker-compose down` (10 s of Python on a busy machine): the
		// daemon's cleanup removes every container, and network_mode none
		// made no network.
		var s model.Metric
		wait := waitSeries(t, p, fmt.Sprintf(`container_memory_working_set_bytes{compose_project=%q}`, project), func(m model.Metric) { s = m })
		t.Logf("compose service's series %s after docker-compose up -d returned (which took %s)", wait.Round(time.Millisecond), took.Round(time.Millisecond))
		require.LessOrEqual(t, wait, 2*dockerScrape+dockerScrape/2)
		require.Equal(t, model.LabelValue(project+"/web.api"), s["workload"])
		require.Equal(t, model.LabelValue("web.api"), s["compose_service"])
		require.Equal(t, model.LabelValue("docker"), s["runtime"])
		require.Equal(t, model.LabelValue(img), s["image"])
	})

	t.Run("unicode", func(t *testing.T) {
		// Docker refuses a name beyond [a-zA-Z0-9][a-zA-Z0-9_.-]; labels
		// take any UTF-8, and compose's labels make the workload: its
		// value must keep them exactly.
		_, errOut, err := d.Output("create", "--network", "none", "--name", "wéb", img)
		require.Error(t, err)
		require.Contains(t, errOut, "Invalid container name")
		const project, service = "prøject-ü 1", "wéb.ñ_2"
		d.Run(t, "run", "-d", "--network", "none", "--name", "unicode-labels",
			"--label", "com.docker.compose.project="+project, "--label", "com.docker.compose.service="+service, img, "sleep", "3600")
		waitSeries(t, p, `container_memory_working_set_bytes{name="unicode-labels"}`, func(m model.Metric) {
			require.Equal(t, model.LabelValue(project+"/"+service), m["workload"], "%s", m)
			require.Equal(t, model.LabelValue(project), m["compose_project"], "%s", m)
			require.Equal(t, model.LabelValue(service), m["compose_service"], "%s", m)
		})
	})

	t.Run("cpu rate", func(t *testing.T) {
		// Once the 10 s window holds only the burner's run (and its first
		// two scrapes have passed): before, the rate climbs through 0.4.
		time.Sleep(time.Until(burnerStarted.Add(10*time.Second + 2*dockerScrape)))
		q := fmt.Sprintf(`rate(container_cpu_usage_seconds_total{workload=%q}[10s])`, burnerName)
		var last float64
		eventually(t, 30*time.Second, "the --cpus 0.5 burner's rate over 10 s within 0.4-0.6 cores", func() error {
			v, err := p.instant(q)
			if err != nil {
				return err
			}
			if len(v) != 1 {
				return fmt.Errorf("%s: %d series; the burner's samples: %s", q, len(v), dockerSeries(p, fmt.Sprintf(`timestamp(container_cpu_usage_seconds_total{id="/docker/%s"})`, burnerID)))
			}
			last = float64(v[0].Value)
			if last < 0.4 || last > 0.6 {
				return fmt.Errorf("rate %.3f outside [0.4, 0.6]", last)
			}
			return nil
		})
		t.Logf("burner's CPU rate: %.3f cores", last)
	})

	t.Run("ContainerCPUSaturated", func(t *testing.T) {
		a := waitAlert(t, p, "ContainerCPUSaturated", burnerName, 60*time.Second)
		require.Equal(t, model.LabelValue("docker"), a.Labels["runtime"])
		require.Equal(t, model.LabelValue(img), a.Labels["image"])
		require.Contains(t, string(a.Annotations["summary"]), burnerName, "the summary names the container")
		t.Logf("summary: %s", a.Annotations["summary"])
	})

	t.Run("ContainerOOMKilled", func(t *testing.T) {
		const name = "oom.victim"
		// No swap to spill into: the 64 MiB buffer must meet the 32 MiB limit.
		dockerRun(t, d, p, name, "--memory", "32m", "--memory-swap", "32m", img, "sleep", "3600")
		// The counter must be scraped at 0 before the kill: increase()
		// counts nothing on a series whose first sample is already 1.
		waitSeries(t, p, fmt.Sprintf(`container_oom_events_total{workload=%q} == 0`, name), nil)
		out, errOut, err := d.Output("exec", name, "dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1")
		require.Error(t, err, "dd of a 64 MiB block in a 32 MiB container is killed\n%s%s", out, errOut)
		require.Contains(t, err.Error(), "137", "killed by SIGKILL (the OOM killer): %s%s", out, errOut)
		a := waitAlert(t, p, "ContainerOOMKilled", name, 60*time.Second)
		require.Equal(t, model.LabelValue("docker"), a.Labels["runtime"])
		require.Contains(t, string(a.Annotations["summary"]), name, "the summary names the container")
		t.Logf("summary: %s", a.Annotations["summary"])
	})

	// The same containers seen by a gpuscope with no Docker socket, and by
	// one run as an ordinary user, as the packaged service runs, whom the
	// daemon's socket (0660, root) refuses. Started only now, so that
	// they do not compete with the burner and p before. Favoured too: a
	// cAdvisor scrape of a loaded machine's cgroups can miss the 1 s
	// scrape timeout.
	absent := "unix://" + filepath.Join(dir, "no-such-docker.sock")
	blind := serveFavoured(t, "--config.file="+writeConfig(t, t.TempDir(), fmt.Sprintf(dockerConfig, absent)))
	denied := serveAsNobody(t, fmt.Sprintf(dockerConfig, d.Host()))
	for _, c := range []struct {
		name string
		p    *process
	}{
		{"bad input: no docker socket", blind},
		{"bad input: docker socket refuses the user", denied},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Without a socket the burner is a raw cgroup: Docker's short
			// id, runtime docker, no image or name.
			short := "docker-" + burnerID[:12]
			var s model.Metric
			waitSeries(t, c.p, fmt.Sprintf(`container_cpu_usage_seconds_total{workload=%q}`, short), func(m model.Metric) { s = m })
			require.Equal(t, model.LabelValue("docker"), s["runtime"])
			require.Empty(t, s["image"])
			require.Empty(t, s["name"])
			// Several scrapes on, Docker is named in one log line, the
			// start's (the test's temporary paths, /tmp/TestDocker..., do
			// not count).
			time.Sleep(3 * dockerScrape)
			mentions := regexp.MustCompile(`(?i)(^|[^a-z])docker`)
			var lines []string
			for _, l := range strings.Split(c.p.out.String(), "\n") {
				if mentions.MatchString(l) {
					lines = append(lines, l)
				}
			}
			require.Len(t, lines, 1, "one log line about Docker, not one per scrape")
			require.Regexp(t, regexp.MustCompile(`cAdvisor started.*runtimes_not_found=\S*docker`), lines[0])
			t.Logf("the line: %s", lines[0])
		})
	}

	t.Run("removed container goes stale", func(t *testing.T) {
		d.Run(t, "rm", "-f", burnerName)
		removed := time.Now()
		q := fmt.Sprintf(`container_cpu_usage_seconds_total{workload=%q}`, burnerName)
		eventually(t, 10*dockerScrape, "the removed container's series stale", func() error {
			v, err := p.instant(q)
			if err != nil {
				return err
			}
			if len(v) != 0 {
				return fmt.Errorf("still %d series at now: %v", len(v), v)
			}
			return nil
		})
		t.Logf("stale %s after docker rm -f returned", time.Since(removed).Round(time.Millisecond))
	})
}

// maxCPUShares is cgroup v1's highest cpu.shares (v2's cpu.weight: 10000).
const maxCPUShares = "262144"

// maxCPUWeight gives the cgroup at path (below each CPU hierarchy) the
// highest CPU weight, for a burner whose CPU quota bounds what it takes.
func maxCPUWeight(t *testing.T, path string) {
	t.Helper()
	set := 0
	for _, f := range []struct{ file, value string }{
		{"cpu/" + path + "/cpu.shares", maxCPUShares},
		{"cpu,cpuacct/" + path + "/cpu.shares", maxCPUShares},
		{path + "/cpu.weight", "10000"},
	} {
		p := filepath.Join(cgroupRoot, f.file)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := os.WriteFile(p, []byte(f.value), 0o644); err != nil {
			t.Logf("no CPU weight for %s: %v", p, err)
			continue
		}
		set++
	}
	if set == 0 {
		t.Logf("no CPU weight for %s: the burner runs with the default", path)
	}
}

// serveAsNobody is serveFavoured for gpuscope run as the user nobody
// (65534) with the config text, its data and config in a directory of
// that user's.
func serveAsNobody(t *testing.T, config string) *process {
	t.Helper()
	const nobody = 65534
	dir, err := os.MkdirTemp("", "gpuscope-e2e-nobody")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, os.RemoveAll(dir)) })
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chown(dir, nobody, nobody))
	data := filepath.Join(dir, "data")
	require.NoError(t, os.Mkdir(data, 0o700))
	require.NoError(t, os.Chown(data, nobody, nobody))
	cfg := writeConfig(t, dir, config)
	setpriv := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", binary}
	cg := newCPUCgroup(t, fmt.Sprintf("gpuscope-e2e-nobody-%d", rand.IntN(1e6)))
	return serveWith(t, data, func(all []string) *process {
		// As serveInCgroup: the shell joins the cgroups as root, then
		// becomes gpuscope as nobody.
		sh := []string{"-c", `while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@"`, "sh"}
		if cg != nil {
			for _, d := range cg.dirs {
				sh = append(sh, filepath.Join(d, "cgroup.procs"))
			}
		}
		return startCommand(t, exec.Command("/bin/sh", append(append(append(sh, "--"), setpriv...), all...)...), all)
	}, []string{"--config.file=" + cfg})
}

// dockerRun starts a container with `docker run -d --network none --name
// name args...` and waits for its series in p: CPU and working set with
// workload name, runtime docker and the image as given (every container
// of these tests runs dockerImage). It returns the
// container's id and the time from docker run returning to both series.
func dockerRun(t *testing.T, d *pkgtest.Dockerd, p *process, name string, args ...string) (string, time.Duration) {
	t.Helper()
	id := strings.TrimSpace(d.Run(t, append([]string{"run", "-d", "--network", "none", "--name", name}, args...)...))
	started := time.Now()
	require.Regexp(t, `^[0-9a-f]{64}$`, id, "docker run -d prints the id")
	var took time.Duration
	for _, metric := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes"} {
		waitSeries(t, p, fmt.Sprintf(`%s{workload=%q}`, metric, name), func(m model.Metric) {
			require.Equal(t, model.LabelValue("docker"), m["runtime"], "%s", m)
			require.Equal(t, model.LabelValue(dockerImage), m["image"], "%s", m)
			require.Equal(t, model.LabelValue(name), m["name"], "cAdvisor's own name label: %s", m)
			require.Equal(t, model.LabelValue("/docker/"+id), m["id"], "%s", m)
		})
		took = time.Since(started)
	}
	return id, took
}

// waitSeries polls q until it returns exactly one series, passes it to
// check (when not nil) and returns how long the wait took.
func waitSeries(t *testing.T, p *process, q string, check func(model.Metric)) time.Duration {
	t.Helper()
	start := time.Now()
	var m model.Metric
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := p.instant(q)
		if err == nil && len(v) == 1 {
			m = v[0].Metric
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no one series after 30s: %v %v\nDocker's containers as gpuscope has them: %s", q, v, err,
				dockerSeries(p, `container_memory_working_set_bytes{id=~"/docker/.+"}`))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	if check != nil {
		check(m)
	}
	return took
}

// dockerSeries says what q returns, and whether the cadvisor job is up,
// for a failure message.
func dockerSeries(p *process, q string) string {
	v, err := p.instant(q)
	up, upErr := p.instant(`up{job="cadvisor"}`)
	return fmt.Sprintf("%s = %v (%v); at %s %v (%v)", q, v, err, time.Now().Format(time.TimeOnly), up, upErr)
}

// waitAlert waits until /api/v1/alerts has alertname firing with the
// workload label, checks that the ALERTS series agrees, and returns it.
func waitAlert(t *testing.T, p *process, alertname, workload string, timeout time.Duration) promv1.Alert {
	t.Helper()
	var found promv1.Alert
	start := time.Now()
	eventually(t, timeout, alertname+" firing for "+workload, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		alerts, err := p.api().Alerts(ctx)
		if err != nil {
			return err
		}
		var names []string
		for _, a := range alerts.Alerts {
			names = append(names, fmt.Sprintf("%s{workload=%q} %s", a.Labels["alertname"], a.Labels["workload"], a.State))
			if string(a.Labels["alertname"]) == alertname && string(a.Labels["workload"]) == workload && a.State == promv1.AlertStateFiring {
				found = a
				return nil
			}
		}
		return fmt.Errorf("not among %v", names)
	})
	t.Logf("%s firing for %s after %s", alertname, workload, time.Since(start).Round(time.Millisecond))
	v, err := p.instant(fmt.Sprintf(`ALERTS{alertname=%q, alertstate="firing", workload=%q}`, alertname, workload))
	require.NoError(t, err)
	require.Len(t, v, 1, "ALERTS has the firing alert with the workload")
	return found
}
