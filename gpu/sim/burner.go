package sim

import "log/slog"

// burnerOptions describe a CPU-burning container for the sim.
type burnerOptions struct {
	root        string   // where the cgroup hierarchies are mounted
	id          string   // the container id: a cgroup path
	cores       float64  // CPU limit
	controllers []string // cgroup v1 hierarchies to join
	logger      *slog.Logger
}
