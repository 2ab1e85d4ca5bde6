// Package web serves gpuscope's HTTP endpoints on echo: the Prometheus HTTP
// API v1 (what Grafana's Prometheus data source calls), the collectors'
// /metrics endpoints, health, readiness, lifecycle and a status page.
package web

import (
	"context"
	"errors"
	"fmt"
	"github.com/grafana/regexp"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	toolkitweb "github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/prometheus/promql"

	"github.com/gpuscope/gpuscope/dashboards"
)

var errNoScrapeManager = errors.New("scraping is not running")

// Options configure the HTTP server.
type Options struct {
	Logger *slog.Logger
	// ListenAddress is the address the server listens on, as configured
	// (used in the API's target URLs).
	ListenAddress string
	ExternalURL   *url.URL
	CORSOrigin    *regexp.Regexp
	// WebConfigFile is exporter-toolkit's web config (TLS, basic auth);
	// empty serves plain HTTP.
	WebConfigFile string
	// MaxRequestBodyBytes limits every request body.
	MaxRequestBodyBytes int64
	EnableLifecycle     bool
	// AllowUnauthenticatedAdmin serves the admin and lifecycle endpoints
	// even when the web config does not authenticate requests (see
	// auth.go); otherwise they answer 403 then.
	AllowUnauthenticatedAdmin bool
	// Gatherer serves the process's own metrics at /metrics.
	Gatherer   prometheus.Gatherer
	Registerer prometheus.Registerer
	// API is nil for `gpuscope agent`, which serves no API.
	API *APIOptions
	// Status renders extra lines of the status page (where to point
	// Grafana, the data directory, ...).
	Status func() []StatusLine
	// Overview configures the page at /.
	Overview OverviewOptions
	// Self, when set, is the in-memory listener the built-in scrape jobs
	// dial; Run serves the collectors' endpoints (only those) on it.
	Self *SelfListener
	// GPUProcesses, when set, serves /api/v1/gpu/processes (serve and
	// agent alike).
	GPUProcesses GPUProcessSource
}

// StatusLine is one line of the status page.
type StatusLine struct{ Name, Value string }

// Handler is the HTTP side of the appliance.
type Handler struct {
	opts  Options
	echo  *echo.Echo
	ready atomic.Bool

	// metrics are the collectors' endpoints; they are served on the public
	// listener and on the in-memory self listener the built-in scrape jobs
	// use, so self-scrapes need neither the network nor credentials.
	metricsMux *http.ServeMux

	reloadCh chan chan error
	quitCh   chan struct{}
	quitOnce sync.Once

	started    time.Time
	dashboards *dashboards.Set // set by MountDashboards, before Run

	// localEngine answers the overview's queries over Overview.Local's
	// gathered values, for `gpuscope agent`: no API, so no engine is given.
	localEngine *promql.Engine
	// alerts is the embedded Alertmanager's API, whose alerts endpoint the
	// self listener serves too (set by MountAlertmanager, before Run).
	alerts http.Handler
}

// New builds the handler and its routes.
func New(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ExternalURL == nil {
		o.ExternalURL = &url.URL{Scheme: "http", Host: o.ListenAddress}
	}
	if o.CORSOrigin == nil {
		o.CORSOrigin = regexp.MustCompile("^(?:.*)$")
	}
	h := &Handler{
		opts:       o,
		echo:       echo.New(),
		metricsMux: http.NewServeMux(),
		reloadCh:   make(chan chan error),
		quitCh:     make(chan struct{}),
		started:    time.Now(),
	}
	e := h.echo
	e.HideBanner = true
	e.HidePort = true
	e.Use(middleware.Recover())
	if o.MaxRequestBodyBytes > 0 {
		e.Use(bodyLimit(o.MaxRequestBodyBytes))
	}

	e.GET("/-/healthy", func(c echo.Context) error {
		return c.String(http.StatusOK, "gpuscope is Healthy.\n")
	})
	e.Match([]string{http.MethodGet, http.MethodHead}, "/-/ready", func(c echo.Context) error {
		if !h.ready.Load() {
			return c.String(http.StatusServiceUnavailable, "Service Unavailable\n")
		}
		return c.String(http.StatusOK, "gpuscope is Ready.\n")
	})
	// Go's profiles, as Prometheus serves them (behind the same
	// --web.config.file authentication): how BENCHMARKS.md's profile of an
	// idle appliance was taken, and what a bug report can attach.
	e.GET("/debug/pprof/*", echo.WrapHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch strings.TrimPrefix(r.URL.Path, "/debug/pprof/") {
		case "cmdline":
			pprof.Cmdline(w, r)
		case "profile":
			pprof.Profile(w, r)
		case "symbol":
			pprof.Symbol(w, r)
		case "trace":
			pprof.Trace(w, r)
		default:
			pprof.Index(w, r)
		}
	})))
	if o.EnableLifecycle {
		e.Match([]string{http.MethodPost, http.MethodPut}, "/-/reload", h.privileged(h.reload))
		e.Match([]string{http.MethodPost, http.MethodPut}, "/-/quit", h.privileged(h.quit))
	}

	if o.Gatherer != nil {
		h.metricsMux.Handle("/metrics", promhttp.InstrumentMetricHandler(o.Registerer,
			promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{Registry: o.Registerer})))
	}
	for _, p := range []string{"/metrics", "/metrics/*"} {
		e.Any(p, echo.WrapHandler(h.metricsMux))
	}

	if o.GPUProcesses != nil {
		e.GET("/api/v1/gpu/processes", gpuProcesses(o.GPUProcesses))
	}
	if o.API != nil {
		api := newAPI(*o.API, o.ListenAddress, o.ExternalURL, o.CORSOrigin, h.testReady, o.Gatherer, o.Registerer, o.Logger.With("component", "api"))
		apiHandler := echo.WrapHandler(registerAPI(api))
		if o.API.Workloads != nil {
			report := workloads(o.API.Workloads)
			e.Match([]string{http.MethodGet, http.MethodPost}, "/api/v1/workloads", func(c echo.Context) error {
				if !h.ready.Load() { // as the query API: the TSDB is not open yet
					return c.String(http.StatusServiceUnavailable, "Service Unavailable\n")
				}
				return report(c)
			})
		}
		if o.API.Digests != nil {
			send := sendDigests(o.API.Digests)
			e.POST("/api/v1/digests/send", h.privileged(func(c echo.Context) error {
				if !h.ready.Load() {
					return c.String(http.StatusServiceUnavailable, "Service Unavailable\n")
				}
				return send(c)
			}))
		}
		e.Any("/api/v1/*", apiHandler)
		if o.API.EnableAdmin {
			e.Any("/api/v1/admin/*", h.privileged(apiHandler))
		}
	}
	if o.API == nil && o.Overview.Local != nil {
		h.localEngine = promql.NewEngine(promql.EngineOpts{
			Logger: o.Logger.With("component", "overview query engine"),
			// Each query is bounded by the page's own timeout.
			Timeout: h.overviewOptions().QueryTimeout,
			// Prometheus's --query.max-samples: one node's current values
			// are far below it.
			MaxSamples: 50_000_000,
		})
	}
	e.GET("/", h.overview)
	h.mountHistory()
	return h
}

