package accounting

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints runs for people: one aligned row per run, times as
// ages from now, a COST column only when some run is priced.
func WriteTable(w io.Writer, runs []Run, now time.Time) error {
	if len(runs) == 0 {
		_, err := fmt.Fprintln(w, "No workloads in this range.")
		return err
	}
	priced := false
	for _, r := range runs {
		priced = priced || r.Cost != nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	header := "WORKLOAD\tRUNTIME\tUSER\tIMAGE/JOB\tNODE\tSTARTED\tDURATION\tGPUS\tGPU-H\tSM AVG/MAX\tGPU MEM\tKWH"
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
		row := []string{cell(oneLine(r.Workload)), r.Runtime, cell(oneLine(r.User)), cell(oneLine(what)), cell(r.Instance), ago(r.Start, now), duration,
			cell(strings.Join(r.GPUs, ",")), strconv.FormatFloat(r.GPUHours, 'f', 2, 64),
			fmt.Sprintf("%.0f%%/%.0f%%", 100*r.SMShareAvg, 100*r.SMShareMax), bytesOrDash(r.GPUMemoryMaxBytes), kwhOrDash(r.EnergyKWh)}
		if priced {
			row = append(row, moneyOrDash(r.Cost, r.Currency))
		}
		row = append(row, strconv.FormatFloat(r.CPUCoreSeconds, 'f', 0, 64), bytesOrDash(r.MemoryMaxBytes),
			strconv.Itoa(r.OOMKills), strconv.Itoa(r.XIDErrors), cell(strings.Join(r.Alerts, ",")), cell(r.Bottleneck))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// WriteCSV prints runs for spreadsheets: plain numbers in the API's
// units, RFC 3339 times, empty cells where the JSON has null.
func WriteCSV(w io.Writer, runs []Run) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"workload", "runtime", "image", "slurm_job_id", "slurm_user", "node", "id", "start", "end", "duration_seconds",
		"gpus", "gpu_hours", "sm_share_avg", "sm_share_max", "gpu_memory_max_bytes", "energy_kwh", "cost", "currency", "co2_grams",
		"cpu_core_seconds", "memory_max_bytes", "oom_kills", "xid_errors", "alerts", "bottleneck",
		// Added after the rest, so that scripts reading columns by
		// position go on working.
		"user", "idle_gpu_hours"})
	for _, r := range runs {
		end := ""
		if r.End != nil {
			end = r.End.UTC().Format(time.RFC3339)
		}
		_ = cw.Write([]string{r.Workload, r.Runtime, r.Image, r.SlurmJobID, r.SlurmUser, r.Instance, r.ID, timeOrEmpty(r.Start), end,
			num(r.DurationSeconds), strings.Join(r.GPUs, " "), num(r.GPUHours), num(r.SMShareAvg), num(r.SMShareMax), num(r.GPUMemoryMaxBytes),
			optNum(r.EnergyKWh), optNum(r.Cost), r.Currency, optNum(r.CO2Grams),
			num(r.CPUCoreSeconds), num(r.MemoryMaxBytes), strconv.Itoa(r.OOMKills), strconv.Itoa(r.XIDErrors), strings.Join(r.Alerts, " "), r.Bottleneck,
			r.User, num(r.IdleGPUHours)})
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON prints runs for scripts, as the API's data: [] when there are
// none.
func WriteJSON(w io.Writer, runs []Run) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if runs == nil {
		runs = []Run{}
	}
	return enc.Encode(runs)
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

// formatDuration is a duration to the second, in its two largest units.
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

// bytesOrDash is a size in binary units to one decimal, "-" for none.
func bytesOrDash(b float64) string {
	if b <= 0 {
		return "-"
	}
	return HumanBytes(b)
}

// HumanBytes is a size in binary units to one decimal, "0 B" for none:
// the report's own form ("512.0 B"), which web's and memlimit's
// formatters ("512 B", "21.2GiB") do not write, shared by the digests.
func HumanBytes(b float64) string {
	if b <= 0 {
		return "0 B"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	return strconv.FormatFloat(b, 'f', 1, 64) + " " + units[i]
}

func kwhOrDash(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 3, 64)
}

func moneyOrDash(v *float64, currency string) string {
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

// Unknown is how a table shows a group without a value: runs whose user
// (or other grouping label) is not known.
const Unknown = "(unknown)"

// WriteGroupTable prints a grouped report for people: one row per group,
// a COST column only when some group is priced. Idle GPU-hours are the
// hours held at under 5 % SM share.
func WriteGroupTable(w io.Writer, by []string, groups []Group) error {
	if len(groups) == 0 {
		_, err := fmt.Fprintln(w, "No workloads in this range.")
		return err
	}
	priced := false
	for _, g := range groups {
		priced = priced || g.Cost != nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	var header []string
	for _, name := range by {
		header = append(header, strings.ToUpper(strings.TrimPrefix(name, LabelPrefix)))
	}
	header = append(header, "RUNS", "GPU-H", "IDLE GPU-H", "SM AVG", "GPU MEM PEAK", "KWH")
	if priced {
		header = append(header, "COST")
	}
	fmt.Fprintln(tw, strings.Join(append(header, "CPU-S"), "\t"))
	for _, g := range groups {
		var row []string
		for _, name := range by {
			v := g.Key[name]
			if v == "" {
				v = Unknown
			}
			row = append(row, oneLine(v))
		}
		row = append(row, strconv.Itoa(g.Runs), strconv.FormatFloat(g.GPUHours, 'f', 2, 64), strconv.FormatFloat(g.IdleGPUHours, 'f', 2, 64),
			fmt.Sprintf("%.0f%%", 100*g.SMShareAvg), bytesOrDash(g.GPUMemoryMaxBytes), kwhOrDash(g.EnergyKWh))
		if priced {
			row = append(row, moneyOrDash(g.Cost, g.Currency))
		}
		row = append(row, strconv.FormatFloat(g.CPUCoreSeconds, 'f', 0, 64))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// WriteGroupCSV prints a grouped report for spreadsheets: a column per
// grouping name (label:<name> as <name>), then the sums in the API's
// units, empty cells where the JSON has null.
func WriteGroupCSV(w io.Writer, by []string, groups []Group) error {
	cw := csv.NewWriter(w)
	var header []string
	for _, name := range by {
		header = append(header, strings.TrimPrefix(name, LabelPrefix))
	}
	_ = cw.Write(append(header, "runs", "gpu_hours", "idle_gpu_hours", "sm_share_avg", "gpu_memory_max_bytes", "energy_kwh",
		"cost", "currency", "co2_grams", "cpu_core_seconds"))
	for _, g := range groups {
		var row []string
		for _, name := range by {
			row = append(row, g.Key[name])
		}
		_ = cw.Write(append(row, strconv.Itoa(g.Runs), num(g.GPUHours), num(g.IdleGPUHours), num(g.SMShareAvg), num(g.GPUMemoryMaxBytes),
			optNum(g.EnergyKWh), optNum(g.Cost), g.Currency, optNum(g.CO2Grams), num(g.CPUCoreSeconds)))
	}
	cw.Flush()
	return cw.Error()
}

// WriteGroupJSON prints a grouped report for scripts, as the API's data:
// [] when there are none.
func WriteGroupJSON(w io.Writer, groups []Group) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if groups == nil {
		groups = []Group{}
	}
	return enc.Encode(groups)
}

// Formats are the forms a report is written in: table, csv and json.
var Formats = []string{"table", "csv", "json"}

// WriteRuns writes runs in format (one of Formats).
func WriteRuns(w io.Writer, format string, runs []Run, now time.Time) error {
	switch format {
	case "table":
		return WriteTable(w, runs, now)
	case "csv":
		return WriteCSV(w, runs)
	case "json":
		return WriteJSON(w, runs)
	}
	return fmt.Errorf("unknown format %q (table, csv or json)", format)
}

// WriteGroups writes groups summed by by in format (one of Formats).
func WriteGroups(w io.Writer, format string, by []string, groups []Group) error {
	switch format {
	case "table":
		return WriteGroupTable(w, by, groups)
	case "csv":
		return WriteGroupCSV(w, by, groups)
	case "json":
		return WriteGroupJSON(w, groups)
	}
	return fmt.Errorf("unknown format %q (table, csv or json)", format)
}
