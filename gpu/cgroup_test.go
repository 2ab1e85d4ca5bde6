package gpu

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/workload"
)

func TestCgroupIDFromProcFile(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{
			name:    "cgroup v1, docker with the cgroupfs driver",
			content: "12:pids:/docker/3f1c\n11:memory:/docker/3f1c\n4:cpu,cpuacct:/docker/3f1c\n1:name=systemd:/docker/3f1c\n",
			want:    "/docker/3f1c",
		},
		{
			name:    "cgroup v1 with separate cpu and cpuacct hierarchies",
			content: "9:name=systemd:/\n4:memory:/sandbox/x\n2:cpuacct:/gpuscope-test/burn\n1:cpu:/gpuscope-test/burn\n0::/\n",
			want:    "/gpuscope-test/burn",
		},
		{
			name:    "hybrid: v1 cpu hierarchy wins over systemd's unified one",
			content: "4:cpu,cpuacct:/system.slice/docker-abc.scope\n1:name=systemd:/system.slice/docker-abc.scope\n0::/system.slice/docker-abc.scope/init\n",
			want:    "/system.slice/docker-abc.scope",
		},
		{
			name:    "cgroup v2, docker with the systemd driver",
			content: "0::/system.slice/docker-0123abcd.scope\n",
			want:    "/system.slice/docker-0123abcd.scope",
		},
		{
			name:    "cgroup v2, a process outside containers counts under its unit",
			content: "0::/system.slice/slurmd.service\n",
			want:    "/system.slice/slurmd.service",
		},
		{
			name:    "root cgroup",
			content: "0::/\n",
			want:    "/",
		},
		{
			name:    "path with a colon",
			content: "0::/kubepods/pod1/cri-containerd:abc\n",
			want:    "/kubepods/pod1/cri-containerd:abc",
		},
		{
			name:    "removed cgroup",
			content: "0::/system.slice/docker-abc.scope (deleted)\n",
			want:    "/system.slice/docker-abc.scope",
		},
		{
			name:    "no trailing newline",
			content: "3:cpu:/a/b",
			want:    "/a/b",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cgroupIDFromProcFile([]byte(tc.content))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := cgroupIDFromProcFile([]byte("5:memory:/x\n"))
	require.Error(t, err)
	// Outside gpuscope's cgroup namespace the host path is unknown.
	_, err = cgroupIDFromProcFile([]byte("0::/../../system.slice/docker-abc.scope\n"))
	require.ErrorContains(t, err, "outside gpuscope's cgroup namespace")
	_, err = cgroupIDFromProcFile(nil)
	require.Error(t, err)
}

func TestCgroupIDOfThisProcess(t *testing.T) {
	// The real /proc of the test process parses.
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip("no /proc")
	}
	id, err := cgroupIDFromProcFile(b)
	require.NoError(t, err)
	// A clean, absolute cgroup path, as gpu.sim.gpus[i].container takes.
	require.True(t, strings.HasPrefix(id, "/"), id)
	require.Equal(t, path.Clean(id), id)
	require.NotContains(t, id, "/..")
	require.False(t, strings.ContainsAny(id, "\n\x00"), id)
}

func TestPIDResolverCachesWhilePidIsSeen(t *testing.T) {
	proc := t.TempDir()
	writeProc(t, proc, 7, "0::/a\n")
	r := newPIDResolver(proc)

	r.beginCycle()
	id, _, err := r.resolve(7)
	require.NoError(t, err)
	require.Equal(t, "/a", id)
	r.endCycle()

	// While the pid keeps running on a GPU its cgroup is not read again.
	require.NoError(t, os.Remove(filepath.Join(proc, "7", "cgroup")))
	r.beginCycle()
	id, _, err = r.resolve(7)
	require.NoError(t, err)
	require.Equal(t, "/a", id)
	r.endCycle()

	// A cycle without the pid forgets it; a new process with that pid is read afresh.
	r.beginCycle()
	r.endCycle()
	writeProc(t, proc, 7, "0::/b\n")
	r.beginCycle()
	id, _, err = r.resolve(7)
	require.NoError(t, err)
	require.Equal(t, "/b", id)

	_, _, err = r.resolve(8)
	require.Error(t, err)
}

