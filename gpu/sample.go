package gpu

import (
	"strconv"
	"time"

	"github.com/gpuscope/gpuscope/workload"
)

// Identity is what identifies a GPU in labels. It is built once when the
// backend opens (BackendEnv.Identity) and shared, read-only, by every
// sample.
type Identity struct {
	index  int
	uuid   string
	busID  string
	model  string
	driver string

	// Label values in the order of the descriptors' label names.
	dcgmLabels []string // gpu, UUID, pci_bus_id, device, modelName, [Hostname], DCGM_FI_DRIVER_VERSION
	ownLabels  []string // gpu, UUID
}

func newIdentity(index int, uuid, busID, model, driver, hostname string, withHost bool) *Identity {
	// The driver's strings are ASCII on every GPU seen; a broken one must
	// still not cost the sample (label values must be valid UTF-8).
	uuid, busID, model, driver, hostname = workload.LabelValue(uuid), workload.LabelValue(busID),
		workload.LabelValue(model), workload.LabelValue(driver), workload.LabelValue(hostname)
	g := &Identity{index: index, uuid: uuid, busID: busID, model: model, driver: driver}
	idx := strconv.Itoa(index)
	g.dcgmLabels = []string{idx, uuid, busID, "nvidia" + idx, model}
	if withHost {
		g.dcgmLabels = append(g.dcgmLabels, hostname)
	}
	g.dcgmLabels = append(g.dcgmLabels, driver)
	g.ownLabels = []string{idx, uuid}
	return g
}

// GPUSample is one GPU's values from one cycle. A backend outside this
// package starts one with NewGPUSample, sets what it read and adds it to
// its Sample.
type GPUSample struct {
	info *Identity
	// at is when the GPU last answered a complete read (this cycle, or
	// earlier for a GPU that is lost or whose read hangs); zero if never.
	at time.Time
	// set holds the fields that have a value; unsupported those the driver
	// says the GPU does not support. A field in neither failed or was blank.
	set         fieldSet
	unsupported fieldSet
	// denied are unsupported fields the driver refused gpuscope's user
	// (NO_PERMISSION); logged once by the collector.
	denied fieldSet
	values [numFields]float64

	// xidCounts counts XID events by code since gpuscope started
	// (values[FieldXID] holds the last code).
	xidCounts []xidCount
	// clockEvents is NVML's clock event reason bitmask (field FieldClockEvents).
	clockEvents uint64
	// containers is the GPU's compute processes grouped by container,
	// sorted by id (fields FieldContainerMemory, FieldContainerSM).
	containers []Container
	// orphans is what the driver lists for processes that are gone
	// (process.go); published with FieldContainerMemory, whose read it is.
	orphans Orphans
	// instances are the GPU instances of a GPU in MIG mode, by GPU_I_ID
	// (mig.go); the GPU itself then keeps its whole-GPU fields only.
	instances []InstanceSample
	// unifiedMemory: the GPU has no framebuffer of its own (DGX Spark's
	// GB10 and other integrated GPUs share the host's memory), and
	// DCGM_FI_DEV_FB_* hold the system memory (gpuscope_gpu_memory_unified).
	unifiedMemory bool
}

// NewGPUSample starts what a backend read of GPU id in one cycle.
func NewGPUSample(id *Identity) *GPUSample { return &GPUSample{info: id} }

// Set records v, the value of f.
func (s *GPUSample) Set(f Field, v float64) {
	s.values[f] = v
	s.set.add(f)
}

// SetUnsupported records that the GPU cannot give f, as NVML's
// NOT_SUPPORTED does: its series is omitted, gpuscope_gpu_field_supported
// says 0, and a value set before is dropped.
func (s *GPUSample) SetUnsupported(f Field) {
	s.set &^= 1 << f
	s.unsupported.add(f)
}

// SetClockEvents records NVML's clock event reasons, a bitmask, as
// FieldClockEvents.
func (s *GPUSample) SetClockEvents(reasons uint64) {
	s.clockEvents = reasons
	s.set.add(FieldClockEvents)
}

