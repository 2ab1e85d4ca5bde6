package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/common/version"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/fileutil"
	apiv1 "github.com/prometheus/prometheus/web/api/v1"

	"github.com/gpuscope/gpuscope/accounting"
	"github.com/gpuscope/gpuscope/alertmanager"
	"github.com/gpuscope/gpuscope/backup"
	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/dashboards"
	"github.com/gpuscope/gpuscope/digest"
	"github.com/gpuscope/gpuscope/doctor"
	"github.com/gpuscope/gpuscope/query"
	"github.com/gpuscope/gpuscope/rules"
	"github.com/gpuscope/gpuscope/scrape"
	"github.com/gpuscope/gpuscope/scrape/families"
	"github.com/gpuscope/gpuscope/storage"
	"github.com/gpuscope/gpuscope/web"
)

// Appliance is `gpuscope serve`: its components, built in dependency
// order by New (each build step reads only what the steps before it set)
// and run in that order by Run.
type Appliance struct {
	set      Settings
	s        resolved
	logger   *slog.Logger
	registry *prometheus.Registry
	now      func() time.Time
	started  time.Time
	// sdMetrics are the service discovery metrics, registered once and
	// shared by the scrape and notifier discovery, as in Prometheus.
	sdMetrics *discovery.SDMetrics
	config    atomic.Pointer[config.Config] // the config in effect; swapped whole on reload
	reload    *reloadState
	reloadMu  sync.Mutex // one reload at a time: Reload, SIGHUP and /-/reload

	// lifecycle: Stop ends Run; ready is closed once Run serves.
	stop     context.CancelFunc
	stopCtx  context.Context
	running  atomic.Bool
	done     chan struct{}
	ready    chan struct{}
	stopOnce sync.Once

	// listen
	listener    net.Listener
	self        *web.SelfListener
	externalURL *url.URL
	// storage
	lock        fileutil.Releaser
	storage     *storage.Ready
	remote      *storage.Remote
	scrapeReady *storage.ReadyScrapeManager // for remote write's metadata; set in buildIngest
	fanout      promstorage.Storage         // TSDB + remote storage: scrape, rule and push appends, queries
	// query
	parser   parser.Parser
	engine   *query.Engine
	am       *alertmanager.Alertmanager
	notifier *rules.Notifier
	rules    *rules.Manager
	reporter *accounting.Reporter
	digest   *digest.Digest
	// ingest
	collectors *nodeCollectors
	scraper    *scrape.Scraper
	// web
	health *doctor.Cache
	web    *web.Handler
}

// New builds the appliance from settings and the config file they name
// (read once, here); it starts nothing but listening, so that a port in
// use or a bad config fails at once. Run runs it.
func New(_ context.Context, set Settings) (*Appliance, error) {
	defaults(&set.Logger, &set.Registry, &set.Now)
	cfg, err := set.loader().Load()
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	for _, w := range cfg.Warnings {
		set.Logger.Warn("Config warning", "warning", w)
	}
	s, err := set.resolve(cfg)
	if err != nil {
		return nil, err
	}
	a := &Appliance{set: set, s: s, logger: set.Logger, registry: set.Registry, now: set.Now, started: set.Now(),
		done: make(chan struct{}), ready: make(chan struct{})}
	a.stopCtx, a.stop = context.WithCancel(context.Background())
	if set.Demo {
		logDemo(a.logger, cfg.GPU, s.dataDir)
	}
	// Before the TSDB replays its WAL, as Prometheus sets GOGC.
	if set.OnConfig != nil {
		set.OnConfig(cfg)
	}
	a.reload = newReloadState(a.registry, a.now)
	if a.sdMetrics, err = discovery.CreateAndRegisterSDMetrics(a.registry); err != nil {
		return nil, fmt.Errorf("register service discovery metrics: %w", err)
	}
	// Listen before anything slow starts, so a port in use fails at once.
	if err := a.listen(cfg); err != nil {
		return nil, err
	}
	a.config.Store(cfg)
	for _, build := range []func() error{a.buildStorage, a.buildQuery, a.buildIngest, a.buildWeb} {
		if err := build(); err != nil {
			a.listener.Close()
			return nil, errors.Join(err, a.close())
		}
	}
	return a, nil
}

