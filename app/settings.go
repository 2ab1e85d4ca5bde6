// Package app is the appliance (`gpuscope serve`) and the agent (`gpuscope
// agent`) as libraries: built from Settings, run until their context ends
// or Stop, reloaded by Reload. Command-line flags, signals and the
// process-wide runtime settings (GOMAXPROCS, GOMEMLIMIT, GOGC, klog) are
// the caller's: package main for the binary, the tests for themselves, so
// that a test can run two appliances in one process under the race
// detector, as Alertmanager's app package allows.
package app

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/units"
	"github.com/grafana/regexp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/version"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/web"
)

// DefaultListenAddress is gpuscope's port: 9089 is next to Prometheus's
// 9090 and clear of Alertmanager (9093), node_exporter (9100),
// dcgm-exporter (9400), cAdvisor (8080) and Grafana (3000).
const DefaultListenAddress = "0.0.0.0:9089"

// FallbackVersion is the version reported when the build did not stamp
// one (go run, go build without the packaging script's -ldflags, a test
// binary). It is semver so Grafana's version detection accepts it.
const FallbackVersion = "0.1.0-dev"

// Version is the build's version: prometheus/common/version's, as the
// binary stamps it, or FallbackVersion.
func Version() string { return cmpOr(version.Version, FallbackVersion) }

// DefaultDataDir is the data directory without --storage.tsdb.path (and
// without --demo, which has config.DemoDataDir).
const DefaultDataDir = "data/"

// Settings are what an appliance runs with: serve's command line, less
// what is the process's. An empty string means "not given": the config
// file's web: section decides, else the default. Start from
// DefaultSettings: its non-zero values are serve's flag defaults.
type Settings struct {
	// Logger, Registry and Now are the caller's. A nil Logger discards; a
	// nil Registry is a new one with the Go, process and build-info
	// collectors; a nil Now is time.Now. Now is the clock of what the
	// appliance says about time (the pages' "now", the status and runtime
	// info); the TSDB, scrape loop and rule manager keep their own.
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Now      func() time.Time

	ConfigFile string
	Demo       bool
	// GPUBackend overrides the file's gpu.backend when not empty.
	GPUBackend string
	// NodeName is the instance label of the node's own series; empty is
	// the host name.
	NodeName string

	DataDir          string // empty: DefaultDataDir, or config.DemoDataDir with Demo
	RetentionTime    model.Duration
	RetentionSize    units.Base2Bytes
	WALCompression   string
	MinBlockDuration time.Duration
	VerifyBlocks     bool
	DiskReserve      units.Base2Bytes

	ListenAddress             string // empty: web.listen_address, else DefaultListenAddress
	ExternalURL               string // empty: web.external_url, else http://<node>:<port>/
	CORSOrigin                string // empty: web.cors_origin, else .*
	WebConfigFile             string
	EnableAdmin               bool
	EnableLifecycle           bool
	AllowUnauthenticatedAdmin bool
	MaxRequestBodyBytes       units.Base2Bytes
	EnableRemoteWriteReceiver bool
	EnableOTLPReceiver        bool
	RemoteFlushDeadline       time.Duration

	QueryTimeout   time.Duration
	MaxSamples     int
	MaxConcurrency int // 0: GOMAXPROCS, at most 20
	LookbackDelta  time.Duration

	OutageTolerance    time.Duration
	ForGracePeriod     time.Duration
	ResendDelay        time.Duration
	NotificationQueue  int
	DrainNotifications bool

	// Flags are the command line as /api/v1/status/flags shows it (the
	// resolved values replace the data directory's, the listen address's,
	// the external URL's and the CORS origin's).
	Flags map[string]string
	// OnConfig is called with every config before it is applied: at New,
	// before the TSDB replays its WAL, and at each reload. The binary sets
	// the process's GOGC from runtime.gogc there, as Prometheus does.
	OnConfig func(*config.Config)
}

// DefaultSettings are serve's flag defaults.
func DefaultSettings() Settings {
	return Settings{
		RetentionTime:       model.Duration(15 * 24 * time.Hour),
		WALCompression:      "snappy",
		MinBlockDuration:    2 * time.Hour,
		VerifyBlocks:        true,
		DiskReserve:         64 * units.MiB,
		MaxRequestBodyBytes: 32 * units.MiB,
		RemoteFlushDeadline: time.Minute,
		QueryTimeout:        2 * time.Minute,
		MaxSamples:          50_000_000,
		LookbackDelta:       5 * time.Minute,
		OutageTolerance:     time.Hour,
		ForGracePeriod:      10 * time.Minute,
		ResendDelay:         time.Minute,
		NotificationQueue:   10_000,
		DrainNotifications:  true,
	}
}

