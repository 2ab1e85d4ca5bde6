// Package scrape runs Prometheus's own service discovery and scrape loop.
// Every sample gpuscope stores, its built-in collectors' included, enters
// through here, so `up`, scrape_duration_seconds, staleness markers,
// relabelling and limits all behave exactly as in Prometheus.
package scrape

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	config_util "github.com/prometheus/common/config"
	promconfig "github.com/prometheus/prometheus/config"
	promdiscovery "github.com/prometheus/prometheus/discovery"
	promscrape "github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"

	"github.com/gpuscope/gpuscope/discovery"

	// Service discovery mechanisms offered in scrape_configs besides
	// static_configs. They register their config keys when imported; the
	// cloud and Kubernetes ones are left out (gpuscope is for machines that
	// do not run Kubernetes), and naming one is a config error.
	_ "github.com/prometheus/prometheus/discovery/dns"
	_ "github.com/prometheus/prometheus/discovery/file"
	_ "github.com/prometheus/prometheus/discovery/http"
)

// Options configure a Scraper.
type Options struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// SDMetrics are the service discovery metrics, registered once per
	// process and shared with the notifier's discovery.
	SDMetrics  *promdiscovery.SDMetrics
	Appendable storage.AppendableV2
	// SelfAddress is the host:port the built-in jobs scrape; connections to
	// it are answered by SelfDial instead of the network.
	SelfAddress string
	SelfDial    func(ctx context.Context) (net.Conn, error)
	// DiscoveryReloadInterval throttles target updates (Prometheus: 5s).
	DiscoveryReloadInterval time.Duration
}

// Scraper owns the targets' feed (static configs directly, other service
// discovery through Prometheus's discovery manager) and a scrape manager.
type Scraper struct {
	logger  *slog.Logger
	targets *discovery.Feeder
	manager *promscrape.Manager
}

// New creates the managers; Run starts them.
func New(o Options) (*Scraper, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SDMetrics == nil {
		return nil, errors.New("scrape: SDMetrics is required")
	}
	feed := discovery.New(discovery.Options{
		Logger:     o.Logger.With("component", "discovery manager scrape"),
		Registerer: o.Registerer,
		SDMetrics:  o.SDMetrics,
		Name:       "scrape",
	})

	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if o.SelfDial != nil && addr == o.SelfAddress {
			return o.SelfDial(ctx)
		}
		return dialer.DialContext(ctx, network, addr)
	}
	sm, err := promscrape.NewManager(&promscrape.Options{
		DiscoveryReloadInterval: modelDuration(o.DiscoveryReloadInterval),
		// Scrape the built-in collectors as soon as the appliance is ready
		// rather than one reload interval later.
		DiscoveryReloadOnStartup: true,
		HTTPClientOptions:        []config_util.HTTPClientOption{config_util.WithDialContextFunc(dial)},
	}, o.Logger.With("component", "scrape manager"), nil, nil, o.Appendable, o.Registerer)
	if err != nil {
		feed.Stop()
		return nil, fmt.Errorf("create scrape manager: %w", err)
	}
	return &Scraper{logger: o.Logger, targets: feed, manager: sm}, nil
}

// Manager exposes the scrape manager to the HTTP API (targets, metadata).
func (s *Scraper) Manager() *promscrape.Manager { return s.manager }

// ApplyConfig updates jobs and their discovery. As in Prometheus the scrape
// manager goes first, so it knows a job before discovery sends its targets.
func (s *Scraper) ApplyConfig(cfg *promconfig.Config) error {
	if err := s.manager.ApplyConfig(cfg); err != nil {
		return fmt.Errorf("apply scrape config: %w", err)
	}
	scfgs, err := cfg.GetScrapeConfigs()
	if err != nil {
		return fmt.Errorf("read scrape configs: %w", err)
	}
	sd := make(map[string]promdiscovery.Configs, len(scfgs))
	for _, c := range scfgs {
		sd[c.JobName] = c.ServiceDiscoveryConfigs
	}
	if err := s.targets.ApplyConfig(sd); err != nil {
		return fmt.Errorf("apply service discovery config: %w", err)
	}
	return nil
}

// Run scrapes until ctx ends, then stops the scrape loops; in-flight
// appends are committed before it returns.
func (s *Scraper) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.manager.Run(s.targets.SyncCh()) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		s.targets.Stop()
		s.manager.Stop()
		return fmt.Errorf("scraping stopped: %w", err)
	}
	s.targets.Stop()
	s.manager.Stop()
	return nil
}
