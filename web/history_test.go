package web

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"math"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	apiv1 "github.com/prometheus/prometheus/web/api/v1"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/accounting"
)

// historyEnd is the end of historyLoad: six hours of a minute's samples
// from 0.
var historyEnd = time.Unix(6*3600, 0).UTC()

// historyLoad is six hours at one sample a minute of the source
// document's case: GPU 0 of n1 leaks 2 GiB every 30 minutes while its
// utilisation stays at 85 %, the container "leaky" that holds it grows
// its working set in step, uses half a core of its half-core quota, and
// has an OOM kill at 5 h; GPUMemoryLeakSuspected goes pending at 2.5 h
// and fires at 3 h, XID 79 at 200 minutes, a thermal clock event from
// 100 to 119 minutes. GPU 1 is in MIG mode with two instances; an
// input-bound cgroup whose name has slashes drives GPU 2.
func historyLoad() string {
	var b strings.Builder
	b.WriteString("load 1m\n")
	series := func(ls string, f func(i int) (float64, bool)) {
		b.WriteString("  " + ls)
		for i := 0; i <= 360; i++ {
			v, ok := f(i)
			if !ok {
				b.WriteString(" _")
				continue
			}
			b.WriteString(" " + strconv.FormatFloat(v, 'f', -1, 64))
		}
		b.WriteString("\n")
	}
	is := func(v float64) func(int) (float64, bool) { return func(int) (float64, bool) { return v, true } }
	between := func(from, to int, v float64) func(int) (float64, bool) {
		return func(i int) (float64, bool) { return v, i >= from && i <= to }
	}
	stair := func(base, step float64) func(int) (float64, bool) {
		return func(i int) (float64, bool) { return base + step*float64(i/30), true }
	}
	const gpu0 = `instance="n1", gpu="0", UUID="GPU-0", modelName="NVIDIA H100 80GB HBM3"`
	series(`DCGM_FI_DEV_FB_USED{`+gpu0+`}`, stair(20480, 2048))
	series(`DCGM_FI_DEV_FB_TOTAL{`+gpu0+`}`, is(81559))
	series(`DCGM_FI_DEV_GPU_UTIL{`+gpu0+`}`, is(85))
	series(`DCGM_FI_DEV_GPU_TEMP{`+gpu0+`}`, is(70))
	series(`DCGM_FI_DEV_POWER_USAGE{`+gpu0+`}`, is(600))
	series(`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{`+gpu0+`}`, func(i int) (float64, bool) { return float64(i) * 600 * 60 * 1000, true })
	series(`gpuscope_gpu_clock_event_active{instance="n1", gpu="0", UUID="GPU-0", reason="sw_thermal"}`, func(i int) (float64, bool) {
		if i >= 100 && i <= 119 {
			return 1, true
		}
		return 0, true
	})
	series(`gpuscope_gpu_xid_errors_total{instance="n1", gpu="0", UUID="GPU-0", err_code="79"}`, between(200, 360, 1))
	series(`ALERTS{alertname="GPUMemoryLeakSuspected", alertstate="pending", instance="n1", gpu="0", UUID="GPU-0", severity="warning"}`, between(150, 179, 1))
	series(`ALERTS{alertname="GPUMemoryLeakSuspected", alertstate="firing", instance="n1", gpu="0", UUID="GPU-0", severity="warning"}`, between(180, 360, 1))
	const leaky = `instance="n1", id="/docker/abc", workload="leaky", runtime="docker", image="trainer:1"`
	series(`gpuscope_gpu_container_memory_used_bytes{gpu="0", UUID="GPU-0", `+leaky+`}`, stair(20000*1048576, 2048*1048576))
	series(`gpuscope_gpu_container_sm_utilization_percent{gpu="0", UUID="GPU-0", `+leaky+`}`, is(80))
	series(`gpuscope_gpu_container_memory_used_bytes{instance="n1", gpu="0", UUID="GPU-0", id="/x", workload="<script>alert(1)</script>", runtime="docker"}`, between(0, 60, 2048))
	series(`container_last_seen{instance="n1", id="/x", workload="<script>alert(1)</script>", runtime="docker"}`, between(0, 60, 1))
	series(`container_cpu_usage_seconds_total{cpu="total", `+leaky+`}`, func(i int) (float64, bool) { return float64(i) * 30, true })
	series(`container_spec_cpu_quota{`+leaky+`}`, is(50000))
	series(`container_spec_cpu_period{`+leaky+`}`, is(100000))
	series(`container_memory_working_set_bytes{`+leaky+`}`, stair(8<<30, 512<<20))
	series(`container_spec_memory_limit_bytes{`+leaky+`}`, is(32<<30))
	series(`container_oom_events_total{`+leaky+`}`, func(i int) (float64, bool) { return float64(min(1, i/300)), true })
	series(`container_last_seen{`+leaky+`}`, func(i int) (float64, bool) { return float64(i * 60), true })
	series(`container_start_time_seconds{`+leaky+`}`, is(0))
	const mig = `instance="n1", gpu="1", UUID="GPU-1", modelName="NVIDIA H100 80GB HBM3"`
	series(`DCGM_FI_DEV_FB_USED{`+mig+`, GPU_I_ID="1", GPU_I_PROFILE="3g.40gb"}`, is(100))
	series(`DCGM_FI_DEV_FB_USED{`+mig+`, GPU_I_ID="2", GPU_I_PROFILE="3g.40gb"}`, is(50))
	series(`DCGM_FI_PROF_GR_ENGINE_ACTIVE{`+mig+`, GPU_I_ID="1", GPU_I_PROFILE="3g.40gb"}`, is(0.8))
	series(`DCGM_FI_PROF_GR_ENGINE_ACTIVE{`+mig+`, GPU_I_ID="2", GPU_I_PROFILE="3g.40gb"}`, is(0.2))
	series(`DCGM_FI_DEV_GPU_TEMP{`+mig+`}`, is(50))
	const input = `instance="n1", id="/gpuscope-demo/input-bound", workload="/gpuscope-demo/input-bound", runtime="cgroup"`
	series(`DCGM_FI_DEV_GPU_TEMP{instance="n1", gpu="2", UUID="GPU-2"}`, is(46))
	series(`DCGM_FI_DEV_GPU_UTIL{instance="n1", gpu="2", UUID="GPU-2"}`, is(30))
	series(`gpuscope_gpu_container_sm_utilization_percent{gpu="2", UUID="GPU-2", `+input+`}`, is(25))
	series(`gpuscope_gpu_container_memory_used_bytes{gpu="2", UUID="GPU-2", `+input+`}`, is(24000*1048576))
	series(`container_cpu_usage_seconds_total{cpu="total", `+input+`}`, func(i int) (float64, bool) { return float64(i) * 30, true })
	series(`container_spec_cpu_quota{`+input+`}`, is(50000))
	series(`container_spec_cpu_period{`+input+`}`, is(100000))
	series(`container_last_seen{`+input+`}`, func(i int) (float64, bool) { return float64(i * 60), true })
	series(`up{instance="n1", job="node-gpu"}`, is(1))
	return b.String()
}

