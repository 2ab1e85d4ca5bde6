package gpu

import (
	"cmp"
	"slices"
	"strconv"
	"time"
)

// The GPU processes, live: what the driver lists on each GPU in the last
// sampling cycle, one entry per process, as nvitop and gpustat show them.
// The collector reads them every cycle anyway to group them by container
// (gpuscope_gpu_container_*); the list keeps the per-process detail that
// grouping drops, for the GPU page, the overview and
// /api/v1/gpu/processes, without a series per pid in the TSDB (unless
// gpu.families.per_process turns such series on). It needs
// gpu.families.processes, with which the processes are read.

// ProcessList is the GPU processes of one node's last sampling cycle.
type ProcessList struct {
	// Node is the collector's host label value.
	Node string `json:"node"`
	// Time is when the cycle sampled the GPUs; zero when none has.
	Time time.Time `json:"time"`
	// GPUs are the node's GPUs in index order, each GPU instance of a GPU
	// in MIG mode after it.
	GPUs []GPUProcesses `json:"gpus"`
}

// GPUProcesses is one GPU's (or GPU instance's) processes.
type GPUProcesses struct {
	// GPU is the GPU's index (the gpu label), UUID and model its UUID and
	// modelName labels.
	GPU   string `json:"gpu"`
	UUID  string `json:"uuid"`
	Model string `json:"model"`
	// GPUInstance and GPUInstanceProfile are a MIG GPU instance's
	// GPU_I_ID and GPU_I_PROFILE; empty for a whole GPU.
	GPUInstance        string `json:"gpu_instance,omitempty"`
	GPUInstanceProfile string `json:"gpu_instance_profile,omitempty"`
	// Read says whether the processes were read in the cycle: false when
	// the driver did not answer, gpuscope is outside the host's pid
	// namespace, or gpu.families.processes is off; Processes is then empty
	// for want of a reading, not for want of processes. A GPU in MIG mode
	// is false too: its processes are its GPU instances', listed after it.
	Read bool `json:"read"`
	// Processes are by pid.
	Processes []Process `json:"processes"`
}

// Process is one process the driver lists on a GPU.
type Process struct {
	PID uint32 `json:"pid"`
	// UID is the process's real uid in decimal and User its name in the
	// host's passwd, else the uid; both empty when /proc could not tell
	// (the process is gone, or hidden by hidepid).
	UID  string `json:"uid,omitempty"`
	User string `json:"user,omitempty"`
	// Name is the kernel's name for the process (/proc/<pid>/comm, at most
	// 15 bytes), Command its command line (arguments joined by spaces, at
	// most MaxCommandBytes, control characters as spaces: safe to show
	// as text, and html/template escapes the rest).
	Name    string `json:"name,omitempty"`
	Command string `json:"command,omitempty"`
	// MemoryBytes is the GPU memory the driver lists for the process; nil
	// where the driver withholds it (another user's process, without
	// privileges).
	MemoryBytes *uint64 `json:"memory_bytes"`
	// SMPercent is the process's SM utilisation over the cycle, 0-100, as
	// gpuscope_gpu_container_sm_utilization_percent sums it per
	// container; nil where the driver's per-process utilisation was not
	// read (MIG instances have none).
	SMPercent *float64 `json:"sm_percent"`
	// Gone: /proc shows no such process, or a zombie, while the driver
	// still lists it: the memory is held for nobody (from its second
	// cycle, gpuscope_gpu_orphaned_memory_bytes).
	Gone bool `json:"gone,omitempty"`
	// Container is the process's cgroup and its workload, as the
	// per-container series label it; nil for a process that is gone or
	// whose cgroup could not be read.
	Container *ProcessContainer `json:"container,omitempty"`
}

// ProcessContainer is the container of a process, with the labels of the
// per-container series (id, name and the workload labels a person reads).
type ProcessContainer struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	Workload string `json:"workload"`
	Runtime  string `json:"runtime"`
	Image    string `json:"image,omitempty"`
	// User is the workload's user (the user label), which may differ from
	// the process's own: a root process in alice's rootless container.
	User string `json:"user,omitempty"`
}

// Processes returns the GPU processes of the last sampling cycle. gpu,
// when not empty, keeps the GPU with that index or UUID (and its GPU
// instances) only. A sample older than the collector serves (a hung
// cycle) lists no processes.
func (c *Collector) Processes(gpu string) ProcessList {
	l := ProcessList{Node: c.env.hostname, GPUs: []GPUProcesses{}}
	snap := c.snap.Load()
	if snap == nil {
		return l
	}
	s := snap.s
	l.Time = s.time
	for i := range s.gpus {
		g := &s.gpus[i]
		if gpu != "" && gpu != g.info.ownLabels[0] && gpu != g.info.uuid {
			continue
		}
		l.GPUs = append(l.GPUs, g.processList(GPUProcesses{GPU: g.info.ownLabels[0], UUID: g.info.uuid, Model: g.info.model}))
		for j := range g.instances {
			is := &g.instances[j]
			l.GPUs = append(l.GPUs, is.processList(GPUProcesses{
				GPU: g.info.ownLabels[0], UUID: g.info.uuid, Model: g.info.model,
				GPUInstance: is.inst.ownLabels[3], GPUInstanceProfile: is.inst.profile,
			}))
		}
	}
	return l
}

// processList fills in out with the processes of g's containers and
// those in none.
func (g *GPUSample) processList(out GPUProcesses) GPUProcesses {
	out.Read = g.set.has(FieldContainerMemory)
	sm := g.set.has(FieldContainerSM)
	out.Processes = []Process{}
	for i := range g.containers {
		c := &g.containers[i]
		pc := &ProcessContainer{ID: c.id, Name: c.name, Workload: c.workload.Workload, Runtime: c.workload.Runtime,
			Image: c.workload.Image, User: c.workload.User}
		for _, p := range c.procs {
			out.Processes = append(out.Processes, p.export(pc, sm))
		}
	}
	for _, p := range g.orphans.procs {
		out.Processes = append(out.Processes, p.export(nil, sm))
	}
	slices.SortFunc(out.Processes, func(a, b Process) int { return cmp.Compare(a.PID, b.PID) })
	return out
}

// gpuProc is one process of a GPU as a cycle grouped it: what the process
// list and the per-process series show.
type gpuProc struct {
	pid           uint32
	memoryBytes   uint64
	memoryUnknown bool
	smPercent     float64
	gone          bool
	user          string // the name of info.uid, else the uid
	info          procInfo
}

func (p gpuProc) export(c *ProcessContainer, sm bool) Process {
	out := Process{PID: p.pid, UID: p.info.uid, User: p.user, Name: p.info.comm, Command: p.info.command, Gone: p.gone, Container: c}
	if !p.memoryUnknown {
		m := p.memoryBytes
		out.MemoryBytes = &m
	}
	if sm {
		v := p.smPercent
		out.SMPercent = &v
	}
	return out
}

// pidLabel is a pid as the per-process series label it.
func pidLabel(pid uint32) string { return strconv.FormatUint(uint64(pid), 10) }
