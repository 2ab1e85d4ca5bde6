// Package alertmanager is Alertmanager inside gpuscope: the alerts of the
// built-in and the user's rules reach people without a second program.
// It is not a re-implementation: it wires Alertmanager's own packages
// (config, dispatch, notify and its receivers, silence, inhibit, nflog,
// provider/mem, template, timeinterval, api) as Alertmanager's app package
// does (app/app.go setup, app/reloader.go reload), which gpuscope cannot
// use itself: it wants a config file, a listener and a cluster of its own,
// and links the web UI, whose assets are not in the module. What differs:
// the config is a section of gpuscope.yml (Load), the API is served by
// gpuscope's HTTP server (Handler), there is no cluster, and silences and
// the notification log are written to disk as they change (persist.go),
// not only every 15 minutes, so that a kill -9 loses neither.
package alertmanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/alertmanager/api"
	amconfig "github.com/prometheus/alertmanager/config"
	"github.com/prometheus/alertmanager/dispatch"
	"github.com/prometheus/alertmanager/eventrecorder"
	"github.com/prometheus/alertmanager/featurecontrol"
	"github.com/prometheus/alertmanager/inhibit"
	"github.com/prometheus/alertmanager/marker"
	"github.com/prometheus/alertmanager/nflog"
	"github.com/prometheus/alertmanager/notify"
	"github.com/prometheus/alertmanager/provider/mem"
	"github.com/prometheus/alertmanager/silence"
	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/alertmanager/timeinterval"
	"github.com/prometheus/alertmanager/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/route"
)

// Alertmanager's defaults (app/options.go), which gpuscope keeps.
const (
	DefaultRetention                   = 120 * time.Hour
	DefaultMaintenanceInterval         = 15 * time.Minute
	DefaultAlertGCInterval             = 30 * time.Minute
	DefaultDispatchMaintenanceInterval = 30 * time.Second
)

// Options configure the embedded Alertmanager.
type Options struct {
	// Logger is the process's: the parts are named (component
	// alertmanager, alertmanager nflog, alertmanager silences,
	// alertmanager api; the dispatcher and the alert provider add their
	// own below alertmanager).
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Dir holds the silences and the notification log
	// (<data>/alertmanager); created if missing.
	Dir string
	// ExternalURL is gpuscope's URL, the templates' .ExternalURL (its
	// overview page is .ExternalURL followed by /).
	ExternalURL *url.URL
	// Retention is how long silences and notification log entries are
	// kept after they end (Alertmanager's --data.retention).
	Retention time.Duration
	// MaintenanceInterval is how often expired silences and log entries
	// are dropped and the state written again; changes are written as
	// they happen.
	MaintenanceInterval time.Duration
	// AlertGCInterval is how often resolved alerts are dropped.
	AlertGCInterval time.Duration
	// DispatchMaintenanceInterval is how often empty aggregation groups
	// are dropped.
	DispatchMaintenanceInterval time.Duration
}

// Alertmanager is the embedded Alertmanager: New loads its state, Run
// serves alerts until its context ends, ApplyConfig takes a new config at
// any time (before Run too), Handler is its API v2.
type Alertmanager struct {
	opts     Options
	logger   *slog.Logger
	flags    featurecontrol.Flagger
	recorder eventrecorder.Recorder // off: the zero value records nothing

	silences         *silence.Silences
	silencer         *silence.Silencer
	nflog            *nflog.Log
	silencesFile     *stateFile
	nflogFile        *stateFile
	groupMarker      marker.GroupMarker
	pipelineBuilder  *notify.PipelineBuilder
	dispatchMetrics  *dispatch.DispatcherMetrics
	metrics          *metrics
	deliveries       deliveries // each integration's last attempt (status.go)
	startTime        time.Time
	ran              atomic.Bool
	ready, done      chan struct{}
	readyOnce        sync.Once
	current          atomic.Pointer[instance] // the running instance, for Handler; nil: not running
	config           atomic.Pointer[Config]   // the config in effect
	mu               sync.Mutex               // serialises ApplyConfig and Run's start and stop
	pending          *built                   // the last config applied, for Run to start with
	running          *instance                // nil unless Run is serving
	closeMaintenance func()
}

// built is a config and what was made of it before anything changed:
// everything of a reload that can fail.
type built struct {
	conf       *amconfig.Config
	tmpl       *template.Template
	receivers  map[string][]notify.Integration
	routes     *dispatch.Route
	intervener *timeinterval.Intervener
}

