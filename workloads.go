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
	since := c.Flag("since", "How far back to report (a Prometheus duration: 30m, 24h, 7d). Default 7d.").String()
	month := c.Flag("month", "Report one calendar month instead, in UTC (2026-11); the current month ends now. Not with --since.").PlaceHolder("YYYY-MM").String()
	by := c.Flag("by", "Sum the runs by user, compose_project, workload, runtime, image, compose_service, slurm_job_id, slurm_user, instance or label:<name> (repeat or comma-separate for several).").Strings()
	all := c.Flag("all", "List every cgroup, systemd units and raw cgroups that held no GPU included.").Bool()
	format := c.Flag("format", "Output format: table, csv or json.").Default("table").Enum("table", "csv", "json")
	server := c.Flag("url", "The gpuscope to ask (its web address; basic auth as http://user:password@host:port).").Default("http://localhost:9089").String()
	return command{clause: c, run: func(*slog.Logger) error {
		err := printWorkloads(context.Background(), os.Stdout, workloadsRequest{
			server: *server, since: *since, month: *month, by: *by, all: *all, format: *format, now: time.Now(),
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpuscope workloads: %s\n", err)
			os.Exit(1)
		}
		return nil
	}}
}

type workloadsRequest struct {
	server, since, month, format string
	by                           []string
	all                          bool
	now                          time.Time
	client                       *http.Client
}

func printWorkloads(ctx context.Context, w io.Writer, r workloadsRequest) error {
	start, end, err := reportRange(r.since, r.month, r.now)
	if err != nil {
		return err
	}
	by, extra, err := accounting.ParseGroupBy(r.by)
	if err != nil {
		return fmt.Errorf("--by: %w", err)
	}
	base, err := url.Parse(r.server)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return fmt.Errorf("--url %q is not an http:// or https:// address (e.g. http://localhost:9089)", r.server)
	}
	client, err := accounting.NewClient(accounting.ClientOptions{URL: base, HTTPClient: r.client})
	if err != nil {
		return err
	}
	q := accounting.Query{Start: start, End: end, All: r.all, Labels: extra}
	if len(by) > 0 {
		rep, err := client.Groups(ctx, q, by)
		if err != nil {
			return err
		}
		for _, warning := range rep.Warnings {
			fmt.Fprintf(os.Stderr, "warning: %s\n", warning)
		}
		switch r.format {
		case "table":
			return accounting.WriteGroupTable(w, by, rep.Groups)
		case "csv":
			return accounting.WriteGroupCSV(w, by, rep.Groups)
		case "json":
			return accounting.WriteGroupJSON(w, rep.Groups)
		}
		return fmt.Errorf("unknown format %q (table, csv or json)", r.format)
	}
	rep, err := client.Report(ctx, q)
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

// reportRange is the range of --since (default 7d) or --month, which
// exclude each other: a calendar month in UTC, to now if it is this one.
func reportRange(since, month string, now time.Time) (start, end time.Time, err error) {
	if month != "" {
		if since != "" {
			return start, end, fmt.Errorf("--since %s and --month %s both say what to report: give one", since, month)
		}
		start, err = time.Parse("2006-01", month)
		if err != nil {
			return start, end, fmt.Errorf("--month %q is not a year and month (e.g. 2026-11)", month)
		}
		if start.After(now) {
			return start, end, fmt.Errorf("--month %s has not begun", month)
		}
		end = start.AddDate(0, 1, 0)
		if end.After(now) {
			end = now
		}
		return start, end, nil
	}
	if since == "" {
		since = "7d"
	}
	d, err := model.ParseDuration(since)
	if err != nil || d <= 0 {
		return start, end, fmt.Errorf("--since %q is not a positive duration (e.g. 30m, 24h, 7d)", since)
	}
	return now.Add(-time.Duration(d)), now, nil
}
