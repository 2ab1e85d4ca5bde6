package sim

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
	"github.com/gpuscope/gpuscope/workload"
)

// TestSimPIDJoinsItsContainer: a simulated GPU given the pid of a real
// process reports its use under the container of that process, found
// through /proc/<pid>/cgroup, cAdvisor's id and the shared workload cache
// as for a real GPU process, and not under gpu.sim.gpus[i].container.
// When the process exits the GPU's per-container series go and the read
// fails as for a vanished GPU process (TestSimPIDVanished).
func TestSimPIDJoinsItsContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	// The process: a busy loop in a hand-made cgroup laid out as Docker's
	// cgroupfs driver lays out a container's, limited to 1% of a core;
	// the cgroup is removed when it stops.
	hexID := fmt.Sprintf("5171%060x", os.Getpid())
	id := "/gpuscope-test/docker/" + hexID
	proc, err := startCPUBurner(bg, burnerOptions{
		root: cgroupRoot, id: id, cores: 0.01,
		controllers: []string{"cpu", "cpuacct", "pids"}, // leave the memory cgroup this test runs in alone
		logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Skipf("the kernel refused the cgroup: %v", err)
	}
	t.Cleanup(func() { require.NoError(t, proc.stop()) })

	for _, tc := range []struct {
		name   string
		lookup func(string) (workload.Metadata, bool)
		want   map[string]string
	}{
		{
			name: "cAdvisor knows the container",
			lookup: func(got string) (workload.Metadata, bool) {
				return workload.Metadata{Name: "llama-train", Image: "pytorch:24.01", Runtime: workload.RuntimeDocker}, got == id
			},
			want: map[string]string{"id": id, "name": "llama-train", "workload": "llama-train", "runtime": "docker", "image": "pytorch:24.01"},
		},
		{
			name: "cAdvisor does not know it: named by the path alone",
			want: map[string]string{"id": id, "name": "", "workload": "docker-" + hexID[:12], "runtime": "docker", "image": ""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := gputest.NewClock()
			o := simOptions(clock,
				GPU{Scenario: ScenarioTraining, PID: proc.pid(), Container: "/gpuscope-test/not-used"},
				GPU{Scenario: ScenarioLeak},
			)
			o.ProcRoot = "/proc"
			o.ContainerLookup = tc.lookup
			c, reg := testCollector(t, o)
			sampleOnce(t, c)

			want := map[string]string{"gpu": "0"}
			for k, v := range tc.want {
				want[k] = v
			}
			mem := gputest.MustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", want)
			require.Equal(t, gputest.MustLookup(t, reg, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "0"})*bytesPerMiB, mem, "the GPU's memory, in the process's container")
			require.Equal(t, gputest.MustLookup(t, reg, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "0"}),
				gputest.MustLookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", want))
			require.Equal(t, 1.0, gputest.MustLookup(t, reg, "gpuscope_gpu_container_processes", want))
			require.Len(t, gputest.Gather(t, reg, "gpuscope_gpu_container_memory_used_bytes"), 2, "GPU 0's container and GPU 1's")
			gputest.MustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": "1", "id": "/gpuscope-sim/gpu1"})
			_, ok := gputest.Lookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"id": "/gpuscope-test/not-used"})
			require.False(t, ok, "the pid wins over container")
			_, ok = gputest.Lookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "0"})
			require.False(t, ok, "no failed read")
		})
	}

	t.Run("the process exits", func(t *testing.T) {
		o := simOptions(gputest.NewClock(), GPU{Scenario: ScenarioTraining, PID: proc.pid()})
		o.ProcRoot = "/proc"
		c, reg := testCollector(t, o)
		sampleOnce(t, c)
		gputest.MustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": "0", "id": id})

		require.NoError(t, proc.stop())
		sampleOnce(t, c)
		require.Empty(t, gputest.Gather(t, reg, "gpuscope_gpu_container_memory_used_bytes"))
		require.Equal(t, 1.0, gputest.MustLookup(t, reg, "gpuscope_gpu_collector_errors_total",
			map[string]string{"gpu": "0", "field": "gpuscope_gpu_container_memory_used_bytes"}))
		require.Equal(t, 0.0, gputest.MustLookup(t, reg, "gpuscope_gpu_orphaned_processes", map[string]string{"gpu": "0"}), "it may have just exited")

		// Still listed a cycle later: an orphan.
		sampleOnce(t, c)
		require.Equal(t, 1.0, gputest.MustLookup(t, reg, "gpuscope_gpu_orphaned_processes", map[string]string{"gpu": "0"}))
	})
}

// TestSimPIDUser: a simulated GPU given the pid of a process that uid
// 1000 runs in a login session's cgroup: its per-container series carry
// user="alice" and the workload "alice: session-7" (the host passwd, here
// a fixture, names uid 1000), and the collector's live process list has
// the process with its user and command.
func TestSimPIDUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups and running a process as another user needs root")
	}
	hier := cgroupRoot
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		if hier = v1Hierarchy(cgroupRoot, "cpu"); hier == "" {
			t.Skip("no cpu cgroup hierarchy")
		}
	}
	top := fmt.Sprintf("/gpuscope-test-user-%d", os.Getpid())
	id := top + "/user.slice/user-1000.slice/session-7.scope"
	require.NoError(t, os.MkdirAll(filepath.Join(hier, id), 0o755))
	t.Cleanup(func() {
		for d := id; d != "/"; d = filepath.Dir(d) {
			for i := 0; i < 50 && os.Remove(filepath.Join(hier, d)) != nil; i++ {
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.NoError(t, os.WriteFile(filepath.Join(hier, id, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644))

	passwd := filepath.Join(t.TempDir(), "passwd")
	require.NoError(t, os.WriteFile(passwd, []byte("alice:x:1000:1000::/home/alice:/bin/sh\n"), 0o644))
	o := simOptions(gputest.NewClock(), GPU{Scenario: ScenarioTraining, PID: cmd.Process.Pid})
	o.ProcRoot = "/proc"
	o.Workloads = workload.NewCache(&workload.Options{Users: workload.NewUsers(workload.UsersOptions{PasswdFile: passwd})})
	c, reg := testCollector(t, o)
	sampleOnce(t, c)
	want := map[string]string{"gpu": "0", "id": id, "workload": "alice: session-7", "runtime": "systemd", "user": "alice"}
	for _, m := range []string{"gpuscope_gpu_container_memory_used_bytes", "gpuscope_gpu_container_sm_utilization_percent", "gpuscope_gpu_container_processes"} {
		gputest.MustLookup(t, reg, m, want)
	}
	procs := c.Processes("0").GPUs[0].Processes
	require.Len(t, procs, 1)
	require.Equal(t, uint32(cmd.Process.Pid), procs[0].PID)
	require.Equal(t, "alice", procs[0].User)
	require.Equal(t, "sleep 300", procs[0].Command)
	require.Equal(t, "alice: session-7", procs[0].Container.Workload)
}
