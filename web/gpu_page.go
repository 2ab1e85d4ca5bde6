package web

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/prometheus/model/labels"
)

// gpuCardNames are the series that make a GPU (the overview's cards
// query reads the same): a GPU is on the page if any had a sample in
// the range.
const gpuCardNames = "DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_POWER_USAGE|DCGM_FI_DEV_XID_ERRORS"

// gpuPageView is what the GPU page's template renders.
type gpuPageView struct {
	Base, Self       string
	Node, GPU, Model string
	UUIDs            []string
	MIG              []migView
	Bar              *rangeBar
	Refresh          int
	Start, End       float64
	Step             float64
	Points           int
	Charts           []*chart
	Events           *eventsView
	Workloads        []gpuWorkload
	WorkloadErr      string
	// Processes are the GPU's processes now: on a live page only (a
	// range in the past has no such list; its workloads stand for them).
	Processes *processesView
	Overview  string
}

type migView struct{ ID, Profile string }

// gpuWorkload is a workload that held the GPU in the range: its peak
// GPU memory and mean SM share over the range's steps.
type gpuWorkload struct {
	Name, Href     string
	Peak, MeanSM   float64
	HasPeak, HasSM bool
}

func (h *Handler) gpuPage(c echo.Context) error {
	hp, ok, err := h.prelude(c)
	if !ok {
		return err
	}
	// /gpu/<node>/<gpu>, each part path-escaped; anything else (/gpu/,
	// /gpu/<node>) is answered with the GPUs there are.
	var node, gpu string
	parts := strings.Split(c.Param("*"), "/")
	if len(parts) == 2 {
		node, _ = url.PathUnescape(parts[0])
		gpu, _ = url.PathUnescape(parts[1])
	} else if len(parts) == 1 {
		node, _ = url.PathUnescape(parts[0])
	}
	base := baseHref(c.Request().URL.EscapedPath())
	self := "gpu/" + url.PathEscape(node) + "/" + url.PathEscape(gpu)
	if node == "" || gpu == "" {
		return h.gpuNotFound(c, hp, base, node, gpu)
	}

	found, err := hp.series(labels.MustNewMatcher(labels.MatchRegexp, labels.MetricName, gpuCardNames),
		labels.MustNewMatcher(labels.MatchEqual, "instance", node), labels.MustNewMatcher(labels.MatchEqual, "gpu", gpu))
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return h.gpuNotFound(c, hp, base, node, gpu)
	}
	v := &gpuPageView{
		Base: base, Self: self, Node: node, GPU: gpu, Refresh: h.refresh(hp.tr),
		Start: unixSeconds(hp.tr.Start), End: unixSeconds(hp.tr.End), Step: hp.tr.Step.Seconds(), Points: hp.ax.n,
		Overview: hp.tr.link("./", url.Values{"node": {node}}),
	}
	v.Bar = hp.tr.bar(self, nil, stepText(hp.tr.Step), h.overviewOptions().Now())
	mig := map[string]string{}
	for _, ls := range found {
		if u := ls.Get("UUID"); u != "" && !slices.Contains(v.UUIDs, u) {
			v.UUIDs = append(v.UUIDs, u)
		}
		if m := ls.Get("modelName"); m != "" {
			v.Model = m
		}
		if gi := ls.Get("GPU_I_ID"); gi != "" {
			mig[gi] = ls.Get("GPU_I_PROFILE")
		}
	}
	slices.Sort(v.UUIDs)
	for id, prof := range mig {
		v.MIG = append(v.MIG, migView{id, prof})
	}
	slices.SortFunc(v.MIG, func(a, b migView) int { return cmp.Compare(atoiOr(a.ID), atoiOr(b.ID)) })

	hp.plan.match = matcherText(labels.MustNewMatcher(labels.MatchEqual, "instance", node), labels.MustNewMatcher(labels.MatchEqual, "gpu", gpu))
	specs := gpuCharts(hp.tr, len(v.UUIDs) > 1)
	v.Charts, v.Events = hp.run(specs, gpuEvents)
	gpuEnergy(hp, v)
	v.Workloads, v.WorkloadErr = gpuWorkloads(v.Charts)
	if hp.tr.Live && h.opts.GPUProcesses != nil {
		asked := askProcesses(c.Request().Context(), h.opts.GPUProcesses, []string{node}, h.overviewOptions().QueryTimeout)
		v.Processes = processesFor(asked[node], gpu)
	}
	if err := newDrawing(hp.ax).draw(v.Charts, v.Events); err != nil {
		return err
	}
	return render(c, http.StatusOK, "gpu", v)
}

func atoiOr(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 1 << 30
	}
	return n
}

