package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/prometheus/common/model"

	"github.com/gpuscope/gpuscope/gpu"
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
	c.Flag("query.max-concurrency", "Maximum number of queries executed concurrently; the others wait. 0: the CPUs gpuscope may use (GOMAXPROCS, which follows a cgroup CPU limit), at most Prometheus's 20: a query runs on one CPU, and more queries than CPUs only take turns, with each other and with the scrapes.").Default("0").IntVar(&f.maxConcurrency)
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

	s, cfg, err := resolveServe(f, logger)
	if err != nil {
		return err
	}
	if err := applyMemLimit(f.memLimit, logger); err != nil {
		return err
	}
	if f.demo {
		logDemo(logger, cfg.GPU, s.dataDir)
	}
	// Before the TSDB replays its WAL, as Prometheus does.
	applyGoGC(cfg.Prometheus, logger)
	a, err := newAppliance(s, cfg, logger)
	if err != nil {
		return err
	}
	return a.run(ctx)
}
