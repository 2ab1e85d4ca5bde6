package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"reflect"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/grafana/regexp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/version"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	promscrape "github.com/prometheus/prometheus/scrape"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/fileutil"
	apiv1 "github.com/prometheus/prometheus/web/api/v1"

	"github.com/gpuscope/gpuscope/accounting"
	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/dashboards"
	"github.com/gpuscope/gpuscope/doctor"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/query"
	"github.com/gpuscope/gpuscope/scrape"
	"github.com/gpuscope/gpuscope/scrape/families"
	"github.com/gpuscope/gpuscope/storage"
	"github.com/gpuscope/gpuscope/web"
)

// serveFlags are serve's command-line settings, named as Prometheus names
// its own.
type serveFlags struct {
	configFile      string
	dataDir         string
	dataDirSet      bool
	retentionTime   model.Duration
	retentionSize   units.Base2Bytes
	walCompression  string
	minBlockRange   model.Duration
	verifyBlocks    bool
	diskReserve     units.Base2Bytes
	listenAddress   string
	listenSet       bool
	externalURL     string
	corsOrigin      string
	corsSet         bool
	webConfigFile   string
	enableAdmin     bool
	enableLifecycle bool
	maxBodyBytes    units.Base2Bytes
	queryTimeout    model.Duration
	maxSamples      int
	maxConcurrency  int
	lookbackDelta   model.Duration
	nodeName        string
	gpuBackend      string
	demo            bool
	flagValues      func() map[string]string

	remoteFlushDeadline       model.Duration
	enableRemoteWriteReceiver bool
	enableOTLPReceiver        bool

	// allowUnauthAdmin serves the admin API and lifecycle endpoints
	// without authentication (web/auth.go).
	allowUnauthAdmin bool
	memLimit         *memLimitFlags

	outageTolerance    model.Duration
	forGracePeriod     model.Duration
	resendDelay        model.Duration
	notificationQueue  int
	drainNotifications bool
}

