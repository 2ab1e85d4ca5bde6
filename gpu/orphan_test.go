package gpu

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
)

func TestStatState(t *testing.T) {
	for _, tc := range []struct {
		name string
		stat string
		want byte
	}{
		{"sleeping", "42 (bash) S 1 42 42 0 -1\n", 'S'},
		{"zombie", "42 (python3) Z 1 42 42 0 -1\n", 'Z'},
		{"name with a ') Z ' in it", "42 (a) Z (b) R 1 42\n", 'R'},
		{"truncated", "42 (bash)", 0},
		{"garbage", "no parenthesis", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, statState([]byte(tc.stat)))
		})
	}
}

// writeZombie makes <root>/<pid> a zombie's: stat in state Z. A zombie's
// cgroup file stays readable.
func writeZombie(t *testing.T, root string, pid int) {
	t.Helper()
	writeProc(t, root, pid, "0::/zombie-parent\n")
	require.NoError(t, os.WriteFile(filepath.Join(root, strconv.Itoa(pid), "stat"),
		[]byte(strconv.Itoa(pid)+" (python3) Z 1 0 0 0 -1 4227084 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0\n"), 0o644))
}

// TestPIDResolverOrphans: a listed pid with no /proc/<pid>, or a zombie,
// is an orphan from the second consecutive cycle it is found so; one
// that comes back (or is no longer listed) starts over; without /proc/1
// (hidepid) an absent pid is not taken for gone.
func TestPIDResolverOrphans(t *testing.T) {
	proc := t.TempDir()
	writeProc(t, proc, 1, "0::/init.scope\n")
	writeProc(t, proc, 7, "0::/a\n")
	r := newPIDResolver(proc)
	type want struct {
		state    pidState
		orphaned bool
	}
	check := func(pid uint32, w want) {
		t.Helper()
		_, st, _ := r.resolve(pid)
		require.Equal(t, w.state, st, "pid %d state", pid)
		require.Equal(t, w.orphaned, r.orphaned(pid), "pid %d orphaned", pid)
	}

	r.beginCycle()
	check(7, want{pidLive, false})
	check(8, want{pidGone, false})
	check(8, want{pidGone, false}) // listed on a second GPU in the same cycle
	r.endCycle()

	r.beginCycle()
	check(7, want{pidLive, false})
	check(8, want{pidGone, true})
	check(8, want{pidGone, true})
	r.endCycle()

	// The cached pid 7 exits and is a zombie: found at its next check
	// (every cycle with few pids), an orphan in the cycle after.
	require.NoError(t, os.WriteFile(filepath.Join(proc, "7", "stat"), []byte("7 (python3) Z 1 7 7 0 -1 4227084 0 0 0 0 0 0 0 0 20 0 1 0 1007 0 0\n"), 0o644))
	r.beginCycle()
	check(7, want{pidZombie, false})
	check(8, want{pidGone, true})
	r.endCycle()
	r.beginCycle()
	check(7, want{pidZombie, true})
	r.endCycle() // pid 8 not listed: forgotten

	// Reaped and its pid given to a new process: live again.
	writeProcStart(t, proc, 7, "0::/b\n", 5000)
	r.beginCycle()
	id, st, err := r.resolve(7)
	require.NoError(t, err)
	require.Equal(t, pidLive, st)
	require.Equal(t, "/b", id)
	check(8, want{pidGone, false}) // a new streak
	r.endCycle()

	// gpuscope cannot see init (hidepid): an absent pid is unknown, not gone.
	require.NoError(t, os.RemoveAll(filepath.Join(proc, "1")))
	for range 3 {
		r.beginCycle()
		_, st, err := r.resolve(9)
		require.Error(t, err)
		require.Equal(t, pidLive, st)
		require.False(t, r.orphaned(9))
		r.endCycle()
	}
}

// TestOrphanedMemoryNVML: the memory the driver lists for processes that
// are gone (no /proc/<pid>, a zombie) is published per GPU with the dcgm
// labels from their second cycle, and is in no container's series.
func TestOrphanedMemoryNVML(t *testing.T) {
	m := newMockMachine(t, 2)
	proc := m.procRoot(t)
	writeProc(t, proc, 1, "0::/init.scope\n")
	writeProc(t, proc, 10, "0::/a\n")
	writeZombie(t, proc, 12)
	m.procs[0] = []nvml.ProcessInfo{
		{Pid: 10, UsedGpuMemory: 4 << 30},
		{Pid: 11, UsedGpuMemory: 2 << 30}, // no /proc/11
		{Pid: 12, UsedGpuMemory: 1 << 30}, // a zombie
	}
	clock := newFakeClock()
	o := mockOptions(m, clock)
	o.ProcRoot = proc
	c, reg := testCollector(t, o)
	gpu0, gpu1 := map[string]string{"gpu": "0"}, map[string]string{"gpu": "1"}

	c.collectOnce(bg)
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", gpu0), "not after one cycle")
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_processes", gpu0))

	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	require.Equal(t, float64(3<<30), mustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", gpu0))
	require.Equal(t, 2.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_processes", gpu0))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", gpu1), "GPU 1 lists nothing")
	// The dcgm labels.
	s := gather(t, reg, "gpuscope_gpu_orphaned_memory_bytes")[0]
	for _, l := range []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"} {
		require.NotEmpty(t, s.labels[l], l)
	}
	// Only the live process has a container.
	cs := gather(t, reg, "gpuscope_gpu_container_memory_used_bytes")
	require.Len(t, cs, 1)
	require.Equal(t, "/a", cs[0].labels["id"])
	require.Equal(t, float64(4<<30), cs[0].value)
	_, failed := lookup(t, reg, "gpuscope_gpu_collector_errors_total", gpu0)
	require.False(t, failed, "a GPU with a live container has no failed read")

	// The driver lets go of the gone process's memory.
	m.mu.Lock()
	m.procs[0] = m.procs[0][:1]
	m.mu.Unlock()
	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", gpu0))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_processes", gpu0))
}

