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

	"github.com/gpuscope/gpuscope/accounting"
)

// workloadsCommand is `gpuscope workloads`: the run report of a running
// appliance, as `docker ps` lists containers.
func workloadsCommand(cli *kingpin.Application) command {
	c := cli.Command("workloads", "Print the run report of a running gpuscope: every container and job seen, its GPUs, GPU-hours, energy and what went wrong.")
	since := c.Flag("since", "How far back to report (a Prometheus duration: 30m, 24h, 7d). Default 7d.").String()
	month := c.Flag("month", "Report one calendar month instead, in UTC (2026-11); the current month ends now. Not with --since.").PlaceHolder("YYYY-MM").String()
	by := c.Flag("by", "Sum the runs by user, compose_project, workload, runtime, image, compose_service, slurm_job_id, slurm_user, instance or label:<name> (repeat or comma-separate for several).").Strings()
	all := c.Flag("all", "List every cgroup, systemd units and raw cgroups that held no GPU included.").Bool()
	format := c.Flag("format", "Output format: table, csv or json.").Default("table").Enum(accounting.Formats...)
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
	start, end, err := accounting.Period(r.since, r.month, r.now)
	if err != nil {
		return fmt.Errorf("--%w", err) // it names since or month first: the flag
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
		printWarnings(rep.Warnings)
		return accounting.WriteGroups(w, r.format, by, rep.Groups)
	}
	rep, err := client.Report(ctx, q)
	if err != nil {
		return err
	}
	printWarnings(rep.Warnings)
	return accounting.WriteRuns(w, r.format, rep.Runs, r.now)
}

func printWarnings(ws []string) {
	for _, w := range ws {
		fmt.Fprintf(os.Stderr, "warning: %s\n", w)
	}
}