type historyFixture struct {
	h   *Handler
	srv *httptest.Server
}

// newHistory serves historyLoad through the real handler: the API, the
// pages, the engine and a run reporter over the same storage, at
// historyEnd, scraped every minute.
func newHistory(t testing.TB) historyFixture {
	t.Helper()
	return newHistoryAt(t, historyEnd)
}

// newHistoryAt is newHistory with the pages' clock at now.
func newHistoryAt(t testing.TB, now time.Time) historyFixture {
	t.Helper()
	return newHistoryWith(t, now, nil)
}

// newHistoryWith is newHistoryAt with the handler's options changed by
// with before it is made.
func newHistoryWith(t testing.TB, now time.Time, with func(*Options)) historyFixture {
	t.Helper()
	st := promqltest.LoadedStorage(t, historyLoad())
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, promqltest.DefaultMaxSamplesPerQuery)
	rm := rules.NewManager(&rules.ManagerOptions{
		QueryFunc: rules.EngineQueryFunc(engine, st), AppendableV2: st, Context: context.Background(),
		NotifyFunc: func(context.Context, string, ...*rules.Alert) {}, Parser: parser.NewParser(parser.Options{}),
	})
	reporter, err := accounting.New(accounting.Options{Engine: engine, Queryable: st,
		Rules: runningGroups{rules.NewGroup(rules.GroupOptions{Name: "gpuscope.accounting", Interval: time.Minute})}})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	o := Options{
		ListenAddress: "127.0.0.1:0", Gatherer: reg, Registerer: reg,
		API: &APIOptions{QueryEngine: engine, Queryable: sampleAndChunk{st}, RuleManager: rm, Workloads: reporter,
			BuildInfo: &apiv1.PrometheusVersion{Version: "1.2.3"}, Config: func() promconfig.Config { return promconfig.DefaultConfig },
			Parser: parser.NewParser(parser.Options{})},
		Overview: OverviewOptions{Now: func() time.Time { return now }, ScrapeInterval: func() time.Duration { return time.Minute }},
	}
	if with != nil {
		with(&o)
	}
	h := New(o)
	h.SetReady(true)
	srv := httptest.NewServer(h.echo)
	t.Cleanup(srv.Close)
	return historyFixture{h: h, srv: srv}
}

// pageAxis is a history page's <main data-start data-end data-step
// data-points>.
type pageAxis struct {
	start, end, step float64
	points           int
}

var mainRe = regexp.MustCompile(`<main id="history" data-start="([^"]+)" data-end="([^"]+)" data-step="([^"]+)" data-points="(\d+)">`)

func readAxis(t *testing.T, body string) pageAxis {
	t.Helper()
	m := mainRe.FindStringSubmatch(body)
	require.NotNil(t, m, "<main id=history> in\n%s", body)
	var a pageAxis
	a.start, _ = strconv.ParseFloat(m[1], 64)
	a.end, _ = strconv.ParseFloat(m[2], 64)
	a.step, _ = strconv.ParseFloat(m[3], 64)
	a.points, _ = strconv.Atoi(m[4])
	return a
}

// legendValues are the data-values of a chart's line, by its legend
// name; ok is false when the chart has no such line.
func legendValues(t *testing.T, body, chart, name string) (vs []float64, ok bool) {
	t.Helper()
	fig := figure(t, body, chart)
	m := regexp.MustCompile(`<li class="series [^"]*" data-series="` + regexp.QuoteMeta(html.EscapeString(name)) + `" data-values="([^"]*)"`).FindStringSubmatch(fig)
	if m == nil {
		return nil, false
	}
	for _, f := range strings.Fields(m[1]) {
		v, err := strconv.ParseFloat(f, 64)
		require.NoError(t, err)
		vs = append(vs, v)
	}
	return vs, true
}

// figure is a chart's <figure> element.
func figure(t *testing.T, body, chart string) string {
	t.Helper()
	i := strings.Index(body, `<figure class="chart" id="`+chart+`"`)
	require.NotEqual(t, -1, i, "chart %s in\n%s", chart, body)
	f := body[i:]
	return f[:strings.Index(f, "</figure>")]
}

