package gpu

import (
	"context"
	"strconv"
	"time"

	"github.com/gpuscope/gpuscope/workload"
)

// backend is where samples come from. The collector calls open until it
// succeeds, then sample once per cycle, never two calls at once; close
// is called once when Run ends, unless a call is still hung.
type backend interface {
	// name is the backend_info label value.
	name() string
	// open prepares the backend. Goroutines it starts (event loops,
	// CPU burners) stop when ctx ends or close is called.
	open(ctx context.Context) error
	// sample reads every GPU once. It reports only what it read: a field
	// that failed is absent from the sample and listed in errs.
	sample(ctx context.Context, now time.Time) *Sample
	close() error
}

// Identity is what identifies a GPU in labels. It is built once when the
// backend opens and shared, read-only, by every sample.
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

// GPUSample is one GPU's values from one cycle.
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
}

func (s *GPUSample) setValue(f Field, v float64) {
	s.values[f] = v
	s.set.add(f)
}

type xidCount struct {
	code  uint64
	count uint64
}

// Container is what a container's processes use on one GPU.
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
			out.gpus[i].setValue(FieldXID, g.values[FieldXID])
		}
	}
	return out
}
