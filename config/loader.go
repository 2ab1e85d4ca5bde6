package config

import (
	"log/slog"

	"github.com/alecthomas/units"
	"github.com/prometheus/common/model"

	"github.com/gpuscope/gpuscope/gpu/sim"
)

// DemoDataDir is where `serve --demo` keeps its TSDB unless a data
// directory is given: apart from data/, so a real appliance started later
// in the same directory never serves the demo's fake H100s.
const DemoDataDir = "data-demo/"

// Loader reads the config as every command that runs or checks an
// appliance does (serve, agent, doctor, check config, alertmanager export,
// grafana provision), so that they all see the same config for the same
// command line: the file, or the embedded defaults without one; --demo's
// simulated GPUs and time scale, and --gpu.backend, over its gpu: section;
// the retention flags where the file sets no retention. The built-in
// jobs are added by the appliance, once its listener's address is known.
type Loader struct {
	File       string
	Demo       bool
	GPUBackend string
	// RetentionTime and RetentionSize are the --storage.tsdb.retention
	// flags: they apply when the file's storage.tsdb.retention sets none.
	RetentionTime model.Duration
	RetentionSize units.Base2Bytes
	Logger        *slog.Logger
}

// Load reads the config. Its errors name the file, line and key; its
// warnings are the caller's to show: serve logs them, `check config`
// prints them.
func (l Loader) Load() (*Config, error) {
	logger := l.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var (
		cfg *Config
		err error
	)
	if l.File == "" {
		cfg = Default(logger)
	} else if cfg, err = LoadFile(l.File, logger); err != nil {
		return nil, err
	}
	if err := cfg.CheckBuiltinJobs(); err != nil {
		return nil, err
	}
	if l.Demo {
		cfg.GPU.Config, cfg.GPU.Sim = sim.DemoConfig()
		// The built-in rules run as fast as the simulated GPUs, so that
		// the demo's alerts fire within minutes.
		cfg.Rules.Builtin.TimeScale = cfg.GPU.Sim.TimeScale
	}
	if l.GPUBackend != "" {
		cfg.GPU.Backend = l.GPUBackend
	}
	if r := cfg.Prometheus.StorageConfig.TSDBConfig.Retention; r.Time == 0 && r.Size == 0 && r.Percentage == 0 {
		r.Time = l.RetentionTime
		r.Size = l.RetentionSize
	}
	return cfg, nil
}