// queryRange asks the API's /api/v1/query_range.
func queryRange(t *testing.T, base, q string, a pageAxis) map[string][]float64 {
	t.Helper()
	v := url.Values{"query": {q}, "start": {formatNum(a.start)}, "end": {formatNum(a.end)}, "step": {formatNum(a.step)}}
	code, body := get(t, base+"/api/v1/query_range?"+v.Encode())
	require.Equal(t, 200, code, body)
	var res struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	out := map[string][]float64{}
	for _, s := range res.Data.Result {
		vs := make([]float64, a.points)
		for i := range vs {
			vs[i] = math.NaN()
		}
		for _, p := range s.Values {
			ts := p[0].(float64)
			f, err := strconv.ParseFloat(p[1].(string), 64)
			require.NoError(t, err)
			vs[int(math.Round((ts-a.start)/a.step))] = f
		}
		key, _ := json.Marshal(s.Metric)
		out[string(key)] = vs
	}
	return out
}

func only(t *testing.T, m map[string][]float64) []float64 {
	t.Helper()
	require.Len(t, m, 1, "%v", m)
	for _, v := range m {
		return v
	}
	return nil
}

func sameFloats(t *testing.T, want, got []float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		if math.IsNaN(want[i]) {
			require.True(t, math.IsNaN(got[i]), "%s: point %d: want none, got %g", what, i, got[i])
			continue
		}
		require.Equal(t, want[i], got[i], "%s: point %d", what, i)
	}
}

func TestChooseStep(t *testing.T) {
	for _, tc := range []struct {
		rng, min time.Duration
		points   int
		want     time.Duration
	}{
		{time.Hour, 15 * time.Second, graphPoints, 15 * time.Second},
		{6 * time.Hour, 15 * time.Second, graphPoints, 2 * time.Minute},
		{24 * time.Hour, 15 * time.Second, graphPoints, 5 * time.Minute},
		{7 * 24 * time.Hour, 15 * time.Second, graphPoints, time.Hour},
		{30 * 24 * time.Hour, 15 * time.Second, graphPoints, 3 * time.Hour},
		{3 * time.Minute, time.Second, graphPoints, time.Second},
		{time.Hour, time.Minute, graphPoints, time.Minute},           // never finer than a scrape
		{time.Hour, 20 * time.Second, graphPoints, 30 * time.Second}, // a scrape between nice steps
		{time.Hour, 15 * time.Second, sparkPoints, time.Minute},      // the overview's sparkline
		{24 * time.Hour, 15 * time.Second, sparkPoints, 30 * time.Minute},
		{400 * 24 * time.Hour, 15 * time.Second, graphPoints, 2 * 24 * time.Hour},
		{5000 * 24 * time.Hour, 15 * time.Second, graphPoints, 400 * time.Hour},
	} {
		t.Run(fmt.Sprintf("%s/%s/%d", tc.rng, tc.min, tc.points), func(t *testing.T) {
			got := chooseStep(tc.rng, tc.min, tc.points)
			require.Equal(t, tc.want, got)
			require.LessOrEqual(t, int(tc.rng/got), tc.points, "at most the points asked for")
		})
	}
}

func TestParseRange(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		query      string
		start, end time.Time
		step       time.Duration
		live       bool
		err        string
	}{
		{query: "", start: now.Add(-time.Hour), end: now, step: 15 * time.Second, live: true},
		{query: "range=6h", start: now.Add(-6 * time.Hour), end: now, step: 2 * time.Minute, live: true},
		{query: "range=30d", start: now.Add(-30 * 24 * time.Hour), end: now, step: 3 * time.Hour, live: true},
		{query: "range=24h&to=1764676800", start: time.Unix(1764676800-86400, 0), end: time.Unix(1764676800, 0), step: 5 * time.Minute},
		{query: "from=2026-12-01T00:00&to=2026-12-01T06:00", start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), end: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC), step: 2 * time.Minute},
		{query: "from=2026-12-01+00:00:00&to=2026-12-01T01:00:00Z", start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), end: time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC), step: 15 * time.Second},
		{query: "from=2026-12-02", start: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), end: now, step: 5 * time.Minute, live: true},
		{query: "range=abc", err: `invalid range "abc": give a duration such as 1h, 6h, 24h, 7d or 30d`},
		{query: "range=0s", err: `invalid range "0s"`},
		{query: "range=-1h", err: `invalid range "-1h"`},
		{query: "range=500d", err: "a range of 500d is longer than the 400d a page draws"},
		{query: "from=yesterday", err: `invalid from "yesterday": give Unix seconds, RFC 3339 (2006-01-02T15:04:05Z) or 2006-01-02 15:04 in UTC`},
		{query: "to=soon", err: `invalid to "soon"`},
		{query: "from=2026-12-02T13:00", err: "from (2026-12-02 13:00:00 UTC) must be before to (2026-12-02 12:00:00 UTC)"},
		{query: "from=2026-12-02T10:00&range=1h", err: "give either range=1h or from=2026-12-02T10:00, not both"},
		{query: "from=NaN", err: `invalid from "NaN"`},
	} {
		t.Run(tc.query, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			require.NoError(t, err)
			tr, err := parseRange(q, now, 15*time.Second)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.ErrorAs(t, err, new(rangeError))
				return
			}
			require.NoError(t, err)
			require.True(t, tc.start.Equal(tr.Start), "start %s", tr.Start)
			require.True(t, tc.end.Equal(tr.End), "end %s", tr.End)
			require.Equal(t, tc.step, tr.Step)
			require.Equal(t, tc.live, tr.Live)
			// The range's links carry it.
			back, err := parseRange(tr.query(), now, 15*time.Second)
			require.NoError(t, err)
			require.True(t, tr.Start.Equal(back.Start) && tr.End.Equal(back.End), "%s round-trips through %s", tc.query, tr.query().Encode())
		})
	}
}