func serveCommand(app *kingpin.Application) command {
	c := app.Command("serve", "Run the appliance: collectors, scraping, TSDB, PromQL, rules and the Prometheus HTTP API.").Default()
	f := &serveFlags{}
	c.Flag("config.file", "gpuscope config file (a prometheus.yml plus gpuscope's sections). Empty: the embedded defaults.").StringVar(&f.configFile)
	c.Flag("storage.tsdb.path", "Base path for metrics storage. Default data/, or "+demoDataDir+" with --demo, so simulated series never mix with a real appliance's.").IsSetByUser(&f.dataDirSet).Default("data/").StringVar(&f.dataDir)
	c.Flag("storage.tsdb.retention.time", "How long to retain samples, unless the config file's storage.tsdb.retention says otherwise.").Default("15d").SetValue(&f.retentionTime)
	c.Flag("storage.tsdb.retention.size", "Maximum bytes of blocks to retain (e.g. 50GB; 0 = no limit), unless the config file says otherwise.").Default("0").BytesVar(&f.retentionSize)
	c.Flag("storage.tsdb.wal-compression-type", "WAL compression: snappy, zstd or none.").Default("snappy").EnumVar(&f.walCompression, "snappy", "zstd", "none")
	c.Flag("storage.tsdb.verify-blocks", "At start, read every block's index and chunks and move damaged blocks to <data>/corrupted instead of serving them. --no-storage.tsdb.verify-blocks checks only that blocks open.").Default("true").BoolVar(&f.verifyBlocks)
	c.Flag("storage.tsdb.disk-reserve", "Space held in <data>/disk-reserve and freed when the disk fills, so that gpuscope's own metrics and the GpuscopeStorageFailing alert are still stored; taken again when free space is back. 0 = none.").Default("64MB").BytesVar(&f.diskReserve)
	c.Flag("storage.tsdb.min-block-duration", "Time the head spans before it is compacted into a block. For use in testing.").Hidden().Default("2h").SetValue(&f.minBlockRange)
	c.Flag("web.listen-address", "Address to listen on for the API, the collectors' /metrics and the status page. Default "+DefaultListenAddress+" or the config file's web.listen_address.").IsSetByUser(&f.listenSet).Default(DefaultListenAddress).StringVar(&f.listenAddress)
	c.Flag("web.external-url", "URL under which gpuscope is reachable (for alert links). Default: http://<node name>:<port>/.").StringVar(&f.externalURL)
	c.Flag("web.cors.origin", `Regex of origins allowed to call the API, anchored. Example: 'https?://(domain1|domain2)\.com'`).IsSetByUser(&f.corsSet).Default(".*").StringVar(&f.corsOrigin)
	c.Flag("web.config.file", "exporter-toolkit web config file for TLS and basic auth.").Default("").StringVar(&f.webConfigFile)
	c.Flag("web.enable-admin-api", "Enable the admin API (delete series, snapshots).").BoolVar(&f.enableAdmin)
	c.Flag("web.enable-lifecycle", "Enable /-/reload and /-/quit.").BoolVar(&f.enableLifecycle)
	c.Flag("web.allow-unauthenticated-admin", "Serve the admin API and lifecycle endpoints even though --web.config.file does not authenticate requests (basic_auth_users). Only where no untrusted client can reach the listen address.").BoolVar(&f.allowUnauthAdmin)
	f.memLimit = addMemLimitFlags(c)
	c.Flag("web.max-request-body-size", "Largest request body accepted by any endpoint.").Default("32MB").BytesVar(&f.maxBodyBytes)
	c.Flag("web.enable-remote-write-receiver", "Accept Prometheus remote-write pushes at /api/v1/write.").BoolVar(&f.enableRemoteWriteReceiver)
	c.Flag("web.enable-otlp-receiver", "Accept OTLP metrics pushes at /api/v1/otlp/v1/metrics.").BoolVar(&f.enableOTLPReceiver)
	c.Flag("storage.remote.flush-deadline", "How long to wait flushing remote-write samples on shutdown or config reload.").Default("1m").SetValue(&f.remoteFlushDeadline)
	c.Flag("query.timeout", "Maximum time a query may take before it is aborted.").Default("2m").SetValue(&f.queryTimeout)
	c.Flag("query.max-samples", "Maximum number of samples a single query can load into memory.").Default("50000000").IntVar(&f.maxSamples)
	c.Flag("query.max-concurrency", "Maximum number of queries executed concurrently; the others wait. Default: the CPUs gpuscope may use (GOMAXPROCS, which follows a cgroup CPU limit), at most Prometheus's 20: a query runs on one CPU, and more queries than CPUs only take turns, with each other and with the scrapes.").Default(strconv.Itoa(min(20, runtime.GOMAXPROCS(0)))).IntVar(&f.maxConcurrency)
	c.Flag("query.lookback-delta", "How far back to look for a sample of a series at an instant.").Default("5m").SetValue(&f.lookbackDelta)
	c.Flag("rules.alert.for-outage-tolerance", "Max time to tolerate a gpuscope outage for restoring the \"for\" state of alerts.").Default("1h").SetValue(&f.outageTolerance)
	c.Flag("rules.alert.for-grace-period", "Minimum duration between an alert and its restored \"for\" state, for alerts whose \"for\" is longer.").Default("10m").SetValue(&f.forGracePeriod)
	c.Flag("rules.alert.resend-delay", "Minimum time to wait before resending an alert to Alertmanager.").Default("1m").SetValue(&f.resendDelay)
	c.Flag("alertmanager.notification-queue-capacity", "Alerts queued for Alertmanager before the oldest are dropped.").Default("10000").IntVar(&f.notificationQueue)
	c.Flag("alertmanager.drain-notification-queue-on-shutdown", "Send the queued alerts before shutting down.").Default("true").BoolVar(&f.drainNotifications)
	c.Flag("gpu.backend", "GPU backend: auto, nvml, sim or none. Default: the config file's gpu.backend (auto).").EnumVar(&f.gpuBackend, gpu.BackendAuto, gpu.BackendNVML, gpu.BackendSim, gpu.BackendNone)
	c.Flag("demo", "Run eight simulated GPUs with one scenario each (training ×2, leak, input-bound, memory-bound, thermal, MIG, XID) at 30× speed, so every dashboard and alert has data without a GPU; data goes to "+demoDataDir+" unless --storage.tsdb.path is given.").BoolVar(&f.demo)
	c.Flag("node.name", "This node's name: the `instance` label of its built-in series and the Hostname label of GPU series. Default: the host name.").Envar("NODE_NAME").StringVar(&f.nodeName)
	f.flagValues = func() map[string]string {
		m := map[string]string{}
		for _, fl := range c.Model().Flags {
			m[fl.Name] = fl.Value.String()
		}
		return m
	}
	return command{clause: c, run: func(logger *slog.Logger) error { return serve(f, logger) }}
}

