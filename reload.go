package main

import (
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/prometheus/config"

	"github.com/gpuscope/gpuscope/alertmanager"
	"github.com/gpuscope/gpuscope/config"
)

// reloadState is the outcome of the last config load, as Prometheus
// exports and reports it.
type reloadState struct {
	success prometheus.Gauge
	time    prometheus.Gauge
	lastOK  atomic.Bool
	lastAt  atomic.Int64
}

func newReloadState(reg prometheus.Registerer) *reloadState {
	s := &reloadState{
		success: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpuscope_config_last_reload_successful",
			Help: "Whether the last configuration reload attempt was successful.",
		}),
		time: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpuscope_config_last_reload_success_timestamp_seconds",
			Help: "Timestamp of the last successful configuration reload.",
		}),
	}
	reg.MustRegister(s.success, s.time)
	return s
}

func (s *reloadState) set(ok bool) {
	s.lastOK.Store(ok)
	if !ok {
		s.success.Set(0)
		return
	}
	s.success.Set(1)
	s.time.SetToCurrentTime()
	s.lastAt.Store(time.Now().Unix())
}

// reloadConfig reads the config file again (SIGHUP, /-/reload); an
// invalid file changes nothing.
func (a *appliance) reloadConfig() error {
	a.logger.Info("Loading configuration file", "file", a.s.flags.configFile)
	cfg, err := a.s.loader.read()
	if err == nil {
		if err = cfg.AddBuiltinJobs(a.self.Address(), a.s.nodeName); err != nil {
			err = fmt.Errorf("load config: %w", err)
		}
	}
	if err != nil {
		a.reload.set(false)
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
		{"alertmanager", func(*promconfig.Config) error { return a.am.ApplyConfig(cfg.Alertmanager) }},
		{"notify", func(c *promconfig.Config) error { return a.notifier.ApplyConfig(withOwnerLabels(c, cfg.Users)) }},
		{"rules", func(c *promconfig.Config) error { return a.rules.ApplyConfig(c, cfg.Rules) }},
		{"digests", func(*promconfig.Config) error { return a.digest.ApplyConfig(cfg.Digests) }},
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
	a.reload.set(ok)
	if ok {
		a.logger.Info("Configuration applied", "file", cfg.File, "scrape_interval", cfg.Prometheus.GlobalConfig.ScrapeInterval)
	}
	return errors.Join(errs...)
}

// withOwnerLabels is c with the users: section's alert relabellings
// (owner_email, owner_chat, owner_receiver by the user label) before
// alerting.alert_relabel_configs, so that the user's own relabelling
// sees them; c itself where no user is mapped.
func withOwnerLabels(c *promconfig.Config, users alertmanager.Users) *promconfig.Config {
	rcs := users.AlertRelabelConfigs()
	if len(rcs) == 0 {
		return c
	}
	out := *c
	out.AlertingConfig.AlertRelabelConfigs = append(rcs, c.AlertingConfig.AlertRelabelConfigs...)
	return &out
}