// Addr is the address the appliance listens on (the port chosen, for a
// listen address with port 0).
func (a *Appliance) Addr() net.Addr { return a.listener.Addr() }

// Ready is closed once Run serves: the TSDB open, the config applied and
// every component started (/-/ready answers 200).
func (a *Appliance) Ready() <-chan struct{} { return a.ready }

// Stop ends Run and waits for it to return; before Run, it releases what
// New took. It is safe to call more than once and from any goroutine.
func (a *Appliance) Stop() {
	a.stopOnce.Do(func() {
		a.stop()
		if !a.running.Swap(true) { // Run never started: nobody else closes
			a.listener.Close()
			if err := a.close(); err != nil {
				a.logger.Error("Stop", "err", err)
			}
			close(a.done)
		}
	})
	<-a.done
}

// listen takes the port, builds the self listener the built-in jobs
// scrape (whose address, the port's, the built-in jobs name), and
// resolves the external URL, now that the port is known.
func (a *Appliance) listen(cfg *config.Config) error {
	l, err := web.Listen(a.s.listenAddress)
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if a.externalURL, err = externalURL(a.s.externalURL, a.s.nodeName, port); err != nil {
		l.Close()
		return err
	}
	a.self = web.NewSelfListener(net.JoinHostPort("localhost", strconv.Itoa(port)))
	if err := cfg.AddBuiltinJobs(a.self.Address(), a.s.nodeName); err != nil {
		l.Close()
		return fmt.Errorf("load config: %w", err)
	}
	a.listener = l
	return nil
}

// buildStorage locks the data directory and builds the storage the TSDB
// opens into (in run, so that the web server answers during a long WAL
// replay) and the remote-write queues.
func (a *Appliance) buildStorage() error {
	// The data directory is locked before the engine rewrites its active
	// query log there, so a second gpuscope on it stops here, harmlessly.
	var err error
	if a.lock, err = storage.Lock(a.s.dataDir); err != nil {
		return err
	}
	a.storage = storage.NewReady()
	a.scrapeReady = &storage.ReadyScrapeManager{}
	a.remote = storage.NewRemote(storage.RemoteOptions{
		Logger:        a.logger.With("component", "remote"),
		Registerer:    a.registry,
		Local:         a.storage,
		Dir:           a.s.dataDir,
		FlushDeadline: a.set.RemoteFlushDeadline,
		ScrapeManager: a.scrapeReady,
	})
	a.fanout = storage.NewFanout(a.logger, a.storage, a.remote)
	return nil
}

