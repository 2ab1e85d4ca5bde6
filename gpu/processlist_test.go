package gpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/workload"
)

// writeProcInfo adds a process's status (real uid), comm and cmdline to
// the fake /proc.
func writeProcInfo(t testing.TB, root string, pid, uid int, comm, cmdline string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	u := strconv.Itoa(uid)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\t"+comm+"\nUid:\t"+u+"\t"+u+"\t"+u+"\t"+u+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cmdline"), []byte(cmdline), 0o644))
}

// TestProcessList: the last cycle's GPU processes, as the GPU page and
// /api/v1/gpu/processes list them: pid, user (named from passwd), name
// and command line, GPU memory (none where the driver withholds it), SM
// share, and the container with its workload; a process that is gone is
// listed as gone, with no container.
func TestProcessList(t *testing.T) {
	const container = "/system.slice/docker-3f2a8c1d5e6b7a8f9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b.scope"
	m := newMockMachine(t, 2)
	proc := m.procRoot(t)
	writeProc(t, proc, 1, "0::/init.scope\n") // /proc shows init: an absent pid is gone
	writeProc(t, proc, 100, "0::"+container+"\n")
	writeProcInfo(t, proc, 100, 1000, "python", "python\x00train.py\x00--lr\x000.1\x00")
	writeProc(t, proc, 101, "0::"+container+"\n")
	writeProcInfo(t, proc, 101, 0, "nvidia-smi", "nvidia-smi\x00")
	writeProc(t, proc, 104, "0::/user.slice/user-1001.slice/session-3.scope\n")
	writeProcInfo(t, proc, 104, 1001, "kworker/0:1", "") // no command line: its name in brackets
	clock := newFakeClock()
	now := uint64(clock.Now().UnixMicro())
	m.procs[0] = []nvml.ProcessInfo{
		{Pid: 100, UsedGpuMemory: 10 << 30},
		{Pid: 101, UsedGpuMemory: ^uint64(0)}, // withheld
		{Pid: 103, UsedGpuMemory: 1 << 30},    // gone
	}
	m.procs[1] = []nvml.ProcessInfo{{Pid: 104, UsedGpuMemory: 1 << 20}}
	m.utils[0] = []nvml.ProcessUtilizationSample{{Pid: 100, TimeStamp: now - 2e6, SmUtil: 50}}

	// The workload cache names users from a passwd, and finds the
	// rootful container's owner from its processes in a fake cgroupfs.
	passwd := filepath.Join(t.TempDir(), "passwd")
	require.NoError(t, os.WriteFile(passwd, []byte("root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n"), 0o644))
	cg := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(cg, "cgroup.controllers"), nil, 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(cg, container), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(cg, container, "cgroup.procs"), []byte("101\n100\n"), 0o644))
	o := mockOptions(m, clock)
	o.ProcRoot = proc
	o.Workloads = workload.NewCache(&workload.Options{Users: workload.NewUsers(workload.UsersOptions{PasswdFile: passwd, ProcRoot: proc, CgroupRoot: cg})})
	o.ContainerLookup = func(id string) (workload.Metadata, bool) {
		return workload.Metadata{Name: "llama-train", Image: "pytorch:24.01", Runtime: workload.RuntimeDocker}, id == container
	}
	c, _ := testCollector(t, o)
	require.Equal(t, ProcessList{Node: "gpu-node-1", GPUs: []GPUProcesses{}}, c.Processes(""), "no cycle yet")
	c.collectOnce(bg)

	u64 := func(v uint64) *uint64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	train := &ProcessContainer{ID: container, Name: "llama-train", Workload: "llama-train", Runtime: "docker", Image: "pytorch:24.01", User: "alice"}
	gpu0 := GPUProcesses{GPU: "0", UUID: "GPU-00000000-0000-4000-8000-000000000000", Model: "NVIDIA H100 80GB HBM3", Read: true, Processes: []Process{
		{PID: 100, UID: "1000", User: "alice", Name: "python", Command: "python train.py --lr 0.1", MemoryBytes: u64(10 << 30), SMPercent: f64(50), Container: train},
		{PID: 101, UID: "0", User: "root", Name: "nvidia-smi", Command: "nvidia-smi", SMPercent: f64(0), Container: train},
		{PID: 103, MemoryBytes: u64(1 << 30), SMPercent: f64(0), Gone: true},
	}}
	gpu1 := GPUProcesses{GPU: "1", UUID: "GPU-00000000-0000-4000-8000-000000000001", Model: "NVIDIA H100 80GB HBM3", Read: true, Processes: []Process{
		{PID: 104, UID: "1001", User: "1001", Name: "kworker/0:1", Command: "[kworker/0:1]", MemoryBytes: u64(1 << 20), SMPercent: f64(0),
			Container: &ProcessContainer{ID: "/user.slice/user-1001.slice/session-3.scope", Workload: "1001: session-3", Runtime: "systemd", User: "1001"}},
	}}
	got := c.Processes("")
	require.Equal(t, clock.Now(), got.Time)
	require.Equal(t, []GPUProcesses{gpu0, gpu1}, got.GPUs)
	require.Equal(t, []GPUProcesses{gpu1}, c.Processes("1").GPUs, "by index")
	require.Equal(t, []GPUProcesses{gpu0}, c.Processes(gpu0.UUID).GPUs, "by UUID")
	require.Empty(t, c.Processes("7").GPUs, "no such GPU")

	// The GPU's processes could not be read: said, not an empty GPU.
	m.mu.Lock()
	m.procs[1] = nil
	m.mu.Unlock()
	m.devs[1].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }
	c.collectOnce(bg)
	g1 := c.Processes("1").GPUs[0]
	require.False(t, g1.Read)
	require.Empty(t, g1.Processes)
}

