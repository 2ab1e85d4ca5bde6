package app

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/sim"
	"github.com/gpuscope/gpuscope/scrape/cadvisor"
	"github.com/gpuscope/gpuscope/scrape/exposition"
	"github.com/gpuscope/gpuscope/web"
	"github.com/gpuscope/gpuscope/workload"
)

// This file is what `serve` and `agent` share: the collectors of the node.

// nodeCollectors are the node's cAdvisor and GPU collectors; either is nil
// when its config turns it off.
type nodeCollectors struct {
	cadvisor *cadvisor.Collector
	gpu      *gpu.Collector
	// gpuLogger gets what /metrics/gpu's handler could not serve.
	gpuLogger *slog.Logger
	// simulated is the sim backend's GPU collector, started late
	// (startSimulated).
	simulated bool
}

func newNodeCollectors(cfg *config.Config, nodeName string, logger *slog.Logger) (*nodeCollectors, error) {
	var (
		c   nodeCollectors
		err error
		// One identity per cgroup for both collectors, so a container's
		// GPU series carry the workload labels of its cAdvisor series,
		// their user among them, named from the host's passwd.
		workloads = workload.NewCache(&workload.Options{Users: workload.NewUsers(workload.UsersOptions{
			PasswdFile: cfg.Workloads.PasswdFile,
			Logger:     logger.With("component", "workload"),
		})})
	)
	if cfg.Cadvisor.Enabled {
		c.cadvisor, err = cadvisor.New(cadvisor.Options{
			Config:    cfg.Cadvisor,
			Interval:  cfg.ScrapeInterval(),
			Logger:    logger.With("component", "cadvisor"),
			Workloads: workloads,
		})
		if err != nil {
			return nil, err
		}
	}
	if cfg.GPU.Backend != gpu.BackendNone {
		var lookup func(string) (workload.Metadata, bool)
		if c.cadvisor != nil {
			// GPU processes' containers get cAdvisor's name, and their
			// identity from the metadata cAdvisor's labels use.
			lookup = c.cadvisor.Lookup
		}
		c.gpuLogger = logger.With("component", "gpu")
		o := gpu.Options{
			Config:          cfg.GPU.Config,
			Interval:        cfg.GPUInterval(),
			Hostname:        nodeName,
			Logger:          c.gpuLogger,
			ContainerLookup: lookup,
			Workloads:       workloads,
		}
		if cfg.GPU.Backend == gpu.BackendSim {
			c.simulated = true
			o.NewBackend = func(env *gpu.BackendEnv) (gpu.Backend, error) {
				return sim.New(sim.Options{Config: cfg.GPU.Sim}, env)
			}
		}
		c.gpu, err = gpu.New(o)
		if err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// mount serves both collectors' endpoints. One that is off still answers
// with an empty page, so a node's targets are up or down together and
// TargetDown means the node, not a choice made in its config.
func (c *nodeCollectors) mount(h *web.Handler) {
	cadvisorHandler, gpuHandler := emptyMetrics(), emptyMetrics()
	if c.cadvisor != nil {
		cadvisorHandler = c.cadvisor.Handler()
	}
	if c.gpu != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(c.gpu)
		// What the registry drops (a duplicate series, a collector's
		// panic) is logged; the rest of the page is served.
		gpuHandler = exposition.Handler(reg, c.gpuLogger)
	}
	h.MountMetrics("/metrics/cadvisor", cadvisorHandler)
	h.MountMetrics("/metrics/gpu", gpuHandler)
}

// start runs the collectors, but a simulated GPU's: they start before the
// TSDB opens, so that the first scrape finds cAdvisor housekept and NVML
// initialised.
func (c *nodeCollectors) start(r *runner) {
	if c.cadvisor != nil {
		r.start("cadvisor", c.cadvisor.Run)
	}
	if c.gpu != nil && !c.simulated {
		r.start("gpu", c.gpu.Run)
	}
}

// startSimulated runs the simulated GPUs' collector. Their scenarios' clock
// starts when the sim opens; opened as scraping begins, a slow start (a
// long WAL replay, a loaded machine) does not eat the first simulated
// minutes, and the first scrape sees every scenario from its start.
func (c *nodeCollectors) startSimulated(r *runner) {
	if c.gpu != nil && c.simulated {
		r.start("gpu", c.gpu.Run)
	}
}

// emptyMetrics serves a valid, empty exposition.
func emptyMetrics() http.Handler {
	return promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{})
}
