package app

import (
	"log/slog"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu/sim"
)

// logDemo says, once at start, where the demo's data goes and which
// simulated GPU runs which scenario.
func logDemo(logger *slog.Logger, c config.GPU, dataDir string) {
	logger.Info("Demo: simulated GPUs, with their own data directory and cgroups under /gpuscope-demo (removed at stop)",
		"data_dir", dataDir, "gpus", c.Sim.Count, "time_scale", c.Sim.TimeScale)
	for i := 0; i < c.Sim.Count; i++ {
		g := c.Sim.GPU(i)
		logger.Info("Demo GPU", "gpu", i, "scenario", g.Scenario, "container", g.Container, "shows", sim.Describe(g.Scenario))
	}
}