// serve runs until SIGINT/SIGTERM (or /-/quit), then stops scraping, lets
// in-flight work finish, closes the TSDB and returns.
func serve(f *serveFlags, logger *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := applyMemLimit(f.memLimit, logger); err != nil {
		return err
	}
	a, err := newAppliance(f, logger)
	if err != nil {
		return err
	}
	return a.run(ctx)
}

// appliance is `gpuscope serve`: everything wired, in start order.
type appliance struct {
	flags    *serveFlags
	logger   *slog.Logger
	nodeName string
	registry *prometheus.Registry

	listener   net.Listener
	lock       fileutil.Releaser
	selfAddr   string
	web        *web.Handler
	ready      *storage.Ready
	remote     *storage.Remote
	fanout     promstorage.Storage // TSDB + remote storage: scrape, rule and push appends, queries
	engine     *query.Engine
	scraper    *scrape.Scraper
	notifier   *query.Notifier
	rules      *query.Rules
	collectors *nodeCollectors
	health     *healthBlock

	config         atomic.Pointer[config.Config]
	reloadSuccess  prometheus.Gauge
	reloadTime     prometheus.Gauge
	lastReloadOK   atomic.Bool
	lastReloadTime atomic.Int64
}

func newAppliance(f *serveFlags, logger *slog.Logger) (*appliance, error) {
	a := &appliance{flags: f, logger: logger, registry: newSelfRegistry()}
	var err error
	if a.nodeName, err = resolveNodeName(f.nodeName); err != nil {
		return nil, err
	}

	cfg, err := a.loadConfig("localhost:0")
	if err != nil {
		return nil, err
	}
	if f.demo {
		if !f.dataDirSet {
			f.dataDir = demoDataDir
		}
		logDemo(logger, cfg.GPU, f.dataDir)
	}
	// Before the TSDB replays its WAL, as Prometheus does.
	applyGoGC(cfg.Prometheus, logger)
	if !f.listenSet && cfg.Web.ListenAddress != "" {
		f.listenAddress = cfg.Web.ListenAddress
	}
	if !f.corsSet && cfg.Web.CORSOrigin != "" {
		f.corsOrigin = cfg.Web.CORSOrigin
	}
	if f.externalURL == "" {
		f.externalURL = cfg.Web.ExternalURL
	}
	cors, err := regexp.Compile("^(?:" + f.corsOrigin + ")$")
	if err != nil {
		return nil, fmt.Errorf("parse --web.cors.origin %q: %w", f.corsOrigin, err)
	}
	if err := checkAuth(f, logger); err != nil {
		return nil, err
	}

	// Listen before anything slow starts, so a port in use fails at once.
	if a.listener, err = web.Listen(f.listenAddress); err != nil {
		return nil, err
	}
	port := a.listener.Addr().(*net.TCPAddr).Port
	a.selfAddr = net.JoinHostPort("localhost", strconv.Itoa(port))
	externalURL, err := resolveExternalURL(f.externalURL, a.nodeName, port)
	if err != nil {
		a.listener.Close()
		return nil, err
	}

	a.reloadSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gpuscope_config_last_reload_successful",
		Help: "Whether the last configuration reload attempt was successful.",
	})
	a.reloadTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gpuscope_config_last_reload_success_timestamp_seconds",
		Help: "Timestamp of the last successful configuration reload.",
	})
	a.registry.MustRegister(a.reloadSuccess, a.reloadTime)

	if a.collectors, err = newNodeCollectors(cfg, a.nodeName, logger); err != nil {
		a.listener.Close()
		return nil, err
	}

	// The data directory is locked before the engine rewrites its active
	// query log there, so a second gpuscope on it stops here, harmlessly.
	if a.lock, err = storage.Lock(f.dataDir); err != nil {
		a.close()
		return nil, err
	}
	promqlParser := parser.NewParser(parser.Options{})
	a.engine, err = query.NewEngine(query.EngineOptions{
		Logger:         logger,
		Registerer:     a.registry,
		DataDir:        f.dataDir,
		Timeout:        time.Duration(f.queryTimeout),
		MaxSamples:     f.maxSamples,
		MaxConcurrency: f.maxConcurrency,
		LookbackDelta:  time.Duration(f.lookbackDelta),
		Parser:         promqlParser,
	})
	if err != nil {
		a.close()
		return nil, err
	}
	a.ready = storage.NewReady()
	a.remote = storage.NewRemote(storage.RemoteOptions{
		Logger:        logger.With("component", "remote"),
		Registerer:    a.registry,
		Local:         a.ready,
		Dir:           f.dataDir,
		FlushDeadline: time.Duration(f.remoteFlushDeadline),
		ScrapeManager: func() *promscrape.Manager {
			if a.scraper == nil {
				return nil
			}
			return a.scraper.Manager()
		},
	})
	a.fanout = storage.NewFanout(logger, a.ready, a.remote)
	sdMetrics, err := discovery.CreateAndRegisterSDMetrics(a.registry)
	if err != nil {
		a.close()
		return nil, fmt.Errorf("register service discovery metrics: %w", err)
	}
	a.scraper, err = scrape.New(scrape.Options{
		Logger:      logger,
		Registerer:  a.registry,
		SDMetrics:   sdMetrics,
		Appendable:  a.fanout,
		SelfAddress: a.selfAddr,
		SelfDial:    func(ctx context.Context) (net.Conn, error) { return a.web.SelfDial(ctx) },
	})
	if err != nil {
		a.close()
		return nil, err
	}

	// Alert delivery has its own discovery of Alertmanagers, sharing the
	// service discovery metrics with scraping as in Prometheus.
	a.notifier, err = query.NewNotifier(query.NotifierOptions{
		Logger:          logger,
		Registerer:      a.registry,
		SDMetrics:       sdMetrics,
		QueueCapacity:   f.notificationQueue,
		DrainOnShutdown: f.drainNotifications,
	})
	if err != nil {
		a.close()
		return nil, err
	}
	a.rules, err = query.NewRules(query.RulesOptions{
		Logger:          logger,
		Registerer:      a.registry,
		Engine:          a.engine,
		Queryable:       a.fanout,
		Appendable:      a.fanout,
		Notifier:        a.notifier.Manager(),
		ExternalURL:     externalURL,
		OutageTolerance: time.Duration(f.outageTolerance),
		ForGracePeriod:  time.Duration(f.forGracePeriod),
		ResendDelay:     time.Duration(f.resendDelay),
		Parser:          promqlParser,
	})
	if err != nil {
		a.close()
		return nil, err
	}

	reporter, err := accounting.New(accounting.Options{
		Engine:         a.engine,
		Queryable:      a.fanout,
		Interval:       a.accountingInterval,
		GroupEnabled:   func() bool { _, ok := a.accountingGroup(); return ok },
		RollupInterval: a.accountingRollupInterval,
		Prices:         func() accounting.Prices { return a.config.Load().Accounting.Prices() },
		Logger:         logger.With("component", "accounting"),
	})
	if err != nil {
		a.close()
		return nil, err
	}

	a.web = web.New(web.Options{
		Logger:              logger.With("component", "web"),
		ListenAddress:       f.listenAddress,
		ExternalURL:         externalURL,
		CORSOrigin:          cors,
		WebConfigFile:       f.webConfigFile,
		MaxRequestBodyBytes: int64(f.maxBodyBytes),
		EnableLifecycle:     f.enableLifecycle,
		// The series diet: /metrics, and so the built-in gpuscope job,
		// has the families self_metrics: turns on, as of the last reload.
		Gatherer: families.Gatherer(a.registry, func(name string) bool {
			return a.config.Load().SelfMetrics.Families.Keep(name)
		}),
		Registerer: a.registry,
		API: &web.APIOptions{
			QueryEngine:   a.engine,
			Queryable:     a.fanout,
			Appendable:    a.fanout,
			Exemplars:     a.ready,
			TSDB:          a.ready,
			TSDBDir:       f.dataDir,
			ScrapeManager: a.scraper.Manager(),
			RuleManager:   a.rules.Manager(),
			Notifier:      a.notifier.Manager(),
			Config:        func() promconfig.Config { return *a.config.Load().Prometheus },
			Flags:         f.flagValues(),
			RuntimeInfo:   a.runtimeInfo,
			BuildInfo: &apiv1.PrometheusVersion{
				Version:   version.Version,
				Revision:  version.GetRevision(),
				Branch:    version.Branch,
				BuildUser: version.BuildUser,
				BuildDate: version.BuildDate,
				GoVersion: version.GoVersion,
			},
			EnableAdmin:               f.enableAdmin,
			EnableRemoteWriteReceiver: f.enableRemoteWriteReceiver,
			EnableOTLPReceiver:        f.enableOTLPReceiver,
			LookbackDelta:             time.Duration(f.lookbackDelta),
			QueryTimeout:              time.Duration(f.queryTimeout),
			Parser:                    promqlParser,
			Workloads:                 reporter,
		},
		AllowUnauthenticatedAdmin: f.allowUnauthAdmin,
		Status:                    a.statusLines,
		Overview: web.OverviewOptions{
			ScrapeInterval: func() time.Duration { return a.config.Load().ScrapeInterval() },
			Health:         a.healthChecks(),
			GrafanaURL:     func() string { return a.config.Load().Web.GrafanaURL },
		},
	})
	a.web.MountFederation(web.FederationOptions{
		Queryable:     a.ready,
		LookbackDelta: time.Duration(f.lookbackDelta),
		ExternalLabels: func() labels.Labels {
			return a.config.Load().Prometheus.GlobalConfig.ExternalLabels
		},
		Parser:     promqlParser,
		Registerer: a.registry,
	})
	boards, err := dashboards.Build()
	if err != nil {
		a.close()
		return nil, err
	}
	a.web.MountDashboards(boards)
	a.collectors.mount(a.web)
	a.config.Store(cfg)
	return a, nil
}

