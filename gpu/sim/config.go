package sim

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/prometheus/common/model"
)

// Scenarios, one per simulated GPU.
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

	// Hardware faults (hardware.go), each raising the built-in alerts
	// of rules/pack/health.yml.
	ScenarioECC          = "ecc"
	ScenarioRowRemap     = "row-remap"
	ScenarioNVLinkErrors = "nvlink-errors"
	ScenarioPCIeReplay   = "pcie-replay"
	ScenarioPowerBrake   = "power-brake"
	ScenarioFanFailure   = "fan-failure"
	ScenarioMissing      = "missing"
)

var scenarios = []string{ScenarioIdle, ScenarioTraining, ScenarioLeak, ScenarioInputBound, ScenarioMemoryBound, ScenarioThermal, ScenarioXID, ScenarioMIG,
	ScenarioHeldIdle, ScenarioOrphan,
	ScenarioECC, ScenarioRowRemap, ScenarioNVLinkErrors, ScenarioPCIeReplay, ScenarioPowerBrake, ScenarioFanFailure, ScenarioMissing}

const (
	defaultModel     = "NVIDIA H100 80GB HBM3"
	defaultMemoryMiB = 81559 // what NVML reports as total for an H100 80GB HBM3
)

// Config is the `gpu: sim:` section of gpuscope's config file: the
// simulated GPUs of backend sim. Every field has a working default
// (DefaultConfig).
type Config struct {
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
	GPUs []GPU `yaml:"gpus"`
	// CPUBurn makes every input-bound GPU's container a real cgroup that
	// burns CPU up to CPUBurnCores, so cAdvisor sees the CPU-saturated
	// container that starves the GPU. Needs root and writable cgroups;
	// without them gpuscope logs once and goes on without burning.
	CPUBurn bool `yaml:"cpu_burn"`
	// CPUBurnCores is the CPU limit of a burning container (default 0.5).
	CPUBurnCores float64 `yaml:"cpu_burn_cores"`
}

// GPU is the workload of one simulated GPU.
type GPU struct {
	// Scenario is one of idle, training, leak, input-bound, memory-bound,
	// thermal, xid, mig, held-idle, orphan, ecc, row-remap, nvlink-errors,
	// pcie-replay, power-brake, fan-failure, missing (default idle). mig is an H100
	// in MIG mode as one 3g.40gb and two 2g.20gb GPU instances, running a
	// training job in <container>/train and an inference server in
	// <container>/serve. held-idle is a job that holds 10 GiB and hardly
	// computes (SM share and GPU utilisation about 1 %: GPUHeldIdle);
	// orphan is 6 GiB the driver lists for a process that is gone (a pid
	// no Linux gives), which has no container
	// (gpuscope_gpu_orphaned_memory_bytes: GPUMemoryHeldByGoneProcess).
	// The hardware faults run a training job until their fault begins, at
	// the simulated time given: ecc (2 min: a double-bit ECC error, a page
	// pending retirement, XID 48), row-remap (2 min: a row remap pending a
	// GPU reset, which the driver asks for as its recovery action, XID 63;
	// 5 min: a remapping that fails, XID 64), nvlink-errors (1 min: NVLink
	// CRC errors at 550 a second, a replay every 30 s, one recovery at 3
	// min), pcie-replay (1 min: 5 PCIe replays a second), power-brake (1
	// min: the power brake halves the clocks), fan-failure (a PCIe card
	// whose fan stops at 1 min: it heats past 90 °C and slows down) and
	// missing (5 min: the GPU leaves the device list, as after a reboot
	// without it).
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
		Count:        8,
		Model:        defaultModel,
		MemoryMiB:    defaultMemoryMiB,
		TimeScale:    1,
		Seed:         1,
		CPUBurnCores: 0.5,
	}
}

// GPU returns simulated GPU i as the simulator runs it: GPUs[i], idle when
// past the end of the list or without a scenario.
func (s Config) GPU(i int) GPU {
	g := GPU{Scenario: ScenarioIdle}
	if i < len(s.GPUs) {
		g = s.GPUs[i]
	}
	if g.Scenario == "" {
		g.Scenario = ScenarioIdle
	}
	return g
}

// Validate reports the first key with a bad value, named as in the file
// (gpu.sim.count).
func (s Config) Validate() error {
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

func (g GPU) validatePID() error {
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