// TestHistoryBadRange: a bad range is a 400 page saying what is wrong
// and what is accepted, on every page that takes one; nothing is run.
func TestHistoryBadRange(t *testing.T) {
	f := newHistory(t)
	for _, tc := range []struct{ path, want string }{
		{"/gpu/n1/0?from=xyz", `invalid from &#34;xyz&#34;: give Unix seconds, RFC 3339`},
		{"/workload/leaky?range=0", `invalid range &#34;0&#34;`},
		{"/?to=yesterday", `invalid to &#34;yesterday&#34;`},
		{"/gpu/n1/0?from=21000&to=20000", "from (1970-01-01 05:50:00 UTC) must be before to (1970-01-01 05:33:20 UTC)"},
		{"/workload/leaky?range=1h&from=0", "give either range=1h or from=0, not both"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, body := get(t, f.srv.URL+tc.path)
			require.Equal(t, 400, code)
			require.Contains(t, body, `<title>gpuscope · Bad time range</title>`)
			require.Contains(t, body, tc.want)
			require.Contains(t, body, "Presets: range=1h, range=6h, range=24h, range=7d, range=30d")
			require.NotContains(t, body, `<svg class="graph"`)
		})
	}
}

// TestGPUPageLeak: the GPU page over the leak's six hours draws the
// framebuffer as a rising staircase whose points are what
// /api/v1/query_range returns for the same range and step: the sample at
// each step where steps are a scrape apart, the most in use in each step
// otherwise.
func TestGPUPageLeak(t *testing.T) {
	f := newHistory(t)
	const sel = `instance="n1", gpu="0"`
	for _, tc := range []struct {
		query, want string
		step        float64
	}{
		{"range=6h", `max_over_time(DCGM_FI_DEV_FB_USED{` + sel + `}[2m]) * 2^20`, 120},
		{"range=1h", `DCGM_FI_DEV_FB_USED{` + sel + `} * 2^20`, 60},
		{"from=3600&to=7200", `DCGM_FI_DEV_FB_USED{` + sel + `} * 2^20`, 60},
	} {
		t.Run(tc.query, func(t *testing.T) {
			code, body := get(t, f.srv.URL+"/gpu/n1/0?"+tc.query)
			require.Equal(t, 200, code, body)
			a := readAxis(t, body)
			require.Equal(t, tc.step, a.step)
			used, ok := legendValues(t, body, "framebuffer", "used")
			require.True(t, ok)
			sameFloats(t, only(t, queryRange(t, f.srv.URL, tc.want, a)), used, "framebuffer used")
			rises := 0
			for i := 1; i < len(used); i++ {
				require.GreaterOrEqual(t, used[i], used[i-1], "a staircase never falls")
				if used[i] > used[i-1] {
					rises++
					require.Equal(t, 2048.0*(1<<20), used[i]-used[i-1], "each stair is 2 GiB")
				}
			}
			require.Greater(t, rises, 0)
			total, ok := legendValues(t, body, "framebuffer", "total")
			require.True(t, ok)
			require.Equal(t, 81559.0*(1<<20), total[len(total)-1])
			util, _ := legendValues(t, body, "utilization", "utilisation")
			require.Equal(t, 85.0, util[len(util)-1], "utilisation stays at 85 %")
		})
	}

	_, body := get(t, f.srv.URL+"/gpu/n1/0?range=6h")
	require.Contains(t, body, `<title>gpuscope · GPU 0 on n1</title>`)
	require.Contains(t, body, `NVIDIA H100 80GB HBM3 · <code>GPU-0</code>`)
	// Axes with units, and a step's values on hover.
	fb := figure(t, body, "framebuffer")
	require.Contains(t, fb, `>80GiB</text>`)
	require.Contains(t, fb, `>0B</text>`)
	require.Regexp(t, `<g class="hv" style="--w:5.2px">`, fb)
	require.Regexp(t, `<rect x="989"><title>01-01 06:00\nused: 44GiB\ntotal: 79\.65GiB</title></rect>`, fb)
	require.Contains(t, fb, `<li class="series s0" data-series="used"`)
	require.Contains(t, fb, `<li class="series s1 ref" data-series="total"`)
	require.Contains(t, fb, `last 44GiB · min 20GiB · max 44GiB`)
	require.Contains(t, figure(t, body, "temperature"), `>80°C</text>`)
	require.Contains(t, figure(t, body, "temperature"), `last 70°C`)
	require.Contains(t, figure(t, body, "power"), `energy in the range: 3.6kWh`, "600 W for 6 h")
	// Every chart says its PromQL, each a link to /graph over the range.
	require.Regexp(t, `data-query>sum by \(GPU_I_ID\) \(max_over_time\(DCGM_FI_DEV_FB_USED\{instance=&#34;n1&#34;, gpu=&#34;0&#34;\}\[2m\]\)\) \* 1048576</a>`, fb)
	// The workloads that held it, linked, the most memory first.
	require.Regexp(t, `(?s)<li class="workload" data-workload="leaky"><a href="workload/leaky\?range=6h">leaky</a> · peak GPU memory <span data-peak="46741323776">43.5 GiB</span> · mean SM share <span data-sm="80">80.0 %</span></li>.*data-workload="&lt;script&gt;alert\(1\)&lt;/script&gt;"`, body)
	require.Regexp(t, `href="workload/leaky\?range=6h">leaky</a> <span class="lv">`, figure(t, body, "workload-memory"), "the legend names the workload, linked")
}

