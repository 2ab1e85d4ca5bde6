package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// simBackend simulates GPUs with scenarios, so that every GPU feature can
// be seen and tested without a GPU. Values are plausible for an H100 SXM
// and carry noise; the scenarios' time runs time_scale times faster than
// the wall clock.
type simBackend struct {
	cfg      SimConfig
	fields   fieldSet
	logger   *slog.Logger
	hostname string
	withHost bool
	namer    *containerNamer
	// grouper joins the GPUs given a host pid (gpu.sim.gpus[i].pid) to
	// the pid's container exactly as the NVML backend joins a real GPU
	// process; it shares namer.
	grouper  *containerGrouper
	procRoot string
	cgroups  string
	now      func() time.Time

	// burnControllers are the cgroup v1 hierarchies a burning container is
	// created in; tests narrow it.
	burnControllers []string

	start   time.Time
	lastT   float64
	gpus    []*simGPU
	burners []*cpuBurner
}

const simDriverVersion = "580.105.08"

func newSimBackend(o *Options, fields fieldSet, withHost bool) *simBackend {
	namer := newContainerNamer(o.ContainerLookup, o.Workloads)
	return &simBackend{
		cfg:             o.Config.Sim,
		fields:          fields,
		logger:          o.Logger,
		hostname:        o.Hostname,
		withHost:        withHost,
		namer:           namer,
		grouper:         newContainerGrouper(o.ProcRoot, namer),
		procRoot:        o.ProcRoot,
		cgroups:         o.CgroupRoot,
		now:             o.Now,
		burnControllers: []string{"cpu", "cpuacct", "memory", "pids"},
	}
}

func (b *simBackend) name() string { return BackendSim }

func (b *simBackend) open(ctx context.Context) error {
	b.start = b.now()
	b.lastT = 0
	b.gpus = make([]*simGPU, b.cfg.Count)
	for i := range b.gpus {
		spec := SimGPU{Scenario: ScenarioIdle}
		if i < len(b.cfg.GPUs) {
			spec = b.cfg.GPUs[i]
		}
		if spec.Scenario == "" {
			spec.Scenario = ScenarioIdle
		}
		switch {
		case spec.Scenario == ScenarioOrphan:
			// The driver lists a process that is gone: a pid Linux never
			// gives, so gone in every pid namespace, in no container.
			spec.Container = ""
		case spec.PID != 0:
			// The process's own container, found each cycle, wins.
			spec.Container = ""
		case spec.Container == "" && spec.Scenario != ScenarioIdle:
			spec.Container = fmt.Sprintf("/gpuscope-sim/gpu%d", i)
		}
		b.gpus[i] = newSimGPU(i, spec, b.cfg, b.hostname, b.withHost)
		if spec.Scenario == ScenarioOrphan {
			b.gpus[i].pid = orphanPID
		}
		if spec.PID != 0 && b.fields.has(FieldContainerMemory) && foreignPIDNamespace(b.procRoot) {
			b.logger.Warn("gpuscope is not in the host's pid namespace; a simulated GPU process given by its host pid will not be found (run gpuscope with the host's pid namespace, e.g. docker --pid host)",
				"gpu", i, "pid", spec.PID, "pid_namespace", filepath.Join(b.procRoot, "self/ns/pid"))
		}
	}
	if b.cfg.CPUBurn {
		b.startBurners(ctx)
	}
	return nil
}

// startBurners gives every input-bound GPU's container a real cgroup with
// a CPU limit and a busy process, so that cAdvisor reports the container
// as CPU-saturated while the GPU starves. Failing that (not root,
// read-only cgroups), the sim goes on without burning.
func (b *simBackend) startBurners(ctx context.Context) {
	seen := map[string]bool{}
	for _, g := range b.gpus {
		// A GPU given a pid runs in that process's real container, whose
		// CPU is its own.
		if g.scenario != ScenarioInputBound || g.pid != 0 || seen[g.container] {
			continue
		}
		seen[g.container] = true
		br, err := startCPUBurner(ctx, burnerOptions{
			root:        b.cgroups,
			id:          g.container,
			cores:       b.cfg.CPUBurnCores,
			controllers: b.burnControllers,
			logger:      b.logger,
		})
		if err != nil {
			b.logger.Warn("Cannot burn CPU for the input-bound scenario; going on without", "container", g.container, "err", err)
			continue
		}
		b.logger.Info("Burning CPU in the input-bound scenario's container", "container", g.container, "cores", b.cfg.CPUBurnCores, "pid", br.pid())
		b.burners = append(b.burners, br)
	}
}