// loader is how the appliance reads its config, at start and at reload.
func (s *Settings) loader() config.Loader {
	return config.Loader{File: s.ConfigFile, Demo: s.Demo, GPUBackend: s.GPUBackend,
		RetentionTime: s.RetentionTime, RetentionSize: s.RetentionSize, Logger: s.Logger}
}

// resolved are the settings the flags and the config file decide
// together, decided once at New and never changed: components read these,
// never the raw settings.
type resolved struct {
	nodeName      string
	dataDir       string
	listenAddress string
	// externalURL is as given; empty means http://<node>:<port>/, known
	// once listening.
	externalURL string
	cors        *regexp.Regexp
}

// resolve decides, with the config file read at start, every setting the
// file may give too; anything wrong fails here, before a port is taken
// or a directory created.
func (s *Settings) resolve(cfg *config.Config) (resolved, error) {
	var (
		r   resolved
		err error
	)
	if r.nodeName, err = NodeName(s.NodeName); err != nil {
		return r, err
	}
	r.dataDir = s.DataDir
	if r.dataDir == "" {
		r.dataDir = DefaultDataDir
		if s.Demo {
			r.dataDir = config.DemoDataDir
		}
	}
	r.listenAddress = cmpOr(s.ListenAddress, cfg.Web.ListenAddress, DefaultListenAddress)
	r.externalURL = cmpOr(s.ExternalURL, cfg.Web.ExternalURL)
	if r.externalURL != "" {
		if _, err := externalURL(r.externalURL, r.nodeName, 0); err != nil {
			return r, err
		}
	}
	cors := cmpOr(s.CORSOrigin, cfg.Web.CORSOrigin, ".*")
	if r.cors, err = regexp.Compile("^(?:" + cors + ")$"); err != nil {
		return r, fmt.Errorf("parse --web.cors.origin %q: %w", cors, err)
	}
	if err := s.checkAuth(r.listenAddress); err != nil {
		return r, err
	}
	return r, nil
}

func cmpOr(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// externalURL is the URL alerts, pages and the log link back to: raw, or
// http://<node>:<port>/ when raw is empty. It is resolved once, when the
// port is known (New), and only validated before.
func externalURL(raw, node string, port int) (*url.URL, error) {
	if raw == "" {
		raw = "http://" + net.JoinHostPort(node, strconv.Itoa(port)) + "/"
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("--web.external-url %q must be an absolute URL like http://host:9089/", raw)
	}
	return u, nil
}

// checkAuth validates --web.config.file before anything starts, and
// refuses to serve the admin API or the lifecycle endpoints when that file
// does not authenticate every request, unless
// --web.allow-unauthenticated-admin says the listener is trusted.
func (s *Settings) checkAuth(listenAddress string) error {
	var privileged []string
	if s.EnableAdmin {
		privileged = append(privileged, "--web.enable-admin-api")
	}
	if s.EnableLifecycle {
		privileged = append(privileged, "--web.enable-lifecycle")
	}
	auth, err := web.CheckAuth(s.WebConfigFile, privileged, s.AllowUnauthenticatedAdmin)
	if err != nil {
		return err
	}
	if len(privileged) > 0 && !auth.Authenticated() {
		s.Logger.Warn("Admin and lifecycle endpoints are served without authentication (--web.allow-unauthenticated-admin)",
			"enabled", strings.Join(privileged, " "), "listen", listenAddress)
	}
	return nil
}

// flagValues are the flags as /api/v1/status/flags shows them: as given,
// except those the config file or --demo resolved otherwise.
func (s *Settings) flagValues(r resolved) map[string]string {
	m := make(map[string]string, len(s.Flags)+4)
	for k, v := range s.Flags {
		m[k] = v
	}
	m["storage.tsdb.path"] = r.dataDir
	m["web.listen-address"] = r.listenAddress
	m["web.external-url"] = r.externalURL
	m["web.cors.origin"] = r.cors.String()
	return m
}

// NodeName is name, else the host name.
func NodeName(name string) (string, error) {
	if name != "" {
		return name, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("read host name (set --node.name): %w", err)
	}
	return h, nil
}

// defaults fills in the caller's logger, registry and clock.
func defaults(logger **slog.Logger, reg **prometheus.Registry, now *func() time.Time) {
	if *logger == nil {
		*logger = slog.New(slog.DiscardHandler)
	}
	if *reg == nil {
		*reg = NewRegistry()
	}
	if *now == nil {
		*now = time.Now
	}
}

// NewRegistry holds a process's own metrics, served at /metrics: the Go
// runtime's, the process's and gpuscope's build info.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector("gpuscope"),
	)
	return reg
}
