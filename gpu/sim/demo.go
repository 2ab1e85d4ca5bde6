package sim

import "github.com/gpuscope/gpuscope/gpu"

// DemoConfig is what `gpuscope serve --demo` runs, the collector's
// settings and the simulator's: eight simulated H100s, one per failure
// mode the source document teaches, at 30× speed so that the leak climbs
// one 2 GiB step per real minute, the thermal GPU crosses 85 °C after
// about 70 s and the XID fires after 20 s. GPUs 0 and 1 share a
// container, like one data-parallel training job; the input-bound
// container really burns half a core when gpuscope runs as root. GPU 6 is
// in MIG mode (3g.40gb + 2 × 2g.20gb), so the per-instance series and
// labels can be seen too. Every optional family is on so that each
// dashboard panel has data.
func DemoConfig() (gpu.Config, Config) {
	g := gpu.DefaultConfig()
	g.Backend = gpu.BackendSim
	g.Families = gpu.Families{
		Profiling: true, Processes: true, ECC: true, RetiredPages: true,
		Violations: true, ClockEvents: true, NVLinkErrors: true,
	}
	c := DefaultConfig()
	c.TimeScale = 30
	c.CPUBurn = true
	c.GPUs = []GPU{
		{Scenario: ScenarioTraining, Container: "/gpuscope-demo/train"},
		{Scenario: ScenarioTraining, Container: "/gpuscope-demo/train"},
		{Scenario: ScenarioLeak, Container: "/gpuscope-demo/leaky"},
		{Scenario: ScenarioInputBound, Container: "/gpuscope-demo/input-bound"},
		{Scenario: ScenarioMemoryBound, Container: "/gpuscope-demo/memory-bound"},
		{Scenario: ScenarioThermal, Container: "/gpuscope-demo/hot"},
		{Scenario: ScenarioMIG, Container: "/gpuscope-demo/mig"},
		{Scenario: ScenarioXID, Container: "/gpuscope-demo/crashy"},
	}
	return g, c
}

// Describe says what a scenario demonstrates, for the demo's start-up
// log: a person who runs --demo learns which GPU to watch for which alert.
func Describe(scenario string) string {
	switch scenario {
	case ScenarioTraining:
		return "steady training; classed compute-bound; no alert"
	case ScenarioLeak:
		return "framebuffer climbing 2 GiB a step; GPUMemoryLeakSuspected"
	case ScenarioInputBound:
		return "GPU waiting on a CPU-saturated container; ContainerCPUSaturated and GPUStarvedByCPU, classed input-bound"
	case ScenarioMemoryBound:
		return "memory full, SMs idle; GPUMemoryAlmostFull, classed memory-bound"
	case ScenarioThermal:
		return "hot and throttling; GPUSMUtilizationHigh, then GPUThermalSlowdown and GPUTemperatureHigh"
	case ScenarioMIG:
		return "MIG mode, one 3g.40gb and two 2g.20gb instances; series per GPU instance"
	case ScenarioXID:
		return "its job dies of XID 79 (fallen off the bus); GPUXIDErrorCritical and GPUFellOffBus"
	case ScenarioHeldIdle:
		return "10 GiB held at about 1% SM share; GPUHeldIdle"
	case ScenarioOrphan:
		return "6 GiB held for a process that is gone; GPUMemoryHeldByGoneProcess"
	case ScenarioECC:
		return "a double-bit ECC error and a page pending retirement; GPUUncorrectableECCError, GPURetiredPagesPending, GPUXIDErrorCritical"
	case ScenarioRowRemap:
		return "a row remap pending a reset, then one that fails; GPURowRemapPending, GPURecoveryActionRequired, GPURowRemapFailed"
	case ScenarioNVLinkErrors:
		return "NVLink CRC errors, replays and a recovery; GPUNVLinkErrors"
	case ScenarioPCIeReplay:
		return "PCIe replays at 5 a second; GPUPCIeReplayRateHigh"
	case ScenarioPowerBrake:
		return "the chassis's power brake halves the clocks; GPUPowerBrake"
	case ScenarioFanFailure:
		return "a PCIe card whose fan stops; GPUThermalSlowdown, GPUHardwareSlowdown"
	case ScenarioMissing:
		return "leaves the device list; GPUMissing"
	default:
		return "no process; classed idle; no alert"
	}
}