// gpuNotFound answers 404 with the GPUs seen in the range, by node.
func (h *Handler) gpuNotFound(c echo.Context, hp *historyPage, base, node, gpu string) error {
	all, err := hp.series(labels.MustNewMatcher(labels.MatchRegexp, labels.MetricName, gpuCardNames))
	if err != nil {
		return err
	}
	seen := map[[2]string]bool{}
	var known []knownLink
	nodeKnown := false
	for _, ls := range all {
		k := [2]string{ls.Get("instance"), ls.Get("gpu")}
		if seen[k] || k[1] == "" {
			continue
		}
		seen[k] = true
		nodeKnown = nodeKnown || k[0] == node
		known = append(known, knownLink{Group: k[0], Text: "GPU " + k[1], Href: hp.tr.link("gpu/"+url.PathEscape(k[0])+"/"+url.PathEscape(k[1]), nil)})
	}
	sort.SliceStable(known, func(i, j int) bool {
		return cmp.Or(cmp.Compare(known[i].Group, known[j].Group), cmp.Compare(atoiOr(known[i].Text[4:]), atoiOr(known[j].Text[4:])), cmp.Compare(known[i].Text, known[j].Text)) < 0
	})
	p := &noticePage{Base: base, Status: http.StatusNotFound, Known: known, Bar: hp.tr.bar("gpu/"+url.PathEscape(node)+"/"+url.PathEscape(gpu), nil, "", h.overviewOptions().Now())}
	switch {
	case node == "":
		p.Title = "GPUs"
	case nodeKnown && gpu == "":
		p.Title = "GPUs of " + node
	case nodeKnown:
		p.Title = fmt.Sprintf("No GPU %s on %s", gpu, node)
	default:
		p.Title = fmt.Sprintf("No node named %s with a GPU", node)
	}
	p.Text = "No GPU series of that name in this range (" + p.Bar.Text + ")."
	p.KnownText = "GPUs with data in this range:"
	if len(known) == 0 {
		p.KnownText = "No GPU has data in this range."
	}
	return render(c, http.StatusNotFound, "notice", p)
}