// instance is what Run builds: the alert provider, the API and the
// config-scoped inhibitor and dispatcher, swapped on every ApplyConfig.
type instance struct {
	alerts     *mem.Alerts
	inhibitor  atomic.Pointer[inhibit.Inhibitor]
	dispatcher atomic.Pointer[dispatch.Dispatcher]
	// api is Alertmanager's API v2, built on its first request
	// (apiHandler): its OpenAPI spec, loaded and analysed, holds 2 MB of
	// heap, which an appliance whose alerts never fire and that no amtool
	// asks need not pay. Guarded by Alertmanager.mu.
	api     *api.API
	handler atomic.Pointer[http.Handler] // api's routes, once built
}

// New loads the silences and the notification log from opts.Dir and
// registers the metrics; it starts nothing.
func New(o Options) (*Alertmanager, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	if o.Dir == "" {
		return nil, errors.New("alertmanager: Dir is required")
	}
	if o.ExternalURL == nil {
		o.ExternalURL = &url.URL{Scheme: "http", Host: "localhost"}
	}
	o.ExternalURL = templateURL(o.ExternalURL)
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.MaintenanceInterval <= 0 {
		o.MaintenanceInterval = DefaultMaintenanceInterval
	}
	if o.AlertGCInterval <= 0 {
		o.AlertGCInterval = DefaultAlertGCInterval
	}
	if o.DispatchMaintenanceInterval <= 0 {
		o.DispatchMaintenanceInterval = DefaultDispatchMaintenanceInterval
	}
	if err := os.MkdirAll(o.Dir, 0o777); err != nil {
		return nil, fmt.Errorf("create alertmanager directory: %w", err)
	}
	logger := o.Logger.With("component", "alertmanager")
	// Receiver names in the notification metrics: which receiver fails is
	// what a user asks first, and gpuscope has few. Alertmanager warns at
	// every start that the flag is experimental; here it is no user's
	// choice, so not logged.
	flags, err := featurecontrol.NewFlags(slog.New(slog.DiscardHandler), featurecontrol.FeatureReceiverNameInMetrics)
	if err != nil {
		return nil, fmt.Errorf("alertmanager features: %w", err)
	}
	a := &Alertmanager{
		opts:        o,
		logger:      logger,
		flags:       flags,
		groupMarker: marker.NewGroupMarker(),
		startTime:   time.Now(),
		ready:       make(chan struct{}),
		done:        make(chan struct{}),
	}
	a.nflog, err = nflog.New(nflog.Options{
		SnapshotFile: filepath.Join(o.Dir, "nflog"),
		Retention:    o.Retention,
		Logger:       o.Logger.With("component", "alertmanager nflog"),
		Metrics:      o.Registerer,
	})
	if err != nil {
		return nil, fmt.Errorf("load notification log: %w", err)
	}
	a.nflogFile = &stateFile{path: filepath.Join(o.Dir, "nflog"), snapshot: a.nflog.Snapshot}
	a.silences, err = silence.New(silence.Options{
		SnapshotFile: filepath.Join(o.Dir, "silences"),
		Retention:    o.Retention,
		Logger:       o.Logger.With("component", "alertmanager silences"),
		Metrics:      o.Registerer,
		// Silences are set and expired by hand, rarely: each is logged,
		// as Alertmanager does with --log.level=debug.
		Logging:       true,
		EventRecorder: a.recorder,
	})
	if err != nil {
		return nil, fmt.Errorf("load silences: %w", err)
	}
	a.silencesFile = &stateFile{path: filepath.Join(o.Dir, "silences"), snapshot: a.silences.Snapshot}
	a.silencer = silence.NewSilencer(a.silences, a.logger, a.recorder)
	a.pipelineBuilder = notify.NewPipelineBuilder(o.Registerer, flags, a.recorder)
	a.dispatchMetrics = dispatch.NewDispatcherMetrics(false, o.Registerer, flags)
	a.metrics = newMetrics(o.Registerer)
	return a, nil
}

// ApplyConfig makes c the config in effect. Everything that can fail is
// done first (templates, receivers): on error nothing changes, and the
// previous config stays in effect. Before Run it is kept for Run.
func (a *Alertmanager) ApplyConfig(c *Config) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	tmpl, receivers, err := build(c.Alertmanager, a.opts.ExternalURL, a.logger, &a.deliveries)
	if err != nil {
		return err
	}
	b := &built{
		conf:       c.Alertmanager,
		tmpl:       tmpl,
		receivers:  receivers,
		routes:     dispatch.NewRoute(c.Alertmanager.Route, nil),
		intervener: timeinterval.NewIntervener(timeIntervals(c.Alertmanager)),
	}
	a.pending = b
	a.config.Store(c)
	if a.running != nil {
		a.apply(a.running, b)
	}
	return nil
}