// TestGPUPageEvents: the leak's alert pending then firing, the thermal
// clock event as bands; the XID as a mark at its step.
func TestGPUPageEvents(t *testing.T) {
	f := newHistory(t)
	_, body := get(t, f.srv.URL+"/gpu/n1/0?range=6h")
	ev := body[strings.Index(body, `<section class="events"`):]
	ev = ev[:strings.Index(ev, "</section>")]
	require.Contains(t, ev, `<li data-kind="alert" data-event="GPUMemoryLeakSuspected" data-spans="2" data-marks="0">`)
	require.Contains(t, ev, `<li data-kind="xid" data-event="XID 79" data-spans="0" data-marks="1">`)
	require.Contains(t, ev, `<li data-kind="clock" data-event="clock event sw_thermal" data-spans="1" data-marks="0">`)
	// A step is in a band if the alert was in that state at any time of
	// it: the step ending 03:00 saw both.
	require.Contains(t, ev, `<title>GPUMemoryLeakSuspected pending, 01-01 02:30 to 01-01 03:00</title>`)
	require.Contains(t, ev, `<title>GPUMemoryLeakSuspected firing, 01-01 03:00 to 01-01 06:00</title>`)
	require.Contains(t, ev, `<title>XID 79 +1 by 01-01 03:20</title>`)
	require.Contains(t, ev, `<title>clock event sw_thermal active, 01-01 01:40 to 01-01 02:00</title>`)
	require.Less(t, strings.Index(ev, `data-kind="alert"`), strings.Index(ev, `data-kind="xid"`), "alerts first")

	// Before the XID and the alert: none of either.
	_, body = get(t, f.srv.URL+"/gpu/n1/0?from=0&to=3600")
	require.Contains(t, body, "No alert, XID, OOM kill or clock event in this range.")
}

// TestGPUPageMIG: a GPU in MIG mode has a line per GPU instance, its
// utilisation the instances' engine activity.
func TestGPUPageMIG(t *testing.T) {
	f := newHistory(t)
	code, body := get(t, f.srv.URL+"/gpu/n1/1")
	require.Equal(t, 200, code)
	require.Contains(t, body, "MIG instances: GI 1 (3g.40gb) GI 2 (3g.40gb)")
	for name, want := range map[string]float64{"utilisation GI 1": 80, "utilisation GI 2": 20} {
		vs, ok := legendValues(t, body, "utilization", name)
		require.True(t, ok, name)
		require.InDelta(t, want, vs[len(vs)-1], 1e-9, name)
	}
	vs, ok := legendValues(t, body, "framebuffer", "used GI 2")
	require.True(t, ok)
	require.Equal(t, 50.0*(1<<20), vs[0])
}

// TestHistoryNotFound: an unknown node, GPU or workload is a 404 page
// listing what has data in the range, linked.
func TestHistoryNotFound(t *testing.T) {
	f := newHistory(t)
	for _, tc := range []struct {
		path, title string
		want        []string
	}{
		{"/gpu/n1/9", "No GPU 9 on n1", []string{`<h3>n1</h3><a href="gpu/n1/0">GPU 0</a> <a href="gpu/n1/1">GPU 1</a> <a href="gpu/n1/2">GPU 2</a>`}},
		{"/gpu/%3Cb%3Enowhere/0?range=6h", "No node named &lt;b&gt;nowhere with a GPU", []string{`<a href="gpu/n1/0?range=6h">GPU 0</a>`}},
		{"/workload/nope?from=0&to=21600", "No workload named nope", []string{
			`<h3>cgroup</h3><a href="workload/%2Fgpuscope-demo%2Finput-bound?from=0&amp;to=21600">/gpuscope-demo/input-bound</a>`,
			`<h3>docker</h3><a href="workload/%3Cscript%3Ealert%281%29%3C%2Fscript%3E?from=0&amp;to=21600">&lt;script&gt;alert(1)&lt;/script&gt;</a> <a href="workload/leaky?from=0&amp;to=21600">leaky</a>`,
		}},
		{"/workload/", "Workloads", []string{`<a href="workload/leaky">leaky</a>`}},
		{"/gpu/", "GPUs", []string{`<a href="gpu/n1/1">GPU 1</a>`}},
		{"/gpu/n1", "GPUs of n1", []string{`<a href="gpu/n1/2">GPU 2</a>`}},
		{"/gpu/n1/", "GPUs of n1", []string{`<a href="gpu/n1/0">GPU 0</a>`}},
		{"/gpu/n1/0/extra", "GPUs", []string{`<a href="gpu/n1/0">GPU 0</a>`}},
		{"/workload/leaky?from=30000&to=36000", "No workload named leaky", []string{"No workload has data in this range."}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, body := get(t, f.srv.URL+tc.path)
			require.Equal(t, 404, code)
			require.Contains(t, body, "<h1><a href=\"./\">gpuscope</a> · "+tc.title+"</h1>")
			for _, w := range tc.want {
				require.Contains(t, body, w)
			}
			require.NotContains(t, body, "<b>nowhere")
		})
	}
}