// close releases what newAppliance acquired: the engine's query log, the
// data directory lock and the listener (if the server never took it).
func (a *appliance) close() error {
	var errs []error
	if a.health != nil {
		a.health.wait()
	}
	if a.remote != nil {
		errs = append(errs, a.remote.Close())
	}
	if a.engine != nil {
		errs = append(errs, a.engine.Close())
	}
	if a.lock != nil {
		errs = append(errs, a.lock.Release())
	}
	return errors.Join(errs...)
}

func resolveExternalURL(raw, node string, port int) (*url.URL, error) {
	if raw == "" {
		raw = "http://" + net.JoinHostPort(node, strconv.Itoa(port)) + "/"
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("--web.external-url %q must be an absolute URL like http://host:9089/", raw)
	}
	return u, nil
}

// loadConfig reads the config file (or the embedded default), adds the
// built-in jobs and the retention defaults from the flags.
func (a *appliance) loadConfig(selfAddr string) (*config.Config, error) {
	var (
		cfg *config.Config
		err error
	)
	if a.flags.configFile == "" {
		cfg = config.Default(a.logger)
	} else if cfg, err = config.LoadFile(a.flags.configFile, a.logger); err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	applyGPUFlags(cfg, a.flags.demo, a.flags.gpuBackend)
	if a.flags.demo {
		// The built-in rules run as fast as the simulated GPUs, so that
		// the demo's alerts fire within minutes.
		cfg.Rules.Builtin.TimeScale = cfg.GPU.Sim.TimeScale
	}
	if err := scrape.AddBuiltinJobs(cfg.Prometheus, builtinJobs(cfg, selfAddr, a.nodeName)); err != nil {
		return nil, fmt.Errorf("load config: %w", cfg.Locate(err))
	}
	for _, w := range cfg.Warnings {
		a.logger.Warn("Config warning", "warning", w)
	}
	if r := cfg.Prometheus.StorageConfig.TSDBConfig.Retention; r.Time == 0 && r.Size == 0 && r.Percentage == 0 {
		r.Time = a.flags.retentionTime
		r.Size = a.flags.retentionSize
	}
	return cfg, nil
}

