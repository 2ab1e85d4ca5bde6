//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// seedQuery is a PromQL expression from the seed document
// (../shared/seed/000_5ed4b510352b13aa.txt), asked of gpuscope and of a
// neighbouring store (Prometheus, VictoriaMetrics) over the same range.
type seedQuery struct {
	// name says where in the seed the query comes from (its line).
	name string
	// promql is the query as the seed writes it, or as its table's
	// threshold column means it.
	promql string
	// metricsQL, when not empty, is what VictoriaMetrics is asked instead
	// of promql because MetricsQL answers promql differently on purpose
	// (see metricsQLRate). Prometheus is always asked promql.
	metricsQL string
	// metricsQLKeepsName: MetricsQL keeps the metric name where PromQL
	// drops it, for functions that "don't change the meaning of the
	// original time series" (MetricsQL docs: min_over_time, round, ...);
	// the comparison leaves __name__ out of VictoriaMetrics's answer.
	metricsQLKeepsName bool
	// mayBeEmpty says why the demo may leave the answer empty over a test's
	// range; every other query must answer something.
	mayBeEmpty string
	// counterRate: the query subtracts counter samples (rate over a
	// window), so a store that rounds stored values (VictoriaMetrics's
	// 13 digits) answers with fewer correct digits; see vmCounterRelTol.
	counterRate bool
}

// seedQueries are the seed's alert expressions and the metrics of its
// table "4.4 监控指标速查表" with their thresholds.
var seedQueries = []seedQuery{
	// Line 64, alert GPUSMUtilizationHigh.
	{name: "line 64 GPUSMUtilizationHigh", promql: `DCGM_FI_DEV_GPU_UTIL > 95`},
	// Line 71, alert GPUMemoryAlmostFull.
	{name: "line 71 GPUMemoryAlmostFull", promql: `DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_TOTAL > 0.9`},
	// Line 96: container_cpu_usage_seconds_total, "rate(5m) > 0.8 * 核数".
	{
		name:        "line 96 container CPU rate",
		promql:      `rate(container_cpu_usage_seconds_total[5m])`,
		metricsQL:   metricsQLRate(`container_cpu_usage_seconds_total`, 5*time.Minute),
		counterRate: true,
	},
	{
		name:        "line 96 container CPU over 0.8 cores",
		promql:      `rate(container_cpu_usage_seconds_total[5m]) > on(instance) group_left 0.8 * machine_cpu_cores`,
		metricsQL:   `(` + metricsQLRate(`container_cpu_usage_seconds_total`, 5*time.Minute) + `) > on(instance) group_left 0.8 * machine_cpu_cores`,
		counterRate: true,
		mayBeEmpty:  "only a busy machine's root cgroup (all its processes) passes 0.8 of its cores",
	},
	// Lines 86 and 97: container_memory_working_set_bytes.
	{name: "line 97 container working set", promql: `container_memory_working_set_bytes`},
	// Lines 84-85 (the leak case) and 98: GPU utilisation, "> 95% 持续5分钟".
	{name: "line 98 GPU utilisation", promql: `DCGM_FI_DEV_GPU_UTIL`},
	{name: "line 98 GPU utilisation over 95 for 5m", promql: `min_over_time(DCGM_FI_DEV_GPU_UTIL[5m]) > 95`, metricsQLKeepsName: true},
	// Lines 84 and 99: framebuffer used, "> 90% 总量".
	{name: "line 99 framebuffer used", promql: `DCGM_FI_DEV_FB_USED`},
	{name: "line 99 framebuffer over 90%", promql: `DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > 0.9`},
	// Line 100: GPU temperature, "> 85℃ 持续10分钟".
	{
		name: "line 100 GPU temperature over 85 for 10m", promql: `min_over_time(DCGM_FI_DEV_GPU_TEMP[10m]) > 85`, metricsQLKeepsName: true,
		mayBeEmpty: "the demo's thermal GPU heats up from its start, so a window that reaches back to it holds cooler samples",
	},
	{
		name: "line 100 GPU temperature over 85", promql: `DCGM_FI_DEV_GPU_TEMP > 85`,
		mayBeEmpty: "the demo's thermal GPU passes 85 °C after a few simulated hours, a few real minutes",
	},
	{name: "line 100 GPU temperature", promql: `DCGM_FI_DEV_GPU_TEMP`},
	// Line 101: the seed's DCGM_FI_DEV_PCIE_RX_BYTES is dcgm-exporter's
	// (and gpuscope's) DCGM_FI_PROF_PCIE_RX_BYTES, field 1010.
	{name: "line 101 PCIe receive rate", promql: `DCGM_FI_PROF_PCIE_RX_BYTES`},
	// Line 105: "container_cpu_usage 与 DCGM_FI_DEV_GPU_UTIL 的比值".
	{
		name:        "line 105 CPU to GPU utilisation ratio",
		promql:      `sum(rate(container_cpu_usage_seconds_total[5m])) / avg(DCGM_FI_DEV_GPU_UTIL)`,
		metricsQL:   `sum(` + metricsQLRate(`container_cpu_usage_seconds_total`, 5*time.Minute) + `) / avg(DCGM_FI_DEV_GPU_UTIL)`,
		counterRate: true,
	},
}