func timeIntervals(c *amconfig.Config) map[string][]timeinterval.TimeInterval {
	out := make(map[string][]timeinterval.TimeInterval, len(c.MuteTimeIntervals)+len(c.TimeIntervals))
	for _, ti := range c.MuteTimeIntervals {
		out[ti.Name] = ti.TimeIntervals
	}
	for _, ti := range c.TimeIntervals {
		out[ti.Name] = ti.TimeIntervals
	}
	return out
}

// apply swaps b's inhibitor and dispatcher in, in the order of
// Alertmanager's reloader: the old ones stop, the new inhibitor has
// loaded the alerts before the new dispatcher starts (so an inhibited
// alert is not sent meanwhile), and each is published once loaded.
func (a *Alertmanager) apply(inst *instance, b *built) {
	if old := inst.inhibitor.Load(); old != nil {
		old.Stop()
	}
	if old := inst.dispatcher.Load(); old != nil {
		old.Stop()
	}
	inhibitor := inhibit.NewInhibitor(inst.alerts, b.conf.InhibitRules, a.logger, a.recorder)
	pipeline := a.pipelineBuilder.New(
		b.receivers,
		func() time.Duration { return 0 }, // no cluster: no peer position to wait for
		inhibitor,
		a.silencer,
		b.intervener,
		a.groupMarker,
		&persistedLog{log: a.nflog, file: a.nflogFile, logger: a.logger},
		nil,
	)
	integrations := 0
	for _, is := range b.receivers {
		integrations += len(is)
	}
	a.metrics.receivers.Set(float64(len(b.receivers)))
	a.metrics.integrations.Set(float64(integrations))
	a.metrics.inhibitionRules.Set(float64(len(b.conf.InhibitRules)))
	if inst.api != nil {
		a.updateAPI(inst, b)
	}
	dispatcher := dispatch.NewDispatcher(
		inst.alerts,
		b.routes,
		pipeline,
		a.groupMarker,
		func(d time.Duration) time.Duration { return max(d, notify.MinTimeout) },
		a.opts.DispatchMaintenanceInterval,
		nil,
		a.logger, // it adds component=dispatcher
		a.recorder,
		a.dispatchMetrics,
		b.tmpl,
	)
	b.routes.Walk(func(r *dispatch.Route) {
		if r.RouteOpts.RepeatInterval > a.opts.Retention {
			a.logger.Warn("repeat_interval is greater than the data retention period. It can lead to notifications being repeated more often than expected.",
				"repeat_interval", r.RouteOpts.RepeatInterval, "retention", a.opts.Retention, "route", r.Key())
		}
		if r.RouteOpts.RepeatInterval < r.RouteOpts.GroupInterval {
			a.logger.Warn("repeat_interval is less than group_interval. Notifications will not repeat until the next group_interval.",
				"repeat_interval", r.RouteOpts.RepeatInterval, "group_interval", r.RouteOpts.GroupInterval, "route", r.Key())
		}
	})
	go inhibitor.Run()
	inhibitor.WaitForLoading()
	inst.inhibitor.Store(inhibitor)
	go dispatcher.Run(a.startTime)
	dispatcher.WaitForLoading()
	inst.dispatcher.Store(dispatcher)
}

// Run receives and dispatches alerts until ctx ends, then stops the
// dispatcher and writes the state a last time. It needs a config applied
// first (ApplyConfig). An Alertmanager runs once.
func (a *Alertmanager) Run(ctx context.Context) error {
	if !a.ran.CompareAndSwap(false, true) {
		return errors.New("alertmanager: Run called twice")
	}
	defer close(a.done)
	inst, err := a.start(ctx)
	if err != nil {
		return err
	}
	<-ctx.Done()
	a.stop(inst)
	return nil
}