// The GPU page's graphs. A GPU in MIG mode has its framebuffer,
// DCGM_FI_PROF_* and per-container series per GPU instance (GPU_I_ID),
// each its own line; the rest is per GPU. Utilisation of a MIG GPU is
// its instances' graphics engine activity, as in the overview and
// gpu:dcgm_fi_dev_gpu_util:avg1m. DCGM gives the framebuffer in MiB and
// clocks in MHz; the page draws bytes and hertz.
func gpuCharts(tr timeRange, manyUUIDs bool) []chartSpec {
	by := "GPU_I_ID"
	if manyUUIDs { // the GPU was replaced in the range: a line per board
		by = "UUID, GPU_I_ID"
	}
	legend := func(name string, ls labels.Labels) (string, string) {
		if gi := ls.Get("GPU_I_ID"); gi != "" {
			name += " GI " + gi
		}
		if u := ls.Get("UUID"); manyUUIDs && u != "" {
			name += " " + u
		}
		return name, ""
	}
	pct := func(name, raw, rec string, scale string) lineSpec {
		return lineSpec{name: name, legend: legend, expr: func(p plan) string {
			return "max by (" + by + ") (" + p.sel(raw, rec, "avg", "") + ")" + scale
		}}
	}
	wlLegend := func(_ string, ls labels.Labels) (string, string) {
		w := ls.Get("workload")
		if gi := ls.Get("GPU_I_ID"); gi != "" {
			return w + " (GI " + gi + ")", tr.link(workloadPath(w), nil)
		}
		return w, tr.link(workloadPath(w), nil)
	}
	return []chartSpec{
		{id: "framebuffer", title: "Framebuffer used and total", unit: unitBytes,
			note: "the most in use in each step: a leak climbs as a staircase", lines: []lineSpec{
				{name: "used", legend: legend, expr: func(p plan) string {
					return "sum by (" + by + ") (" + p.sel("DCGM_FI_DEV_FB_USED", "gpu:dcgm_fi_dev_fb_used:avg1m", "max", "") + ") * 1048576"
				}},
				{name: "total", ref: true, legend: legend, expr: func(p plan) string {
					if p.useRecorded("gpu:dcgm_fi_dev_fb_total:max1m") {
						return "sum by (" + by + ") (" + p.sel("", "gpu:dcgm_fi_dev_fb_total:max1m", "max", "") + ") * 1048576"
					}
					// Without DCGM_FI_DEV_FB_TOTAL (dcgm-exporter's default
					// counters), used + free + reserved, as the overview.
					return "sum by (" + by + ") (" + p.sel("DCGM_FI_DEV_FB_TOTAL", "", "max", "") + ") * 1048576 or sum by (" + by + ") (" +
						p.sel(`{__name__=~"DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_FB_RESERVED"}`, "", "max", "") + ") * 1048576"
				}},
			}},
		{id: "utilization", title: "Utilisation and activity", unit: unitPercent, lines: []lineSpec{
			{name: "utilisation", legend: legend, expr: func(p plan) string {
				if p.useRecorded("gpu:dcgm_fi_dev_gpu_util:avg1m") {
					return "max by (" + by + ") (" + p.sel("", "gpu:dcgm_fi_dev_gpu_util:avg1m", "avg", "") + ")"
				}
				return "max by (" + by + ") (" + p.sel("DCGM_FI_DEV_GPU_UTIL", "", "avg", "") + ") or max by (" + by + ") (" +
					p.sel("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "", "avg", `GPU_I_ID!=""`) + ") * 100"
			}},
			pct("SM active", "DCGM_FI_PROF_SM_ACTIVE", "", " * 100"),
			pct("tensor active", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gpu:dcgm_fi_prof_pipe_tensor_active:avg1m", " * 100"),
			pct("DRAM active", "DCGM_FI_PROF_DRAM_ACTIVE", "gpu:dcgm_fi_prof_dram_active:avg1m", " * 100"),
			pct("memory copy", "DCGM_FI_DEV_MEM_COPY_UTIL", "gpu:dcgm_fi_dev_mem_copy_util:avg1m", ""),
		}},
		{id: "temperature", title: "Temperature", unit: unitCelsius, note: "the highest in each step", lines: []lineSpec{
			{name: "GPU", legend: legend, expr: func(p plan) string {
				return "max by (" + by + ") (" + p.sel("DCGM_FI_DEV_GPU_TEMP", "gpu:dcgm_fi_dev_gpu_temp:max1m", "max", "") + ")"
			}},
			{name: "memory", legend: legend, expr: func(p plan) string {
				return "max by (" + by + ") (" + p.sel("DCGM_FI_DEV_MEMORY_TEMP", "gpu:dcgm_fi_dev_memory_temp:max1m", "max", "") + ")"
			}},
		}},
		{id: "power", title: "Power", unit: unitWatts, lines: []lineSpec{
			{name: "power", legend: legend, expr: func(p plan) string {
				return "max by (" + by + ") (" + p.sel("DCGM_FI_DEV_POWER_USAGE", "gpu:dcgm_fi_dev_power_usage:avg1m", "avg", "") + ")"
			}},
		}},
		{id: "clocks", title: "Clocks", unit: unitHertz, note: "throttle reasons are in the events below", lines: []lineSpec{
			{name: "SM", legend: legend, expr: func(p plan) string {
				if p.useRecorded("gpu:dcgm_fi_dev_sm_clock_hertz:avg1m") {
					return "max by (" + by + ") (" + p.sel("", "gpu:dcgm_fi_dev_sm_clock_hertz:avg1m", "avg", "") + ")"
				}
				return "max by (" + by + ") (" + p.sel("DCGM_FI_DEV_SM_CLOCK", "", "avg", "") + ") * 1e6"
			}},
			{name: "memory", legend: legend, expr: func(p plan) string {
				if p.useRecorded("gpu:dcgm_fi_dev_mem_clock_hertz:avg1m") {
					return "max by (" + by + ") (" + p.sel("", "gpu:dcgm_fi_dev_mem_clock_hertz:avg1m", "avg", "") + ")"
				}
				return "max by (" + by + ") (" + p.sel("DCGM_FI_DEV_MEM_CLOCK", "", "avg", "") + ") * 1e6"
			}},
		}},
		{id: "interconnect", title: "PCIe and NVLink", unit: unitBytesPS, lines: []lineSpec{
			{name: "PCIe tx", legend: legend, expr: func(p plan) string {
				return "max by (" + by + ") (" + p.sel("gpuscope_gpu_pcie_tx_bytes_per_second", "gpu:gpuscope_gpu_pcie_tx_bytes_per_second:avg1m", "avg", "") + ")"
			}},
			{name: "PCIe rx", legend: legend, expr: func(p plan) string {
				return "max by (" + by + ") (" + p.sel("gpuscope_gpu_pcie_rx_bytes_per_second", "gpu:gpuscope_gpu_pcie_rx_bytes_per_second:avg1m", "avg", "") + ")"
			}},
			{name: "PCIe link maximum", ref: true, legend: legend, expr: func(p plan) string {
				return "max by (" + by + ") (" + p.sel("gpuscope_gpu_pcie_max_bandwidth_bytes_per_second", "gpu:gpuscope_gpu_pcie_max_bandwidth_bytes_per_second:max1m", "max", "") + ")"
			}},
			// DCGM computes NVLink's in MB/s.
			{name: "NVLink", legend: legend, expr: func(p plan) string {
				return "max by (" + by + ") (" + p.sel("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "gpu:dcgm_fi_dev_nvlink_bandwidth_total:avg1m", "avg", "") + ") * 1e6"
			}},
		}},
		{id: "workload-memory", title: "GPU memory by workload", unit: unitBytes, note: "the most each workload held in each step", lines: []lineSpec{
			{name: "", legend: wlLegend, expr: func(p plan) string {
				return "sum by (workload, GPU_I_ID) (" + p.sel("gpuscope_gpu_container_memory_used_bytes", "gpu:gpuscope_gpu_container_memory_used_bytes:avg1m", "max", "") + ")"
			}},
		}},
		{id: "workload-sm", title: "SM share by workload", unit: unitPercent, lines: []lineSpec{
			{name: "", legend: wlLegend, expr: func(p plan) string {
				return "sum by (workload, GPU_I_ID) (" + p.sel("gpuscope_gpu_container_sm_utilization_percent", "gpu:gpuscope_gpu_container_sm_utilization_percent:avg1m", "avg", "") + ")"
			}},
		}},
	}
}

// gpuEvents are the GPU's alerts (ALERTS, as the rule manager writes
// them: pending and firing), clock events (throttle reasons) and XIDs.
var gpuEvents = []eventSpec{
	{kind: "alert", expr: func(p plan) string {
		return "max by (alertname, alertstate, GPU_I_ID, workload) (" + p.sel("ALERTS", "", "max", "") + ")"
	}, label: alertLabel, state: func(ls labels.Labels) string { return ls.Get("alertstate") }},
	{kind: "clock", expr: func(p plan) string {
		return "max by (reason) (" + p.sel("gpuscope_gpu_clock_event_active", "gpu:gpuscope_gpu_clock_event_active:max1m", "max", "") + ") > 0"
	}, label: func(ls labels.Labels) string { return "clock event " + ls.Get("reason") }, state: func(labels.Labels) string { return "active" }},
	{kind: "xid", expr: func(p plan) string {
		return "sum by (err_code) (" + p.sel("gpuscope_gpu_xid_errors_total", "", "max", "") + ")"
	}, label: func(ls labels.Labels) string { return "XID " + ls.Get("err_code") }},
}

func alertLabel(ls labels.Labels) string {
	s := ls.Get("alertname")
	if gi := ls.Get("GPU_I_ID"); gi != "" {
		s += " GI " + gi
	}
	if w := ls.Get("workload"); w != "" {
		s += " " + w
	}
	return s
}

// gpuEnergy sets the power graph's figure: the energy the GPU used in
// the range, from its counter (millijoules), where it has one.
func gpuEnergy(hp *historyPage, v *gpuPageView) {
	for _, c := range v.Charts {
		if c.ID != "power" {
			continue
		}
		expr := "sum(increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" + hp.plan.match + "}[" + promDuration(hp.tr.Range()) + "]))"
		res, err := hp.instant(expr)
		switch {
		case err != nil:
			c.Stat = "energy: " + err.Error()
		case len(res) == 1:
			c.Stat = "energy in the range: " + humanizeOne(res[0].F/3.6e6, unitWattHours) // mJ to Wh
		}
		c.Queries = append(c.Queries, chartQuery{Expr: expr, Href: hp.tr.graphLink(expr)})
	}
}

var unitWattHours = unit{suffix: "Wh"}

// gpuWorkloads lists the workloads of the GPU memory and SM share
// graphs, the most memory first.
func gpuWorkloads(charts []*chart) ([]gpuWorkload, string) {
	byName := map[string]*gpuWorkload{}
	var out []*gpuWorkload
	var errText string
	for _, c := range charts {
		if c.ID != "workload-memory" && c.ID != "workload-sm" {
			continue
		}
		if c.Err != "" {
			errText = c.Err
		}
		for _, l := range c.Lines {
			w := byName[l.Name]
			if w == nil {
				w = &gpuWorkload{Name: l.Name, Href: l.Link}
				byName[l.Name] = w
				out = append(out, w)
			}
			_, mx, _, ok := stats(l.Values)
			if !ok {
				continue
			}
			if c.ID == "workload-memory" {
				w.Peak, w.HasPeak = mx, true
			} else {
				w.MeanSM, w.HasSM = mean(l.Values), true
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Peak > out[j].Peak })
	res := make([]gpuWorkload, len(out))
	for i, w := range out {
		res[i] = *w
	}
	return res, errText
}

func mean(vs []float64) float64 {
	var s float64
	n := 0
	for _, v := range vs {
		if v == v { // not NaN
			s += v
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return s / float64(n)
}

// workloadPath is the workload page of name, relative to the root.
func workloadPath(name string) string { return "workload/" + url.PathEscape(name) }
