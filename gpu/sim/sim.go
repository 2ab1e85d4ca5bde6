package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscope/gpuscope/gpu"
)

// Options configure a simulator.
type Options struct {
	// Config is the gpu.sim section.
	Config Config
	// CgroupRoot is where the cgroup hierarchies are mounted (default
	// "/sys/fs/cgroup"); the CPU burner creates its cgroups there.
	CgroupRoot string
}

// Backend simulates GPUs with scenarios, so that every GPU feature can be
// seen and tested without a GPU. Values are plausible for an H100 SXM and
// carry noise; the scenarios' time runs time_scale times faster than the
// wall clock. It is a gpu.Backend: gpu.Options.NewBackend makes it.
type Backend struct {
	cfg     Config
	env     *gpu.BackendEnv
	cgroups string

	// burnControllers are the cgroup v1 hierarchies a burning container is
	// created in; tests narrow it.
	burnControllers []string

	start   time.Time
	lastT   float64
	gpus    []*simGPU
	burners []*cpuBurner
}

var _ gpu.Backend = (*Backend)(nil)

const (
	simDriverVersion = "580.105.08"
	bytesPerMiB      = 1 << 20
)

// New makes a simulator of o.Config that reports through env, the GPU
// collector's (gpu.Options.NewBackend). It starts nothing; it fails only
// on a bad config.
func New(o Options, env *gpu.BackendEnv) (*Backend, error) {
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	if o.CgroupRoot == "" {
		o.CgroupRoot = "/sys/fs/cgroup"
	}
	return &Backend{
		cfg:             o.Config,
		env:             env,
		cgroups:         o.CgroupRoot,
		burnControllers: []string{"cpu", "cpuacct", "memory", "pids"},
	}, nil
}

// Name is gpu.BackendSim.
func (b *Backend) Name() string { return gpu.BackendSim }

// Open builds the GPUs and, with cpu_burn, starts the CPU burners; they
// stop when ctx ends or Close is called.
func (b *Backend) Open(ctx context.Context) error {
	b.start = b.env.Now()
	b.lastT = 0
	b.gpus = make([]*simGPU, b.cfg.Count)
	for i := range b.gpus {
		spec := b.cfg.GPU(i)
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
		b.gpus[i] = newSimGPU(i, spec, b.cfg, b.env)
		if spec.Scenario == ScenarioOrphan {
			b.gpus[i].pid = orphanPID
		}
		if spec.PID != 0 && b.env.Enabled(gpu.FieldContainerMemory) && b.env.ForeignPIDNamespace() {
			b.env.Logger.Warn("gpuscope is not in the host's pid namespace; a simulated GPU process given by its host pid will not be found (run gpuscope with the host's pid namespace, e.g. docker --pid host)",
				"gpu", i, "pid", spec.PID, "pid_namespace", filepath.Join(b.env.ProcRoot, "self/ns/pid"))
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
func (b *Backend) startBurners(ctx context.Context) {
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
			logger:      b.env.Logger,
		})
		if err != nil {
			b.env.Logger.Warn("Cannot burn CPU for the input-bound scenario; going on without", "container", g.container, "err", err)
			continue
		}
		b.env.Logger.Info("Burning CPU in the input-bound scenario's container", "container", g.container, "cores", b.cfg.CPUBurnCores, "pid", br.pid())
		if br.sharing() {
			b.env.Logger.Warn("Another gpuscope's demo already burns CPU in this container's cgroup: the two burners share its limit, so each gets less than its cores and its GPU may not look starved", "container", g.container, "cores", b.cfg.CPUBurnCores)
		}
		b.burners = append(b.burners, br)
	}
}

// Sample advances every GPU to the simulated time of now and reports it
// as the NVML backend would have read it.
func (b *Backend) Sample(_ context.Context, now time.Time) *gpu.Sample {
	t := now.Sub(b.start).Seconds() * b.cfg.TimeScale
	dt := max(t-b.lastT, 0)
	b.lastT = t
	s := gpu.NewSample(now)
	for _, g := range b.gpus {
		if g.scenario == ScenarioMissing && t >= missingAt {
			// Gone from the device list, as after a reboot that did not
			// bring it back: no series and no error, one GPU fewer.
			continue
		}
		gs := gpu.NewGPUSample(g.info)
		if g.lostAt(t) {
			// Off the bus: NVML answers GPU_IS_LOST for every read, and
			// the job on it is not running.
			s.AddError(g.info, "device", nvml.ERROR_GPU_IS_LOST)
			if !g.offBus {
				// The driver reports XID 79 as the GPU falls off the bus.
				g.offBus = true
				g.raiseXID(79)
			}
			// The XID series stay, as in the NVML backend.
			if b.env.Enabled(gpu.FieldXID) {
				gs.Set(gpu.FieldXID, float64(g.lastXID))
				g.addXIDCounts(gs)
			}
			s.AddUnreadGPU(gs, g.lastAt)
			continue
		}
		g.offBus = false
		g.lastAt = now
		st := g.step(t, dt)
		// The scenarios run at time_scale, but a joule is a watt for a
		// real second: energy follows the wall clock, as GPU-hours do,
		// so a demo's report shows an H100's 700 W, not 30 times it.
		g.energyMJ += st.power * dt / b.cfg.TimeScale * 1000
		if err := b.fill(gs, g, st); err != nil {
			s.AddError(g.info, gpu.FieldContainerMemory.String(), err)
		}
		if g.mig != nil {
			b.fillMIG(gs, g)
		}
		s.AddGPU(gs)
	}
	return s
}