// buildQuery builds the PromQL engine, the notifier, the rule manager and
// the run reports, which all read through the engine.
func (a *Appliance) buildQuery() error {
	f := &a.set
	a.parser = parser.NewParser(parser.Options{})
	var err error
	a.engine, err = query.NewEngine(query.EngineOptions{
		Logger:         a.logger, // it names its parts: query engine, activeQueryTracker
		Registerer:     a.registry,
		DataDir:        a.s.dataDir,
		Timeout:        f.QueryTimeout,
		MaxSamples:     f.MaxSamples,
		MaxConcurrency: f.MaxConcurrency,
		LookbackDelta:  f.LookbackDelta,
		Parser:         a.parser,
	})
	if err != nil {
		return err
	}
	// The embedded Alertmanager keeps its silences and notification log
	// beside the TSDB.
	a.am, err = alertmanager.New(alertmanager.Options{
		Logger:      a.logger, // it names its parts: alertmanager, alertmanager nflog, ...
		Registerer:  a.registry,
		Dir:         filepath.Join(a.s.dataDir, "alertmanager"),
		ExternalURL: a.externalURL,
	})
	if err != nil {
		return err
	}
	// Alert delivery has its own discovery of Alertmanagers, sharing the
	// service discovery metrics with scraping as in Prometheus; the
	// embedded one is reached over the self listener.
	a.notifier, err = rules.NewNotifier(rules.NotifierOptions{
		Logger:          a.logger, // it names its parts: notifier, discovery manager notify
		Registerer:      a.registry,
		SDMetrics:       a.sdMetrics,
		QueueCapacity:   f.NotificationQueue,
		DrainOnShutdown: f.DrainNotifications,
		Embedded:        &rules.Embedded{Address: a.self.Address(), Dial: a.self.Dial},
	})
	if err != nil {
		return err
	}
	a.rules, err = rules.NewManager(rules.Options{
		Logger:          a.logger.With("component", "rule manager"),
		Registerer:      a.registry,
		Engine:          a.engine,
		Queryable:       a.fanout,
		Appendable:      a.fanout,
		Notifier:        a.notifier.Manager(),
		ExternalURL:     a.externalURL,
		OutageTolerance: f.OutageTolerance,
		ForGracePeriod:  f.ForGracePeriod,
		ResendDelay:     f.ResendDelay,
		Parser:          a.parser,
	})
	if err != nil {
		return err
	}
	a.reporter, err = accounting.New(accounting.Options{
		Engine:    a.engine,
		Queryable: a.fanout,
		Rules:     a.rules.Prometheus(),
		TimeScale: func() float64 { return a.config.Load().Rules.Builtin.TimeScale },
		Prices:    func() accounting.Prices { return a.config.Load().Accounting.Prices() },
		Logger:    a.logger.With("component", "accounting"),
	})
	if err != nil {
		return err
	}
	a.digest, err = digest.New(digest.Options{
		Reporter:    a.reporter,
		Sender:      a.notifier.Manager(),
		ExternalURL: a.externalURL,
		Logger:      a.logger.With("component", "digest"),
	})
	return err
}

// buildIngest builds the node's collectors and the scrape manager that
// reads them (through the self listener) and every other target.
func (a *Appliance) buildIngest() error {
	var err error
	if a.collectors, err = newNodeCollectors(a.config.Load(), a.s.nodeName, a.logger); err != nil {
		return err
	}
	a.scraper, err = scrape.New(scrape.Options{
		Logger:      a.logger, // it names its parts: scrape manager, discovery manager scrape
		Registerer:  a.registry,
		SDMetrics:   a.sdMetrics,
		Appendable:  a.fanout,
		SelfAddress: a.self.Address(),
		SelfDial:    a.self.Dial,
	})
	if err != nil {
		return err
	}
	a.scrapeReady.Set(a.scraper.Manager())
	return nil
}

// buildWeb builds the HTTP side: the API over the engine and storage, the
// overview page, federation, dashboards and the collectors' endpoints.
func (a *Appliance) buildWeb() error {
	boards, err := dashboards.Build()
	if err != nil {
		return err
	}
	a.health = doctor.NewCache(a.doctorChecks, 0)
	a.web = web.New(web.Options{
		Logger:              a.logger.With("component", "web"),
		ListenAddress:       a.s.listenAddress,
		ExternalURL:         a.externalURL,
		CORSOrigin:          a.s.cors,
		WebConfigFile:       a.set.WebConfigFile,
		MaxRequestBodyBytes: int64(a.set.MaxRequestBodyBytes),
		EnableLifecycle:     a.set.EnableLifecycle,
		// The series diet: /metrics, and so the built-in gpuscope job,
		// has the families self_metrics: turns on, as of the last reload.
		Gatherer: families.Gatherer(a.registry, func(name string) bool {
			return a.config.Load().SelfMetrics.Families.Keep(name)
		}),
		Registerer:                a.registry,
		API:                       a.apiOptions(),
		AllowUnauthenticatedAdmin: a.set.AllowUnauthenticatedAdmin,
		Status:                    a.statusLines,
		Overview: web.OverviewOptions{
			Now:            a.now,
			ScrapeInterval: func() time.Duration { return a.config.Load().ScrapeInterval() },
			Health:         a.health.Checks,
			GrafanaURL:     func() string { return a.config.Load().Web.GrafanaURL },
			Notifications: func(ctx context.Context) *web.Notifications {
				st, err := a.am.Status(ctx)
				return web.NewNotifications(st, err, len(a.config.Load().Prometheus.AlertingConfig.AlertmanagerConfigs))
			},
		},
		Self: a.self,
		GPUProcesses: web.NewNodeProcesses(web.NodeProcessesOptions{
			Node:    a.s.nodeName,
			Local:   a.collectors.gpu,
			Targets: a.scraper.Manager().TargetsActive,
			Client:  func() config_util.HTTPClientConfig { return a.config.Load().Nodes.HTTPClientConfig },
		}),
	})
	a.web.MountFederation(web.FederationOptions{
		Queryable:     a.storage,
		LookbackDelta: a.set.LookbackDelta,
		ExternalLabels: func() labels.Labels {
			return a.config.Load().Prometheus.GlobalConfig.ExternalLabels
		},
		Parser:     a.parser,
		Registerer: a.registry,
	})
	a.web.MountDashboards(boards)
	a.web.MountAlertmanager(a.am.Handler())
	a.collectors.mount(a.web)
	return nil
}

