package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpuscope/gpuscope/accounting"
)

// workloadSeriesNames are the series that make a workload (its GPU
// memory, cAdvisor's cgroup series): a workload is on the page if any
// had a sample in the range.
const workloadSeriesNames = "gpuscope_gpu_container_memory_used_bytes|container_last_seen|container_cpu_usage_seconds_total"

// workloadPageView is what the workload page's template renders.
type workloadPageView struct {
	Base, Self, Name string
	Runtimes         []string
	Images           []string
	Cgroups          []string
	GPUs             []knownLink
	Bar              *rangeBar
	Refresh          int
	Start, End       float64
	Step             float64
	Points           int
	Charts           []*chart
	Events           *eventsView
	OOMKills         float64
	Runs             []accounting.Run
	Report           bool
	ReportErr        string
	ReportWarnings   []string
	Overview         string
}

func (h *Handler) workloadPage(c echo.Context) error {
	hp, ok, err := h.prelude(c)
	if !ok {
		return err
	}
	name := pathParam(c, "*")
	base := baseHref(c.Request().URL.EscapedPath())
	self := workloadPath(name)
	sel := labels.MustNewMatcher(labels.MatchEqual, "workload", name)
	found, err := hp.series(labels.MustNewMatcher(labels.MatchRegexp, labels.MetricName, workloadSeriesNames), sel)
	if err != nil {
		return err
	}
	if name == "" || len(found) == 0 {
		return h.workloadNotFound(c, hp, base, name)
	}
	v := &workloadPageView{
		Base: base, Self: self, Name: name, Refresh: h.refresh(hp.tr), Report: h.opts.API.Workloads != nil,
		Start: unixSeconds(hp.tr.Start), End: unixSeconds(hp.tr.End), Step: hp.tr.Step.Seconds(), Points: hp.ax.n,
		Overview: hp.tr.link("./", nil),
	}
	v.Bar = hp.tr.bar(self, nil, stepText(hp.tr.Step), h.overviewOptions().Now())
	gpus := map[string]bool{}
	for _, ls := range found {
		add := func(list *[]string, v string) {
			if v != "" && !slices.Contains(*list, v) {
				*list = append(*list, v)
			}
		}
		add(&v.Runtimes, ls.Get("runtime"))
		add(&v.Images, ls.Get("image"))
		add(&v.Cgroups, ls.Get("instance")+" "+ls.Get("id"))
		if g := ls.Get("gpu"); g != "" && ls.Get(labels.MetricName) == "gpuscope_gpu_container_memory_used_bytes" {
			k := ls.Get("instance") + "\xff" + g
			if !gpus[k] {
				gpus[k] = true
				text := ls.Get("instance") + " GPU " + g
				if gi := ls.Get("GPU_I_ID"); gi != "" {
					text += " GI " + gi
				}
				v.GPUs = append(v.GPUs, knownLink{Text: text, Href: hp.tr.link("gpu/"+url.PathEscape(ls.Get("instance"))+"/"+url.PathEscape(g), nil)})
			}
		}
	}
	slices.Sort(v.Runtimes)
	slices.Sort(v.Images)
	slices.Sort(v.Cgroups)
	slices.SortFunc(v.GPUs, func(a, b knownLink) int { return cmp.Compare(a.Text, b.Text) })

	hp.plan.match = matcherText(sel)
	v.Charts, v.Events = hp.run(workloadCharts(hp.tr, len(v.Cgroups) > 1), workloadEvents)
	for _, row := range v.Events.Rows {
		for _, m := range row.Marks {
			if row.Kind == "oom" {
				v.OOMKills += m.N
			}
		}
	}
	if v.Report {
		h.workloadReport(hp.ctx, hp, v)
	}
	if err := newDrawing(hp.ax).draw(v.Charts, v.Events); err != nil {
		return err
	}
	return render(c, http.StatusOK, "workload", v)
}

// workloadReport is the workload's run report over the range: the same
// report as /api/v1/workloads (all=true), of this workload only.
func (h *Handler) workloadReport(ctx context.Context, hp *historyPage, v *workloadPageView) {
	ctx, cancel := context.WithTimeout(ctx, hp.src.timeout)
	defer cancel()
	rep, err := h.opts.API.Workloads.Report(ctx, accounting.Query{Start: hp.tr.Start, End: hp.tr.End, All: true, Workload: v.Name})
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		v.ReportErr = errTimedOut.Error()
	case err != nil:
		v.ReportErr = err.Error()
	default:
		v.Runs, v.ReportWarnings = rep.Runs, rep.Warnings
	}
}

// workloadNotFound answers 404 with the workloads seen in the range.
func (h *Handler) workloadNotFound(c echo.Context, hp *historyPage, base, name string) error {
	all, err := hp.series(labels.MustNewMatcher(labels.MatchRegexp, labels.MetricName, workloadSeriesNames),
		labels.MustNewMatcher(labels.MatchNotEqual, "workload", ""))
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var known []knownLink
	for _, ls := range all {
		w := ls.Get("workload")
		if seen[w] {
			continue
		}
		seen[w] = true
		known = append(known, knownLink{Group: ls.Get("runtime"), Text: w, Href: hp.tr.link(workloadPath(w), nil)})
	}
	slices.SortFunc(known, func(a, b knownLink) int { return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Text, b.Text)) })
	p := &noticePage{Base: base, Status: http.StatusNotFound, Known: known, Title: fmt.Sprintf("No workload named %s", name),
		Bar: hp.tr.bar(workloadPath(name), nil, "", h.overviewOptions().Now())}
	if name == "" {
		p.Title = "Workloads"
	}
	p.Text = "No series with workload=" + fmt.Sprintf("%q", name) + " in this range (" + p.Bar.Text + ")."
	p.KnownText = "Workloads with data in this range, by runtime:"
	if len(known) == 0 {
		p.KnownText = "No workload has data in this range."
	}
	return render(c, http.StatusNotFound, "notice", p)
}

