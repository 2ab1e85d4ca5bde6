package cadvisor

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/cadvisor/lib/container"
	"github.com/google/cadvisor/lib/manager"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuscope/gpuscope/workload"
)

func TestMetricSet(t *testing.T) {
	set, err := DefaultConfig().MetricSet()
	require.NoError(t, err)
	for _, off := range DefaultDisabledMetrics {
		require.False(t, set.Has(off), "%s is off by default", off)
	}
	for _, on := range []container.MetricKind{container.CpuUsageMetrics, container.MemoryUsageMetrics, container.NetworkUsageMetrics, container.DiskIOMetrics} {
		require.True(t, set.Has(on), "%s is on by default", on)
	}

	set, err = Config{EnableMetrics: []string{"tcp", "percpu"}, DisableMetrics: []string{"network"}}.MetricSet()
	require.NoError(t, err)
	require.True(t, set.Has(container.NetworkTcpUsageMetrics))
	require.True(t, set.Has(container.PerCpuUsageMetrics))
	require.False(t, set.Has(container.NetworkUsageMetrics))

	_, err = Config{EnableMetrics: []string{"gpu"}}.MetricSet()
	require.ErrorContains(t, err, `cadvisor.enable_metrics: unknown metric set "gpu"`)
	_, err = Config{DisableMetrics: []string{"cpus"}}.MetricSet()
	require.ErrorContains(t, err, `cadvisor.disable_metrics: unknown metric set "cpus"`)
}

// TestCollectorSeesANewCgroup runs the real cAdvisor manager against this
// machine's cgroups: a cgroup created after start is discovered and its CPU
// usage exported with cAdvisor's names and labels.
func TestCollectorSeesANewCgroup(t *testing.T) {
	name := fmt.Sprintf("gpuscope-cadvisor-test-%d", time.Now().UnixNano()%1e6)
	dirs := makeCgroup(t, name)
	// cAdvisor leaves out the CPU series of a cgroup that has used no CPU;
	// give it a process that does a little work, then sleeps.
	proc := exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec sleep 60")
	require.NoError(t, proc.Start())
	t.Cleanup(func() { _ = proc.Process.Kill(); _ = proc.Wait() })
	joinCgroup(t, dirs, proc.Process.Pid)

	c, err := New(Options{Config: DefaultConfig(), Interval: 200 * time.Millisecond})
	require.NoError(t, err)
	runCollector(t, c)

	id := "/" + name
	require.Eventually(t, func() bool {
		m, err := containerSeries(c, "container_cpu_usage_seconds_total", id)
		if err != nil || m == nil {
			return false
		}
		require.Equal(t, "total", labelValue(m, "cpu"), "percpu is off: one series per container")
		return true
	}, 20*time.Second, 100*time.Millisecond, "container %s in /metrics/cadvisor", id)

	md, ok := c.Lookup(id)
	require.True(t, ok, "Lookup knows the cgroup")
	require.Equal(t, workload.Metadata{}, md, "a raw cgroup has no name, image, labels or runtime")
	_, ok = c.Lookup("/no-such-cgroup")
	require.False(t, ok)
}

// TestScrapeBeforeRun: the manager is created by Run (which can take
// seconds without Docker), so a scrape that comes first waits within its
// own deadline and is told why it got nothing, and Lookup knows no
// container; once Run has created the manager, the same handler serves
// cAdvisor's metrics.
func TestScrapeBeforeRun(t *testing.T) {
	// The interval of TestCollectorSeesANewCgroup: cAdvisor keeps it in a
	// package variable that the previous test's housekeeping still reads.
	c, err := New(Options{Config: DefaultConfig(), Interval: 200 * time.Millisecond})
	require.NoError(t, err)
	h := c.Handler()

	ctx, cancelScrape := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelScrape()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics/cadvisor", nil).WithContext(ctx))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Contains(t, rec.Body.String(), "cAdvisor is still starting")
	_, ok := c.Lookup("/")
	require.False(t, ok, "no manager yet: no container is known")

	runCollector(t, c)
	// No deadline: this scrape waits for Run to create the manager.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics/cadvisor", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "machine_cpu_cores ", "cAdvisor's machine metrics")
	require.Contains(t, rec.Body.String(), `container_cpu_usage_seconds_total{cpu="total",id="/"`, "the root cgroup's stats are in the first scrape")
	require.Eventually(t, func() bool { _, ok := c.Lookup("/"); return ok }, 20*time.Second, 50*time.Millisecond, "the root cgroup, once housekeeping has run")
}

func TestNewRejectsZeroInterval(t *testing.T) {
	_, err := New(Options{Config: DefaultConfig()})
	require.ErrorContains(t, err, "housekeeping interval must be positive")
}

