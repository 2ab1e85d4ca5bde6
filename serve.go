package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/model"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu"
)

// serveFlags are serve's command line: the appliance's settings, named
// as Prometheus names its own, and what only the process has.
type serveFlags struct {
	app.Settings
	memLimit *memLimitFlags
}

func serveCommand(cli *kingpin.Application) command {
	c := cli.Command("serve", "Run the appliance: collectors, scraping, TSDB, PromQL, rules and the Prometheus HTTP API.").Default()
	f := &serveFlags{Settings: app.DefaultSettings()}
	s := &f.Settings
	c.Flag("config.file", "gpuscope config file (a prometheus.yml plus gpuscope's sections). Empty: the embedded defaults.").StringVar(&s.ConfigFile)
	c.Flag("storage.tsdb.path", "Base path for metrics storage. Default data/, or "+config.DemoDataDir+" with --demo, so simulated series never mix with a real appliance's.").PlaceHolder(app.DefaultDataDir).StringVar(&s.DataDir)
	c.Flag("storage.tsdb.retention.time", "How long to retain samples, unless the config file's storage.tsdb.retention says otherwise.").Default("15d").SetValue(&s.RetentionTime)
	c.Flag("storage.tsdb.retention.size", "Maximum bytes of blocks to retain (e.g. 50GB; 0 = no limit), unless the config file says otherwise.").Default("0").BytesVar(&s.RetentionSize)
	c.Flag("storage.tsdb.wal-compression-type", "WAL compression: snappy, zstd or none.").Default("snappy").EnumVar(&s.WALCompression, "snappy", "zstd", "none")
	c.Flag("storage.tsdb.verify-blocks", "At start, read every block's index and chunks and move damaged blocks to <data>/corrupted instead of serving them. --no-storage.tsdb.verify-blocks checks only that blocks open.").Default("true").BoolVar(&s.VerifyBlocks)
	c.Flag("storage.tsdb.disk-reserve", "Space held in <data>/disk-reserve and freed when the disk fills, so that gpuscope's own metrics and the GpuscopeStorageFailing alert are still stored; taken again when free space is back. 0 = none.").Default("64MB").BytesVar(&s.DiskReserve)
	c.Flag("storage.tsdb.min-block-duration", "Time the head spans before it is compacted into a block. For use in testing.").Hidden().Default("2h").SetValue((*model.Duration)(&s.MinBlockDuration))
	c.Flag("web.listen-address", "Address to listen on for the API, the collectors' /metrics and the status page. Default "+app.DefaultListenAddress+" or the config file's web.listen_address.").PlaceHolder(app.DefaultListenAddress).StringVar(&s.ListenAddress)
	c.Flag("web.external-url", "URL under which gpuscope is reachable (for alert links). Default: http://<node name>:<port>/.").StringVar(&s.ExternalURL)
	c.Flag("web.cors.origin", `Regex of origins allowed to call the API, anchored. Default: the config file's web.cors_origin, else .* (any). Example: 'https?://(domain1|domain2)\.com'`).PlaceHolder(".*").StringVar(&s.CORSOrigin)
	c.Flag("web.config.file", "exporter-toolkit web config file for TLS and basic auth.").Default("").StringVar(&s.WebConfigFile)
	c.Flag("web.enable-admin-api", "Enable the admin API (delete series, snapshots).").BoolVar(&s.EnableAdmin)
	c.Flag("web.enable-lifecycle", "Enable /-/reload and /-/quit.").BoolVar(&s.EnableLifecycle)
	c.Flag("web.allow-unauthenticated-admin", "Serve the admin API and lifecycle endpoints even though --web.config.file does not authenticate requests (basic_auth_users). Only where no untrusted client can reach the listen address.").BoolVar(&s.AllowUnauthenticatedAdmin)
	f.memLimit = addMemLimitFlags(c)
	c.Flag("web.max-request-body-size", "Largest request body accepted by any endpoint.").Default("32MB").BytesVar(&s.MaxRequestBodyBytes)
	c.Flag("web.enable-remote-write-receiver", "Accept Prometheus remote-write pushes at /api/v1/write.").BoolVar(&s.EnableRemoteWriteReceiver)
	c.Flag("web.enable-otlp-receiver", "Accept OTLP metrics pushes at /api/v1/otlp/v1/metrics.").BoolVar(&s.EnableOTLPReceiver)
	c.Flag("storage.remote.flush-deadline", "How long to wait flushing remote-write samples on shutdown or config reload.").Default("1m").SetValue((*model.Duration)(&s.RemoteFlushDeadline))
	c.Flag("query.timeout", "Maximum time a query may take before it is aborted.").Default("2m").SetValue((*model.Duration)(&s.QueryTimeout))
	c.Flag("query.max-samples", "Maximum number of samples a single query can load into memory.").Default("50000000").IntVar(&s.MaxSamples)
	c.Flag("query.max-concurrency", "Maximum number of queries executed concurrently; the others wait. 0: the CPUs gpuscope may use (GOMAXPROCS, which follows a cgroup CPU limit), at most Prometheus's 20: a query runs on one CPU, and more queries than CPUs only take turns, with each other and with the scrapes.").Default("0").IntVar(&s.MaxConcurrency)
	c.Flag("query.lookback-delta", "How far back to look for a sample of a series at an instant.").Default("5m").SetValue((*model.Duration)(&s.LookbackDelta))
	c.Flag("rules.alert.for-outage-tolerance", "Max time to tolerate a gpuscope outage for restoring the \"for\" state of alerts.").Default("1h").SetValue((*model.Duration)(&s.OutageTolerance))
	c.Flag("rules.alert.for-grace-period", "Minimum duration between an alert and its restored \"for\" state, for alerts whose \"for\" is longer.").Default("10m").SetValue((*model.Duration)(&s.ForGracePeriod))
	c.Flag("rules.alert.resend-delay", "Minimum time to wait before resending an alert to Alertmanager.").Default("1m").SetValue((*model.Duration)(&s.ResendDelay))
	c.Flag("alertmanager.notification-queue-capacity", "Alerts queued for Alertmanager before the oldest are dropped.").Default("10000").IntVar(&s.NotificationQueue)
	c.Flag("alertmanager.drain-notification-queue-on-shutdown", "Send the queued alerts before shutting down.").Default("true").BoolVar(&s.DrainNotifications)
	c.Flag("gpu.backend", "GPU backend: auto, nvml, sim or none. Default: the config file's gpu.backend (auto).").EnumVar(&s.GPUBackend, gpu.BackendAuto, gpu.BackendNVML, gpu.BackendSim, gpu.BackendNone)
	c.Flag("demo", "Run eight simulated GPUs with one scenario each (training ×2, leak, input-bound, memory-bound, thermal, MIG, XID) at 30× speed, so every dashboard and alert has data without a GPU; data goes to "+config.DemoDataDir+" unless --storage.tsdb.path is given.").BoolVar(&s.Demo)
	c.Flag("node.name", "This node's name: the `instance` label of its built-in series and the Hostname label of GPU series. Default: the host name.").Envar("NODE_NAME").StringVar(&s.NodeName)
	return command{clause: c, run: func(logger *slog.Logger) error { return serve(f, c.Model(), logger) }}
}

// serve runs until SIGINT/SIGTERM (or /-/quit), then stops scraping, lets
// in-flight work finish, closes the TSDB and returns.
func serve(f *serveFlags, flags *kingpin.CmdModel, logger *slog.Logger) error {
	if err := applyMemLimit(f.memLimit, logger); err != nil {
		return err
	}
	s := f.Settings
	s.Logger, s.Flags = logger, map[string]string{}
	for _, fl := range flags.Flags {
		s.Flags[fl.Name] = fl.Value.String()
	}
	s.OnConfig = func(c *config.Config) { applyGoGC(c.Prometheus, logger) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := app.New(ctx, s)
	if err != nil {
		return err
	}
	return runWithSignals(ctx, a, logger)
}

// runWithSignals runs r until ctx ends, reloading it on each SIGHUP.
func runWithSignals(ctx context.Context, r interface {
	Run(context.Context) error
	Reload() error
}, logger *slog.Logger) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				// The appliance logs its own failures, as it does for
				// POST /-/reload.
				if err := r.Reload(); errors.Is(err, app.ErrAgentReloadsNothing) {
					logger.Warn(err.Error())
				}
			}
		}
	}()
	return r.Run(ctx)
}