// start builds the instance (the alert provider's collector runs until
// ctx ends) and the maintenance of the silences and the log, and applies
// the config.
func (a *Alertmanager) start(ctx context.Context) (*instance, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		return nil, errors.New("alertmanager: no config applied before Run")
	}
	alerts, err := mem.NewAlerts(ctx, a.opts.AlertGCInterval, 0, a.silencer, a.logger, a.recorder, a.opts.Registerer, a.flags)
	if err != nil {
		return nil, fmt.Errorf("create alert provider: %w", err)
	}
	inst := &instance{alerts: alerts}
	a.closeMaintenance = a.maintain()
	a.apply(inst, a.pending)
	a.running = inst
	a.current.Store(inst)
	a.readyOnce.Do(func() { close(a.ready) })
	a.logger.Info("Alertmanager started", "dir", a.opts.Dir)
	return inst, nil
}

// apiHandler returns inst's API v2, built on the first call.
func (a *Alertmanager) apiHandler(inst *instance) (http.Handler, error) {
	if h := inst.handler.Load(); h != nil {
		return *h, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if h := inst.handler.Load(); h != nil {
		return *h, nil
	}
	if a.running != inst {
		return nil, ErrNotRunning
	}
	var err error
	inst.api, err = api.New(api.Options{
		Alerts:          inst.alerts,
		Silences:        a.silences,
		GroupMutedFunc:  a.groupMarker.Muted,
		Logger:          a.opts.Logger.With("component", "alertmanager api"),
		Registry:        a.opts.Registerer,
		RequestDuration: a.metrics.requestDuration,
		GroupFunc: func(ctx context.Context, routeFilter func(*dispatch.Route) bool, alertFilter func(*types.Alert, time.Time) bool) (dispatch.AlertGroups, map[model.Fingerprint][]string, error) {
			return inst.dispatcher.Load().Groups(ctx, routeFilter, alertFilter)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create API: %w", err)
	}
	a.updateAPI(inst, a.pending)
	var h http.Handler = inst.api.Register(route.New(), "/")
	inst.handler.Store(&h)
	return h, nil
}

// updateAPI gives inst's API b's config and the status of an alert as
// the inhibitor and silencer in effect see it.
func (a *Alertmanager) updateAPI(inst *instance, b *built) {
	inst.api.Update(b.conf, func(ctx context.Context, labels model.LabelSet) {
		inst.inhibitor.Load().Mutes(ctx, labels)
		a.silencer.Mutes(ctx, labels)
	})
}

// maintain runs Alertmanager's maintenance of the silences and the log:
// drop what expired, write the state; once more when stopped. The
// returned func stops it and waits.
func (a *Alertmanager) maintain() func() {
	stopc := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		a.nflog.Maintenance(a.opts.MaintenanceInterval, a.nflogFile.path, stopc, func() (int64, error) {
			if _, err := a.nflog.GC(); err != nil {
				return 0, err
			}
			return a.nflogFile.write()
		})
	})
	wg.Go(func() {
		a.silences.Maintenance(a.opts.MaintenanceInterval, a.silencesFile.path, stopc, func() (int64, error) {
			if _, err := a.silences.GC(); err != nil {
				return 0, err
			}
			return a.silencesFile.write()
		})
	})
	return func() {
		close(stopc)
		wg.Wait()
	}
}

// stop undoes start: the API answers 503, the dispatcher and inhibitor
// stop (no notification after this), the provider closes, and the state
// is written.
func (a *Alertmanager) stop(inst *instance) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.current.Store(nil)
	a.running = nil
	inst.inhibitor.Load().Stop()
	inst.dispatcher.Load().Stop()
	inst.alerts.Close()
	a.closeMaintenance()
	a.logger.Info("Alertmanager stopped")
}

// WaitReady blocks until Run serves (so that the first alerts sent find
// it), Run returned or ctx ended; the error says which of the last two.
func (a *Alertmanager) WaitReady(ctx context.Context) error {
	select {
	case <-a.ready:
		return nil
	case <-a.done:
		return errors.New("alertmanager stopped before it was ready")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Config is the config in effect; nil before ApplyConfig.
func (a *Alertmanager) Config() *Config { return a.config.Load() }

// Reaches says whether an alert can reach anyone with the config in
// effect (Config.Reaches); Nobody says why not.
func (a *Alertmanager) Reaches() bool {
	c := a.config.Load()
	return c != nil && c.Reaches()
}

// Nobody says why no alert reaches anyone with the config in effect, and
// how to fix that; "" when one can.
func (a *Alertmanager) Nobody() string {
	c := a.config.Load()
	if c == nil {
		return "the embedded Alertmanager has no config yet"
	}
	return c.Nobody()
}
