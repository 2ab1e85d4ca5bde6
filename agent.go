package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu"
)

func agentCommand(cli *kingpin.Application) command {
	c := cli.Command("agent", "Run only the collectors (cAdvisor at /metrics/cadvisor, GPUs at /metrics/gpu) for an appliance elsewhere to scrape: no TSDB, no scraping, no rules.")
	var s app.AgentSettings
	c.Flag("config.file", "gpuscope config file; the agent reads its cadvisor, gpu, web and global.scrape_interval settings. Empty: the embedded defaults.").StringVar(&s.ConfigFile)
	c.Flag("web.listen-address", "Address to listen on for /metrics, /metrics/cadvisor and /metrics/gpu. Default "+app.DefaultListenAddress+" or the config file's web.listen_address.").PlaceHolder(app.DefaultListenAddress).StringVar(&s.ListenAddress)
	c.Flag("web.config.file", "exporter-toolkit web config file for TLS and basic auth.").Default("").StringVar(&s.WebConfigFile)
	c.Flag("gpu.backend", "GPU backend: auto, nvml, sim or none. Default: the config file's gpu.backend (auto).").EnumVar(&s.GPUBackend, gpu.BackendAuto, gpu.BackendNVML, gpu.BackendSim, gpu.BackendNone)
	c.Flag("demo", "Run simulated GPUs with one scenario each, as serve --demo.").BoolVar(&s.Demo)
	c.Flag("node.name", "This node's name: the Hostname label of GPU series. Default: the host name.").Envar("NODE_NAME").StringVar(&s.NodeName)
	memLimit := addMemLimitFlags(c)
	return command{clause: c, run: func(logger *slog.Logger) error {
		if err := applyMemLimit(memLimit, logger); err != nil {
			return err
		}
		s.Logger, s.OnConfig = logger, func(c *config.Config) { applyGoGC(c.Prometheus, logger) }
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		a, err := app.NewAgent(ctx, s)
		if err != nil {
			return err
		}
		return runWithSignals(ctx, a, logger)
	}}
}