// metricsQLRate is PromQL's rate(sel[window]) written in MetricsQL.
//
// MetricsQL's own rate differs on purpose (docs.victoriametrics.com
// MetricsQL, "implemented differently"): it takes the last sample before
// the window as the start and does not extrapolate to the window's edges.
// Prometheus (promql/functions.go extrapolatedRate) takes the first and
// last samples inside the window and extrapolates to each edge when the
// sample there is closer than 1.1 average intervals, else by half an
// interval, and never past the counter's zero point. So the two answer
// differently for every window, by a few percent at 15 s scrapes. This
// expression rebuilds Prometheus's arithmetic from MetricsQL functions
// that take only the window's samples (increase_prometheus is last minus
// first with resets, without the sample before), so the comparison still
// checks the stored samples and MetricsQL's evaluation, with no
// tolerance for the difference. VictoriaMetrics 1.79 has no
// rate_prometheus. The choices are "or", not MetricsQL's "default": a
// default fills only the steps of series its left side has somewhere,
// so a counter that does not move (an idle cgroup: toZero never exists)
// lost its whole series where PromQL answers 0.
func metricsQLRate(sel string, window time.Duration) string {
	w := model.Duration(window).String()
	s := window.Seconds()
	return fmt.Sprintf(`WITH (
	n = count_over_time(%[1]s[%[2]s]),
	t1 = tfirst_over_time(%[1]s[%[2]s]),
	t2 = tlast_over_time(%[1]s[%[2]s]),
	v1 = first_over_time(%[1]s[%[2]s]),
	inc = increase_prometheus(%[1]s[%[2]s]),
	sampled = t2 - t1,
	avg = sampled / (n - 1),
	toStart = ((t1 - (time() - %[3]g)) < 1.1 * avg) or (avg / 2),
	toZero = sampled * (v1 >= 0) / (inc > 0),
	toStartZ = (toZero < toStart) or toStart,
	toEnd = ((time() - t2) < 1.1 * avg) or (avg / 2),
)
inc * (sampled + toStartZ + toEnd) / sampled / %[3]g`, sel, w, s)
}

// rangeResult is a query_range (or a raw range selector) answer: per
// series (labels without the ignored ones, as a string), value by
// millisecond timestamp.
type rangeResult map[string]map[int64]float64

// promAPI is a Prometheus HTTP API client for a base URL: gpuscope,
// Prometheus and VictoriaMetrics all answer it.
func promAPI(url string) (promv1.API, error) {
	c, err := api.NewClient(api.Config{Address: url})
	if err != nil {
		return nil, fmt.Errorf("api client for %s: %w", url, err)
	}
	return promv1.NewAPI(c), nil
}

// toRangeResult keys a matrix by its labels without drop (the external
// labels a remote write or federation adds); with strict set, every
// series must carry those labels with those values (raw series do;
// aggregations drop them); with dropName, without __name__.
func toRangeResult(m model.Matrix, drop model.LabelSet, strict, dropName bool) (rangeResult, error) {
	out := rangeResult{}
	for _, s := range m {
		metric := s.Metric.Clone()
		if dropName {
			delete(metric, model.MetricNameLabel)
		}
		for name, value := range drop {
			got, ok := metric[name]
			if ok && got != value || !ok && strict {
				return nil, fmt.Errorf("series %s: want %s=%q on every series", s.Metric, name, value)
			}
			delete(metric, name)
		}
		key := metric.String()
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("series %s twice without %v", key, drop)
		}
		vals := make(map[int64]float64, len(s.Values))
		for _, v := range s.Values {
			vals[int64(v.Timestamp)] = float64(v.Value)
		}
		out[key] = vals
	}
	return out, nil
}