// TestWorkloadPage: the leaking container's page has its GPU memory and
// working set climbing on one time axis, its CPU at its quota, its OOM
// kill, and its run report; the input-bound cgroup's (a name with
// slashes) its CPU at the limit and its GPU share low.
func TestWorkloadPage(t *testing.T) {
	f := newHistory(t)
	code, body := get(t, f.srv.URL+"/workload/leaky?range=6h")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `<title>gpuscope · workload leaky</title>`)
	a := readAxis(t, body)
	const w = `workload="leaky"`
	gpuMem, ok := legendValues(t, body, "gpu-memory", "n1 GPU 0")
	require.True(t, ok)
	sameFloats(t, only(t, queryRange(t, f.srv.URL, `max_over_time(gpuscope_gpu_container_memory_used_bytes{`+w+`}[2m])`, a)), gpuMem, "GPU memory")
	ws, ok := legendValues(t, body, "memory", "working set")
	require.True(t, ok)
	sameFloats(t, only(t, queryRange(t, f.srv.URL, `max_over_time(container_memory_working_set_bytes{`+w+`}[2m])`, a)), ws, "working set")
	require.Greater(t, gpuMem[len(gpuMem)-1], gpuMem[0])
	require.Greater(t, ws[len(ws)-1], ws[0], "the working set climbs with the GPU memory")
	limit, _ := legendValues(t, body, "memory", "limit")
	require.Equal(t, float64(32<<30), limit[0])
	used, _ := legendValues(t, body, "cpu", "used")
	cpuLimit, _ := legendValues(t, body, "cpu", "limit")
	require.InDelta(t, 0.5, used[len(used)-1], 1e-9, "half a core")
	require.Equal(t, 0.5, cpuLimit[len(cpuLimit)-1], "its quota")
	require.Contains(t, body, `<li data-kind="oom" data-event="OOM kill n1 /docker/abc" data-spans="0" data-marks="1">`)
	require.Contains(t, body, `GPUs <a href="gpu/n1/0?range=6h">n1 GPU 0</a>`)
	// The run report, as /api/v1/workloads has it.
	require.Contains(t, body, `<tr class="run" data-id="/docker/abc" data-instance="n1">`)
	require.Contains(t, body, `<td data-field="oom-kills" data-value="1">1</td>`)
	require.Regexp(t, `<td data-field="cpu-seconds" data-value="10800">10800</td>`, body, "half a core for 6 hours")

	// A name with slashes, linked escaped; the CPU at its limit, the GPU
	// share low.
	code, body = get(t, f.srv.URL+"/workload/%2Fgpuscope-demo%2Finput-bound?range=1h")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `<base href="../">`)
	used, _ = legendValues(t, body, "cpu", "used")
	cpuLimit, _ = legendValues(t, body, "cpu", "limit")
	require.InDelta(t, cpuLimit[len(cpuLimit)-1], used[len(used)-1], 1e-9)
	sm, _ := legendValues(t, body, "gpu-sm", "n1 GPU 2")
	require.Equal(t, 25.0, sm[len(sm)-1])
	code, _ = get(t, f.srv.URL+"/workload//gpuscope-demo/input-bound")
	require.Equal(t, 200, code, "the name unescaped in the path works too")
}

// TestHistoryEscapesLabelValues: a workload's name is text wherever it
// is shown: title, legend, hover, links.
func TestHistoryEscapesLabelValues(t *testing.T) {
	f := newHistory(t)
	for _, path := range []string{"/workload/%3Cscript%3Ealert%281%29%3C%2Fscript%3E?from=0&to=3600", "/gpu/n1/0?from=0&to=3600"} {
		code, body := get(t, f.srv.URL+path)
		require.Equal(t, 200, code)
		require.NotContains(t, body, "<script>")
		require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	}
	_, body := get(t, f.srv.URL+"/gpu/n1/0?from=0&to=3600")
	require.Contains(t, figure(t, body, "workload-memory"), "\n&lt;script&gt;alert(1)&lt;/script&gt;: 2kiB", "the hover text")
}

// TestHistoryAgentAndStarting: `gpuscope agent` has no history and says
// so; serve answers 503 until its TSDB is open.
func TestHistoryAgentAndStarting(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := New(Options{ListenAddress: "127.0.0.1:0", Overview: OverviewOptions{Local: reg, Node: "ws1"}})
	h.SetReady(true)
	srv := httptest.NewServer(h.echo)
	t.Cleanup(srv.Close)
	for _, p := range []string{"/gpu/ws1/0", "/workload/x", "/graph?g0.expr=up"} {
		code, body := get(t, srv.URL+p)
		require.Equal(t, 404, code, p)
		require.Contains(t, body, "gpuscope agent keeps no history: it has no TSDB", p)
	}
	_, body := get(t, srv.URL+"/")
	require.Contains(t, body, `<p class="meta" id="no-history">No history here:`)
	require.NotContains(t, body, `data-range`)

	f := newHistory(t)
	f.h.SetReady(false)
	for _, p := range []string{"/gpu/n1/0", "/workload/leaky", "/graph?g0.expr=up"} {
		code, body := get(t, f.srv.URL+p)
		require.Equal(t, 503, code, p)
		require.Contains(t, body, "the TSDB is opening", p)
	}
}

func TestPlanSelectors(t *testing.T) {
	recorded := func(name string) time.Duration {
		if name == "gpu:dcgm_fi_dev_fb_used:avg1m" {
			return time.Minute
		}
		return 0
	}
	const m = `instance="n1"`
	for _, tc := range []struct {
		step      time.Duration
		raw, rec  string
		sel, rate string
	}{
		{15 * time.Second, "DCGM_FI_DEV_FB_USED", "gpu:dcgm_fi_dev_fb_used:avg1m",
			`DCGM_FI_DEV_FB_USED{instance="n1"}`, `rate(DCGM_FI_DEV_FB_USED{instance="n1"}[1m])`},
		{2 * time.Minute, "DCGM_FI_DEV_FB_USED", "gpu:dcgm_fi_dev_fb_used:avg1m",
			`max_over_time(DCGM_FI_DEV_FB_USED{instance="n1"}[2m])`, `rate(DCGM_FI_DEV_FB_USED{instance="n1"}[2m15s])`},
		// Five minutes or more: the minute recording, where its rule runs.
		{5 * time.Minute, "DCGM_FI_DEV_FB_USED", "gpu:dcgm_fi_dev_fb_used:avg1m",
			`max_over_time(gpu:dcgm_fi_dev_fb_used:avg1m{instance="n1"}[5m])`, `avg_over_time(gpu:dcgm_fi_dev_fb_used:avg1m{instance="n1"}[5m])`},
		{3 * time.Hour, "DCGM_FI_DEV_GPU_TEMP", "gpu:dcgm_fi_dev_gpu_temp:max1m",
			`max_over_time(DCGM_FI_DEV_GPU_TEMP{instance="n1"}[3h])`, `rate(DCGM_FI_DEV_GPU_TEMP{instance="n1"}[3h15s])`},
		{5 * time.Minute, `{__name__=~"a|b"}`, "", `max_over_time({__name__=~"a|b", instance="n1"}[5m])`, `rate({__name__=~"a|b", instance="n1"}[5m15s])`},
	} {
		t.Run(tc.step.String()+"/"+tc.raw, func(t *testing.T) {
			p := plan{step: tc.step, minStep: 15 * time.Second, recorded: recorded, match: m}
			require.Equal(t, tc.sel, p.sel(tc.raw, tc.rec, "max", ""))
			require.Equal(t, tc.rate, p.rate(tc.raw, tc.rec, ""))
			_, err := parser.NewParser(parser.Options{}).ParseExpr(p.sel(tc.raw, tc.rec, "max", `id!="/"`))
			require.NoError(t, err)
		})
	}
}

