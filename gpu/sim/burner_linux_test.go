package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
)

const cgroupRoot = "/sys/fs/cgroup"

// burnerTest starts a sim whose input-bound GPU burns CPU in a real
// cgroup. It skips where cgroups cannot be written (not root, read-only
// cgroupfs in a container).
func burnerTest(t *testing.T, id string) (*gpu.Collector, *Backend, *gputest.SyncBuffer) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	var logs gputest.SyncBuffer
	o := simOptions(gputest.NewClock(), GPU{Scenario: ScenarioInputBound, Container: id})
	o.Sim.CPUBurn = true
	o.CgroupRoot = cgroupRoot
	o.Interval = 50 * time.Millisecond
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, sim, err := newCollector(o)
	require.NoError(t, err)
	// Leave the memory cgroup this test runs in alone.
	sim.burnControllers = []string{"cpu", "cpuacct", "pids"}
	return c, sim, &logs
}

func TestCPUBurnerRunsInCgroup(t *testing.T) {
	id := fmt.Sprintf("/gpuscope-test/burn-%d", os.Getpid())
	// The parent is removed only by whoever created it: another test run
	// (or one killed earlier) may hold it.
	parentExisted := map[string]bool{}
	for _, h := range []string{"cpu", "cpuacct", "pids"} {
		if dir := v1Hierarchy(cgroupRoot, h); dir != "" {
			_, err := os.Stat(filepath.Join(dir, "gpuscope-test"))
			parentExisted[h] = err == nil
		}
	}
	c, sim, logs := burnerTest(t, id)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	require.NoError(t, c.SampleOnce(ctx))
	if len(sim.burners) == 0 {
		t.Skipf("the kernel refused the cgroup: %s", logs.String())
	}
	require.Len(t, sim.burners, 1)
	pid := sim.burners[0].pid()

	// The burner sits in the container's cgroup, and the pid-to-container
	// mapping used for GPU processes finds it there: a simulated GPU
	// process given its pid is in the container.
	_, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	require.NoError(t, err)
	po := simOptions(gputest.NewClock(), GPU{Scenario: ScenarioTraining, PID: pid})
	po.ProcRoot = "/proc"
	pc, preg := testCollector(t, po)
	sampleOnce(t, pc)
	gputest.MustLookup(t, preg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": "0", "id": id})

	// It is limited to half a core and uses it.
	require.Equal(t, "50000", cgroupCPUQuota(t, id))
	u1, t1 := cgroupCPUUsage(t, id), time.Now()
	time.Sleep(time.Second)
	u2, t2 := cgroupCPUUsage(t, id), time.Now()
	cores := (u2 - u1).Seconds() / t2.Sub(t1).Seconds()
	require.Greater(t, cores, 0.2, "the burner burns")
	require.Less(t, cores, 0.75, "within its quota")

	// The GPU side names the same container.
	reg := newRegistry(t, c)
	gputest.MustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": "0", "id": id})

	require.NoError(t, sim.Close())
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "burner killed")
	for _, h := range []string{"cpu", "cpuacct", "pids"} {
		if dir := v1Hierarchy(cgroupRoot, h); dir != "" {
			_, err := os.Stat(filepath.Join(dir, id))
			require.ErrorIs(t, err, os.ErrNotExist, "cgroup removed from %s", h)
			if !parentExisted[h] {
				_, err = os.Stat(filepath.Join(dir, "gpuscope-test"))
				require.ErrorIs(t, err, os.ErrNotExist, "parent created for it removed from %s", h)
			}
		}
	}
}

func TestCPUBurnerStopsWithRun(t *testing.T) {
	id := fmt.Sprintf("/gpuscope-test/run-%d", os.Getpid())
	c, sim, logs := burnerTest(t, id)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	require.Eventually(t, func() bool {
		return bytes.Contains(logs.Bytes(), []byte("Burning CPU")) || bytes.Contains(logs.Bytes(), []byte("Cannot burn CPU"))
	}, 5*time.Second, 5*time.Millisecond)
	if bytes.Contains(logs.Bytes(), []byte("Cannot burn CPU")) {
		cancel()
		require.NoError(t, <-done)
		t.Skipf("the kernel refused the cgroup: %s", logs.String())
	}
	pid := pidFromLog(t, logs.String())
	cancel()
	require.NoError(t, <-done)
	require.Empty(t, sim.burners)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "burner killed when Run ends")
	_, err := os.Stat(filepath.Join(v1Hierarchy(cgroupRoot, "cpu"), id))
	require.True(t, errors.Is(err, os.ErrNotExist) || v1Hierarchy(cgroupRoot, "cpu") == "")
}

func TestCPUBurnerWithoutRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as root")
	}
	_, err := startCPUBurner(bg, burnerOptions{root: cgroupRoot, id: "/x", cores: 0.5})
	require.ErrorContains(t, err, "root")
}

func pidFromLog(t *testing.T, logs string) int {
	t.Helper()
	i := strings.Index(logs, "pid=")
	require.GreaterOrEqual(t, i, 0, logs)
	f := strings.Fields(logs[i+4:])
	pid, err := strconv.Atoi(f[0])
	require.NoError(t, err)
	return pid
}

func cgroupCPUQuota(t *testing.T, id string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		b, err := os.ReadFile(filepath.Join(cgroupRoot, id, "cpu.max"))
		require.NoError(t, err)
		return strings.Fields(string(b))[0]
	}
	b, err := os.ReadFile(filepath.Join(v1Hierarchy(cgroupRoot, "cpu"), id, "cpu.cfs_quota_us"))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// cgroupCPUUsage is the container's CPU time as cAdvisor reads it.
func cgroupCPUUsage(t *testing.T, id string) time.Duration {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		b, err := os.ReadFile(filepath.Join(cgroupRoot, id, "cpu.stat"))
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "usage_usec" {
				us, err := strconv.ParseInt(f[1], 10, 64)
				require.NoError(t, err)
				return time.Duration(us) * time.Microsecond
			}
		}
		t.Fatal("no usage_usec in cpu.stat")
	}
	b, err := os.ReadFile(filepath.Join(v1Hierarchy(cgroupRoot, "cpuacct"), id, "cpuacct.usage"))
	require.NoError(t, err)
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	return time.Duration(ns)
}

// TestCPUBurnersShareACgroup: two gpuscopes burning in the same
// container (two demos) leave nothing behind whichever stops first: the
// one that created the cgroups cannot remove them while the other's
// burner is in them, so the last one out does.
func TestCPUBurnersShareACgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	id := fmt.Sprintf("/gpuscope-test-shared-%d/input-bound", os.Getpid())
	o := burnerOptions{root: cgroupRoot, id: id, cores: 0.1, controllers: []string{"cpu", "cpuacct"}, logger: slog.New(slog.DiscardHandler)}
	first, err := startCPUBurner(bg, o)
	if err != nil {
		t.Skipf("the kernel refused the cgroup: %v", err)
	}
	second, err := startCPUBurner(bg, o)
	require.NoError(t, err)
	require.Empty(t, second.created, "the first created them")
	require.NotEmpty(t, second.joined)
	require.False(t, first.sharing())
	require.True(t, second.sharing(), "the second says it shares the first's cgroup")

	require.Error(t, first.stop(), "busy: the second burner is in it")
	dir := v1Hierarchy(cgroupRoot, "cpu")
	_, err = os.Stat(filepath.Join(dir, id))
	require.NoError(t, err, "still there for the second")
	require.NoError(t, second.stop())
	for _, h := range []string{"cpu", "cpuacct"} {
		_, err = os.Stat(filepath.Join(v1Hierarchy(cgroupRoot, h), filepath.Dir(id)))
		require.ErrorIs(t, err, os.ErrNotExist, "the last one out removed them from %s", h)
	}
}

// TestCPUBurnerReplacesALeftoverCgroup: a demo killed with SIGKILL leaves
// its empty cgroup; the next one makes it anew (its CPU counter from
// zero, its start now) and owns it, rather than joining a stranger.
func TestCPUBurnerReplacesALeftoverCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	id := fmt.Sprintf("/gpuscope-test-leftover-%d/input-bound", os.Getpid())
	dir := filepath.Join(v1Hierarchy(cgroupRoot, "cpu"), id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("the kernel refused the cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir); os.Remove(filepath.Dir(dir)) })
	before, err := os.Stat(dir)
	require.NoError(t, err)

	b, err := startCPUBurner(bg, burnerOptions{root: cgroupRoot, id: id, cores: 0.1, controllers: []string{"cpu"}, logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.False(t, b.sharing(), "an empty cgroup is no other gpuscope's burner")
	require.Equal(t, []string{dir}, b.created, "made anew and owned")
	after, err := os.Stat(dir)
	require.NoError(t, err)
	require.NotEqual(t, before.Sys().(*syscall.Stat_t).Ino, after.Sys().(*syscall.Stat_t).Ino, "a new cgroup, not the leftover")

	require.NoError(t, b.stop())
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "removed at stop")
}
