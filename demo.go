package main

import (
	"log/slog"

	"github.com/gpuscope/gpuscope/gpu"
)

// demoDataDir is where `serve --demo` keeps its TSDB unless
// --storage.tsdb.path is given: apart from data/, so a real appliance
// started later in the same directory never serves the demo's fake H100s.
const demoDataDir = "data-demo/"

// demoShows says what a sim scenario demonstrates, for the start-up log:
// a person who runs --demo learns which GPU to watch for which alert.
func demoShows(scenario string) string {
	switch scenario {
	case gpu.ScenarioTraining:
		return "steady training; classed compute-bound; no alert"
	case gpu.ScenarioLeak:
		return "framebuffer climbing 2 GiB a step; GPUMemoryLeakSuspected"
	case gpu.ScenarioInputBound:
		return "GPU waiting on a CPU-saturated container; ContainerCPUSaturated and GPUStarvedByCPU, classed input-bound"
	case gpu.ScenarioMemoryBound:
		return "memory full, SMs idle; GPUMemoryAlmostFull, classed memory-bound"
	case gpu.ScenarioThermal:
		return "hot and throttling; GPUSMUtilizationHigh, then GPUTemperatureHigh"
	case gpu.ScenarioMIG:
		return "MIG mode, one 3g.40gb and two 2g.20gb instances; series per GPU instance"
	case gpu.ScenarioXID:
		return "XID errors, then XID 79 (fallen off the bus); GPUXIDErrorCritical and GPUFellOffBus"
	default:
		return "no process; classed idle; no alert"
	}
}

// logDemo says, once at start, where the demo's data goes and which
// simulated GPU runs which scenario.
func logDemo(logger *slog.Logger, c gpu.Config, dataDir string) {
	logger.Info("Demo: simulated GPUs, with their own data directory and cgroups under /gpuscope-demo (removed at stop)",
		"data_dir", dataDir, "gpus", c.Sim.Count, "time_scale", c.Sim.TimeScale)
	for i := 0; i < c.Sim.Count; i++ {
		g := gpu.SimGPU{Scenario: gpu.ScenarioIdle}
		if i < len(c.Sim.GPUs) {
			g = c.Sim.GPUs[i]
		}
		scenario := g.Scenario
		if scenario == "" {
			scenario = gpu.ScenarioIdle
		}
		logger.Info("Demo GPU", "gpu", i, "scenario", scenario, "container", g.Container, "shows", demoShows(scenario))
	}
}