func (b *simBackend) sample(_ context.Context, now time.Time) *Sample {
	t := now.Sub(b.start).Seconds() * b.cfg.TimeScale
	dt := max(t-b.lastT, 0)
	b.lastT = t
	b.grouper.beginCycle() // and the namer's
	defer b.grouper.endCycle()
	s := &Sample{time: now, gpus: make([]GPUSample, len(b.gpus))}
	for i, g := range b.gpus {
		gs := &s.gpus[i]
		gs.info = g.info
		if g.lostAt(t) {
			// Off the bus: NVML answers GPU_IS_LOST for every read, and
			// the job on it is not running.
			s.errs = append(s.errs, fieldError{gpu: g.info.ownLabels[0], field: "device", err: nvml.ERROR_GPU_IS_LOST})
			if !g.offBus {
				// The driver reports XID 79 as the GPU falls off the bus.
				g.offBus = true
				g.lastXID = 79
				g.xidCount++
			}
			gs.at = g.lastAt
			// The XID series stay, as in the NVML backend.
			if b.fields.has(FieldXID) {
				gs.setValue(FieldXID, float64(g.lastXID))
				gs.xidCounts = []xidCount{{code: g.lastXID, count: g.xidCount}}
			}
			continue
		}
		g.offBus = false
		s.read++
		gs.at, g.lastAt = now, now
		st := g.step(t, dt)
		if err := b.fill(gs, g, st); err != nil {
			s.errs = append(s.errs, fieldError{gpu: g.info.ownLabels[0], field: fields[FieldContainerMemory].name, err: err})
		}
		if g.mig != nil {
			b.fillMIG(gs, g)
		}
	}
	return s
}

func (b *simBackend) close() error {
	var errs []error
	for _, br := range b.burners {
		errs = append(errs, br.stop())
	}
	b.burners = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop CPU burners: %w", err)
	}
	return nil
}

// fill turns a GPU state into a sample the way the NVML backend would have
// read it: only enabled fields, DCGM units, MiB truncated. The error is
// that of the per-container read: a GPU process given by pid whose cgroup
// cannot be read.
func (b *simBackend) fill(s *GPUSample, g *simGPU, st simState) error {
	set := func(f Field, v float64) {
		if b.fields.has(f) {
			s.setValue(f, v)
		}
	}
	total := float64(b.cfg.MemoryMiB)
	used := float64(int64(st.memUsedMiB))
	set(FieldSMClock, float64(int64(st.smClock)))
	set(FieldMemClock, float64(int64(st.memClock)))
	set(FieldGPUTemp, float64(int64(st.temp)))
	set(FieldMemoryTemp, float64(int64(st.memTemp)))
	set(FieldPowerUsage, float64(int64(st.power*1000))/1000)
	set(FieldEnergy, float64(int64(g.energyMJ)))
	set(FieldPCIeReplay, 0)
	set(FieldGPUUtil, float64(int64(st.util)))
	set(FieldMemCopyUtil, float64(int64(st.memCopyUtil)))
	set(FieldEncUtil, 0)
	set(FieldDecUtil, 0)
	set(FieldXID, float64(g.lastXID))
	set(FieldFBUsed, used)
	set(FieldFBReserved, simReservedMiB)
	set(FieldFBFree, total-simReservedMiB-used)
	set(FieldFBTotal, total)
	set(FieldNVLinkBandwidth, float64(int64(st.nvlinkMBs)))
	set(FieldVGPULicense, 0)
	set(FieldUncRemappedRows, 0)
	set(FieldCorRemappedRows, 0)
	set(FieldRowRemapFailure, 0)
	set(FieldProfGrEngineActive, st.grActive)
	set(FieldProfSMActive, st.smActive)
	set(FieldProfSMOccupancy, st.smOccupancy)
	set(FieldProfTensorActive, st.tensor)
	set(FieldProfDRAMActive, st.dram)
	set(FieldProfPCIeTxBytes, float64(int64(st.pcieTx)))
	set(FieldProfPCIeRxBytes, float64(int64(st.pcieRx)))
	set(FieldProfNVLinkTxBytes, float64(int64(st.nvlinkMBs*1e6/2)))
	set(FieldProfNVLinkRxBytes, float64(int64(st.nvlinkMBs*1e6/2)))
	set(FieldThermalViolation, float64(int64(g.thermalViolationNs)))
	for _, f := range []Field{FieldPowerViolation, FieldSyncBoostViolation, FieldBoardLimitViolation, FieldLowUtilViolation, FieldReliabilityViolation,
		FieldECCSBEVolTotal, FieldECCDBEVolTotal, FieldECCSBEAggTotal, FieldECCDBEAggTotal, FieldRetiredSBE, FieldRetiredDBE, FieldRetiredPending,
		FieldNVLinkCRCFlitErrors, FieldNVLinkCRCDataErrors, FieldNVLinkReplayErrors, FieldNVLinkRecoveryErrors} {
		set(f, 0)
	}
	set(FieldPCIeLinkGen, float64(st.pcieGen))
	set(FieldPCIeLinkWidth, 16)
	set(FieldPCIeLinkMaxGen, 5)
	set(FieldPCIeLinkMaxWidth, 16)
	set(FieldPCIeMaxBandwidth, PCIeMaxBandwidth(5, 16))
	set(FieldPCIeTxRate, float64(int64(st.pcieTx)))
	set(FieldPCIeRxRate, float64(int64(st.pcieRx)))
	if b.fields.has(FieldClockEvents) {
		s.clockEvents = st.clockEvents
		s.set.add(FieldClockEvents)
	}
	if g.xidCount > 0 {
		s.xidCounts = []xidCount{{code: g.lastXID, count: g.xidCount}}
	}
	if !b.fields.has(FieldContainerMemory) {
		return nil
	}
	s.set.add(FieldContainerMemory)
	s.set.add(FieldContainerSM)
	switch {
	case !st.process:
	case g.pid != 0:
		return b.fillProcess(s, g, used, st.util)
	case g.container != "":
		c := b.namer.usage(g.container)
		c.memoryBytes, c.smPercent, c.processes = used*bytesPerMiB, float64(int64(st.util)), 1
		s.containers = []Container{c}
	}
	return nil
}