// Close stops the CPU burners and removes their cgroups.
func (b *Backend) Close() error {
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
func (b *Backend) fill(s *gpu.GPUSample, g *simGPU, st simState) error {
	set := func(f gpu.Field, v float64) {
		if b.env.Enabled(f) {
			s.Set(f, v)
		}
	}
	total := float64(b.cfg.MemoryMiB)
	used := float64(int64(st.memUsedMiB))
	set(gpu.FieldSMClock, float64(int64(st.smClock)))
	set(gpu.FieldMemClock, float64(int64(st.memClock)))
	set(gpu.FieldGPUTemp, float64(int64(st.temp)))
	set(gpu.FieldMemoryTemp, float64(int64(st.memTemp)))
	set(gpu.FieldPowerUsage, float64(int64(st.power*1000))/1000)
	set(gpu.FieldEnergy, float64(int64(g.energyMJ)))
	set(gpu.FieldPCIeReplay, g.hw.pcieReplays)
	set(gpu.FieldGPUUtil, float64(int64(st.util)))
	set(gpu.FieldMemCopyUtil, float64(int64(st.memCopyUtil)))
	set(gpu.FieldEncUtil, 0)
	set(gpu.FieldDecUtil, 0)
	set(gpu.FieldXID, float64(g.lastXID))
	set(gpu.FieldFBUsed, used)
	set(gpu.FieldFBReserved, simReservedMiB)
	set(gpu.FieldFBFree, total-simReservedMiB-used)
	set(gpu.FieldFBTotal, total)
	set(gpu.FieldNVLinkBandwidth, float64(int64(st.nvlinkMBs)))
	set(gpu.FieldVGPULicense, 0)
	set(gpu.FieldUncRemappedRows, g.hw.uncRemapped)
	set(gpu.FieldCorRemappedRows, 0)
	set(gpu.FieldRowRemapFailure, g.hw.remapFailed)
	set(gpu.FieldRowRemapPending, g.hw.remapPending)
	set(gpu.FieldRecoveryAction, g.hw.recoveryAction)
	set(gpu.FieldEnforcedPowerLimit, powerLimitW)
	if st.fan == noFan {
		s.SetUnsupported(gpu.FieldFanSpeed)
	} else {
		set(gpu.FieldFanSpeed, st.fan)
	}
	set(gpu.FieldProfGrEngineActive, st.grActive)
	set(gpu.FieldProfSMActive, st.smActive)
	set(gpu.FieldProfSMOccupancy, st.smOccupancy)
	set(gpu.FieldProfTensorActive, st.tensor)
	set(gpu.FieldProfDRAMActive, st.dram)
	set(gpu.FieldProfPCIeTxBytes, float64(int64(st.pcieTx)))
	set(gpu.FieldProfPCIeRxBytes, float64(int64(st.pcieRx)))
	set(gpu.FieldProfNVLinkTxBytes, float64(int64(st.nvlinkMBs*1e6/2)))
	set(gpu.FieldProfNVLinkRxBytes, float64(int64(st.nvlinkMBs*1e6/2)))
	set(gpu.FieldThermalViolation, float64(int64(g.thermalViolationNs)))
	for _, f := range []gpu.Field{gpu.FieldPowerViolation, gpu.FieldSyncBoostViolation, gpu.FieldBoardLimitViolation, gpu.FieldLowUtilViolation, gpu.FieldReliabilityViolation,
		gpu.FieldECCSBEVolTotal, gpu.FieldECCSBEAggTotal, gpu.FieldRetiredSBE} {
		set(f, 0)
	}
	set(gpu.FieldECCDBEVolTotal, g.hw.eccDBE)
	set(gpu.FieldECCDBEAggTotal, g.hw.eccDBE)
	set(gpu.FieldRetiredDBE, g.hw.retiredDBE)
	set(gpu.FieldRetiredPending, g.hw.retiredPending)
	set(gpu.FieldNVLinkCRCFlitErrors, g.hw.nvlinkCRCFlit)
	set(gpu.FieldNVLinkCRCDataErrors, g.hw.nvlinkCRCData)
	set(gpu.FieldNVLinkReplayErrors, g.hw.nvlinkReplay)
	set(gpu.FieldNVLinkRecoveryErrors, g.hw.nvlinkRecovery)
	set(gpu.FieldPCIeLinkGen, float64(st.pcieGen))
	set(gpu.FieldPCIeLinkWidth, 16)
	set(gpu.FieldPCIeLinkMaxGen, 5)
	set(gpu.FieldPCIeLinkMaxWidth, 16)
	set(gpu.FieldPCIeMaxBandwidth, gpu.PCIeMaxBandwidth(5, 16))
	set(gpu.FieldPCIeTxRate, float64(int64(st.pcieTx)))
	set(gpu.FieldPCIeRxRate, float64(int64(st.pcieRx)))
	if b.env.Enabled(gpu.FieldClockEvents) {
		s.SetClockEvents(st.clockEvents)
	}
	g.addXIDCounts(s)
	if !b.env.Enabled(gpu.FieldContainerMemory) {
		return nil
	}
	var cs []gpu.Container
	switch {
	case !st.process:
	case g.pid != 0:
		return b.fillProcess(s, g, used, st.util)
	case g.container != "":
		cs = []gpu.Container{b.env.Container(g.container, used*bytesPerMiB, float64(int64(st.util)), 1)}
	}
	s.SetContainers(cs, gpu.Orphans{})
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
func (b *Backend) fillProcess(s *gpu.GPUSample, g *simGPU, usedMiB, util float64) error {
	pid := uint32(g.pid)
	cs, orphans, unresolved := b.env.GroupProcesses(
		[]nvml.ProcessInfo{{Pid: pid, UsedGpuMemory: uint64(usedMiB) * bytesPerMiB}},
		[]nvml.ProcessUtilizationSample{{Pid: pid, SmUtil: uint32(util)}},
	)
	s.SetContainers(cs, orphans)
	if unresolved > 0 && len(cs) == 0 {
		return fmt.Errorf("cannot read the cgroup of the simulated GPU process %d (no such process, or gpuscope is outside the host pid namespace?)", pid)
	}
	return nil
}

// simGPU is one simulated GPU and the state it accumulates.
type simGPU struct {
	info      *gpu.Identity
	scenario  string
	container string
	pid       int // a host process standing for the GPU's process; 0: none
	memoryMiB float64
	rng       *rand.Rand

	lostFrom, lostUntil float64   // simulated seconds; lostFrom 0: never lost
	offBus              bool      // lost in the previous cycle
	lastAt              time.Time // last cycle the GPU answered
	mig                 *simMIG   // the mig scenario's GPU instances (mig.go)

	energyMJ           float64
	thermalViolationNs float64
	// lastXID is the last XID the GPU raised, xids how often each code.
	lastXID uint64
	xids    map[uint64]uint64
	hw      hardwareState // the hardware-fault scenarios' counters (hardware.go)
}

// raiseXID records that the driver reported XID code on the GPU.
func (g *simGPU) raiseXID(code uint64) {
	if g.xids == nil {
		g.xids = map[uint64]uint64{}
	}
	g.lastXID = code
	g.xids[code]++
}

// addXIDCounts adds the GPU's XID counts by code, in code order, to s.
func (g *simGPU) addXIDCounts(s *gpu.GPUSample) {
	for _, code := range slices.Sorted(maps.Keys(g.xids)) {
		s.AddXIDCount(code, g.xids[code])
	}
}

// simBusIDs are the PCI addresses of the GPUs in a DGX H100.
var simBusIDs = []string{"00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
	"00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"}

func newSimGPU(i int, spec GPU, cfg Config, env *gpu.BackendEnv) *simGPU {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
	// The UUID's first group spells "5171" (sim) so nobody mistakes it for a real GPU.
	uuid := fmt.Sprintf("GPU-5171%04x-%04x-%04x-%04x-%012x", i, rng.Uint32()&0xffff, 0x4000|rng.Uint32()&0x0fff,
		0x8000|rng.Uint32()&0x3fff, rng.Uint64()&0xffffffffffff)
	busID := fmt.Sprintf("%08X:%02X:00.0", 1+i/256, i%256)
	if i < len(simBusIDs) {
		busID = simBusIDs[i]
	}
	g := &simGPU{
		info:      env.Identity(i, uuid, busID, cfg.Model, simDriverVersion),
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