// MountMetrics serves a collector's exposition at path (/metrics/cadvisor,
// /metrics/gpu), publicly and to the built-in self-scrapes.
func (h *Handler) MountMetrics(path string, handler http.Handler) {
	h.metricsMux.Handle(path, handler)
}

// Echo exposes the router so other packages can add their routes
// (dashboards, federation).
func (h *Handler) Echo() *echo.Echo { return h.echo }

// SetReady marks the appliance ready (TSDB open, config applied) or not.
func (h *Handler) SetReady(ready bool) { h.ready.Store(ready) }

// testReady gates the API: 503 until the TSDB is open and the WAL
// replayed.
func (h *Handler) testReady(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "Service Unavailable")
			return
		}
		f(w, r)
	}
}

// Reload delivers /-/reload requests; the receiver answers on the channel.
func (h *Handler) Reload() <-chan chan error { return h.reloadCh }

// Quit is closed by /-/quit.
func (h *Handler) Quit() <-chan struct{} { return h.quitCh }

func (h *Handler) reload(c echo.Context) error {
	rc := make(chan error)
	select {
	case h.reloadCh <- rc:
	case <-c.Request().Context().Done():
		return c.Request().Context().Err()
	}
	if err := <-rc; err != nil {
		return c.String(http.StatusInternalServerError, fmt.Sprintf("failed to reload config: %s\n", err))
	}
	return c.NoContent(http.StatusOK)
}

func (h *Handler) quit(c echo.Context) error {
	h.quitOnce.Do(func() { close(h.quitCh) })
	return c.String(http.StatusOK, "Requesting termination... Goodbye!\n")
}

// Listen opens the public listener; called before anything slow starts so
// a port in use fails the start at once.
func Listen(address string) (net.Listener, error) {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (%s)", address, err, listenHint(err))
	}
	return l, nil
}

// listenHint says what to do about a failed listen: only a port in use
// calls for another address.
func listenHint(err error) string {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return "another process uses this port: stop it or set --web.listen-address to a free address"
	case errors.Is(err, syscall.EACCES):
		return "ports below 1024 need root or CAP_NET_BIND_SERVICE: choose a port of 1024 or above with --web.listen-address"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "this machine has no such address: use one of its addresses, or 0.0.0.0 for all, in --web.listen-address"
	default:
		return "--web.listen-address and web.listen_address take host:port, e.g. 0.0.0.0:9089 or :9089"
	}
}

// Run serves on l and on the self listener until ctx ends, then shuts down
// gracefully.
func (h *Handler) Run(ctx context.Context, l net.Listener) error {
	public := &http.Server{
		Handler:           h.echo,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(h.opts.Logger.Handler(), slog.LevelError),
	}
	self := &http.Server{Handler: h.selfHandler(), ReadHeaderTimeout: 30 * time.Second}

	errc := make(chan error, 2)
	go func() {
		webConfig := h.opts.WebConfigFile
		errc <- toolkitweb.Serve(l, public, &toolkitweb.FlagConfig{WebConfigFile: &webConfig}, h.opts.Logger)
	}()
	if h.opts.Self != nil {
		go func() { errc <- self.Serve(h.opts.Self) }()
	}

	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve HTTP: %w", err)
		}
		return nil
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(public.Shutdown(shutdownCtx), self.Shutdown(shutdownCtx))
}
