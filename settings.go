package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/alecthomas/units"
	"github.com/grafana/regexp"
	"github.com/prometheus/common/model"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu/sim"
	"github.com/gpuscope/gpuscope/web"
)

// serveSettings are serve's flags and the config file's web: section
// resolved once at start. Which of the two wins is decided in
// resolveServe and nowhere else; neither is changed afterwards, and
// components read these values, never the flags.
type serveSettings struct {
	flags         *serveFlags
	nodeName      string
	dataDir       string
	listenAddress string
	// externalURL is --web.external-url or web.external_url as given;
	// empty means http://<node name>:<port>/, known once listening.
	externalURL string
	cors        *regexp.Regexp
	loader      configLoader
}

// resolveServe reads the config file (once) and resolves serve's
// settings; anything wrong in either fails here, before a port is taken
// or a directory created.
func resolveServe(f *serveFlags, logger *slog.Logger) (*serveSettings, *config.Config, error) {
	node, err := resolveNodeName(f.nodeName)
	if err != nil {
		return nil, nil, err
	}
	s := &serveSettings{
		flags:         f,
		nodeName:      node,
		dataDir:       f.dataDir,
		listenAddress: f.listenAddress,
		externalURL:   f.externalURL,
		loader: configLoader{
			file: f.configFile, demo: f.demo, gpuBackend: f.gpuBackend,
			retentionTime: f.retentionTime, retentionSize: f.retentionSize,
			logger: logger,
		},
	}
	cfg, err := s.loader.read()
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.CheckBuiltinJobs(); err != nil {
		return nil, nil, fmt.Errorf("load config: %w", err)
	}
	if f.demo && !f.dataDirSet {
		s.dataDir = demoDataDir
	}
	if !f.listenSet && cfg.Web.ListenAddress != "" {
		s.listenAddress = cfg.Web.ListenAddress
	}
	if s.externalURL == "" {
		s.externalURL = cfg.Web.ExternalURL
	}
	if _, err := resolveExternalURL(s.externalURL, node, 0); err != nil {
		return nil, nil, err
	}
	cors := f.corsOrigin
	if !f.corsSet && cfg.Web.CORSOrigin != "" {
		cors = cfg.Web.CORSOrigin
	}
	if s.cors, err = regexp.Compile("^(?:" + cors + ")$"); err != nil {
		return nil, nil, fmt.Errorf("parse --web.cors.origin %q: %w", cors, err)
	}
	if err := checkAuth(f, s.listenAddress, logger); err != nil {
		return nil, nil, err
	}
	return s, cfg, nil
}

// flagValues are the flags as /api/v1/status/flags shows them: as given,
// except those the config file or --demo resolved otherwise.
func (s *serveSettings) flagValues() map[string]string {
	m := s.flags.flagValues()
	m["storage.tsdb.path"] = s.dataDir
	m["web.listen-address"] = s.listenAddress
	m["web.external-url"] = s.externalURL
	m["web.cors.origin"] = s.cors.String()
	return m
}

// resolveExternalURL is the URL alerts and the log link back to:
// raw, or http://<node>:<port>/ when raw is empty.
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

// configLoader reads the config file as serve and agent run it: the file
// or the embedded defaults, with --demo and --gpu.backend over its gpu:
// section and the retention flags where the file sets no retention. The
// built-in jobs are added by the caller, once the self listener's address
// is known.
type configLoader struct {
	file          string
	demo          bool
	gpuBackend    string
	retentionTime model.Duration
	retentionSize units.Base2Bytes
	logger        *slog.Logger
}

func (l configLoader) read() (*config.Config, error) {
	var (
		cfg *config.Config
		err error
	)
	if l.file == "" {
		cfg = config.Default(l.logger)
	} else if cfg, err = config.LoadFile(l.file, l.logger); err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	if l.demo {
		cfg.GPU.Config, cfg.GPU.Sim = sim.DemoConfig()
		// The built-in rules run as fast as the simulated GPUs, so that
		// the demo's alerts fire within minutes.
		cfg.Rules.Builtin.TimeScale = cfg.GPU.Sim.TimeScale
	}
	if l.gpuBackend != "" {
		cfg.GPU.Backend = l.gpuBackend
	}
	for _, w := range cfg.Warnings {
		l.logger.Warn("Config warning", "warning", w)
	}
	if r := cfg.Prometheus.StorageConfig.TSDBConfig.Retention; r.Time == 0 && r.Size == 0 && r.Percentage == 0 {
		r.Time = l.retentionTime
		r.Size = l.retentionSize
	}
	return cfg, nil
}

// checkAuth validates --web.config.file before anything starts, and
// refuses to serve the admin API or the lifecycle endpoints when that file
// does not authenticate every request, unless
// --web.allow-unauthenticated-admin says the listener is trusted.
func checkAuth(f *serveFlags, listenAddress string, logger *slog.Logger) error {
	var privileged []string
	if f.enableAdmin {
		privileged = append(privileged, "--web.enable-admin-api")
	}
	if f.enableLifecycle {
		privileged = append(privileged, "--web.enable-lifecycle")
	}
	auth, err := web.CheckAuth(f.webConfigFile, privileged, f.allowUnauthAdmin)
	if err != nil {
		return err
	}
	if len(privileged) > 0 && !auth.Authenticated() {
		logger.Warn("Admin and lifecycle endpoints are served without authentication (--web.allow-unauthenticated-admin)",
			"enabled", strings.Join(privileged, " "), "listen", listenAddress)
	}
	return nil
}