// makeCgroup creates name in the cpu, cpuacct and memory hierarchies (v1) or the
// unified one (v2), skipping where the kernel refuses (not root).
func makeCgroup(t *testing.T, name string) []string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		t.Skipf("no cgroup filesystem: %v", err)
	}
	bases := []string{"/sys/fs/cgroup"}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		bases = nil
		// cAdvisor reads a v1 container's stats from every hierarchy a
		// runtime creates it in; one missing from memory has no stats.
		for _, c := range []string{"cpu", "cpuacct", "memory"} {
			if p, err := filepath.EvalSymlinks(filepath.Join("/sys/fs/cgroup", c)); err == nil && !slices.Contains(bases, p) {
				bases = append(bases, p)
			}
		}
	}
	var dirs []string
	for _, b := range bases {
		d := filepath.Join(b, name)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			t.Skipf("kernel refused to create cgroup %s (tests need root): %v", d, err)
		}
		dirs = append(dirs, d)
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			// The kernel refuses while the killed process is still exiting.
			for i := 0; i < 50 && os.Remove(d) != nil && !errors.Is(statErr(d), os.ErrNotExist); i++ {
				time.Sleep(50 * time.Millisecond)
			}
		}
	})
	return dirs
}

func statErr(p string) error { _, err := os.Stat(p); return err }

// joinCgroup moves pid into the cgroup's directories from makeCgroup.
func joinCgroup(t *testing.T, dirs []string, pid int) {
	t.Helper()
	for _, d := range dirs {
		require.NoError(t, os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644))
	}
}

// runCollector runs c until the test ends, then requires a clean stop.
func runCollector(t *testing.T, c *Collector) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// containerSeries is the first series of metric that c exports for the
// container id, or nil.
func containerSeries(c *Collector, metric, id string) (*dto.Metric, error) {
	mfs, err := c.Gatherer().Gather()
	if err != nil {
		return nil, err
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelValue(m, "id") == id {
				return m, nil
			}
		}
	}
	return nil, nil
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestOOMKillCounted: a process killed by the kernel for its cgroup's
// memory limit shows in that container's container_oom_events_total, the
// counter the cAdvisor library itself leaves at 0.
func TestOOMKillCounted(t *testing.T) {
	name := fmt.Sprintf("gpuscope-oom-test-%d", time.Now().UnixNano()%1e6)
	dirs := makeCgroup(t, name)
	limited := false
	for _, d := range dirs {
		// v1 (memory hierarchy) or v2; with swap the limit covers it too,
		// so the process is killed rather than swapped out.
		for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.max", "memory.swap.max"} {
			value := "16777216"
			if f == "memory.swap.max" {
				value = "0"
			}
			if err := os.WriteFile(filepath.Join(d, f), []byte(value), 0o644); err == nil && (f == "memory.limit_in_bytes" || f == "memory.max") {
				limited = true
			}
		}
	}
	if !limited {
		t.Skip("the kernel refused a memory limit on the test cgroup")
	}

	c, err := New(Options{Config: DefaultConfig(), Interval: 200 * time.Millisecond})
	require.NoError(t, err)
	runCollector(t, c)
	id := "/" + name
	oomEvents := func() (float64, bool) {
		m, err := containerSeries(c, "container_oom_events_total", id)
		require.NoError(t, err)
		return m.GetCounter().GetValue(), m != nil
	}
	require.Eventually(t, func() bool { _, ok := oomEvents(); return ok }, 20*time.Second, 50*time.Millisecond, "container %s in /metrics/cadvisor", id)
	n, _ := oomEvents()
	require.Equal(t, 0.0, n, "no OOM kill yet")
	// The root cgroup counts every kill on the machine (/proc/vmstat).
	machineEvents := func() float64 {
		m, err := containerSeries(c, "container_oom_events_total", "/")
		require.NoError(t, err)
		require.NotNil(t, m, "the root cgroup in /metrics/cadvisor")
		return m.GetCounter().GetValue()
	}
	machineBefore := machineEvents()

	// The shell waits for a line before it becomes the allocating process,
	// so that it is in the cgroup, not its parent's, when it allocates.
	proc := exec.Command("/bin/sh", "-c", "read go; exec tail /dev/zero")
	stdin, err := proc.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, proc.Start())
	t.Cleanup(func() { _ = proc.Process.Kill() })
	joinCgroup(t, dirs, proc.Process.Pid)
	_, err = stdin.Write([]byte("go\n"))
	require.NoError(t, err)
	err = proc.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "tail /dev/zero ends only when killed")
	status, _ := exit.Sys().(syscall.WaitStatus)
	require.Equal(t, syscall.SIGKILL, status.Signal(), "killed by the OOM killer: %v", err)

	require.Eventually(t, func() bool { n, _ := oomEvents(); return n == 1 }, 20*time.Second, 50*time.Millisecond, "one OOM kill counted for %s", id)
	if _, ok := vmstatOOMKills("/proc/vmstat"); ok {
		require.Eventually(t, func() bool { return machineEvents() >= machineBefore+1 }, 20*time.Second, 50*time.Millisecond, "the kill counted for the machine")
	}
}