// TestOrphanedMemoryHidepid: without /proc/1 gpuscope may not see other
// users' processes (/proc mounted hidepid), so an absent pid is a failed
// read, never an orphan.
func TestOrphanedMemoryHidepid(t *testing.T) {
	m := newMockMachine(t, 1)
	m.procs[0] = []nvml.ProcessInfo{{Pid: 11, UsedGpuMemory: 2 << 30}}
	clock := newFakeClock()
	o := mockOptions(m, clock)
	o.ProcRoot = m.procRoot(t) // no /proc/1
	c, reg := testCollector(t, o)
	for range 3 {
		c.collectOnce(bg)
		clock.Advance(10 * time.Second)
	}
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", map[string]string{"gpu": "0"}))
	require.Equal(t, 3.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total",
		map[string]string{"gpu": "0", "field": "gpuscope_gpu_container_memory_used_bytes"}), "one failed read a cycle")
}

// TestOrphanedMemoryMIG: on a GPU in MIG mode the orphans are per GPU
// instance, with GPU_I_PROFILE and GPU_I_ID.
func TestOrphanedMemoryMIG(t *testing.T) {
	mm := newMIGMachine(t, 1)
	mm.setProcs(0, nvml.ProcessInfo{Pid: 100, UsedGpuMemory: 20000 << 20})
	mm.setProcs(2, nvml.ProcessInfo{Pid: 250, UsedGpuMemory: 5000 << 20}) // gone
	writeProc(t, mm.procRoot(t), 1, "0::/init.scope\n")
	_, reg, _ := migCollector(t, mm, nil) // two cycles

	require.Equal(t, float64(5000<<20), mustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", instance("5", "2g.20gb")))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_processes", instance("5", "2g.20gb")))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", instance("1", "3g.40gb")))
	_, ok := lookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", wholeGPU("0"))
	require.False(t, ok, "per instance only, as the per-container series")
	for _, s := range gather(t, reg, "gpuscope_gpu_container_memory_used_bytes") {
		require.NotEqual(t, "5", s.labels["GPU_I_ID"], "the gone process has no container: %v", s.labels)
	}
}

// TestNVMLProcessVanished: a GPU process that the driver lists but that
// is gone (gputest.ProcessVanished); gpu/sim checks a simulated GPU
// process given a pid that does not exist is the same.
func TestNVMLProcessVanished(t *testing.T) {
	m := newMockMachine(t, 1)
	m.procs[0] = []nvml.ProcessInfo{{Pid: gputest.GonePID, UsedGpuMemory: 1 << 30}}
	o := mockOptions(m, newFakeClock())
	o.ProcRoot = "/proc"
	c, reg := testCollector(t, o)
	gputest.ProcessVanished(t, func() { c.collectOnce(bg) }, reg)
}

// TestContainerGrouperOrphans: a process found gone (absent, or a zombie)
// counts in unresolved in its first cycle, as one that exited while
// being read, and is an orphan from the second; neither is in a container.
func TestContainerGrouperOrphans(t *testing.T) {
	proc := t.TempDir()
	writeProc(t, proc, 1, "0::/init.scope\n")
	writeZombie(t, proc, 12)
	g := newContainerGrouper(proc, newContainerNamer(nil, nil))
	procs := []nvml.ProcessInfo{{Pid: 11, UsedGpuMemory: 2 << 30}, {Pid: 12, UsedGpuMemory: ^uint64(0)}}
	// Listed as gone from the first cycle: the process list says what
	// /proc shows now.
	gone := []gpuProc{{pid: 11, memoryBytes: 2 << 30, gone: true}, {pid: 12, memoryUnknown: true, gone: true}}
	for _, want := range []struct {
		orphans    Orphans
		unresolved int
	}{
		{Orphans{procs: gone}, 2},
		{Orphans{memoryBytes: 2 << 30, processes: 2, procs: gone}, 0}, // the zombie's memory withheld: counted, not summed
		{Orphans{memoryBytes: 2 << 30, processes: 2, procs: gone}, 0},
	} {
		g.beginCycle()
		out, orphans, unresolved := g.group(procs, nil, smWindow{})
		g.endCycle()
		require.Empty(t, out)
		require.Equal(t, want.orphans, orphans)
		require.Equal(t, want.unresolved, unresolved)
	}
}
