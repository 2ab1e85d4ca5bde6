package accounting

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/gpuscope/gpuscope/workload"
)

// The recorded series of the gpuscope.accounting rule group that the
// report integrates; rules/pack/accounting.yml defines them.
const (
	seriesGPUHeld    = "gpu_workload:gpu_held:present"
	seriesGPUIdle    = "gpu_workload:gpu_held_idle:present"
	seriesSMShare    = "gpu_workload:gpu_sm_share:ratio"
	seriesGPUMemory  = "gpu_workload:gpu_memory_used_bytes:max1m"
	seriesGPUPower   = "gpu_workload:gpu_power_watts:apportioned"
	seriesBottleneck = "gpu_workload:bottleneck:class" // gpuscope.diagnosis
	seriesXIDs       = "gpu_workload:xid_errors_total:sum"
	seriesMemory     = "workload:memory_working_set_bytes:max1m"
	// rollupHours is 1 at each evaluation of the hourly group: the hours
	// its sums cover.
	rollupHours        = "gpuscope:accounting_rollup:present"
	defaultReportRange = 7 * 24 * time.Hour
)

// The built-in rule groups the report reads, as rules/pack/accounting.yml
// names them.
const (
	// accountingGroup records, every interval, what each workload holds;
	// each of its samples stands for one interval.
	accountingGroup = "gpuscope.accounting"
	// accountingInterval is accountingGroup's interval in the pack, before
	// rules.builtin.time_scale divides it.
	accountingInterval = time.Minute
	// rollupGroup sums accountingGroup's series by the hour for reports
	// over long ranges.
	rollupGroup = "gpuscope.accounting.hourly"
)

// ErrEmptyRange is the error of a query whose start is not before its end.
var ErrEmptyRange = errors.New("empty range")

// listedRuntimes are the runtimes whose cgroups are workloads by
// themselves; systemd units and raw cgroups are listed only when they
// held a GPU, or when the query asks for all.
var listedRuntimes = []string{workload.RuntimeDocker, workload.RuntimePodman, workload.RuntimeContainerd, workload.RuntimeSlurm}

// Prices turn energy and GPU-hours into money and CO₂. Zero leaves them
// out of the report.
type Prices struct {
	PerKWh         float64
	Currency       string
	GramsCO2PerKWh float64
	// PerGPUHour is the price of an hour of a GPU by its model (the GPU
	// series' modelName), the key DefaultModel for the models not named.
	// A MIG instance's hour is charged as its GPU's.
	PerGPUHour map[string]float64
}

// DefaultModel is the key of PerGPUHour whose price applies to every GPU
// model not named.
const DefaultModel = "default"

// gpuHourPrice is what an hour of a GPU of model costs: its own price,
// else the default, else nothing.
func (p Prices) gpuHourPrice(model string) float64 {
	if v, ok := p.PerGPUHour[model]; ok {
		return v
	}
	return p.PerGPUHour[DefaultModel]
}

// priced says whether the report has costs at all.
func (p Prices) priced() bool {
	return p.PerKWh > 0 || slices.ContainsFunc(slices.Collect(maps.Values(p.PerGPUHour)), func(v float64) bool { return v > 0 })
}

// RuleGroups is what the report asks of the rule manager: the groups it
// runs now, after reloads and rules.builtin's filters. Prometheus's
// *rules.Manager is one.
type RuleGroups interface {
	RuleGroups() []*rules.Group
}

var _ RuleGroups = (*rules.Manager)(nil)

// Options configure a Reporter.
type Options struct {
	Engine    promql.QueryEngine
	Queryable storage.Queryable
	// Rules is the rule manager, where the report finds its groups as
	// they run at each report. The gpuscope.accounting group's interval is
	// how much time each recorded sample stands for; without the group the
	// report has no GPU, energy or CPU figures and says so in a warning.
	// The gpuscope.accounting.hourly group's hours are read from its
	// series, and only the rest from the minute and cAdvisor series.
	// Required.
	Rules RuleGroups
	// TimeScale returns rules.builtin.time_scale; it follows reloads.
	// While gpuscope.accounting does not run, the samples it recorded
	// before are taken to stand for its interval at this scale, 1m divided
	// by it. Nil: 1.
	TimeScale func() float64
	// Prices returns the configured prices; it follows reloads. Nil: none.
	Prices func() Prices
	Logger *slog.Logger
}

// Reporter computes run reports.
type Reporter struct {
	o Options
}

