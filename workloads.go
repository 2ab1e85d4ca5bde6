package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/model"

	"github.com/gpuscope/gpuscope/accounting"
)

// workloadsCommand is `gpuscope workloads`: the run report of a running
// appliance, as `docker ps` lists containers.
func workloadsCommand(app *kingpin.Application) command {
	c := app.Command("workloads", "Print the run report of a running gpuscope: every container and job seen, its GPUs, GPU-hours, energy and what went wrong.")
	since := c.Flag("since", "How far back to report (a Prometheus duration: 30m, 24h, 7d).").Default("7d").String()
	all := c.Flag("all", "List every cgroup, systemd units and raw cgroups that held no GPU included.").Bool()
	format := c.Flag("format", "Output format: table, csv or json.").Default("table").Enum("table", "csv", "json")
	server := c.Flag("url", "The gpuscope to ask (its web address; basic auth as http://user:password@host:port).").Default("http://localhost:9089").String()
	return command{clause: c, run: func(*slog.Logger) error {
		err := printWorkloads(context.Background(), os.Stdout, workloadsRequest{
			server: *server, since: *since, all: *all, format: *format, now: time.Now(),
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpuscope workloads: %s\n", err)
			os.Exit(1)
		}
		return nil
	}}
}

type workloadsRequest struct {
	server, since, format string
	all                   bool
	now                   time.Time
	client                *http.Client
}

func printWorkloads(ctx context.Context, w io.Writer, r workloadsRequest) error {
	since, err := model.ParseDuration(r.since)
	if err != nil || since <= 0 {
		return fmt.Errorf("--since %q is not a positive duration (e.g. 30m, 24h, 7d)", r.since)
	}
	base, err := url.Parse(r.server)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return fmt.Errorf("--url %q is not an http:// or https:// address (e.g. http://localhost:9089)", r.server)
	}
	client, err := accounting.NewClient(accounting.ClientOptions{URL: base, HTTPClient: r.client})
	if err != nil {
		return err
	}
	rep, err := client.Report(ctx, accounting.Query{Start: r.now.Add(-time.Duration(since)), End: r.now, All: r.all})
	if err != nil {
		return err
	}
	for _, warning := range rep.Warnings {
		fmt.Fprintf(os.Stderr, "warning: %s\n", warning)
	}
	switch r.format {
	case "table":
		return accounting.WriteTable(w, rep.Runs, r.now)
	case "csv":
		return accounting.WriteCSV(w, rep.Runs)
	case "json":
		return accounting.WriteJSON(w, rep.Runs)
	}
	return fmt.Errorf("unknown format %q (table, csv or json)", r.format)
}