// fillProcess reports GPU g's process as the host process g.pid and
// groups it as the NVML backend groups the processes the driver lists: its
// container is read from /proc/<pid>/cgroup and named from the cache
// shared with cAdvisor. A pid whose cgroup cannot be read (no such
// process, it exited, or gpuscope is in another pid namespace) is what a
// vanished process is to the NVML backend: the GPU has no per-container
// series in this cycle, and the read counts in
// gpuscope_gpu_collector_errors_total{field="gpuscope_gpu_container_memory_used_bytes"};
// a pid gone (no /proc/<pid>, or a zombie) for two cycles is an orphan,
// its memory in gpuscope_gpu_orphaned_memory_bytes, as for a real GPU.
func (b *simBackend) fillProcess(s *GPUSample, g *simGPU, usedMiB, util float64) error {
	pid := uint32(g.pid)
	cs, orphans, unresolved := b.grouper.group(
		[]nvml.ProcessInfo{{Pid: pid, UsedGpuMemory: uint64(usedMiB) * bytesPerMiB}},
		[]nvml.ProcessUtilizationSample{{Pid: pid, SmUtil: uint32(util)}},
	)
	s.containers, s.orphans = cs, orphans
	if unresolved > 0 && len(cs) == 0 {
		return fmt.Errorf("cannot read the cgroup of the simulated GPU process %d (no such process, or gpuscope is outside the host pid namespace?)", pid)
	}
	return nil
}

// simGPU is one simulated GPU and the state it accumulates.
type simGPU struct {
	info      *Identity
	scenario  string
	container string
	pid       int // a host process standing for the GPU's process; 0: none
	memoryMiB float64
	rng       *rand.Rand

	lostFrom, lostUntil float64   // simulated seconds; lostFrom 0: never lost
	offBus              bool      // lost in the previous cycle
	lastAt              time.Time // last cycle the GPU answered
	mig                 *simMIG   // the mig scenario's GPU instances (sim_mig.go)

	energyMJ           float64
	thermalViolationNs float64
	lastXID            uint64
	xidCount           uint64
}

// simBusIDs are the PCI addresses of the GPUs in a DGX H100.
var simBusIDs = []string{"00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
	"00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"}

func newSimGPU(i int, spec SimGPU, cfg SimConfig, hostname string, withHost bool) *simGPU {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
	// The UUID's first group spells "5171" (sim) so nobody mistakes it for a real GPU.
	uuid := fmt.Sprintf("GPU-5171%04x-%04x-%04x-%04x-%012x", i, rng.Uint32()&0xffff, 0x4000|rng.Uint32()&0x0fff,
		0x8000|rng.Uint32()&0x3fff, rng.Uint64()&0xffffffffffff)
	busID := fmt.Sprintf("%08X:%02X:00.0", 1+i/256, i%256)
	if i < len(simBusIDs) {
		busID = simBusIDs[i]
	}
	g := &simGPU{
		info:      newIdentity(i, uuid, busID, cfg.Model, simDriverVersion, hostname, withHost),
		scenario:  spec.Scenario,
		container: spec.Container,
		pid:       spec.PID,
		memoryMiB: float64(cfg.MemoryMiB),
		rng:       rng,
	}
	if spec.LostAt > 0 {
		g.lostFrom = time.Duration(spec.LostAt).Seconds()
		g.lostUntil = math.Inf(1)
		if spec.LostFor > 0 {
			g.lostUntil = g.lostFrom + time.Duration(spec.LostFor).Seconds()
		}
	}
	return g
}

// lostAt says whether the GPU is off the bus at simulated time t.
func (g *simGPU) lostAt(t float64) bool {
	return g.lostFrom > 0 && t >= g.lostFrom && t < g.lostUntil
}
