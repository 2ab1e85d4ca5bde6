package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/dashboards"
)

func dashboardsExportCommand(cli *kingpin.Application) command {
	c := cli.Command("dashboards", "Grafana dashboards.").Command("export", "Write every dashboard as <uid>.json into DIR, for Grafana's Dashboards → Import.")
	dir := c.Arg("dir", "Output directory (created if missing).").Required().String()
	return command{clause: c, run: func(*slog.Logger) error {
		set, err := dashboards.Build()
		if err != nil {
			return err
		}
		return printPaths(dashboards.Export(set, *dir))
	}}
}

func grafanaProvisionCommand(cli *kingpin.Application) command {
	c := cli.Command("grafana", "Grafana integration.").Command("provision", "Write a Grafana provisioning tree (data source + dashboards) into DIR/provisioning; mount it at /etc/grafana/provisioning.")
	dir := c.Arg("dir", "Output directory (created if missing).").Required().String()
	url := c.Flag("url", "gpuscope's URL as Grafana reaches it, e.g. http://gpuscope:9089.").Required().String()
	configFile := c.Flag("config.file", "gpuscope config file whose global.scrape_interval becomes the data source's timeInterval. Empty: the embedded default (15s).").String()
	grafanaPath := c.Flag("grafana.provisioning-path", "Where DIR/provisioning is mounted inside Grafana.").Default("/etc/grafana/provisioning").String()
	return command{clause: c, run: func(logger *slog.Logger) error {
		cfg, err := config.Loader{File: *configFile, Logger: logger}.Load()
		if err != nil {
			return err
		}
		set, err := dashboards.Build()
		if err != nil {
			return err
		}
		if dashboards.IsLoopbackURL(*url) {
			logger.Warn("The data source's --url is this host's loopback: a Grafana in a container reaches itself there, not gpuscope; give the host's name or IP unless Grafana runs on the host network", "url", *url)
		}
		return printPaths(dashboards.Provision(set, *dir, dashboards.ProvisionOptions{
			URL:            *url,
			ScrapeInterval: time.Duration(cfg.Prometheus.GlobalConfig.ScrapeInterval),
			GrafanaPath:    *grafanaPath,
		}))
	}}
}

// printPaths prints the files a command wrote, one per line, and returns
// its error.
func printPaths(paths []string, err error) error {
	for _, p := range paths {
		fmt.Println(p)
	}
	return err
}