func TestContainerGrouperCapsAndSorts(t *testing.T) {
	proc := t.TempDir()
	writeProc(t, proc, 1, "0::/z\n")
	writeProc(t, proc, 2, "0::/a\n")
	writeProc(t, proc, 3, "0::/a\n")
	g := newContainerGrouper(proc, newContainerNamer(nil, nil))
	g.beginCycle()
	out, _, unresolved := g.group(
		[]nvml.ProcessInfo{{Pid: 1, UsedGpuMemory: 1}, {Pid: 2, UsedGpuMemory: 2}, {Pid: 3, UsedGpuMemory: 3}, {Pid: 4, UsedGpuMemory: 4}},
		[]nvml.ProcessUtilizationSample{{Pid: 2, SmUtil: 70}, {Pid: 3, SmUtil: 60}},
		smWindow{},
	)
	g.endCycle()
	require.Equal(t, 1, unresolved)
	require.Equal(t, []Container{
		{id: "/a", workload: workload.Identity{Workload: "/a", Runtime: workload.RuntimeCgroup}, memoryBytes: 5, smPercent: 100, processes: 2,
			procs: []gpuProc{{pid: 2, memoryBytes: 2, smPercent: 70}, {pid: 3, memoryBytes: 3, smPercent: 60}}},
		{id: "/z", workload: workload.Identity{Workload: "/z", Runtime: workload.RuntimeCgroup}, memoryBytes: 1, processes: 1,
			procs: []gpuProc{{pid: 1, memoryBytes: 1}}},
	}, out)
}

func TestPCIeMaxBandwidth(t *testing.T) {
	for _, tc := range []struct {
		gen, width int
		want       float64
	}{
		{1, 16, 4e9},
		{2, 8, 4e9},
		{3, 16, 15.76e9},
		{4, 16, 31.504e9},
		{5, 16, 63.008e9},
		{6, 16, 121.008e9},
		{4, 0, 0},
		{0, 16, 0},
		{7, 16, 0},
	} {
		require.InDelta(t, tc.want, PCIeMaxBandwidth(tc.gen, tc.width), 1, "gen %d x%d", tc.gen, tc.width)
	}
}

// TestPIDResolverCatchesPIDReuse: a pid that ended and was given to a new
// process between two cycles, while still listed on a GPU, is resolved
// afresh: its start time changed.
func TestPIDResolverCatchesPIDReuse(t *testing.T) {
	proc := t.TempDir()
	writeProcStart(t, proc, 7, "0::/a\n", 500)
	r := newPIDResolver(proc)
	r.beginCycle()
	id, _, err := r.resolve(7)
	require.NoError(t, err)
	require.Equal(t, "/a", id)
	r.endCycle()

	writeProcStart(t, proc, 7, "0::/b\n", 900)
	r.beginCycle()
	id, _, err = r.resolve(7)
	require.NoError(t, err)
	require.Equal(t, "/b", id, "the new process's container")
	r.endCycle()

	// With many pids the check is spread over cycles: 256 pids, 8 a
	// cycle, each every 32 cycles.
	for pid := 1000; pid < 1256; pid++ {
		writeProcStart(t, proc, pid, "0::/c\n", 1)
	}
	resolveAll := func() {
		r.beginCycle()
		for pid := uint32(1000); pid < 1256; pid++ {
			_, _, err := r.resolve(pid)
			require.NoError(t, err)
		}
		r.endCycle()
	}
	resolveAll()
	writeProcStart(t, proc, 1100, "0::/d\n", 2)
	for range 32 {
		resolveAll()
	}
	id, _, err = r.resolve(1100)
	require.NoError(t, err)
	require.Equal(t, "/d", id)
}

func TestStatStartTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		stat string
		want uint64
	}{
		{"plain", "42 (bash) S 1 42 42 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 1 0 98765 1 1 1\n", 98765},
		{"name with spaces and parentheses", "42 (a) b (c) R 1 42 42 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 1 0 12345 1 1 1\n", 12345},
		{"truncated", "42 (bash) S 1 42", 0},
		{"garbage", "no parenthesis", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, statStartTime([]byte(tc.stat)))
		})
	}
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc")
	}
	require.NotZero(t, statStartTime(b), "this process's start time")
}