// run starts the components, serves until ctx ends, and stops them in
// reverse order so no append races the TSDB's close.
func (a *appliance) run(ctx context.Context) (err error) {
	logger := a.logger
	var group stages
	defer func() {
		err = errors.Join(err, group.stopAll(), a.close())
		if err == nil {
			logger.Info("See you next time!")
		}
	}()

	// A failing component ends the appliance with its error.
	failed := make(chan error, 8)
	fail := func(name string) func(error) {
		return func(err error) {
			if err != nil {
				failed <- fmt.Errorf("%s: %w", name, err)
			}
		}
	}

	group.start("web", a.web.Run, fail("web"), a.listener)
	a.collectors.start(&group, fail)

	logger.Info("Opening TSDB", "dir", a.flags.dataDir)
	start := time.Now()
	db, err := storage.Open(storage.Options{
		Dir:              a.flags.dataDir,
		Retention:        time.Duration(a.flags.retentionTime),
		MaxBytes:         a.flags.retentionSize,
		WALCompression:   a.flags.walCompression,
		MinBlockDuration: time.Duration(a.flags.minBlockRange),
		SkipBlockCheck:   !a.flags.verifyBlocks,
		MaxExemplars:     a.config.Load().Prometheus.StorageConfig.ExemplarsConfig.MaxExemplars,
		Stats:            a.ready.DBStats(),
		Logger:           logger,
		Registerer:       a.registry,
	})
	if err != nil {
		return err
	}
	group.onStop("tsdb", func() error {
		logger.Info("Closing TSDB")
		if err := db.Close(); err != nil {
			return fmt.Errorf("close TSDB: %w", err)
		}
		return nil
	})
	// As Prometheus: the remote-write queues tail the WAL and are woken
	// on every commit; they stop (flushing for up to the flush deadline)
	// after scraping and before the TSDB closes.
	db.SetWriteNotified(a.remote)
	group.onStop("remote_storage", a.remote.Close)
	// A commit refused for lack of space frees the disk reserve, so the
	// failure itself is stored and alerted on (storage/reserve.go).
	reserve := storage.NewReserve(storage.ReserveOptions{
		Dir:        a.flags.dataDir,
		Size:       int64(a.flags.diskReserve),
		Logger:     logger.With("component", "tsdb"),
		Registerer: a.registry,
	})
	a.ready.OnCommitFailed(reserve.CommitFailed)
	group.start("disk_reserve", func(ctx context.Context, _ net.Listener) error { return reserve.Run(ctx) }, fail("disk_reserve"), nil)
	a.ready.Set(db)
	logger.Info("TSDB open", "duration", time.Since(start).Round(time.Millisecond))

	// The built-in jobs scrape the real listener's port through the
	// in-memory self listener.
	cfg, err := a.loadConfig(a.selfAddr)
	if err != nil {
		return err
	}
	if err := a.applyConfig(cfg); err != nil {
		return fmt.Errorf("apply initial config: %w", err)
	}
	group.start("scrape", func(ctx context.Context, _ net.Listener) error { return a.scraper.Run(ctx) }, fail("scrape"), nil)
	// Stages stop in reverse: the rule manager stops first (before the
	// TSDB closes), then the notifier sends what its last evaluations
	// queued.
	group.start("notify", func(ctx context.Context, _ net.Listener) error { return a.notifier.Run(ctx) }, fail("notify"), nil)
	group.start("rules", func(ctx context.Context, _ net.Listener) error { return a.rules.Run(ctx) }, fail("rules"), nil)

	a.web.SetReady(true)
	a.health.Checks(ctx) // the first run now, so that the page has them when first opened
	logger.Info("gpuscope is ready; point Grafana's Prometheus data source at this URL",
		"url", a.grafanaURL(), "listen", a.listener.Addr().String(), "node", a.nodeName)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			logger.Info("Received shutdown signal, stopping")
			a.web.SetReady(false)
			return nil
		case <-a.web.Quit():
			logger.Info("Received /-/quit, stopping")
			a.web.SetReady(false)
			return nil
		case err := <-failed:
			a.web.SetReady(false)
			return err
		case <-hup:
			if err := a.reload(); err != nil {
				logger.Error("Reload failed; the previous configuration stays in effect", "err", err)
			}
		case rc := <-a.web.Reload():
			rc <- a.reload()
		}
	}
}

