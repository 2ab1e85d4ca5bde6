package gpu

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Backend names accepted in Config.Backend.
const (
	BackendAuto = "auto"
	BackendNVML = "nvml"
	BackendSim  = "sim"
	BackendNone = "none"
)

// Values accepted in Config.HostnameLabel.
const (
	HostnameLabelDCGM   = "Hostname" // dcgm-exporter up to 4.5.3-4.8.2
	HostnameLabelLower  = "hostname" // dcgm-exporter 4.6.0-4.8.3 and later
	HostnameLabelNone   = "none"     // like dcgm-exporter --no-hostname
	defaultSimModel     = "NVIDIA H100 80GB HBM3"
	defaultSimMemoryMiB = 81559 // what NVML reports as total for an H100 80GB HBM3
)

// Sim scenarios, one per simulated GPU.
const (
	ScenarioIdle        = "idle"
	ScenarioTraining    = "training"
	ScenarioLeak        = "leak"
	ScenarioInputBound  = "input-bound"
	ScenarioMemoryBound = "memory-bound"
	ScenarioThermal     = "thermal"
	ScenarioXID         = "xid"
	ScenarioMIG         = "mig"
	ScenarioHeldIdle    = "held-idle"
	ScenarioOrphan      = "orphan"
)

var scenarios = []string{ScenarioIdle, ScenarioTraining, ScenarioLeak, ScenarioInputBound, ScenarioMemoryBound, ScenarioThermal, ScenarioXID, ScenarioMIG,
	ScenarioHeldIdle, ScenarioOrphan}

// Config is the `gpu:` section of gpuscope's config file. Every field has a
// working default (DefaultConfig); the config package decodes into a copy of
// it with KnownFields(true).
type Config struct {
	// Backend selects where GPU data comes from: "auto" (NVML if
	// libnvidia-ml.so.1 loads, otherwise no GPUs and
	// gpuscope_gpu_collector_up 0), "nvml", "sim" (simulated GPUs) or "none".
	Backend string `yaml:"backend"`
	// Interval between two NVML reads. 0 means the global scrape interval;
	// the caller resolves it into Options.Interval.
	Interval model.Duration `yaml:"interval"`
	// Timeout is the deadline of one sampling cycle; a cycle still running
	// after it makes gpuscope_gpu_collector_up 0 while scrapes keep getting
	// the previous sample. 0 means the interval.
	Timeout model.Duration `yaml:"timeout"`
	// HostnameLabel is the name of the host label on DCGM series:
	// "Hostname" (default, dcgm-exporter <= 4.5.3-4.8.2 and the dashboards
	// written for it), "hostname" (dcgm-exporter 4.6+) or "none".
	HostnameLabel string `yaml:"hostname_label"`
	// Families switches optional metric families on and off.
	Families Families `yaml:"families"`
	// Sim configures the simulated GPUs of backend "sim".
	Sim SimConfig `yaml:"sim"`
}

// Families are the optional metric families. The dcgm-exporter default
// counters are always exported.
type Families struct {
	// Profiling: DCGM_FI_PROF_* from NVML GPM (Hopper and newer; absent on
	// older GPUs). Default on.
	Profiling bool `yaml:"profiling"`
	// Processes: gpuscope_gpu_container_* (per-container GPU memory and SM
	// utilisation from the GPU's compute processes). Default on.
	Processes bool `yaml:"processes"`
	// ECC: DCGM_FI_DEV_ECC_{SBE,DBE}_{VOL,AGG}_TOTAL. Default off.
	ECC bool `yaml:"ecc"`
	// RetiredPages: DCGM_FI_DEV_RETIRED_{SBE,DBE,PENDING}. Default off.
	RetiredPages bool `yaml:"retired_pages"`
	// Violations: DCGM_FI_DEV_*_VIOLATION throttling time in ns. Default off.
	Violations bool `yaml:"violations"`
	// ClockEvents: gpuscope_gpu_clock_event_active{reason}. Default off.
	ClockEvents bool `yaml:"clock_events"`
	// NVLinkErrors: DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL. Default off.
	NVLinkErrors bool `yaml:"nvlink_errors"`
}

// SimConfig configures backend "sim".
type SimConfig struct {
	// Count is the number of simulated GPUs (default 8).
	Count int `yaml:"count"`
	// Model is the modelName label (default "NVIDIA H100 80GB HBM3").
	Model string `yaml:"model"`
	// MemoryMiB is the framebuffer size each GPU reports (default 81559).
	MemoryMiB int `yaml:"memory_mib"`
	// TimeScale compresses time: simulated time = start + time_scale ×
	// elapsed real time (default 1). At 30 the leak scenario steps every
	// real minute.
	TimeScale float64 `yaml:"time_scale"`
	// Seed makes the noise reproducible (default 1).
	Seed uint64 `yaml:"seed"`
	// GPUs configures GPU i with GPUs[i]; GPUs past the end of the list are
	// idle. At most Count entries.
	GPUs []SimGPU `yaml:"gpus"`
	// CPUBurn makes every input-bound GPU's container a real cgroup that
	// burns CPU up to CPUBurnCores, so cAdvisor sees the CPU-saturated
	// container that starves the GPU. Needs root and writable cgroups;
	// without them gpuscope logs once and goes on without burning.
	CPUBurn bool `yaml:"cpu_burn"`
	// CPUBurnCores is the CPU limit of a burning container (default 0.5).
	CPUBurnCores float64 `yaml:"cpu_burn_cores"`
}

