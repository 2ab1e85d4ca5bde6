package app

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/alecthomas/units"
	apiv1 "github.com/prometheus/prometheus/web/api/v1"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/doctor"
	"github.com/gpuscope/gpuscope/web"
)

// This file is what the appliance says about itself: the status page's
// lines, /api/v1/status/runtimeinfo, and the Health block's checks.

func (a *Appliance) statusLines() []web.StatusLine {
	cfg := a.config.Load()
	file := cfg.File
	if file == "" {
		file = "(embedded defaults)"
	}
	return []web.StatusLine{
		{Name: "Version", Value: Version()},
		{Name: "Node", Value: a.s.nodeName},
		{Name: "Grafana data source URL", Value: a.externalURL.String()},
		{Name: "Config file", Value: file},
		{Name: "Data directory", Value: a.s.dataDir},
		{Name: "Scrape interval", Value: cfg.Prometheus.GlobalConfig.ScrapeInterval.String()},
		{Name: "Retention", Value: cfg.Prometheus.StorageConfig.TSDBConfig.Retention.Time.String()},
	}
}

// doctorChecks runs gpuscope doctor's checks about this appliance: its
// data directory, retention, port, and its own targets and containers
// (asked over HTTP, unless the web config may require credentials the
// appliance does not have).
func (a *Appliance) doctorChecks(ctx context.Context) []doctor.Check {
	self := "http://" + a.self.Address()
	if a.set.WebConfigFile != "" {
		self = ""
	}
	return doctor.Run(ctx, doctor.Options{
		Config:        a.config.Load(),
		Logger:        a.logger.With("component", "doctor"),
		DataDir:       a.s.dataDir,
		ListenAddress: a.s.listenAddress,
		URL:           self,
	})
}

func (a *Appliance) runtimeInfo() (apiv1.RuntimeInfo, error) {
	cwd, _ := os.Getwd()
	return apiv1.RuntimeInfo{
		StartTime:           a.started,
		CWD:                 cwd,
		Hostname:            a.s.nodeName,
		ServerTime:          a.now().UTC(),
		ReloadConfigSuccess: a.reload.lastOK.Load(),
		LastConfigTime:      time.Unix(a.reload.lastAt.Load(), 0).UTC(),
		GoroutineCount:      runtime.NumGoroutine(),
		GOMAXPROCS:          runtime.GOMAXPROCS(0),
		GOMEMLIMIT:          debug.SetMemoryLimit(-1),
		GOGC:                os.Getenv("GOGC"),
		GODEBUG:             os.Getenv("GODEBUG"),
		StorageRetention:    retentionText(a.config.Load()),
	}, nil
}

func retentionText(cfg *config.Config) string {
	r := cfg.Prometheus.StorageConfig.TSDBConfig.Retention
	switch {
	case r.Time != 0 && r.Size != 0:
		return r.Time.String() + " or " + units.Base2Bytes(r.Size).String()
	case r.Size != 0:
		return units.Base2Bytes(r.Size).String()
	default:
		return r.Time.String()
	}
}