func (a *Appliance) apiOptions() *web.APIOptions {
	f := &a.set
	return &web.APIOptions{
		QueryEngine:   a.engine,
		Queryable:     a.fanout,
		Appendable:    a.fanout,
		Exemplars:     a.storage,
		TSDB:          a.storage,
		TSDBDir:       a.s.dataDir,
		ScrapeManager: a.scraper.Manager(),
		RuleManager:   a.rules.Prometheus(),
		Notifier:      a.notifier.Manager(),
		Config:        func() promconfig.Config { return *a.config.Load().Prometheus },
		Flags:         a.set.flagValues(a.s),
		RuntimeInfo:   a.runtimeInfo,
		BuildInfo: &apiv1.PrometheusVersion{
			Version:   Version(),
			Revision:  version.GetRevision(),
			Branch:    version.Branch,
			BuildUser: version.BuildUser,
			BuildDate: version.BuildDate,
			GoVersion: version.GoVersion,
		},
		EnableAdmin:               f.EnableAdmin,
		EnableRemoteWriteReceiver: f.EnableRemoteWriteReceiver,
		EnableOTLPReceiver:        f.EnableOTLPReceiver,
		LookbackDelta:             f.LookbackDelta,
		QueryTimeout:              f.QueryTimeout,
		Parser:                    a.parser,
		Workloads:                 a.reporter,
		Digests:                   a.digest,
	}
}