// workloadCharts are the workload page's graphs: its GPUs' memory and SM
// share, and its cgroups' CPU and memory against their limits, on one
// time axis, so that GPU memory climbing with the working set is one
// page. Lines of the workload's cgroups are named by node, and by the
// cgroup where a node has several.
func workloadCharts(tr timeRange, manyCgroups bool) []chartSpec {
	gpuLegend := func(_ string, ls labels.Labels) (string, string) {
		text := ls.Get("instance") + " GPU " + ls.Get("gpu")
		if gi := ls.Get("GPU_I_ID"); gi != "" {
			text += " GI " + gi
		}
		return text, tr.link("gpu/"+url.PathEscape(ls.Get("instance"))+"/"+url.PathEscape(ls.Get("gpu")), nil)
	}
	cgLegend := func(name string, ls labels.Labels) (string, string) {
		if !manyCgroups {
			return name, ""
		}
		return name + " " + ls.Get("instance") + " " + path.Base(ls.Get("id")), ""
	}
	return []chartSpec{
		{id: "gpu-memory", title: "GPU memory", unit: unitBytes, note: "by GPU: the most the workload held in each step", lines: []lineSpec{
			{name: "", legend: gpuLegend, expr: func(p plan) string {
				return "sum by (instance, gpu, GPU_I_ID) (" + p.sel("gpuscope_gpu_container_memory_used_bytes", "gpu:gpuscope_gpu_container_memory_used_bytes:avg1m", "max", "") + ")"
			}},
		}},
		{id: "gpu-sm", title: "SM share", unit: unitPercent, note: "by GPU: the workload's share of the GPU's streaming multiprocessors", lines: []lineSpec{
			{name: "", legend: gpuLegend, expr: func(p plan) string {
				return "sum by (instance, gpu, GPU_I_ID) (" + p.sel("gpuscope_gpu_container_sm_utilization_percent", "gpu:gpuscope_gpu_container_sm_utilization_percent:avg1m", "avg", "") + ")"
			}},
		}},
		{id: "cpu", title: "CPU", unit: unitCores, note: "cores used against the CFS quota (the host's cores where there is none)", lines: []lineSpec{
			{name: "used", legend: cgLegend, expr: func(p plan) string {
				if p.useRecorded("workload:cpu_usage_cores:rate1m") {
					return "sum by (instance, id) (" + p.rate("", "workload:cpu_usage_cores:rate1m", "") + ")"
				}
				return "sum by (instance, id) (" + p.rate("container_cpu_usage_seconds_total", "", `id!="/"`) + ")"
			}},
			{name: "limit", ref: true, legend: cgLegend, expr: func(p plan) string {
				// The container rules' limit counts the host's cores for a
				// cgroup without a quota; without them, the quota alone.
				if p.recorded("instance_id:container_cpu_limit:cores") > 0 {
					return "max by (instance, id) (" + p.sel("instance_id:container_cpu_limit:cores", "", "max", "") + ")"
				}
				return "max by (instance, id) (" + p.sel("container_spec_cpu_quota", "", "max", `id!="/"`) + ") / max by (instance, id) (" +
					p.sel("container_spec_cpu_period", "", "max", `id!="/"`) + ") > 0"
			}},
		}},
		{id: "memory", title: "Memory working set", unit: unitBytes, note: "the most in each step, against the cgroup's memory limit", lines: []lineSpec{
			{name: "working set", legend: cgLegend, expr: func(p plan) string {
				return "max by (instance, id) (" + p.sel("container_memory_working_set_bytes", "workload:memory_working_set_bytes:max1m", "max", `id!="/"`) + ")"
			}},
			{name: "limit", ref: true, legend: cgLegend, expr: func(p plan) string {
				return "max by (instance, id) (" + p.sel("container_spec_memory_limit_bytes", "instance_id:container_spec_memory_limit_bytes:max1m", "max", `id!="/"`) + ") > 0"
			}},
		}},
	}
}

// workloadEvents are the workload's alerts and OOM kills.
var workloadEvents = []eventSpec{
	{kind: "alert", expr: func(p plan) string {
		return "max by (alertname, alertstate, instance, gpu) (" + p.sel("ALERTS", "", "max", "") + ")"
	}, label: func(ls labels.Labels) string {
		s := ls.Get("alertname") + " " + ls.Get("instance")
		if g := ls.Get("gpu"); g != "" {
			s += " GPU " + g
		}
		return strings.TrimSpace(s)
	}, state: func(ls labels.Labels) string { return ls.Get("alertstate") }},
	{kind: "oom", expr: func(p plan) string {
		return "sum by (instance, id) (" + p.sel("container_oom_events_total", "", "max", `id!="/"`) + ")"
	}, label: func(ls labels.Labels) string { return "OOM kill " + ls.Get("instance") + " " + ls.Get("id") }},
}