// reload re-reads the config; an invalid file changes nothing.
func (a *appliance) reload() error {
	a.logger.Info("Loading configuration file", "file", a.flags.configFile)
	cfg, err := a.loadConfig(a.selfAddr)
	if err != nil {
		a.setReloadResult(false)
		return err
	}
	old := a.config.Load()
	if !reflect.DeepEqual(cfg.Cadvisor, old.Cadvisor) || !reflect.DeepEqual(cfg.GPU, old.GPU) || cfg.Web != old.Web {
		a.logger.Warn("Changes to the cadvisor, gpu and web sections take effect at the next start")
	}
	return a.applyConfig(cfg)
}

// applyConfig hands a validated config to every component, Prometheus
// style: each applies what it can, failures are reported together.
func (a *appliance) applyConfig(cfg *config.Config) error {
	reloaders := []struct {
		name  string
		apply func(*promconfig.Config) error
	}{
		{"tsdb", func(c *promconfig.Config) error { return a.ready.Get().ApplyConfig(c) }},
		{"remote_storage", a.remote.ApplyConfig},
		{"runtime", func(c *promconfig.Config) error { applyGoGC(c, a.logger); return nil }},
		{"query_engine", func(c *promconfig.Config) error {
			a.engine.SetEvaluationInterval(time.Duration(c.GlobalConfig.EvaluationInterval))
			return nil
		}},
		{"scrape", a.scraper.ApplyConfig},
		{"notify", a.notifier.ApplyConfig},
		{"rules", func(c *promconfig.Config) error { return a.rules.ApplyConfig(c, cfg.Rules) }},
	}
	var errs []error
	for _, r := range reloaders {
		if err := r.apply(cfg.Prometheus); err != nil {
			a.logger.Error("Failed to apply configuration", "component", r.name, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", r.name, err))
		}
	}
	a.config.Store(cfg)
	ok := len(errs) == 0
	a.setReloadResult(ok)
	if ok {
		a.logger.Info("Configuration applied", "file", cfg.File, "scrape_interval", cfg.Prometheus.GlobalConfig.ScrapeInterval)
	}
	return errors.Join(errs...)
}

func (a *appliance) setReloadResult(ok bool) {
	a.lastReloadOK.Store(ok)
	if ok {
		a.reloadSuccess.Set(1)
		a.reloadTime.SetToCurrentTime()
		a.lastReloadTime.Store(time.Now().Unix())
		return
	}
	a.reloadSuccess.Set(0)
}

func (a *appliance) grafanaURL() string {
	u, err := resolveExternalURL(a.flags.externalURL, a.nodeName, a.listener.Addr().(*net.TCPAddr).Port)
	if err != nil {
		return ""
	}
	return u.String()
}

func (a *appliance) statusLines() []web.StatusLine {
	cfg := a.config.Load()
	file := cfg.File
	if file == "" {
		file = "(embedded defaults)"
	}
	// The page adds what it found (GPUs, targets, alerts) after these.
	return []web.StatusLine{
		{Name: "Version", Value: version.Version},
		{Name: "Node", Value: a.nodeName},
		{Name: "Grafana data source URL", Value: a.grafanaURL()},
		{Name: "Config file", Value: file},
		{Name: "Data directory", Value: a.flags.dataDir},
		{Name: "Scrape interval", Value: cfg.Prometheus.GlobalConfig.ScrapeInterval.String()},
		{Name: "Retention", Value: cfg.Prometheus.StorageConfig.TSDBConfig.Retention.Time.String()},
	}
}

var startTime = time.Now()

// healthChecks runs gpuscope doctor's checks for the overview page's
// Health block, about this appliance: its data directory, retention,
// port, and its own targets and containers (asked over HTTP, unless the
// web config may require credentials the appliance does not have).
func (a *appliance) healthChecks() func(ctx context.Context) []web.HealthCheck {
	self := "http://" + a.selfAddr
	if a.flags.webConfigFile != "" {
		self = ""
	}
	a.health = newHealthBlock(func(ctx context.Context) []doctor.Check {
		return doctor.Run(ctx, doctor.Options{
			Config:        a.config.Load(),
			Logger:        a.logger.With("component", "doctor"),
			DataDir:       a.flags.dataDir,
			RetentionSize: int64(a.flags.retentionSize),
			ListenAddress: a.flags.listenAddress,
			URL:           self,
		})
	})
	return a.health.Checks
}

func (a *appliance) runtimeInfo() (apiv1.RuntimeInfo, error) {
	cwd, _ := os.Getwd()
	r := cfgRetention(a.config.Load())
	return apiv1.RuntimeInfo{
		StartTime:           startTime,
		CWD:                 cwd,
		Hostname:            a.nodeName,
		ServerTime:          time.Now().UTC(),
		ReloadConfigSuccess: a.lastReloadOK.Load(),
		LastConfigTime:      time.Unix(a.lastReloadTime.Load(), 0).UTC(),
		GoroutineCount:      runtime.NumGoroutine(),
		GOMAXPROCS:          runtime.GOMAXPROCS(0),
		GOMEMLIMIT:          debug.SetMemoryLimit(-1),
		GOGC:                os.Getenv("GOGC"),
		GODEBUG:             os.Getenv("GODEBUG"),
		StorageRetention:    r,
	}, nil
}

func cfgRetention(cfg *config.Config) string {
	r := cfg.Prometheus.StorageConfig.TSDBConfig.Retention
	switch {
	case r.Time != 0 && r.Size != 0:
		return r.Time.String() + " or " + units.Base2Bytes(r.Size).String()
	case r.Size != 0:
		return units.Base2Bytes(r.Size).String()
	default:
		return r.Time.String()
	}
}

// stages runs components and stops them in reverse start order.
type stages struct {
	mu    sync.Mutex
	stops []stage
}

type stage struct {
	name string
	stop func() error
}

// start runs fn in a goroutine with its own context; report receives its
// result when it returns on its own.
func (s *stages) start(name string, fn func(context.Context, net.Listener) error, report func(error), l net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stopping atomic.Bool
	go func() {
		err := fn(ctx, l)
		if !stopping.Load() {
			report(err)
		}
		done <- err
	}()
	s.onStop(name, func() error {
		stopping.Store(true)
		cancel()
		return <-done
	})
}

func (s *stages) onStop(name string, stop func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stops = append(s.stops, stage{name, stop})
}

func (s *stages) stopAll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for i := len(s.stops) - 1; i >= 0; i-- {
		if err := s.stops[i].stop(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("stop %s: %w", s.stops[i].name, err))
		}
	}
	s.stops = nil
	return errors.Join(errs...)
}