// SimGPU is the workload of one simulated GPU.
type SimGPU struct {
	// Scenario is one of idle, training, leak, input-bound, memory-bound,
	// thermal, xid, mig, held-idle, orphan (default idle). mig is an H100
	// in MIG mode as one 3g.40gb and two 2g.20gb GPU instances, running a
	// training job in <container>/train and an inference server in
	// <container>/serve. held-idle is a job that holds 10 GiB and hardly
	// computes (SM share and GPU utilisation about 1 %: GPUHeldIdle);
	// orphan is 6 GiB the driver lists for a process that is gone (a pid
	// no Linux gives), which has no container
	// (gpuscope_gpu_orphaned_memory_bytes: GPUMemoryHeldByGoneProcess).
	Scenario string `yaml:"scenario"`
	// Container is the cgroup path of the container running the GPU's
	// process, as cAdvisor names it in its id label (for example
	// /system.slice/docker-abc.scope). Default /gpuscope-sim/gpu<index>
	// for every scenario but idle, which has no process.
	Container string `yaml:"container"`
	// PID makes the GPU's process a real host process: each cycle its
	// container is found as the NVML backend finds a GPU process's
	// (/proc/<pid>/cgroup, then cAdvisor's id and the workload labels),
	// and Container is not used. For demos and tests: give it the pid of
	// a process in a Docker container (docker inspect -f '{{.State.Pid}}')
	// and the GPU's use shows under that container's name and image. A
	// pid that does not exist or exits is what a vanished process is to
	// the NVML backend: no per-container series, and a read error counted
	// in gpuscope_gpu_collector_errors_total. Needs gpuscope in the
	// host's pid namespace. Not with scenarios idle (no process) and mig
	// (two jobs); 0: none.
	PID int `yaml:"pid"`
	// LostAt makes the GPU fall off the bus this long (simulated time)
	// after the sim starts: every read answers NVML's GPU_IS_LOST, as a
	// real GPU does after XID 79, until LostFor has passed (0: for good).
	// 0 never loses it.
	LostAt  model.Duration `yaml:"lost_at"`
	LostFor model.Duration `yaml:"lost_for"`
}

// DefaultConfig returns the config used when the file does not set a key.
func DefaultConfig() Config {
	return Config{
		Backend:       BackendAuto,
		HostnameLabel: HostnameLabelDCGM,
		Families:      Families{Profiling: true, Processes: true},
		Sim: SimConfig{
			Count:        8,
			Model:        defaultSimModel,
			MemoryMiB:    defaultSimMemoryMiB,
			TimeScale:    1,
			Seed:         1,
			CPUBurnCores: 0.5,
		},
	}
}

// DemoConfig is what `gpuscope serve --demo` runs: eight simulated H100s,
// one per failure mode the source document teaches, at 30× speed so that
// the leak climbs one 2 GiB step per real minute, the thermal GPU crosses
// 85 °C after about 70 s and the XID fires after 20 s. GPUs 0 and 1 share a
// container, like one data-parallel training job; the input-bound container
// really burns half a core when gpuscope runs as root. GPU 6 is in MIG mode
// (3g.40gb + 2 × 2g.20gb), so the per-instance series and labels can be
// seen too. Every optional family is on so that each dashboard panel has
// data.
func DemoConfig() Config {
	c := DefaultConfig()
	c.Backend = BackendSim
	c.Families = Families{
		Profiling: true, Processes: true, ECC: true, RetiredPages: true,
		Violations: true, ClockEvents: true, NVLinkErrors: true,
	}
	c.Sim.TimeScale = 30
	c.Sim.CPUBurn = true
	c.Sim.GPUs = []SimGPU{
		{Scenario: ScenarioTraining, Container: "/gpuscope-demo/train"},
		{Scenario: ScenarioTraining, Container: "/gpuscope-demo/train"},
		{Scenario: ScenarioLeak, Container: "/gpuscope-demo/leaky"},
		{Scenario: ScenarioInputBound, Container: "/gpuscope-demo/input-bound"},
		{Scenario: ScenarioMemoryBound, Container: "/gpuscope-demo/memory-bound"},
		{Scenario: ScenarioThermal, Container: "/gpuscope-demo/hot"},
		{Scenario: ScenarioMIG, Container: "/gpuscope-demo/mig"},
		{Scenario: ScenarioXID, Container: "/gpuscope-demo/crashy"},
	}
	return c
}