// New checks the options.
func New(o Options) (*Reporter, error) {
	if o.Engine == nil || o.Queryable == nil {
		return nil, errors.New("accounting: a query engine and a queryable are required")
	}
	if o.Rules == nil {
		return nil, errors.New("accounting: the rule manager is required")
	}
	if o.TimeScale == nil {
		o.TimeScale = func() float64 { return 1 }
	}
	if o.Prices == nil {
		o.Prices = func() Prices { return Prices{} }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reporter{o: o}, nil
}

// accountingGroups is how the accounting groups run now.
type accountingGroups struct {
	// interval is how much time each accounting sample stands for.
	interval time.Duration
	// enabled is whether gpuscope.accounting runs.
	enabled bool
	// rollup is the hourly group's interval, 0 when it does not run (the
	// report then reads every minute).
	rollup time.Duration
}

// groups finds the accounting groups among those the rule manager runs,
// the first of each name as Prometheus's API lists them.
func (r *Reporter) groups() accountingGroups {
	running := r.o.Rules.RuleGroups()
	find := func(name string) *rules.Group {
		if i := slices.IndexFunc(running, func(g *rules.Group) bool { return g.Name() == name }); i >= 0 {
			return running[i]
		}
		return nil
	}
	gs := accountingGroups{interval: time.Duration(float64(accountingInterval) / r.o.TimeScale())}
	if g := find(accountingGroup); g != nil {
		gs.interval, gs.enabled = g.Interval(), true
	}
	if g := find(rollupGroup); g != nil {
		gs.rollup = g.Interval()
	}
	return gs
}

// Query selects the runs of a report: those seen between Start and End.
type Query struct {
	Start, End time.Time
	// All lists every cgroup, systemd units and raw cgroups without a GPU
	// included.
	All bool
	// Workload, when set, keeps only the runs of that workload (the
	// workload label): the per-workload page's report reads that
	// workload's series only, not every cgroup's.
	Workload string
	// Labels are labels to read for each run beside its identity, for a
	// report grouped by label:<name>: from cAdvisor's and the GPU
	// collector's raw per-cgroup series (a target's labels, a
	// relabelling's), the last value in the range.
	Labels []string
}

// Run is one row of the report. Energy, cost and CO₂ are nil where they
// cannot be said: cost and CO₂ without a price, all three on a node whose
// GPUs report no power.
type Run struct {
	Workload       string `json:"workload"`
	Runtime        string `json:"runtime"`
	Image          string `json:"image,omitempty"`
	ComposeProject string `json:"compose_project,omitempty"`
	ComposeService string `json:"compose_service,omitempty"`
	SlurmJobID     string `json:"slurm_job_id,omitempty"`
	SlurmStep      string `json:"slurm_step,omitempty"`
	SlurmUser      string `json:"slurm_user,omitempty"`
	// User is who ran it, as the user label has it: a name from the
	// host's passwd, or the uid where passwd does not know it.
	User     string `json:"user,omitempty"`
	Instance string `json:"instance"`
	ID       string `json:"id"`

	Start           time.Time  `json:"start"`
	End             *time.Time `json:"end"` // nil while running
	Running         bool       `json:"running"`
	DurationSeconds float64    `json:"duration_seconds"`

	GPUs     []string `json:"gpus"`
	GPUHours float64  `json:"gpu_hours"`
	// IdleGPUHours are the GPU-hours held at under 5 % SM share
	// (GPUHeldIdle's threshold); 0 where the driver gives no share (MIG).
	IdleGPUHours        float64  `json:"idle_gpu_hours"`
	SMShareAvg          float64  `json:"sm_share_avg"`
	SMShareMax          float64  `json:"sm_share_max"`
	GPUMemoryMaxBytes   float64  `json:"gpu_memory_max_bytes"`
	GPUMemoryTotalBytes float64  `json:"gpu_memory_total_bytes,omitempty"`
	EnergyKWh           *float64 `json:"energy_kwh"`
	Cost                *float64 `json:"cost,omitempty"`
	Currency            string   `json:"currency,omitempty"`
	CO2Grams            *float64 `json:"co2_grams,omitempty"`
	// Labels are the run's values of the labels a grouped report was
	// asked to group by (label:<name>); not in the API's answer.
	Labels map[string]string `json:"-"`

	CPUCoreSeconds float64 `json:"cpu_core_seconds"`
	MemoryMaxBytes float64 `json:"memory_max_bytes"`

	XIDErrors  int      `json:"xid_errors"`
	OOMKills   int      `json:"oom_kills"`
	Alerts     []string `json:"alerts,omitempty"`
	Bottleneck string   `json:"bottleneck,omitempty"`
}

// Report is the runs of a query, ordered by start, newest first, and what
// the reader should know about their figures.
type Report struct {
	Runs     []Run
	Warnings []string
}

type runKey struct{ instance, id string }

func keyOf(m labels.Labels) runKey {
	return runKey{m.Get("instance"), m.Get("id")}
}

// Report computes the report of q: a draft filled in by one phase per
// figure, each a query or a few over the range's segments. The order
// matters where a phase reads what an earlier one found: the runs, their
// GPUs, their starts.
func (r *Reporter) Report(ctx context.Context, q Query) (Report, error) {
	if q.End.IsZero() {
		q.End = time.Now()
	}
	if q.Start.IsZero() {
		q.Start = q.End.Add(-defaultReportRange)
	}
	rng := q.End.Sub(q.Start)
	if rng < time.Second {
		return Report{}, fmt.Errorf("%w: start %s is not at least a second before end %s", ErrEmptyRange,
			q.Start.UTC().Format(time.RFC3339), q.End.UTC().Format(time.RFC3339))
	}
	gs := r.groups()
	e := &evaluator{r: r, ctx: ctx, at: q.End, rng: "[" + model.Duration(rng).String() + "]"}
	if q.Workload != "" {
		e.only = labels.MustNewMatcher(labels.MatchEqual, workload.LabelWorkload, q.Workload)
	}
	d := &draft{q: q, e: e, interval: gs.interval, segs: e.segments(q.Start, q.End, gs.rollup)}
	d.gpuHolders()
	d.cgroups()
	d.gpuHours()
	d.dropUnlisted()
	d.extraLabels()
	d.starts()
	d.ends()
	d.smShare()
	d.idleHours()
	d.gpuMemory()
	d.energy(r.o.Prices())
	d.cost(r.o.Prices())
	d.cpu()
	d.memory()
	d.oomKills()
	d.countersBeforeRange()
	d.xidErrors()
	d.alerts()
	d.bottlenecks()
	if e.err != nil {
		return Report{}, e.err
	}
	out := d.report()
	if !gs.enabled {
		out.Warnings = append(out.Warnings, "the built-in rule group "+accountingGroup+" is disabled (rules.builtin.disabled_groups): GPU-hours, SM share, energy and CPU-seconds are not recorded and read 0")
	}
	return out, nil
}

// draft is a report being computed: its query, the runs found so far, and
// what a phase finds for a later one. A failed query leaves its error in
// e, and the phases after it read nothing.
type draft struct {
	q        Query
	e        *evaluator
	segs     []segment
	interval time.Duration // how much time each accounting sample stands for

	runs map[runKey]*Run
	// heldBy is the held series' sums per run and GPU (gpuHolders); heldGPU
	// the runs among them, and extraIDs, quoted for a regexp, those whose
	// runtime is not listed.
	heldBy   []promql.Sample
	heldGPU  map[runKey]bool
	extraIDs []string
	// lastSeen is the last sighting of each run cAdvisor saw (cgroups).
	lastSeen map[runKey]float64
	// gpusOf is each run's GPUs (gpuHours), for their memory totals;
	// hoursOn its GPU-hours on each, modelOf each GPU's model
	// (gpuMemory), both for the price of its GPU-hours.
	gpusOf  map[runKey][]gpuKey
	hoursOn map[runKey]map[gpuKey]float64
	modelOf map[gpuKey]string
}

type gpuKey struct{ instance, gpu, uuid, gi string }

// runLabels are the labels that name a run and its workload, for a by
// clause.
func runLabels() string {
	return "instance, id, " + strings.Join(workload.LabelNames(), ", ")
}

// cgroupStat is stat over cAdvisor's per-scrape series (and their hourly
// roll-ups) of the listed runtimes only, and of the other cgroups that
// held a GPU, unless all are asked for.
func (d *draft) cgroupStat(agg, fn, metric string) func(string) string {
	if d.q.All {
		return stat(agg + ` (` + fn + `(` + metric + `{id!="/"}%s))`)
	}
	out := agg + ` (` + fn + `(` + metric + `{id!="/", runtime=~"` + strings.Join(listedRuntimes, "|") + `"}%s))`
	if len(d.extraIDs) > 0 {
		out += ` or ` + agg + ` (` + fn + `(` + metric + `{id=~` + strconv.Quote(strings.Join(d.extraIDs, "|")) + `}%s))`
	}
	return stat(out)
}

// gpuHolders reads the GPU-holding runs first, in one read of the held
// series: their identity, GPUs and GPU-hours. cgroups needs them to
// read the unlisted runtimes' cgroups that held a GPU.
func (d *draft) gpuHolders() {
	d.heldBy = d.e.over(d.segs, sum,
		stat(`sum by (`+runLabels()+`, gpu, UUID, GPU_I_ID) (sum_over_time(`+seriesGPUHeld+`%s))`),
		stat(`sum by (`+runLabels()+`, gpu, UUID, GPU_I_ID) (sum_over_time(gpu_workload:gpu_held:sum1h%s))`))
	d.heldGPU = map[runKey]bool{}
	for _, s := range d.heldBy {
		k := keyOf(s.Metric)
		if !d.heldGPU[k] && !slices.Contains(listedRuntimes, s.Metric.Get(workload.LabelRuntime)) {
			d.extraIDs = append(d.extraIDs, regexp.QuoteMeta(k.id))
		}
		d.heldGPU[k] = true
	}
}

// cgroups finds the runs cAdvisor saw, each named as at its last
// sighting: a container's name can change once its runtime knows it.
func (d *draft) cgroups() {
	seen := d.e.over(d.segs, math.Max,
		d.cgroupStat(`max by (`+runLabels()+`)`, "max_over_time", "container_last_seen"),
		d.cgroupStat(`max by (`+runLabels()+`)`, "max_over_time", "workload:container_last_seen:max1h"))
	d.runs = map[runKey]*Run{}
	d.lastSeen = map[runKey]float64{}
	for _, s := range seen {
		k := keyOf(s.Metric)
		if at, ok := d.lastSeen[k]; ok && at >= s.F {
			continue
		}
		run := &Run{Instance: k.instance, ID: k.id}
		setIdentity(run, s.Metric)
		d.runs[k], d.lastSeen[k] = run, s.F
	}
}

// gpuHours gives each GPU holder its GPUs and GPU-hours, adding the
// holders cAdvisor did not see.
func (d *draft) gpuHours() {
	interval := d.interval.Seconds()
	d.gpusOf = map[runKey][]gpuKey{}
	d.hoursOn = map[runKey]map[gpuKey]float64{}
	for _, s := range d.heldBy {
		k := keyOf(s.Metric)
		run, ok := d.runs[k]
		if !ok { // cAdvisor off: the GPU series alone
			run = &Run{Instance: k.instance, ID: k.id}
			setIdentity(run, s.Metric)
			d.runs[k] = run
		}
		run.GPUHours += s.F * interval / 3600
		g := gpuKey{k.instance, s.Metric.Get("gpu"), s.Metric.Get("UUID"), s.Metric.Get("GPU_I_ID")}
		if d.hoursOn[k] == nil {
			d.hoursOn[k] = map[gpuKey]float64{}
		}
		d.hoursOn[k][g] += s.F * interval / 3600
		if name := gpuName(s.Metric); !slices.Contains(run.GPUs, name) {
			run.GPUs = append(run.GPUs, name)
			d.gpusOf[k] = append(d.gpusOf[k], g)
		}
	}
}

// extraLabels reads the labels the query asks for beside the identity.
// The accounting series and their roll-up keep only the identity, so
// these come from the raw series over the whole range.
func (d *draft) extraLabels() {
	for _, name := range d.q.Labels {
		if !model.LegacyValidation.IsValidLabelName(name) {
			continue // ParseGroupBy refuses it with a message; no query is built of it
		}
		sel := `{id!="/", ` + name + `!=""}` + d.e.rng
		for _, s := range d.e.vector(`max by (instance, id, ` + name + `) (max_over_time(container_last_seen` + sel + `))` +
			` or max by (instance, id, ` + name + `) (max_over_time(gpuscope_gpu_container_processes` + sel + `))`) {
			if run, ok := d.runs[keyOf(s.Metric)]; ok {
				if run.Labels == nil {
					run.Labels = map[string]string{}
				}
				run.Labels[name] = s.Metric.Get(name)
			}
		}
	}
}

// dropUnlisted drops the runs of unlisted runtimes that held no GPU,
// unless all are asked for.
func (d *draft) dropUnlisted() {
	for k, run := range d.runs {
		if !d.q.All && !d.heldGPU[k] && !slices.Contains(listedRuntimes, run.Runtime) {
			delete(d.runs, k)
		}
	}
}

// starts sets each run's start: its cgroup's creation, or its first GPU
// sample.
func (d *draft) starts() {
	eachRun(d.runs, d.e.over(d.segs, math.Min,
		d.cgroupStat(`min by (instance, id)`, "min_over_time", "container_start_time_seconds"),
		d.cgroupStat(`min by (instance, id)`, "min_over_time", "workload:container_start_time_seconds:min1h")),
		func(run *Run, v float64) { run.Start = unixTime(v) })
	// A run cAdvisor does not know (its collector off, or a GPU process's
	// cgroup it does not watch) starts at its first GPU sample.
	var unstarted []string
	for _, run := range d.runs {
		if run.Start.IsZero() {
			unstarted = append(unstarted, regexp.QuoteMeta(run.ID))
		}
	}
	if len(unstarted) > 0 {
		step := model.Duration(d.interval).String()
		d.e.each(`min by (instance, id) (min_over_time(timestamp(`+seriesGPUHeld+`{id=~`+strconv.Quote(strings.Join(unstarted, "|"))+`})`+strings.TrimSuffix(d.e.rng, "]")+`:`+step+`]))`, d.runs, func(run *Run, v float64) {
			if run.Start.IsZero() {
				run.Start = unixTime(v)
			}
		})
	}
}

// ends sets each run's end, its last sighting; a run still seen or
// holding a GPU at the range's end is running and has none. A run
// cAdvisor does not know (its collector off, or a GPU process's cgroup it
// does not watch) ends at its last GPU sample, as it starts at its first.
func (d *draft) ends() {
	var unseen []string
	for k, run := range d.runs {
		if at, ok := d.lastSeen[k]; ok {
			end := unixTime(at)
			run.End = &end
			continue
		}
		unseen = append(unseen, regexp.QuoteMeta(run.ID))
	}
	if len(unseen) > 0 {
		step := model.Duration(d.interval).String()
		d.e.each(`max by (instance, id) (max_over_time(timestamp(`+seriesGPUHeld+`{id=~`+strconv.Quote(strings.Join(unseen, "|"))+`})`+strings.TrimSuffix(d.e.rng, "]")+`:`+step+`]))`, d.runs, func(run *Run, v float64) {
			if run.End == nil {
				end := unixTime(v)
				run.End = &end
			}
		})
	}
	d.e.each(`group by (instance, id) (container_last_seen{id!="/"})`, d.runs, func(run *Run, _ float64) {
		run.Running, run.End = true, nil
	})
	d.e.each(`group by (instance, id) (`+seriesGPUHeld+`)`, d.runs, func(run *Run, _ float64) {
		run.Running, run.End = true, nil
	})
}

// smShare sets each run's average and peak share of its GPUs' SMs.
func (d *draft) smShare() {
	smSum := d.e.over(d.segs, sum,
		stat(`sum by (instance, id) (sum_over_time(`+seriesSMShare+`%s))`),
		stat(`sum by (instance, id) (sum_over_time(gpu_workload:gpu_sm_share:sum1h%s))`))
	smCount := map[runKey]float64{}
	for _, s := range d.e.over(d.segs, sum,
		stat(`sum by (instance, id) (count_over_time(`+seriesSMShare+`%s))`),
		stat(`sum by (instance, id) (sum_over_time(gpu_workload:gpu_sm_share:count1h%s))`)) {
		smCount[keyOf(s.Metric)] = s.F
	}
	eachRun(d.runs, smSum, func(run *Run, v float64) {
		if n := smCount[runKey{run.Instance, run.ID}]; n > 0 {
			run.SMShareAvg = v / n
		}
	})
	eachRun(d.runs, d.e.over(d.segs, math.Max,
		stat(`max by (instance, id) (max_over_time(`+seriesSMShare+`%s))`),
		stat(`max by (instance, id) (max_over_time(gpu_workload:gpu_sm_share:max1h%s))`)),
		func(run *Run, v float64) { run.SMShareMax = v })
}

// idleHours sets each run's GPU-hours held at under 5 % SM share.
func (d *draft) idleHours() {
	interval := d.interval.Seconds()
	eachRun(d.runs, d.e.over(d.segs, sum,
		stat(`sum by (instance, id) (sum_over_time(`+seriesGPUIdle+`%s))`),
		stat(`sum by (instance, id) (sum_over_time(gpu_workload:gpu_held_idle:sum1h%s))`)),
		func(run *Run, v float64) { run.IdleGPUHours = v * interval / 3600 })
}

// gpuMemory sets each run's peak GPU memory and the largest memory of
// the GPUs it held, and finds each GPU's model.
func (d *draft) gpuMemory() {
	eachRun(d.runs, d.e.over(d.segs, math.Max,
		stat(`max by (instance, id) (max_over_time(`+seriesGPUMemory+`%s))`),
		stat(`max by (instance, id) (max_over_time(gpu_workload:gpu_memory_used_bytes:max1h%s))`)),
		func(run *Run, v float64) { run.GPUMemoryMaxBytes = v })
	// DCGM_FI_DEV_FB_TOTAL is in MiB; a MIG instance has its own. A
	// GPU's total does not change: sampled hourly, not every scrape.
	// Without the roll-up, an hourly subquery rather than every scrape.
	var totals []promql.Sample
	if len(d.segs) == 1 && !d.segs[0].hourly {
		totals = d.e.vector(`max by (instance, gpu, UUID, GPU_I_ID, modelName) (max_over_time(DCGM_FI_DEV_FB_TOTAL` + strings.TrimSuffix(d.e.rng, "]") + `:1h]))`)
	} else {
		totals = d.e.over(d.segs, math.Max,
			stat(`max by (instance, gpu, UUID, GPU_I_ID, modelName) (max_over_time(DCGM_FI_DEV_FB_TOTAL%s))`),
			stat(`max by (instance, gpu, UUID, GPU_I_ID, modelName) (max_over_time(gpu:dcgm_fi_dev_fb_total:max1h%s))`))
	}
	total := map[gpuKey]float64{}
	d.modelOf = map[gpuKey]string{}
	for _, s := range totals {
		g := gpuKey{s.Metric.Get("instance"), s.Metric.Get("gpu"), s.Metric.Get("UUID"), s.Metric.Get("GPU_I_ID")}
		total[g] = math.Max(total[g], s.F*1048576)
		// Hours rolled up before the roll-up kept the model have none:
		// the model another segment names wins.
		if m := s.Metric.Get("modelName"); m != "" {
			d.modelOf[g] = m
		}
	}
	for k, gs := range d.gpusOf {
		for _, g := range gs {
			d.runs[k].GPUMemoryTotalBytes = math.Max(d.runs[k].GPUMemoryTotalBytes, total[g])
		}
	}
}

// energy sets each run's share of its GPUs' energy and, as prices says,
// its CO₂.
func (d *draft) energy(prices Prices) {
	interval := d.interval.Seconds()
	eachRun(d.runs, d.e.over(d.segs, sum,
		stat(`sum by (instance, id) (sum_over_time(`+seriesGPUPower+`%s))`),
		stat(`sum by (instance, id) (sum_over_time(gpu_workload:gpu_power_watts:sum1h%s))`)),
		func(run *Run, v float64) {
			kwh := v * interval / 3.6e6
			run.EnergyKWh = &kwh
			if prices.GramsCO2PerKWh > 0 {
				co2 := kwh * prices.GramsCO2PerKWh
				run.CO2Grams = &co2
			}
		})
}

// cost sets each run's cost: its energy at the price per kWh plus its
// hours on each GPU at that GPU model's price per GPU-hour. A run whose
// GPUs report no power is charged its GPU-hours only; a run with nothing
// to charge (no price applies) has no cost.
func (d *draft) cost(prices Prices) {
	if !prices.priced() {
		return
	}
	for k, run := range d.runs {
		var cost float64
		charged := false
		if prices.PerKWh > 0 && run.EnergyKWh != nil {
			cost += *run.EnergyKWh * prices.PerKWh
			charged = true
		}
		for g, h := range d.hoursOn[k] {
			if p := prices.gpuHourPrice(d.modelOf[g]); p > 0 {
				cost += h * p
				charged = true
			}
		}
		if charged {
			run.Cost, run.Currency = &cost, prices.Currency
		}
	}
}

// cpu sets each run's CPU core-seconds from the kernel's counter (since
// the cgroup's creation, as the OOM count): exact, where summing the
// recorded per-minute rate would lose up to an interval at each end of a
// run. Per cpu label first, so a container renamed in the range is not
// counted twice. countersBeforeRange takes off what a run used before
// the range.
func (d *draft) cpu() {
	eachRun(d.runs, sumByRun(d.e.over(d.segs, math.Max,
		d.cgroupStat(`max by (instance, id, cpu)`, "max_over_time", "container_cpu_usage_seconds_total"),
		d.cgroupStat(`max by (instance, id, cpu)`, "max_over_time", "workload:container_cpu_usage_seconds_total:max1h"))),
		func(run *Run, v float64) { run.CPUCoreSeconds = v })
}

// memory sets each run's peak memory working set.
func (d *draft) memory() {
	eachRun(d.runs, d.e.over(d.segs, math.Max,
		stat(`max by (instance, id) (max_over_time(`+seriesMemory+`%s))`),
		stat(`max by (instance, id) (max_over_time(workload:memory_working_set_bytes:max1h%s))`)),
		func(run *Run, v float64) { run.MemoryMaxBytes = v })
}

// oomKills sets each run's OOM kills from container_oom_events_total,
// which counts from the cgroup's creation: a run that started in the
// range had all of its kills in it. countersBeforeRange takes off those
// of a run that started before.
func (d *draft) oomKills() {
	eachRun(d.runs, d.e.over(d.segs, math.Max,
		d.cgroupStat(`max by (instance, id)`, "max_over_time", "container_oom_events_total"),
		d.cgroupStat(`max by (instance, id)`, "max_over_time", "workload:container_oom_events_total:max1h")),
		func(run *Run, v float64) { run.OOMKills = int(math.Round(v)) })
}

// countersBeforeRange subtracts, from each run that started before the
// range, what its OOM and CPU counters had reached at the range's first
// sample. Only those runs' series are read.
func (d *draft) countersBeforeRange() {
	var before []string
	for _, run := range d.runs {
		if run.Start.Before(d.q.Start) {
			before = append(before, regexp.QuoteMeta(run.ID))
		}
	}
	if len(before) == 0 {
		return
	}
	ids := strconv.Quote(strings.Join(before, "|"))
	eachRun(d.runs, d.e.over(d.segs, math.Min,
		stat(`min by (instance, id) (min_over_time(container_oom_events_total{id=~`+ids+`}%s))`),
		stat(`min by (instance, id) (min_over_time(workload:container_oom_events_total:min1h{id=~`+ids+`}%s))`)),
		func(run *Run, v float64) {
			if run.Start.Before(d.q.Start) {
				run.OOMKills -= int(math.Round(v))
			}
		})
	eachRun(d.runs, sumByRun(d.e.over(d.segs, math.Min,
		stat(`min by (instance, id, cpu) (min_over_time(container_cpu_usage_seconds_total{id=~`+ids+`}%s))`),
		stat(`min by (instance, id, cpu) (min_over_time(workload:container_cpu_usage_seconds_total:min1h{id=~`+ids+`}%s))`))),
		func(run *Run, v float64) {
			if run.Start.Before(d.q.Start) {
				run.CPUCoreSeconds -= v
			}
		})
}

// xidErrors sets each run's XID errors: per GPU series, its count's rise
// while the run held it.
func (d *draft) xidErrors() {
	xidMin := map[string]float64{}
	for _, s := range d.e.over(d.segs, math.Min,
		stat(`min_over_time(`+seriesXIDs+`%s)`),
		stat(`min_over_time(gpu_workload:xid_errors_total:min1h%s)`)) {
		xidMin[s.Metric.String()] = s.F
	}
	xids := d.e.over(d.segs, math.Max,
		stat(`max_over_time(`+seriesXIDs+`%s)`),
		stat(`max_over_time(gpu_workload:xid_errors_total:max1h%s)`))
	for i := range xids {
		xids[i].F -= xidMin[xids[i].Metric.String()]
	}
	eachRun(d.runs, sumByRun(xids), func(run *Run, v float64) { run.XIDErrors = int(math.Round(v)) })
}

// alerts sets the alerts that fired naming each run's cgroup, and the
// alerts on a GPU (label gpu, no id: GPUXIDErrorCritical, GPUFellOffBus,
// GPUTemperatureHigh, ...) that began firing while the run held that GPU
// (that MIG instance, for an alert on one) or within d.gpuAlertGrace
// after: the alert of a fault that kills a job fires after its process is
// gone. An alert already firing when a run started on its GPU (an XID
// alert holds for an hour) is not the run's.
func (d *draft) alerts() {
	add := func(run *Run, name string) {
		if !slices.Contains(run.Alerts, name) {
			run.Alerts = append(run.Alerts, name)
		}
	}
	for _, s := range d.e.vector(`count by (instance, id, alertname) (count_over_time(ALERTS{alertstate="firing", id!=""}` + d.e.rng + `))`) {
		if run, ok := d.runs[keyOf(s.Metric)]; ok {
			add(run, s.Metric.Get("alertname"))
		}
	}
	names := d.e.vector(`count by (alertname) (count_over_time(ALERTS{alertstate="firing", id="", gpu!=""}` + d.e.rng + `))`)
	if len(names) == 0 {
		return
	}
	held := `max by (instance, id, gpu, GPU_I_ID) (max_over_time(` + seriesGPUHeld + `[` + model.Duration(d.gpuAlertGrace()).String() + `]))`
	step := model.Duration(d.interval).String()
	sub := strings.TrimSuffix(d.e.rng, "]") + ":" + step + "]"
	for _, n := range names {
		// Firing now and not a step before: the alert began firing.
		alert := func(gi string) string {
			sel := fmt.Sprintf(`ALERTS{alertname=%q, alertstate="firing", id="", gpu!="", GPU_I_ID%s""}`, n.Metric.Get("alertname"), gi)
			return `(` + sel + ` unless ` + sel + ` offset ` + step + `)`
		}
		q := `count by (instance, id) (count_over_time((` +
			`(` + held + ` and on (instance, gpu) ` + alert("=") + `)` +
			` or (` + held + ` and on (instance, gpu, GPU_I_ID) ` + alert("!=") + `)` +
			`)` + sub + `))`
		d.e.each(q, d.runs, func(run *Run, _ float64) { add(run, n.Metric.Get("alertname")) })
	}
}

// gpuAlertGrace is how long after a run's last GPU sample an alert on
// that GPU is still its: three accounting intervals, and at least two
// minutes, which covers the scrape of the fault and the evaluation of its
// alert at any rules.builtin.time_scale.
func (d *draft) gpuAlertGrace() time.Duration {
	return max(3*d.interval, 2*time.Minute)
}

// bottlenecks sets each run's bottleneck: the class its GPUs were in
// longest while it held them, the first by name on a tie.
func (d *draft) bottlenecks() {
	most := map[runKey]float64{}
	for _, s := range d.e.over(d.segs, sum,
		stat(`sum by (instance, id, class) (count_over_time(`+seriesBottleneck+`%s))`),
		stat(`sum by (instance, id, class) (sum_over_time(gpu_workload:bottleneck:count1h%s))`)) {
		k := keyOf(s.Metric)
		if run, ok := d.runs[k]; ok && (s.F > most[k] || s.F == most[k] && s.Metric.Get("class") < run.Bottleneck) {
			most[k], run.Bottleneck = s.F, s.Metric.Get("class")
		}
	}
}

// report is the runs with their durations, newest first.
func (d *draft) report() Report {
	out := Report{Runs: make([]Run, 0, len(d.runs))}
	for _, run := range d.runs {
		end := d.q.End
		if run.End != nil {
			end = *run.End
		}
		if !run.Start.IsZero() {
			run.DurationSeconds = math.Max(0, end.Sub(run.Start).Seconds())
		}
		slices.Sort(run.GPUs)
		slices.Sort(run.Alerts)
		out.Runs = append(out.Runs, *run)
	}
	slices.SortFunc(out.Runs, func(a, b Run) int {
		return cmp.Or(b.Start.Compare(a.Start), cmp.Compare(a.Instance, b.Instance), cmp.Compare(a.ID, b.ID))
	})
	return out
}

func setIdentity(run *Run, m labels.Labels) {
	run.Workload = m.Get(workload.LabelWorkload)
	run.Runtime = m.Get(workload.LabelRuntime)
	run.Image = m.Get(workload.LabelImage)
	run.ComposeProject = m.Get(workload.LabelComposeProject)
	run.ComposeService = m.Get(workload.LabelComposeService)
	run.SlurmJobID = m.Get(workload.LabelSlurmJobID)
	run.SlurmStep = m.Get(workload.LabelSlurmStep)
	run.SlurmUser = m.Get(workload.LabelSlurmUser)
	run.User = m.Get(workload.LabelUser)
	if run.Workload == "" {
		run.Workload = run.ID
	}
}

// gpuName is the GPU as nvidia-smi numbers it, with the MIG instance.
func gpuName(m labels.Labels) string {
	name := m.Get("gpu")
	if name == "" {
		name = m.Get("UUID")
	}
	if gi := m.Get("GPU_I_ID"); gi != "" {
		name += "/" + gi
	}
	return name
}

// unixTime is a timestamp PromQL gave as float seconds, at the
// millisecond the TSDB stores: the float's last bits are not a time
// (1796614563.818 is 1796614563.818000078 as a float64).
func unixTime(v float64) time.Time {
	return time.UnixMilli(int64(math.Round(v * 1000))).UTC()
}
