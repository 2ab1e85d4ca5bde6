package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
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
	runs, warnings, err := fetchWorkloads(ctx, r, base, time.Duration(since))
	if err != nil {
		return err
	}
	for _, warning := range warnings {
		fmt.Fprintf(os.Stderr, "warning: %s\n", warning)
	}
	return writeRuns(w, runs, r.format, r.now)
}

func fetchWorkloads(ctx context.Context, r workloadsRequest, base *url.URL, since time.Duration) ([]accounting.Run, []string, error) {
	client := r.client
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Minute}
	}
	u := base.JoinPath("api/v1/workloads")
	q := url.Values{}
	q.Set("start", strconv.FormatInt(r.now.Add(-since).Unix(), 10))
	q.Set("end", strconv.FormatInt(r.now.Unix(), 10))
	if r.all {
		q.Set("all", "true")
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("ask %s: %w", base.Redacted(), err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach gpuscope at %s: %w (is `gpuscope serve` running there? --url says where)", base.Redacted(), unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("read the report from %s: %w", base.Redacted(), err)
	}
	var env struct {
		Status   string           `json:"status"`
		Data     []accounting.Run `json:"data"`
		Error    string           `json:"error"`
		Warnings []string         `json:"warnings"`
	}
	decodeErr := json.Unmarshal(body, &env)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, nil, fmt.Errorf("%s has no /api/v1/workloads (a `gpuscope agent`, an older gpuscope, or not gpuscope): %s", base.Redacted(), resp.Status)
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, nil, fmt.Errorf("%s asks for credentials (%s): give them in --url as http://user:password@host:port", base.Redacted(), resp.Status)
	case decodeErr == nil && env.Status == "error":
		return nil, nil, fmt.Errorf("gpuscope at %s: %s", base.Redacted(), env.Error)
	case resp.StatusCode != http.StatusOK || decodeErr != nil:
		return nil, nil, fmt.Errorf("gpuscope at %s answered %s: %s", base.Redacted(), resp.Status, snippet(body))
	}
	return env.Data, env.Warnings, nil
}

// writeRuns prints the runs in format: a table for people, CSV for
// spreadsheets, the API's JSON for scripts.
func writeRuns(w io.Writer, runs []accounting.Run, format string, now time.Time) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if runs == nil {
			runs = []accounting.Run{}
		}
		return enc.Encode(runs)
	case "csv":
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"workload", "runtime", "image", "slurm_job_id", "slurm_user", "node", "id", "start", "end", "duration_seconds",
			"gpus", "gpu_hours", "sm_share_avg", "sm_share_max", "gpu_memory_max_bytes", "energy_kwh", "cost", "currency", "co2_grams",
			"cpu_core_seconds", "memory_max_bytes", "oom_kills", "xid_errors", "alerts", "bottleneck"})
		for _, r := range runs {
			end := ""
			if r.End != nil {
				end = r.End.UTC().Format(time.RFC3339)
			}
			_ = cw.Write([]string{r.Workload, r.Runtime, r.Image, r.SlurmJobID, r.SlurmUser, r.Instance, r.ID, timeOrEmpty(r.Start), end,
				num(r.DurationSeconds), strings.Join(r.GPUs, " "), num(r.GPUHours), num(r.SMShareAvg), num(r.SMShareMax), num(r.GPUMemoryMaxBytes),
				optNum(r.EnergyKWh), optNum(r.Cost), r.Currency, optNum(r.CO2Grams),
				num(r.CPUCoreSeconds), num(r.MemoryMaxBytes), strconv.Itoa(r.OOMKills), strconv.Itoa(r.XIDErrors), strings.Join(r.Alerts, " "), r.Bottleneck})
		}
		cw.Flush()
		return cw.Error()
	case "table":
		if len(runs) == 0 {
			_, err := fmt.Fprintln(w, "No workloads in this range.")
			return err
		}
		priced := false
		for _, r := range runs {
			priced = priced || r.Cost != nil
		}
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		header := "WORKLOAD\tRUNTIME\tIMAGE/JOB\tNODE\tSTARTED\tDURATION\tGPUS\tGPU-H\tSM AVG/MAX\tGPU MEM\tKWH"
		if priced {
			header += "\tCOST"
		}
		fmt.Fprintln(tw, header+"\tCPU-S\tMEM\tOOM\tXID\tALERTS\tBOTTLENECK")
		for _, r := range runs {
			what := r.Image
			if r.SlurmJobID != "" {
				what = "job " + r.SlurmJobID
				if r.SlurmUser != "" {
					what += " (" + r.SlurmUser + ")"
				}
			}
			duration := formatDuration(r.DurationSeconds)
			if r.Running {
				duration += " (running)"
			}
			row := []string{cell(oneLine(r.Workload)), r.Runtime, cell(oneLine(what)), cell(r.Instance), ago(r.Start, now), duration,
				gpusCell(r.GPUs), strconv.FormatFloat(r.GPUHours, 'f', 2, 64),
				fmt.Sprintf("%.0f%%/%.0f%%", 100*r.SMShareAvg, 100*r.SMShareMax), bytesOrDash(r.GPUMemoryMaxBytes), kwh(r.EnergyKWh)}
			if priced {
				row = append(row, money(r.Cost, r.Currency))
			}
			row = append(row, strconv.FormatFloat(r.CPUCoreSeconds, 'f', 0, 64), bytesOrDash(r.MemoryMaxBytes),
				strconv.Itoa(r.OOMKills), strconv.Itoa(r.XIDErrors), cell(strings.Join(r.Alerts, ",")), cell(r.Bottleneck))
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		return tw.Flush()
	}
	return fmt.Errorf("unknown format %q (table, csv or json)", format)
}

// oneLine keeps a name with a newline or tab (the workload labels have
// none, but a hostile API answer might) on its row of the table.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

func gpusCell(gpus []string) string { return cell(strings.Join(gpus, ",")) }

func cell(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return formatDuration(now.Sub(t).Seconds()) + " ago"
}

func formatDuration(sec float64) string {
	d := time.Duration(sec) * time.Second
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func bytesOrDash(b float64) string {
	if b <= 0 {
		return "-"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	return strconv.FormatFloat(b, 'f', 1, 64) + " " + units[i]
}

func kwh(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 3, 64)
}

func money(v *float64, currency string) string {
	if v == nil {
		return "-"
	}
	return strings.TrimSpace(strconv.FormatFloat(*v, 'f', 2, 64) + " " + currency)
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func optNum(v *float64) string {
	if v == nil {
		return ""
	}
	return num(*v)
}

func timeOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// unwrapURLError drops net/http's "Get \"<url>\":" prefix, which repeats
// the URL (and its password) the message already names.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func snippet(b []byte) string {
	s := strings.TrimSpace(oneLine(string(b)))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return strconv.Quote(s)
}
