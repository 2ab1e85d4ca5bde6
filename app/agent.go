package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/scrape/families"
	"github.com/gpuscope/gpuscope/web"
)

// AgentSettings are `gpuscope agent`'s: the serve settings that apply to
// an agent, with the same names and meanings.
type AgentSettings struct {
	// Logger, Registry and Now are the caller's, as in Settings.
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Now      func() time.Time

	ConfigFile    string
	Demo          bool
	GPUBackend    string
	NodeName      string
	ListenAddress string // empty: web.listen_address, else DefaultListenAddress
	WebConfigFile string
	// OnConfig is called with the config at NewAgent (Settings.OnConfig).
	OnConfig func(*config.Config)
}

// ErrAgentReloadsNothing is Agent.Reload's answer: an agent's settings
// take effect at start.
var ErrAgentReloadsNothing = errors.New("the agent reloads nothing; restart it to apply config changes")

// Agent is `gpuscope agent`: the collectors and the web handler, nothing
// else. The appliance's node-* jobs scrape it.
type Agent struct {
	logger     *slog.Logger
	nodeName   string
	cfg        *config.Config
	listener   net.Listener
	web        *web.Handler
	collectors *nodeCollectors

	stop     context.CancelFunc
	stopCtx  context.Context
	running  atomic.Bool
	done     chan struct{}
	ready    chan struct{}
	stopOnce sync.Once
}

// NewAgent builds the agent and takes its port; Run runs it.
func NewAgent(_ context.Context, s AgentSettings) (*Agent, error) {
	defaults(&s.Logger, &s.Registry, &s.Now)
	a := &Agent{logger: s.Logger, done: make(chan struct{}), ready: make(chan struct{})}
	a.stopCtx, a.stop = context.WithCancel(context.Background())
	var err error
	if a.nodeName, err = NodeName(s.NodeName); err != nil {
		return nil, err
	}
	if a.cfg, err = (config.Loader{File: s.ConfigFile, Demo: s.Demo, GPUBackend: s.GPUBackend, Logger: s.Logger}).Load(); err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	for _, w := range a.cfg.Warnings {
		s.Logger.Warn("Config warning", "warning", w)
	}
	if s.OnConfig != nil {
		s.OnConfig(a.cfg)
	}
	listenAddress := cmpOr(s.ListenAddress, a.cfg.Web.ListenAddress, DefaultListenAddress)
	// A bad web config fails the start here, naming the file.
	if _, err := web.ReadWebConfig(s.WebConfigFile); err != nil {
		return nil, err
	}
	if a.listener, err = web.Listen(listenAddress); err != nil {
		return nil, err
	}
	if a.collectors, err = newNodeCollectors(a.cfg, a.nodeName, s.Logger); err != nil {
		a.listener.Close()
		return nil, err
	}
	// The page at / shows the GPU collector's current values.
	var gpuMetrics prometheus.Gatherer
	if a.collectors.gpu != nil {
		r := prometheus.NewRegistry()
		r.MustRegister(a.collectors.gpu)
		gpuMetrics = r
	}
	a.web = web.New(web.Options{
		Logger:        s.Logger.With("component", "web"),
		ListenAddress: listenAddress,
		WebConfigFile: s.WebConfigFile,
		// The agent takes no request bodies.
		MaxRequestBodyBytes: 1 << 20,
		Gatherer:            families.Gatherer(s.Registry, a.cfg.SelfMetrics.Families.Keep),
		Registerer:          s.Registry,
		API:                 nil,
		Status:              a.statusLines,
		Overview: web.OverviewOptions{
			Now:            s.Now,
			ScrapeInterval: a.cfg.ScrapeInterval,
			Local:          gpuMetrics,
			Node:           a.nodeName,
		},
		GPUProcesses: web.NewNodeProcesses(web.NodeProcessesOptions{Node: a.nodeName, Local: a.collectors.gpu}),
	})
	a.collectors.mount(a.web)
	return a, nil
}

// Addr is the address the agent listens on.
func (a *Agent) Addr() net.Addr { return a.listener.Addr() }

// Ready is closed once Run serves.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Reload is ErrAgentReloadsNothing: the binary logs it on SIGHUP, which
// would otherwise end a Go program.
func (a *Agent) Reload() error { return ErrAgentReloadsNothing }

// Stop ends Run and waits for it; before Run it releases the port. Safe
// to call more than once.
func (a *Agent) Stop() {
	a.stopOnce.Do(func() {
		a.stop()
		if !a.running.Swap(true) {
			a.listener.Close()
			close(a.done)
		}
	})
	<-a.done
}

// Run serves the collectors until ctx ends or Stop is called. It runs
// once.
func (a *Agent) Run(ctx context.Context) (err error) {
	if a.running.Swap(true) {
		return errors.New("the agent has run already, or was stopped")
	}
	defer close(a.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(a.stopCtx, cancel)()

	r := newRunner()
	defer func() { err = errors.Join(err, r.stopAll()) }()
	r.start("web", func(ctx context.Context) error { return a.web.Run(ctx, a.listener) })
	a.collectors.start(r)
	a.collectors.startSimulated(r) // an agent has nothing to open first
	a.web.SetReady(true)
	a.logger.Info("gpuscope agent is ready; list it in the appliance's nodes: section",
		"listen", a.listener.Addr().String(), "node", a.nodeName,
		"cadvisor", a.collectors.cadvisor != nil, "gpu_backend", a.cfg.GPU.Backend)
	close(a.ready)
	return r.wait(ctx, events{ready: a.web.SetReady, logger: a.logger})
}

func (a *Agent) statusLines() []web.StatusLine {
	file := a.cfg.File
	if file == "" {
		file = "(embedded defaults)"
	}
	return []web.StatusLine{
		{Name: "Version", Value: Version()},
		{Name: "Mode", Value: "agent (collectors only; scraped by an appliance's nodes: section)"},
		{Name: "Node", Value: a.nodeName},
		{Name: "Config file", Value: file},
		{Name: "GPU backend", Value: a.cfg.GPU.Backend},
	}
}