// TestPagesReadRecordingRules: where the gpuscope.dashboard group runs,
// a 24-hour GPU page reads its minute recordings instead of the raw
// series, and draws the same line from them.
func TestPagesReadRecordingRules(t *testing.T) {
	load := historyLoad() + "  gpu:dcgm_fi_dev_fb_used:avg1m{instance=\"n1\", gpu=\"0\", UUID=\"GPU-0\", modelName=\"NVIDIA H100 80GB HBM3\"}"
	for i := 0; i <= 360; i++ {
		load += " " + strconv.Itoa(20480+2048*(i/30))
	}
	st := promqltest.LoadedStorage(t, load+"\n")
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, promqltest.DefaultMaxSamplesPerQuery)
	src := engineSource{engine: engine, queryable: st, timeout: time.Minute}
	tr, err := parseRange(url.Values{"range": {"24h"}}, historyEnd.Add(18*time.Hour), time.Minute)
	require.NoError(t, err)
	hp := &historyPage{ctx: context.Background(), src: src, tr: tr, ax: newAxis(tr.Start, tr.End, tr.Step)}
	specs := gpuCharts(tr, false)[0:1] // the framebuffer
	specs[0].lines = specs[0].lines[:1]
	var lines [2][]float64
	for i, rec := range []string{"", "gpu:dcgm_fi_dev_fb_used:avg1m"} {
		hp.plan = plan{step: tr.Step, minStep: time.Minute, match: `instance="n1", gpu="0"`, recorded: func(name string) time.Duration {
			if name == rec {
				return time.Minute
			}
			return 0
		}}
		charts, _ := hp.run(specs, nil)
		require.Empty(t, charts[0].Err)
		require.Len(t, charts[0].Lines, 1)
		require.Contains(t, charts[0].Queries[0].Expr, map[bool]string{false: "DCGM_FI_DEV_FB_USED{", true: rec + "{"}[rec != ""])
		lines[i] = charts[0].Lines[0].Values
	}
	sameFloats(t, lines[0], lines[1], "the raw series and the recording")
}

// TestOverviewRange: the overview takes the range: the sparklines span
// it, the cards are read at its end, node links keep it, and a range in
// the past does not reload itself.
func TestOverviewRange(t *testing.T) {
	f := newHistory(t)
	code, body := get(t, f.srv.URL+"/?range=6h")
	require.Equal(t, 200, code)
	require.Contains(t, body, `<meta http-equiv="refresh" content="60">`)
	require.Contains(t, body, `<a href="./?range=6h" class="current">6h</a>`)
	require.Contains(t, body, `a point every 10m`, "at most 60 points over 6 hours")
	require.Contains(t, body, `viewBox="0 0 35 20"`)
	require.Contains(t, body, `<a href="gpu/n1/0?range=6h">GPU 0</a>`)
	require.Contains(t, body, `<a href="workload/leaky?range=6h"><code>leaky</code></a>`)

	// At the end of the first hour: GPU 0's framebuffer was 24 GiB, and
	// the page does not reload.
	_, body = get(t, f.srv.URL+"/?range=1h&to=3600")
	require.Contains(t, body, `data-eval-time="3600.000"`)
	require.Contains(t, cardField(t, body, "n1", "0", "memory-used"), `data-value="25769803776"`)
	require.NotContains(t, body, `http-equiv="refresh"`)
	require.Contains(t, body, "a range in the past: not refreshed")
	_, body = get(t, f.srv.URL+"/?node=n1&range=1h&to=3600")
	require.Contains(t, body, `<a href="./?node=n1&amp;range=6h">6h</a>`, "the range links keep the node")
	require.Contains(t, body, `<input type="hidden" name="node" value="n1">`)
	o := newOverview(t, overviewLoad, nil, OverviewOptions{})
	_, body = get(t, o.srv.URL+"/?range=6h")
	require.Contains(t, body, `Nodes: <a href="?node=node-a&amp;range=6h">node-a</a>`, "the node links keep the range")
	_, body = get(t, o.srv.URL+"/?range=6h&node=node-a")
	require.Contains(t, body, `<a href="./?range=6h">all</a>`)
}

