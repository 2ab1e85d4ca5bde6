package gpu

import (
	"context"
	"log/slog"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// This file is the seam between the Collector and where its samples come
// from. The NVML backend is in this package; another, such as gpu/sim's
// simulator, is made outside it through Options.NewBackend and reports
// with NewSample, NewGPUSample and BackendEnv, so that the collector
// labels and renders its GPUs and containers as it does NVML's.

// Backend is where a Collector's samples come from. The collector calls
// Open until it succeeds, then Sample once per cycle, never two calls at
// once; Close is called once when Run ends, unless a call is still hung.
type Backend interface {
	// Name is the backend label of gpuscope_gpu_collector_backend_info.
	Name() string
	// Open prepares the backend. Goroutines it starts (event loops, CPU
	// burners) stop when ctx ends or Close is called.
	Open(ctx context.Context) error
	// Sample reads every GPU once. It reports only what it read: a field
	// that failed is absent from the sample and added as an error.
	Sample(ctx context.Context, now time.Time) *Sample
	Close() error
}

// BackendEnv is what a Collector gives the backend it makes: its logger
// and clock, the fields its config switches on, and its way of labelling
// GPUs and containers. Its methods are safe for concurrent use.
type BackendEnv struct {
	// Logger is the collector's.
	Logger *slog.Logger
	// Now is the collector's clock.
	Now func() time.Time
	// ProcRoot is where /proc is mounted.
	ProcRoot string

	fields   fieldSet
	hostname string
	withHost bool
	// grouper, with its namer, is the one container attribution of the
	// collector; it brackets each Sample call with its cycle.
	grouper *containerGrouper
}

func newBackendEnv(o *Options, fields fieldSet, withHost bool) *BackendEnv {
	return &BackendEnv{
		Logger:   o.Logger,
		Now:      o.Now,
		ProcRoot: o.ProcRoot,
		fields:   fields,
		hostname: o.Hostname,
		withHost: withHost,
		grouper:  newContainerGrouper(o.ProcRoot, newContainerNamer(o.ContainerLookup, o.Workloads)),
	}
}

// Enabled reports whether the config switches f on. A backend need not
// read a field that is off; it is not published.
func (e *BackendEnv) Enabled(f Field) bool { return e.fields.has(f) }

// Identity is the labels of the GPU with NVML index index: UUID, PCI bus
// id (00000000:18:00.0), model name and driver version as NVML gives
// them, and the collector's host label.
func (e *BackendEnv) Identity(index int, uuid, busID, model, driver string) *Identity {
	return newIdentity(index, uuid, busID, model, driver, e.hostname, e.withHost)
}

// ForeignPIDNamespace reports whether gpuscope runs in a pid namespace
// other than the host's, where host pids (NVML's) name no process it can
// see.
func (e *BackendEnv) ForeignPIDNamespace() bool { return foreignPIDNamespace(e.ProcRoot) }

// Container is the use of container id (a cgroup path, as cAdvisor names
// its containers) with the labels the collector's series give it:
// cAdvisor's name and the workload labels shared with cAdvisor's
// collector.
func (e *BackendEnv) Container(id string, memoryBytes, smPercent float64, processes int) Container {
	g := e.grouper
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.namer.usage(id)
	c.memoryBytes, c.smPercent, c.processes = memoryBytes, smPercent, processes
	return c
}

// GroupProcesses sums the use of a GPU's processes, as NVML lists them, by
// container, exactly as the NVML backend does: each host pid's container
// is read from /proc/<pid>/cgroup. A pid that is gone is an orphan from
// the second cycle it is listed; unresolved counts the pids whose cgroup
// could not be read (in the first cycle, those gone too).
func (e *BackendEnv) GroupProcesses(procs []nvml.ProcessInfo, utils []nvml.ProcessUtilizationSample) (cs []Container, orphans Orphans, unresolved int) {
	// A backend's samples are its own account of the interval: their
	// mean, as NVML's are before the driver's period is known.
	return e.grouper.group(procs, utils, smWindow{})
}
