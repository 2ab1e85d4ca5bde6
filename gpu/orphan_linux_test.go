package gpu

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
)

// TestOrphanedMemoryRealZombie: on the real /proc, a child that exited
// and was not waited for (a zombie) and a pid no Linux gives are orphans
// the driver lists memory for; this test's own process is not.
func TestOrphanedMemoryRealZombie(t *testing.T) {
	if _, err := os.Stat("/proc/1"); err != nil {
		t.Skip("/proc/1 not visible")
	}
	child := exec.Command("/bin/sh", "-c", "exit 0")
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Wait() }) // reaps it
	pid := child.Process.Pid
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err == nil && statState(b) == 'Z'
	}, 10*time.Second, 10*time.Millisecond, "the child exits and, not waited for, stays a zombie")

	m := newMockMachine(t, 1)
	m.procs[0] = []nvml.ProcessInfo{
		{Pid: uint32(os.Getpid()), UsedGpuMemory: 4 << 30},
		{Pid: uint32(pid), UsedGpuMemory: 1 << 30},
		{Pid: gputest.GonePID, UsedGpuMemory: 2 << 30},
	}
	clock := newFakeClock()
	o := mockOptions(m, clock)
	o.ProcRoot = "/proc"
	c, reg := testCollector(t, o)
	gpu0 := map[string]string{"gpu": "0"}
	c.collectOnce(bg)
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_processes", gpu0))
	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	// The zombie's status still names its owner, this test's user: its
	// 1 GiB is theirs; the pid gone altogether is nobody's known.
	byUser := map[string]float64{}
	for _, s := range gather(t, reg, "gpuscope_gpu_orphaned_memory_bytes") {
		byUser[s.labels["user"]] += s.value
	}
	owner := strconv.Itoa(os.Getuid()) // the test collector reads no passwd: the uid
	require.Equal(t, map[string]float64{"": 2 << 30, owner: 1 << 30}, byUser)
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_processes", map[string]string{"gpu": "0", "user": owner}))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_processes", map[string]string{"gpu": "0", "user": ""}))
	cs := gather(t, reg, "gpuscope_gpu_container_memory_used_bytes")
	require.Len(t, cs, 1, "this test's process")
	self, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	id, err := cgroupIDFromProcFile(bytes.TrimSpace(self))
	require.NoError(t, err)
	require.Equal(t, id, cs[0].labels["id"])

	// Reaped: the pid is gone, and still an orphan while the driver lists it.
	require.NoError(t, child.Wait())
	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	require.Equal(t, 2.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_processes", gpu0), "both nobody's known now")
}