// TestRuntimeEndpoints: the configured sockets reach the flags cAdvisor's
// runtime clients dial, and an unset one keeps cAdvisor's default.
func TestRuntimeEndpoints(t *testing.T) {
	// cAdvisor's own flags, where the first collector sets them; the test
	// claims a set of its own, so that it writes nothing a running
	// cAdvisor of another test reads.
	for _, name := range []string{"docker", "podman", "containerd"} {
		require.NotNil(t, flag.Lookup(name), "cAdvisor registers --%s", name)
	}
	require.Same(t, manager.HousekeepingInterval, processWide.interval)
	require.Same(t, flag.CommandLine, processWide.flags)
	fs := flag.NewFlagSet("cadvisor", flag.ContinueOnError)
	for _, name := range []string{"docker", "podman", "containerd"} {
		fs.String(name, flag.Lookup(name).DefValue, "")
	}
	interval := time.Duration(0)
	p := &processSettings{interval: &interval, flags: fs}

	c := Config{DockerEndpoint: "unix:///tmp/gpuscope-test/docker.sock", PodmanEndpoint: "unix:///tmp/gpuscope-test/podman.sock"}
	kept, err := p.claim(3*time.Second, c)
	require.NoError(t, err)
	require.Empty(t, kept, "the first collector of the process sets them")
	require.Equal(t, "unix:///tmp/gpuscope-test/docker.sock", fs.Lookup("docker").Value.String())
	require.Equal(t, "unix:///tmp/gpuscope-test/podman.sock", fs.Lookup("podman").Value.String())
	require.Equal(t, flag.Lookup("containerd").DefValue, fs.Lookup("containerd").Value.String(), "an endpoint the config does not set keeps cAdvisor's default")
	require.Equal(t, 3*time.Second, interval)

	// A second collector with other values keeps the first's, and is told.
	kept, err = p.claim(time.Second, Config{DockerEndpoint: "unix:///tmp/other/docker.sock", PodmanEndpoint: c.PodmanEndpoint})
	require.NoError(t, err)
	require.Equal(t, []string{"housekeeping interval 3s (not 1s)", "docker endpoint unix:///tmp/gpuscope-test/docker.sock (not unix:///tmp/other/docker.sock)"}, kept)
	require.Equal(t, "unix:///tmp/gpuscope-test/docker.sock", fs.Lookup("docker").Value.String())
	require.Equal(t, 3*time.Second, interval)
	kept, err = p.claim(3*time.Second, c)
	require.NoError(t, err)
	require.Empty(t, kept, "the same values: nothing to say")
}

// TestInvalidUTF8CgroupKeepsEveryContainer: a cgroup whose name is not
// valid UTF-8 (any user with a delegated cgroup subtree can mkdir one)
// made cAdvisor's collector panic in MustNewConstMetric part-way through
// its containers, so those after it in map order were missing from the
// scrape. Its id is now escaped as the GPU collector escapes it
// (workload.LabelValue), and every container is served.
func TestInvalidUTF8CgroupKeepsEveryContainer(t *testing.T) {
	n := time.Now().UnixNano() % 1e6
	bad := fmt.Sprintf("gpuscope-bad\xff\xfe-test-%d", n)
	good := fmt.Sprintf("gpuscope-good-test-%d", n)
	badDirs, goodDirs := makeCgroup(t, bad), makeCgroup(t, good)
	for _, dirs := range [][]string{badDirs, goodDirs} {
		proc := exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec sleep 60")
		require.NoError(t, proc.Start())
		t.Cleanup(func() { _ = proc.Process.Kill(); _ = proc.Wait() })
		joinCgroup(t, dirs, proc.Process.Pid)
	}

	var logs syncBuffer
	c, err := New(Options{Config: DefaultConfig(), Interval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	runCollector(t, c)

	escaped := workload.LabelValue("/" + bad)
	require.Equal(t, fmt.Sprintf(`/gpuscope-bad\xff\xfe-test-%d`, n), escaped)
	for _, id := range []string{escaped, "/" + good, "/"} {
		require.Eventually(t, func() bool {
			m, err := containerSeries(c, "container_cpu_usage_seconds_total", id)
			require.NoError(t, err, "the gather has no error")
			return m != nil
		}, 20*time.Second, 50*time.Millisecond, "container %q in /metrics/cadvisor", id)
	}
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics/cadvisor", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), fmt.Sprintf(`id="/gpuscope-bad\\xff\\xfe-test-%d"`, n))
	require.NotContains(t, logs.String(), "level=WARN msg=\"error gathering metrics", logs.String())
}

// syncBuffer is a bytes.Buffer safe for a logger written from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