// Validate reports the first key with a bad value, named as in the file.
func (c Config) Validate() error {
	switch c.Backend {
	case BackendAuto, BackendNVML, BackendSim, BackendNone:
	default:
		return fmt.Errorf("gpu.backend: unknown backend %q (want auto, nvml, sim or none)", c.Backend)
	}
	if c.Interval < 0 {
		return fmt.Errorf("gpu.interval: must not be negative, got %s", c.Interval)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("gpu.timeout: must not be negative, got %s", c.Timeout)
	}
	if c.Interval > 0 && c.Interval < model.Duration(100*time.Millisecond) {
		return fmt.Errorf("gpu.interval: %s is below the minimum of 100ms", c.Interval)
	}
	switch c.HostnameLabel {
	case HostnameLabelDCGM, HostnameLabelLower, HostnameLabelNone:
	default:
		return fmt.Errorf("gpu.hostname_label: unknown value %q (want Hostname, hostname or none)", c.HostnameLabel)
	}
	return c.Sim.validate()
}

func (s SimConfig) validate() error {
	if s.Count < 1 || s.Count > 1024 {
		return fmt.Errorf("gpu.sim.count: must be between 1 and 1024, got %d", s.Count)
	}
	if strings.TrimSpace(s.Model) == "" {
		return errors.New("gpu.sim.model: must not be empty")
	}
	if s.MemoryMiB < 4096 {
		return fmt.Errorf("gpu.sim.memory_mib: must be at least 4096, got %d", s.MemoryMiB)
	}
	if !(s.TimeScale > 0) || s.TimeScale > 1e6 {
		return fmt.Errorf("gpu.sim.time_scale: must be above 0 and at most 1000000, got %g", s.TimeScale)
	}
	if !(s.CPUBurnCores > 0) || s.CPUBurnCores > 1024 {
		return fmt.Errorf("gpu.sim.cpu_burn_cores: must be above 0 and at most 1024, got %g", s.CPUBurnCores)
	}
	if len(s.GPUs) > s.Count {
		return fmt.Errorf("gpu.sim.gpus: %d entries for %d GPUs (gpu.sim.count)", len(s.GPUs), s.Count)
	}
	for i, g := range s.GPUs {
		if g.Scenario != "" && !knownScenario(g.Scenario) {
			return fmt.Errorf("gpu.sim.gpus[%d].scenario: unknown scenario %q (want %s)", i, g.Scenario, strings.Join(scenarios, ", "))
		}
		if g.LostAt < 0 || g.LostFor < 0 {
			return fmt.Errorf("gpu.sim.gpus[%d]: lost_at and lost_for must not be negative", i)
		}
		if g.LostFor > 0 && g.LostAt == 0 {
			return fmt.Errorf("gpu.sim.gpus[%d].lost_for: set lost_at too (when the GPU falls off the bus)", i)
		}
		if err := g.validatePID(); err != nil {
			return fmt.Errorf("gpu.sim.gpus[%d].pid: %w", i, err)
		}
		if g.Container != "" {
			if err := validCgroupID(g.Container); err != nil {
				return fmt.Errorf("gpu.sim.gpus[%d].container: %w", i, err)
			}
			if s.CPUBurn && g.Scenario == ScenarioInputBound && g.Container == "/" {
				return fmt.Errorf("gpu.sim.gpus[%d].container: the root cgroup cannot be a burning container", i)
			}
		}
	}
	return nil
}

// maxPID is the largest pid Linux gives (PID_MAX_LIMIT on 64-bit).
const maxPID = 1 << 22

func (g SimGPU) validatePID() error {
	switch {
	case g.PID == 0:
		return nil
	case g.PID < 0:
		return fmt.Errorf("must not be negative, got %d (a host process id, or 0 for none)", g.PID)
	case g.PID > maxPID:
		return fmt.Errorf("%d is above the largest Linux pid (%d)", g.PID, maxPID)
	case g.Scenario == "" || g.Scenario == ScenarioIdle:
		return errors.New("an idle GPU runs no process; set a scenario such as training")
	case g.Scenario == ScenarioMIG:
		return errors.New("not with the mig scenario, whose two jobs run in <container>/train and <container>/serve")
	case g.Scenario == ScenarioOrphan:
		return errors.New("not with the orphan scenario, whose process is gone by design")
	}
	return nil
}

func knownScenario(s string) bool {
	for _, x := range scenarios {
		if s == x {
			return true
		}
	}
	return false
}

// validCgroupID accepts what cAdvisor uses as a container id: a clean,
// absolute cgroup path.
func validCgroupID(id string) error {
	if !strings.HasPrefix(id, "/") {
		return fmt.Errorf("%q is not an absolute cgroup path", id)
	}
	if path.Clean(id) != id || strings.Contains(id, "/..") {
		return fmt.Errorf("%q is not a clean cgroup path", id)
	}
	if strings.ContainsAny(id, "\n\x00") {
		return fmt.Errorf("%q contains a newline or NUL", id)
	}
	return nil
}