// TestProcessListOff: without gpu.families.processes no process is read,
// and the list says so.
func TestProcessListOff(t *testing.T) {
	m := newMockMachine(t, 1)
	writeProc(t, m.procRoot(t), 100, "0::/a\n")
	m.procs[0] = []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1 << 30}}
	o := mockOptions(m, newFakeClock())
	o.ProcRoot = m.procRoot(t)
	o.Config.Families.Processes = false
	c, _ := testCollector(t, o)
	c.collectOnce(bg)
	l := c.Processes("")
	require.Len(t, l.GPUs, 1)
	require.False(t, l.GPUs[0].Read)
	require.Empty(t, l.GPUs[0].Processes)
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"arguments", "python\x00-m\x00torch.distributed.run\x00", "python -m torch.distributed.run"},
		{"a process that rewrote its title (one argument with spaces)", "vllm serve: Llama-3\x00\x00\x00", "vllm serve: Llama-3"},
		{"control characters become spaces", "sh\x00-c\x00echo a\nb\tc\x1b[31m", "sh -c echo a b c [31m"},
		{"invalid UTF-8", "x\xff\xfey", `x\xff\xfey`}, // workload.Clean's escape, selectable in PromQL
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, commandLine([]byte(tc.in)))
		})
	}
	long := commandLine([]byte(strings.Repeat("é", 4*MaxCommandBytes)))
	require.LessOrEqual(t, len(long), MaxCommandBytes)
	require.True(t, utf8.ValidString(long))
	require.True(t, strings.HasSuffix(long, "…"))
}

