package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/version"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/scrape/families"
	"github.com/gpuscope/gpuscope/web"
)

// agentFlags are the serve flags that apply to an agent, with the same
// names and meanings.
type agentFlags struct {
	configFile    string
	listenAddress string
	listenSet     bool
	webConfigFile string
	gpuBackend    string
	demo          bool
	nodeName      string
	memLimit      *memLimitFlags
}

func agentCommand(app *kingpin.Application) command {
	c := app.Command("agent", "Run only the collectors (cAdvisor at /metrics/cadvisor, GPUs at /metrics/gpu) for an appliance elsewhere to scrape: no TSDB, no scraping, no rules.")
	f := &agentFlags{}
	c.Flag("config.file", "gpuscope config file; the agent reads its cadvisor, gpu, web and global.scrape_interval settings. Empty: the embedded defaults.").StringVar(&f.configFile)
	c.Flag("web.listen-address", "Address to listen on for /metrics, /metrics/cadvisor and /metrics/gpu. Default "+DefaultListenAddress+" or the config file's web.listen_address.").IsSetByUser(&f.listenSet).Default(DefaultListenAddress).StringVar(&f.listenAddress)
	c.Flag("web.config.file", "exporter-toolkit web config file for TLS and basic auth.").Default("").StringVar(&f.webConfigFile)
	c.Flag("gpu.backend", "GPU backend: auto, nvml, sim or none. Default: the config file's gpu.backend (auto).").EnumVar(&f.gpuBackend, gpu.BackendAuto, gpu.BackendNVML, gpu.BackendSim, gpu.BackendNone)
	c.Flag("demo", "Run simulated GPUs with one scenario each, as serve --demo.").BoolVar(&f.demo)
	c.Flag("node.name", "This node's name: the Hostname label of GPU series. Default: the host name.").Envar("NODE_NAME").StringVar(&f.nodeName)
	f.memLimit = addMemLimitFlags(c)
	return command{clause: c, run: func(logger *slog.Logger) error { return runAgent(f, logger) }}
}

// runAgent serves the collectors until SIGINT/SIGTERM.
func runAgent(f *agentFlags, logger *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := applyMemLimit(f.memLimit, logger); err != nil {
		return err
	}
	a, err := newAgent(f, logger)
	if err != nil {
		return err
	}
	return a.run(ctx)
}

// agent is `gpuscope agent`: the collectors and the web handler, nothing
// else. The appliance's node-* jobs scrape it.
type agent struct {
	logger     *slog.Logger
	nodeName   string
	cfg        *config.Config
	listener   net.Listener
	web        *web.Handler
	collectors *nodeCollectors
}

func newAgent(f *agentFlags, logger *slog.Logger) (*agent, error) {
	a := &agent{logger: logger}
	var err error
	if a.nodeName, err = resolveNodeName(f.nodeName); err != nil {
		return nil, err
	}
	loader := configLoader{file: f.configFile, demo: f.demo, gpuBackend: f.gpuBackend, logger: logger}
	if a.cfg, err = loader.read(); err != nil {
		return nil, err
	}
	applyGoGC(a.cfg.Prometheus, logger)
	listenAddress := f.listenAddress
	if !f.listenSet && a.cfg.Web.ListenAddress != "" {
		listenAddress = a.cfg.Web.ListenAddress
	}
	// A bad web config fails the start here, naming the file.
	if _, err := web.ReadWebConfig(f.webConfigFile); err != nil {
		return nil, err
	}

	if a.listener, err = web.Listen(listenAddress); err != nil {
		return nil, err
	}
	if a.collectors, err = newNodeCollectors(a.cfg, a.nodeName, logger); err != nil {
		a.listener.Close()
		return nil, err
	}
	reg := newSelfRegistry()
	// The page at / shows the GPU collector's current values.
	var gpuMetrics prometheus.Gatherer
	if a.collectors.gpu != nil {
		r := prometheus.NewRegistry()
		r.MustRegister(a.collectors.gpu)
		gpuMetrics = r
	}
	a.web = web.New(web.Options{
		Logger:        logger.With("component", "web"),
		ListenAddress: listenAddress,
		WebConfigFile: f.webConfigFile,
		// The agent takes no request bodies.
		MaxRequestBodyBytes: 1 << 20,
		Gatherer:            families.Gatherer(reg, a.cfg.SelfMetrics.Families.Keep),
		Registerer:          reg,
		API:                 nil,
		Status:              a.statusLines,
		Overview: web.OverviewOptions{
			ScrapeInterval: a.cfg.ScrapeInterval,
			Local:          gpuMetrics,
			Node:           a.nodeName,
		},
		GPUProcesses: web.NewNodeProcesses(web.NodeProcessesOptions{Node: a.nodeName, Local: a.collectors.gpu}),
	})
	a.collectors.mount(a.web)
	return a, nil
}

func (a *agent) run(ctx context.Context) (err error) {
	r := newRunner()
	defer func() { err = errors.Join(err, r.stopAll()) }()
	r.start("web", func(ctx context.Context) error { return a.web.Run(ctx, a.listener) })
	a.collectors.start(r)
	a.web.SetReady(true)
	a.logger.Info("gpuscope agent is ready; list it in the appliance's nodes: section",
		"listen", a.listener.Addr().String(), "node", a.nodeName,
		"cadvisor", a.collectors.cadvisor != nil, "gpu_backend", a.cfg.GPU.Backend)
	return r.wait(ctx, events{
		// SIGHUP would end a Go program; an agent reloads nothing (its
		// settings take effect at start), so it says so and goes on.
		hup:    func() { a.logger.Warn("The agent reloads nothing; restart it to apply config changes") },
		ready:  a.web.SetReady,
		logger: a.logger,
	})
}

func (a *agent) statusLines() []web.StatusLine {
	file := a.cfg.File
	if file == "" {
		file = "(embedded defaults)"
	}
	return []web.StatusLine{
		{Name: "Version", Value: version.Version},
		{Name: "Mode", Value: "agent (collectors only; scraped by an appliance's nodes: section)"},
		{Name: "Node", Value: a.nodeName},
		{Name: "Config file", Value: file},
		{Name: "GPU backend", Value: a.cfg.GPU.Backend},
	}
}