// queryRange asks url for q over [start, end] at step; drop (not strict)
// and dropName as in toRangeResult.
func queryRange(ctx context.Context, url, q string, start, end time.Time, step time.Duration, drop model.LabelSet, dropName bool) (rangeResult, error) {
	a, err := promAPI(url)
	if err != nil {
		return nil, err
	}
	v, _, _, err := a.QueryRange(ctx, q, promv1.Range{Start: start, End: end, Step: step})
	if err != nil {
		return nil, fmt.Errorf("%s: query_range %s: %w", url, q, err)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("%s: query_range %s: a %s, not a matrix", url, q, v.Type())
	}
	return toRangeResult(m, drop, false, dropName)
}

// allSamples returns the raw samples in (end-window, end] of every series
// that selector selects: an instant query of selector[window], which
// Prometheus and VictoriaMetrics both answer with the stored samples
// (but see dropStaleMarkers). drop (strict) as in toRangeResult.
func allSamples(ctx context.Context, url, selector string, end time.Time, window time.Duration, drop model.LabelSet) (rangeResult, error) {
	a, err := promAPI(url)
	if err != nil {
		return nil, err
	}
	q := fmt.Sprintf(`%s[%dms]`, selector, window.Milliseconds())
	v, _, _, err := a.Query(ctx, q, end)
	if err != nil {
		return nil, fmt.Errorf("%s: query %s: %w", url, q, err)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("%s: query %s: a %s, not a matrix", url, q, v.Type())
	}
	return toRangeResult(m, drop, true, false)
}

// dropNaN removes r's NaN samples and returns how many there were.
//
// For VictoriaMetrics both kinds of NaN differ from Prometheus's TSDB:
// it does not store a sample whose value is NaN (a summary's quantile
// with no observations, e.g. prometheus_sd_file_scan_duration_seconds),
// which PromQL returns; and it stores the staleness markers (a special
// NaN written where a series ends) it receives by remote write and
// returns them as NaN in a range selector's raw samples (and in
// /api/v1/export), where PromQL never returns them. Its query evaluation
// honours the markers as PromQL does. The raw comparison leaves out
// both, and counts them.
func dropNaN(r rangeResult) int {
	n := 0
	for k, vals := range r {
		for ts, v := range vals {
			if math.IsNaN(v) {
				delete(vals, ts)
				n++
			}
		}
		if len(vals) == 0 {
			delete(r, k)
		}
	}
	return n
}

// magnitudes returns each series' largest absolute value.
func (r rangeResult) magnitudes() map[string]float64 {
	out := make(map[string]float64, len(r))
	for k, vals := range r {
		for _, v := range vals {
			if !math.IsNaN(v) {
				out[k] = math.Max(out[k], math.Abs(v))
			}
		}
	}
	return out
}

// samples is the number of samples in r.
func (r rangeResult) samples() int {
	n := 0
	for _, s := range r {
		n += len(s)
	}
	return n
}

