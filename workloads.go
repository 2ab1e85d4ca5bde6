package main

import (
	"context"
	"fmt"
	"log/slog"
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
		err := accounting.Print(context.Background(), os.Stdout, os.Stderr, accounting.PrintRequest{
			Server: *server, Since: *since, Month: *month, By: *by, All: *all, Format: *format, Now: time.Now(),
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpuscope workloads: %s\n", err)
			os.Exit(1)
		}
		return nil
	}}
}