// close releases what New acquired: the engine's query log, the
// remote storage's goroutine, the data directory lock and the listener
// (if the server never took it).
func (a *Appliance) close() error {
	var errs []error
	if a.health != nil {
		a.health.Wait()
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

// Run starts the components in dependency order, serves until ctx ends,
// Stop is called, /-/quit is asked or a component fails, and stops them
// in reverse order (runner says why). It runs once.
func (a *Appliance) Run(ctx context.Context) (err error) {
	if a.running.Swap(true) {
		return errors.New("the appliance has run already, or was stopped")
	}
	defer close(a.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(a.stopCtx, cancel)
	defer stop()

	r := newRunner()
	defer func() {
		err = errors.Join(err, r.stopAll(), a.close())
		if err == nil {
			a.logger.Info("See you next time!")
		}
	}()
	r.start("web", func(ctx context.Context) error { return a.web.Run(ctx, a.listener) })
	a.collectors.start(r)
	if err := a.openStorage(r); err != nil {
		return err
	}
	if err := a.applyConfig(a.config.Load()); err != nil {
		return fmt.Errorf("apply initial config: %w", err)
	}
	a.collectors.startSimulated(r)
	r.start("scrape", a.scraper.Run)
	// The rule manager stops before the notifier, which then sends what
	// the last evaluations queued, to the Alertmanagers and the embedded
	// one, which stops last and is up before the first alert is sent.
	r.start("alertmanager", a.am.Run)
	if err := a.am.WaitReady(ctx); err != nil {
		return fmt.Errorf("start alertmanager: %w", err)
	}
	r.start("notify", a.notifier.Run)
	r.start("rules", a.rules.Run)
	r.start("digests", a.digest.Run)
	// Backups are asked over a socket in the data directory, which only
	// root and the user gpuscope runs as can reach (backup.SocketFile);
	// it stops before the TSDB closes, so a backup in progress finishes.
	r.start("control", func(ctx context.Context) error {
		return backup.Serve(ctx, a.s.dataDir, a.backupHandler(), a.logger.With("component", "control"))
	})

	a.web.SetReady(true)
	a.health.Checks(ctx) // the first run now, so that the page has them when first opened
	a.logger.Info("gpuscope is ready; point Grafana's Prometheus data source at this URL",
		"url", a.externalURL.String(), "listen", a.listener.Addr().String(), "node", a.s.nodeName)
	close(a.ready)
	return r.wait(ctx, events{
		reload: a.web.Reload(),
		apply:  a.Reload,
		quit:   a.web.Quit(),
		ready:  a.web.SetReady,
		logger: a.logger,
	})
}

// backupHandler takes backups of the running appliance: its TSDB and
// its Alertmanager's state.
func (a *Appliance) backupHandler() http.Handler {
	return backup.Handler(backup.HandlerOptions{
		DataDir: a.s.dataDir,
		Logger:  a.logger.With("component", "backup"),
		Options: func() (backup.Options, error) {
			if a.storage.Get() == nil {
				return backup.Options{}, errors.New("the TSDB is not open yet")
			}
			return backup.Options{TSDB: a.storage, Alertmanager: a.am, Version: Version()}, nil
		},
	})
}

// openStorage opens the TSDB (replaying its WAL) with the web server
// already answering, and starts what writes beside it: the disk reserve
// and the remote-write queues that tail its WAL.
func (a *Appliance) openStorage(r *runner) error {
	f := &a.set
	a.logger.Info("Opening TSDB", "dir", a.s.dataDir)
	start := time.Now()
	db, err := storage.Open(storage.Options{
		Dir:              a.s.dataDir,
		Retention:        time.Duration(f.RetentionTime),
		MaxBytes:         f.RetentionSize,
		WALCompression:   f.WALCompression,
		MinBlockDuration: f.MinBlockDuration,
		SkipBlockCheck:   !f.VerifyBlocks,
		MaxExemplars:     a.config.Load().Prometheus.StorageConfig.ExemplarsConfig.MaxExemplars,
		Stats:            a.storage.DBStats(),
		Logger:           a.logger.With("component", "tsdb"),
		Registerer:       a.registry,
	})
	if err != nil {
		return err
	}
	r.onStop("tsdb", func() error {
		a.logger.Info("Closing TSDB")
		if err := db.Close(); err != nil {
			return fmt.Errorf("close TSDB: %w", err)
		}
		return nil
	})
	// As Prometheus: the remote-write queues tail the WAL and are woken
	// on every commit; they stop (flushing for up to the flush deadline)
	// after scraping and before the TSDB closes.
	db.SetWriteNotified(a.remote)
	r.onStop("remote_storage", a.remote.Close)
	// A commit refused for lack of space frees the disk reserve, so the
	// failure itself is stored and alerted on (storage/reserve.go).
	reserve := storage.NewReserve(storage.ReserveOptions{
		Dir:        a.s.dataDir,
		Size:       int64(f.DiskReserve),
		Logger:     a.logger.With("component", "tsdb"),
		Registerer: a.registry,
	})
	a.storage.OnCommitFailed(reserve.CommitFailed)
	r.start("disk_reserve", reserve.Run)
	a.storage.Set(db)
	a.logger.Info("TSDB open", "duration", time.Since(start).Round(time.Millisecond))
	return nil
}
