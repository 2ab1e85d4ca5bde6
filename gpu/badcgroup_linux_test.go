package gpu

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuscope/gpuscope/workload"
)

// makeTestCgroup creates the cgroup name where gpuscope reads a
// process's container from (the cpu hierarchy on cgroup v1 and hybrid
// machines, the unified one on v2) and returns its container id and a
// function that moves a pid into it. It skips where the kernel refuses
// (not root, read-only cgroupfs).
func makeTestCgroup(t *testing.T, name string) (id string, join func(pid int)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	const root = "/sys/fs/cgroup"
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		t.Skipf("no cgroup filesystem: %v", err)
	}
	base := root
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		base = filepath.Join(root, "cpu")
		if err := unix.Statfs(base, &st); err != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
			t.Skip("no cgroup v1 cpu hierarchy")
		}
	}
	dir := filepath.Join(base, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		t.Skipf("the kernel refused cgroup %q: %v", dir, err)
	}
	t.Cleanup(func() {
		// The kernel refuses while a killed process is still exiting.
		for i := 0; i < 100 && os.Remove(dir) != nil; i++ {
			if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return "/" + name, func(pid int) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644))
	}
}

// startSleeper starts a process that lives until the test ends.
func startSleeper(t *testing.T) int {
	t.Helper()
	p := exec.Command("/bin/sleep", "300")
	require.NoError(t, p.Start())
	t.Cleanup(func() { _ = p.Process.Kill(); _ = p.Wait() })
	return p.Process.Pid
}

// TestInvalidUTF8CgroupKeepsEveryGPU is R1 of the second review: a GPU
// process in a cgroup whose name is not valid UTF-8 (any user with a
// delegated cgroup subtree can mkdir one) made the render panic, and every
// GPU's series vanished while gpuscope_gpu_collector_up stayed 1. Here the
// cgroup is real, the process in it real, and go-nvml's mock lists its pid
// on GPU 0: every GPU keeps its series, and the container has its own,
// labelled with its escaped path.
func TestInvalidUTF8CgroupKeepsEveryGPU(t *testing.T) {
	name := fmt.Sprintf("gpuscope-test-bad\xff\xfe-%d", os.Getpid())
	id, join := makeTestCgroup(t, name)
	pid := startSleeper(t)
	join(pid)
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	require.NoError(t, err)
	require.Contains(t, string(cg), name, "the process is in the cgroup")

	m := newMockMachine(t, 2)
	m.procs[0] = []nvml.ProcessInfo{{Pid: uint32(pid), UsedGpuMemory: 3 << 30}}
	o := mockOptions(m, newFakeClock())
	o.ProcRoot = "/proc"
	c, reg := testCollector(t, o)
	c.collectOnce(bg)

	for _, gpu := range []string{"0", "1"} {
		for _, name := range []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS", "gpuscope_gpu_last_sample_timestamp_seconds"} {
			mustLookup(t, reg, name, map[string]string{"gpu": gpu})
		}
	}
	want := `/gpuscope-test-bad\xff\xfe-` + strconv.Itoa(os.Getpid())
	require.Equal(t, workload.LabelValue(id), want)
	require.Equal(t, float64(3<<30), mustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": "0", "id": want}))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_collector_render_errors_total", nil))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))

	// And in the text /metrics/gpu serves, escaped once more by the
	// exposition format.
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).
		ServeHTTP(rec, httptest.NewRequest("GET", "/metrics/gpu", nil))
	require.Equal(t, 200, rec.Code)
	body := rec.Body.String()
	require.Contains(t, body, `id="/gpuscope-test-bad\\xff\\xfe-`)
	require.Equal(t, 2, strings.Count(body, "DCGM_FI_DEV_GPU_TEMP{"), "both GPUs")
}
