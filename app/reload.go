package app

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/prometheus/config"

	"github.com/gpuscope/gpuscope/config"
)

// reloadState is the outcome of the last config load, as Prometheus
// exports and reports it.
type reloadState struct {
	success prometheus.Gauge
	time    prometheus.Gauge
	lastOK  atomic.Bool
	lastAt  atomic.Int64
	now     func() time.Time
}

func newReloadState(reg prometheus.Registerer, now func() time.Time) *reloadState {
	s := &reloadState{now: now,
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
	t := s.now()
	s.time.Set(float64(t.UnixNano()) / 1e9)
	s.lastAt.Store(t.Unix())
}

// Reload reads the config file again and applies it (the binary calls
// it on SIGHUP; POST /-/reload comes here too); an invalid file changes
// nothing, and its error says why. Safe while Run runs; one reload runs
// at a time. A failure is logged here, whoever asked (SIGHUP, POST
// /-/reload), as Prometheus's reloadConfig does: the HTTP caller sees the
// error, but the log is where an operator looks afterwards.
func (a *Appliance) Reload() error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	err := a.reloadLocked()
	if err != nil {
		a.logger.Error("Reload failed; the previous configuration stays in effect", "file", a.set.ConfigFile, "err", err)
	}
	return err
}

func (a *Appliance) reloadLocked() error {
	a.logger.Info("Loading configuration file", "file", a.set.ConfigFile)
	cfg, err := a.set.loader().Load()
	if err != nil {
		err = fmt.Errorf("load config: %w", err)
	} else {
		for _, w := range cfg.Warnings {
			a.logger.Warn("Config warning", "warning", w)
		}
		if err = cfg.AddBuiltinJobs(a.self.Address(), a.s.nodeName); err != nil {
			err = fmt.Errorf("load config: %w", err)
		}
	}
	if err != nil {
		a.reload.set(false)
		return err
	}
	old := a.config.Load()
	if later := changedAtStartOnly(old, cfg); len(later) > 0 {
		a.logger.Warn("These sections changed, and take effect at the next start; the rest is applied now", "sections", strings.Join(later, ", "))
	}
	return a.applyConfig(cfg)
}

// changedAtStartOnly names the sections that differ between old and cfg
// and are read only when the collectors and the listener are built.
func changedAtStartOnly(old, cfg *config.Config) []string {
	var names []string
	if !reflect.DeepEqual(cfg.Cadvisor, old.Cadvisor) {
		names = append(names, "cadvisor")
	}
	if !reflect.DeepEqual(cfg.GPU, old.GPU) {
		names = append(names, "gpu")
	}
	if cfg.Web != old.Web {
		names = append(names, "web")
	}
	// The user label's names come from the passwd file the cgroup
	// collectors were built with.
	if !reflect.DeepEqual(cfg.Workloads, old.Workloads) {
		names = append(names, "workloads")
	}
	return names
}

// applyConfig hands a validated config to every component, Prometheus
// style: each applies what it can, failures are reported together.
func (a *Appliance) applyConfig(cfg *config.Config) error {
	reloaders := []struct {
		name  string
		apply func(*promconfig.Config) error
	}{
		{"tsdb", func(c *promconfig.Config) error { return a.storage.Get().ApplyConfig(c) }},
		{"remote_storage", a.remote.ApplyConfig},
		{"query_engine", func(c *promconfig.Config) error {
			a.engine.SetEvaluationInterval(time.Duration(c.GlobalConfig.EvaluationInterval))
			return nil
		}},
		{"scrape", a.scraper.ApplyConfig},
		{"alertmanager", func(*promconfig.Config) error { return a.am.ApplyConfig(cfg.Alertmanager) }},
		{"notify", func(c *promconfig.Config) error { return a.notifier.ApplyConfig(c, cfg.Users.AlertRelabelConfigs()) }},
		{"rules", func(c *promconfig.Config) error { return a.rules.ApplyConfig(c, cfg.Rules) }},
		{"digests", func(*promconfig.Config) error { return a.digest.ApplyConfig(cfg.Digests) }},
	}
	if a.set.OnConfig != nil {
		a.set.OnConfig(cfg)
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