// FuzzHistoryParams: whatever the URL's range and /graph parameters, the
// pages answer with a page (200, or 400, 404, 422 saying why), never a
// server error.
func FuzzHistoryParams(f *testing.F) {
	f.Add("6h", "", "", "0", `DCGM_FI_DEV_FB_USED`, "1h", "", "0", "")
	f.Add("", "0", "3600", "leaky", `rate(x[5m]`, "an hour", "tomorrow", "9", "0.001")
	f.Add("30d", "", "1e300", "", `sum by (gpu) (up) / on() group_left vector(1)`, "-1h", "1970-01-01 00:00:00", "graph", "-5")
	f.Add("1y", "NaN", "-1", "/gpuscope-demo/input-bound", `"x"`, "400d", "+Inf", "table", "1e9")
	h := newHistory(f)
	f.Fuzz(func(t *testing.T, rng, from, to, page, expr, rangeInput, endInput, tab, step string) {
		q := url.Values{}
		for k, v := range map[string]string{"range": rng, "from": from, "to": to} {
			if v != "" {
				q.Set(k, v)
			}
		}
		g := url.Values{"g0.expr": {expr}, "g0.range_input": {rangeInput}, "g0.end_input": {endInput}, "g0.tab": {tab}, "g0.res_type": {"fixed"}, "g0.res_step": {step}}
		for _, path := range []string{"/?" + q.Encode(), "/gpu/n1/" + url.PathEscape(page) + "?" + q.Encode(),
			"/workload/" + url.PathEscape(page) + "?" + q.Encode(), "/graph?" + g.Encode()} {
			u, err := url.Parse(path)
			if err != nil {
				continue
			}
			req := httptest.NewRequest("GET", "/", nil)
			req.URL, req.RequestURI = u, path
			rec := httptest.NewRecorder()
			h.h.echo.ServeHTTP(rec, req)
			require.Contains(t, []int{200, 400, 404, 422}, rec.Code, "%s: %.500s", path, rec.Body.String())
			require.Contains(t, rec.Body.String(), "<title>gpuscope", path)
		}
	})
}

// chartQueries are a chart's PromQL, one a line spec, as the page lists
// them under the chart.
func chartQueries(t *testing.T, body, chart string) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile(`data-query>([^<]*)</a>`).FindAllStringSubmatch(figure(t, body, chart), -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	require.NotEmpty(t, out, "the PromQL of chart %s", chart)
	return out
}

// TestLiveRangesDrawTheNewestSteps: a range that ends now (no to=, the
// clock at nanoseconds as a real one is, 20 s after the last scrape)
// draws up to its newest step, and its points are /api/v1/query_range's
// for the page's own PromQL over the same range and step. The pages
// laid the engine's millisecond timestamps on steps counted from a
// start with nanoseconds, found no point on any step, and drew "no
// data" for every live range; a range with to= in whole seconds hid it.
func TestLiveRangesDrawTheNewestSteps(t *testing.T) {
	now := historyEnd.Add(20*time.Second + 123456789)
	f := newHistoryAt(t, now)
	for _, tc := range []struct {
		path, chart, line string
		query             int // the chart's query that draws line
	}{
		{"/gpu/n1/0", "framebuffer", "used", 0},
		{"/gpu/n1/0?range=5m", "framebuffer", "used", 0},
		{"/gpu/n1/0?range=1h", "framebuffer", "used", 0},
		{"/gpu/n1/0?range=6h", "framebuffer", "used", 0},
		{"/gpu/n1/0?range=6h", "utilization", "utilisation", 0},
		{"/workload/leaky?range=5m", "memory", "working set", 0},
		{"/workload/leaky?range=1h", "cpu", "used", 0},
		{"/workload/leaky?range=6h", "gpu-memory", "n1 GPU 0", 0},
		// A fixed end in the past, with nanoseconds: the same.
		{"/gpu/n1/0?range=1h&to=" + formatNum(unixSeconds(historyEnd)-0.0005), "framebuffer", "used", 0},
	} {
		t.Run(tc.path+" "+tc.chart, func(t *testing.T) {
			code, body := get(t, f.srv.URL+tc.path)
			require.Equal(t, 200, code, body)
			a := readAxis(t, body)
			if !strings.Contains(tc.path, "to=") {
				require.Equal(t, unixSeconds(now), a.end, "the range ends now")
			}
			vs, ok := legendValues(t, body, tc.chart, tc.line)
			require.True(t, ok, "line %q of chart %s", tc.line, tc.chart)
			require.Len(t, vs, a.points)
			for _, i := range []int{a.points - 2, a.points - 1} {
				require.False(t, math.IsNaN(vs[i]), "step %d of %d: the newest steps are drawn: %v", i, a.points, vs)
			}
			expr := chartQueries(t, body, tc.chart)[tc.query]
			sameFloats(t, only(t, queryRange(t, f.srv.URL, expr, a)), vs, expr)
			require.NotContains(t, figure(t, body, tc.chart), ">no data<")
		})
	}

	// /graph's default end is now too, at Prometheus's own step.
	q := url.Values{"g0.expr": {`DCGM_FI_DEV_FB_USED{gpu="0"}`}, "g0.tab": {"0"}}
	for _, rng := range []string{"5m", "1h", "6h"} {
		q.Set("g0.range_input", rng)
		code, body := get(t, f.srv.URL+"/graph?"+q.Encode())
		require.Equal(t, 200, code, body)
		fig := figure(t, body, "g0")
		m := regexp.MustCompile(`<li class="series s0" data-series="([^"]*)" data-values="([^"]*)"`).FindStringSubmatch(fig)
		require.NotNil(t, m, fig)
		d, _ := time.ParseDuration(rng)
		step := math.Floor(d.Seconds() / 250)
		a := pageAxis{start: unixSeconds(now.Add(-d)), end: unixSeconds(now), step: step, points: int(d.Seconds()/step) + 1}
		vs, _ := legendValues(t, body, "g0", html.UnescapeString(m[1]))
		require.False(t, math.IsNaN(vs[len(vs)-1]), "%s: the newest step is drawn", rng)
		sameFloats(t, only(t, queryRange(t, f.srv.URL, q.Get("g0.expr"), a)), vs, rng+": the graph's points")
		require.NotContains(t, fig, ">no data<")
	}
}