// TestProcessListMIG: a GPU in MIG mode lists its processes per GPU
// instance, after the GPU itself (which then has none), with no SM share:
// the driver has no per-process utilisation in MIG mode.
func TestProcessListMIG(t *testing.T) {
	mm := newMIGMachine(t, 1)
	mm.setProcs(0, nvml.ProcessInfo{Pid: 100, UsedGpuMemory: 20000 << 20})
	mm.setProcs(2, nvml.ProcessInfo{Pid: 200, UsedGpuMemory: 11000 << 20})
	c, _, _ := migCollector(t, mm, nil)
	l := c.Processes("0")
	require.Len(t, l.GPUs, 4, "the GPU and its instances 1, 5, 6")
	require.Equal(t, []string{"", "1", "5", "6"}, []string{l.GPUs[0].GPUInstance, l.GPUs[1].GPUInstance, l.GPUs[2].GPUInstance, l.GPUs[3].GPUInstance})
	require.Empty(t, l.GPUs[0].Processes, "the whole GPU's processes are its instances'")
	u64 := func(v uint64) *uint64 { return &v }
	require.Equal(t, GPUProcesses{GPU: "0", UUID: l.GPUs[1].UUID, Model: l.GPUs[1].Model, GPUInstance: "1", GPUInstanceProfile: "3g.40gb", Read: true, Processes: []Process{
		{PID: 100, MemoryBytes: u64(20000 << 20), Container: &ProcessContainer{ID: "/train-a", Workload: "/train-a", Runtime: "cgroup"}},
	}}, l.GPUs[1])
	require.Equal(t, uint32(200), l.GPUs[2].Processes[0].PID)
	require.Nil(t, l.GPUs[2].Processes[0].SMPercent)
	require.Empty(t, l.GPUs[3].Processes)
	require.True(t, l.GPUs[3].Read)
}

// TestPerProcessSeries: gpu.families.per_process on gives a series per
// GPU process and metric (pid, user, comm, id), a gone process's with an
// empty id, and per GPU instance on a GPU in MIG mode; off (the default),
// none, while the per-container series and the process list are the same.
func TestPerProcessSeries(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[on], func(t *testing.T) {
			m := newMockMachine(t, 1)
			proc := m.procRoot(t)
			writeProc(t, proc, 1, "0::/init.scope\n")
			writeProc(t, proc, 100, "0::/a\n")
			writeProcInfo(t, proc, 100, 1000, "python3", "python3\x00x.py\x00")
			m.procs[0] = []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1 << 30}, {Pid: 103, UsedGpuMemory: 2 << 30}}
			o := mockOptions(m, newFakeClock())
			o.ProcRoot = proc
			o.Config.Families.PerProcess = on
			c, reg := testCollector(t, o)
			c.collectOnce(bg)
			require.Equal(t, float64(1<<30), mustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"id": "/a"}))
			require.Len(t, c.Processes("").GPUs[0].Processes, 2)
			mem := gather(t, reg, "gpuscope_gpu_process_memory_used_bytes")
			sm := gather(t, reg, "gpuscope_gpu_process_sm_utilization_percent")
			if !on {
				require.Empty(t, mem)
				require.Empty(t, sm)
				return
			}
			require.Len(t, mem, 2)
			require.Len(t, sm, 2)
			require.Equal(t, float64(1<<30), mustLookup(t, reg, "gpuscope_gpu_process_memory_used_bytes",
				map[string]string{"gpu": "0", "pid": "100", "user": "1000", "comm": "python3", "id": "/a"}))
			require.Equal(t, float64(2<<30), mustLookup(t, reg, "gpuscope_gpu_process_memory_used_bytes",
				map[string]string{"gpu": "0", "pid": "103", "user": "", "comm": "", "id": ""}), "a gone process: no container")
		})
	}
	t.Run("MIG", func(t *testing.T) {
		mm := newMIGMachine(t, 1)
		mm.setProcs(2, nvml.ProcessInfo{Pid: 200, UsedGpuMemory: 11000 << 20})
		_, reg, _ := migCollector(t, mm, func(o *Options) { o.Config.Families.PerProcess = true })
		require.Equal(t, float64(11000<<20), mustLookup(t, reg, "gpuscope_gpu_process_memory_used_bytes",
			map[string]string{"gpu": "0", "GPU_I_ID": "5", "GPU_I_PROFILE": "2g.20gb", "pid": "200", "id": "/serve"}))
		require.Empty(t, gather(t, reg, "gpuscope_gpu_process_sm_utilization_percent"), "no per-process utilisation in MIG mode")
	})
}