// AddXIDCount records that the driver reported XID code count times since
// gpuscope started (gpuscope_gpu_xid_errors_total); FieldXID's value is
// the last XID.
func (s *GPUSample) AddXIDCount(code, count uint64) {
	s.xidCounts = append(s.xidCounts, xidCount{code: code, count: count})
}

// SetContainers records that the GPU's processes were read
// (FieldContainerMemory and FieldContainerSM): cs are what its containers
// use (BackendEnv.Container, BackendEnv.GroupProcesses), orphans what the
// driver lists for processes that are gone.
func (s *GPUSample) SetContainers(cs []Container, orphans Orphans) {
	s.set.add(FieldContainerMemory)
	s.set.add(FieldContainerSM)
	s.containers, s.orphans = cs, orphans
}

// SetUnifiedMemory records that the GPU shares the host's memory (an
// integrated GPU such as DGX Spark's GB10, whose driver has no framebuffer
// figures) and that the DCGM_FI_DEV_FB_* values set are the system
// memory's: gpuscope_gpu_memory_unified is then 1.
func (s *GPUSample) SetUnifiedMemory(unified bool) { s.unifiedMemory = unified }

type xidCount struct {
	code  uint64
	count uint64
}

// Container is what a container's processes use on one GPU (or GPU
// instance), with the labels the collector gives the container. A backend
// gets one from BackendEnv.Container or BackendEnv.GroupProcesses.
type Container struct {
	id          string
	name        string            // cAdvisor's name label
	workload    workload.Identity // the workload labels, image among them
	memoryBytes float64
	// memoryUnknown: the driver withheld the memory of one of the
	// container's processes; its memory series is omitted, not partial.
	memoryUnknown bool
	smPercent     float64
	processes     int
	// procs are the processes, for the process list and the per-process
	// series.
	procs []gpuProc
}

// sample is one complete cycle: what a scrape is served until the next.
type Sample struct {
	time time.Time
	gpus []GPUSample
	errs []fieldError
	// read counts the GPUs that answered in this cycle (a lost GPU whose
	// XID series are kept did not); 0 sets gpuscope_gpu_collector_up 0.
	read int
	// reinit, set by the backend, asks the collector to close and open it
	// again (the driver was unloaded or upgraded, or nothing answers).
	reinit error
}

// NewSample starts the sample of the cycle at now.
func NewSample(now time.Time) *Sample { return &Sample{time: now} }

// AddGPU adds g, read from a GPU that answered in this cycle: it counts
// toward gpuscope_gpu_collector_up, and now is when it last answered.
func (s *Sample) AddGPU(g *GPUSample) {
	gs := *g
	gs.at = s.time
	s.gpus = append(s.gpus, gs)
	s.read++
}

// AddUnreadGPU adds g, a GPU that could not be read in this cycle (off the
// bus): it does not count as read, and lastAnswer is when it last
// answered (zero if never). What is served of such a GPU is its XID
// series; g should hold no more.
func (s *Sample) AddUnreadGPU(g *GPUSample, lastAnswer time.Time) {
	gs := *g
	gs.at = lastAnswer
	s.gpus = append(s.gpus, gs)
}

// AddError records a failed read, counted in
// gpuscope_gpu_collector_errors_total and logged when it first appears:
// of field, a metric name (Field.String) or "device" for a GPU that could
// not be read at all, on GPU g, or on none when g is nil.
func (s *Sample) AddError(g *Identity, field string, err error) {
	e := fieldError{field: field, err: err}
	if g != nil {
		e.gpu = g.ownLabels[0]
	}
	s.errs = append(s.errs, e)
}

// fieldError is one failed read. gpu is the GPU index, or "" when the
// failure is not tied to one GPU.
type fieldError struct {
	gpu   string
	field string
	err   error
}

// stale returns s with each GPU's series dropped except its XID series
// and last-sample time: what is served once a sample is too old.
func (s *Sample) stale() *Sample {
	out := &Sample{time: s.time, gpus: make([]GPUSample, len(s.gpus))}
	for i, g := range s.gpus {
		out.gpus[i] = GPUSample{info: g.info, at: g.at, xidCounts: g.xidCounts}
		if g.set.has(FieldXID) {
			out.gpus[i].Set(FieldXID, g.values[FieldXID])
		}
	}
	return out
}