// diffRanges compares want and got: the same series, each with a value
// at the same timestamps, values within relTol of each other (relative
// to the larger magnitude of the two, or to scale[series] when that is
// larger; 0 means equal). allowExtra, when not nil, may excuse a point
// that only got has. It returns a description of the first differences,
// or "" when they agree, and the largest relative difference seen.
func diffRanges(want, got rangeResult, relTol float64, scale map[string]float64, allowExtra func(key string, ts int64, v float64) bool) (string, float64) {
	var diffs []string
	maxRel := 0.0
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		w, inWant := want[k]
		g, inGot := got[k]
		switch {
		case !inGot:
			diffs = append(diffs, fmt.Sprintf("%s: missing (%d points)", k, len(w)))
			continue
		case !inWant:
			diffs = append(diffs, fmt.Sprintf("%s: extra (%d points)", k, len(g)))
			continue
		}
		var missing, extra, differ []string
		for ts, wv := range w {
			gv, ok := g[ts]
			if !ok {
				missing = append(missing, model.Time(ts).Time().UTC().Format("15:04:05.000"))
				continue
			}
			rel := relDiff(wv, gv)
			if sc := scale[k]; rel > 0 && sc > math.Max(math.Abs(wv), math.Abs(gv)) {
				rel = math.Abs(wv-gv) / sc
			}
			maxRel = math.Max(maxRel, rel)
			if rel > relTol {
				differ = append(differ, fmt.Sprintf("%s %v vs %v", model.Time(ts).Time().UTC().Format("15:04:05.000"), wv, gv))
			}
		}
		for ts, gv := range g {
			if _, ok := w[ts]; !ok && (allowExtra == nil || !allowExtra(k, ts, gv)) {
				extra = append(extra, model.Time(ts).Time().UTC().Format("15:04:05.000"))
			}
		}
		if len(missing)+len(extra)+len(differ) > 0 {
			sort.Strings(missing)
			sort.Strings(extra)
			sort.Strings(differ)
			diffs = append(diffs, fmt.Sprintf("%s: %d of %d points missing %v, %d extra %v, %d differ %v",
				k, len(missing), len(w), head(missing), len(extra), head(extra), len(differ), head(differ)))
		}
	}
	if len(diffs) == 0 {
		return "", maxRel
	}
	return fmt.Sprintf("%d of %d series differ:\n%s", len(diffs), len(sorted), strings.Join(head(diffs), "\n")), maxRel
}

// relDiff is |a-b| relative to the larger magnitude (0 for equal values,
// NaNs included).
func relDiff(a, b float64) float64 {
	if a == b || (math.IsNaN(a) && math.IsNaN(b)) {
		return 0
	}
	return math.Abs(a-b) / math.Max(math.Abs(a), math.Abs(b))
}

func head(s []string) []string {
	return s[:min(len(s), 5)]
}

// stableCgroups returns the cgroups (cAdvisor's id label) that url's
// cAdvisor series have both at from and at to. The e2e tests run side by
// side on one host, and cAdvisor sees every cgroup: one that another test
// creates or removes inside a window is first or last scraped at a
// different instant by each of two stores compared over it, so a
// comparison of query answers keeps to the cgroups that lived through it.
func stableCgroups(ctx context.Context, url string, from, to time.Time) (map[string]bool, error) {
	a, err := promAPI(url)
	if err != nil {
		return nil, err
	}
	const cgroups = `group by (id) (container_memory_working_set_bytes{job="cadvisor"} @ %d)`
	q := fmt.Sprintf(cgroups+" and "+cgroups, from.Unix(), to.Unix())
	v, _, _, err := a.Query(ctx, q, to)
	if err != nil {
		return nil, fmt.Errorf("%s: query %s: %w", url, q, err)
	}
	ids := map[string]bool{}
	for _, s := range v.(model.Vector) {
		ids[string(s.Metric["id"])] = true
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: no cgroup lived from %s to %s", url, from, to)
	}
	return ids, nil
}

// keepCgroups drops r's series whose id label is a cgroup not in ids and
// returns how many it dropped. Series without an id are kept.
func keepCgroups(r rangeResult, ids map[string]bool) int {
	dropped := 0
	for key := range r {
		if id, ok := labelOf(key, "id"); ok && !ids[id] {
			delete(r, key)
			dropped++
		}
	}
	return dropped
}

// labelOf reads label name from a rangeResult key, which
// model.Metric.String wrote: sorted name=%q pairs joined by ", ". A
// quote inside a value is escaped, so `, name="` starts only the label.
// (Not PromQL's ParseMetric: an id from a cgroup whose name is not
// UTF-8, as TestServeInvalidUTF8Cgroup makes, is %q's \x escapes,
// which PromQL refuses.)
func labelOf(key, name string) (string, bool) {
	i := strings.Index(key, "{"+name+`="`)
	if i < 0 {
		if i = strings.Index(key, ", "+name+`="`); i < 0 {
			return "", false
		}
	}
	quoted, err := strconv.QuotedPrefix(key[strings.Index(key[i:], `"`)+i:])
	if err != nil {
		return "", false
	}
	value, err := strconv.Unquote(quoted)
	return value, err == nil
}
