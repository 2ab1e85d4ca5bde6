package web

import (
	"context"
	"errors"
	"html"
	"math"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"
	apiv1 "github.com/prometheus/prometheus/web/api/v1"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/dashboards"
	"github.com/gpuscope/gpuscope/doctor"
)

// overviewLoad is an hour of two nodes at 15 s: node-a has a whole GPU
// with a training job and a MIG GPU with one instance busy, node-b a
// GPU that fell off the bus. Times are from 0, so the page is evaluated at
// evalAt.
const overviewLoad = `
load 15s
  DCGM_FI_DEV_GPU_UTIL{instance="node-a",gpu="0",UUID="GPU-a0",modelName="NVIDIA H100 80GB HBM3"} 0+0.25x240
  DCGM_FI_DEV_FB_USED{instance="node-a",gpu="0",UUID="GPU-a0",modelName="NVIDIA H100 80GB HBM3"} 40000x240
  DCGM_FI_DEV_FB_TOTAL{instance="node-a",gpu="0",UUID="GPU-a0",modelName="NVIDIA H100 80GB HBM3"} 81559x240
  DCGM_FI_DEV_GPU_TEMP{instance="node-a",gpu="0",UUID="GPU-a0",modelName="NVIDIA H100 80GB HBM3"} 71x240
  DCGM_FI_DEV_POWER_USAGE{instance="node-a",gpu="0",UUID="GPU-a0",modelName="NVIDIA H100 80GB HBM3"} 612.5x240
  DCGM_FI_DEV_XID_ERRORS{instance="node-a",gpu="0",UUID="GPU-a0",modelName="NVIDIA H100 80GB HBM3",err_code="0",err_msg="No Error"} 0x240
  gpuscope_gpu_clock_event_active{instance="node-a",gpu="0",UUID="GPU-a0",reason="sw_thermal"} 1x240
  gpuscope_gpu_clock_event_active{instance="node-a",gpu="0",UUID="GPU-a0",reason="gpu_idle"} 0x240
  gpuscope_gpu_container_memory_used_bytes{instance="node-a",gpu="0",UUID="GPU-a0",workload="train",id="/t"} 1073741824x240
  gpuscope_gpu_container_sm_utilization_percent{instance="node-a",gpu="0",UUID="GPU-a0",workload="train",id="/t"} 55x240
  gpuscope_gpu_container_memory_used_bytes{instance="node-a",gpu="0",UUID="GPU-a0",workload="<script>alert(1)</script>",id="/x"} 2048x240
  gpu:bottleneck:class{instance="node-a",gpu="0",UUID="GPU-a0",class="compute-bound"} 1x240
  DCGM_FI_PROF_GR_ENGINE_ACTIVE{instance="node-a",gpu="1",UUID="GPU-a1",GPU_I_ID="1",modelName="NVIDIA H100 80GB HBM3"} 0.8x240
  DCGM_FI_PROF_GR_ENGINE_ACTIVE{instance="node-a",gpu="1",UUID="GPU-a1",GPU_I_ID="5",modelName="NVIDIA H100 80GB HBM3"} 0.2x240
  DCGM_FI_DEV_FB_USED{instance="node-a",gpu="1",UUID="GPU-a1",GPU_I_ID="1",modelName="NVIDIA H100 80GB HBM3"} 100x240
  DCGM_FI_DEV_FB_USED{instance="node-a",gpu="1",UUID="GPU-a1",GPU_I_ID="5",modelName="NVIDIA H100 80GB HBM3"} 50x240
  DCGM_FI_DEV_FB_FREE{instance="node-a",gpu="1",UUID="GPU-a1",GPU_I_ID="1",modelName="NVIDIA H100 80GB HBM3"} 900x240
  DCGM_FI_DEV_FB_FREE{instance="node-a",gpu="1",UUID="GPU-a1",GPU_I_ID="5",modelName="NVIDIA H100 80GB HBM3"} 950x240
  DCGM_FI_DEV_GPU_TEMP{instance="node-a",gpu="1",UUID="GPU-a1",modelName="NVIDIA H100 80GB HBM3"} 50x240
  gpu:bottleneck:class{instance="node-a",gpu="1",UUID="GPU-a1",GPU_I_ID="1",class="compute-bound"} 1x240
  gpu:bottleneck:class{instance="node-a",gpu="1",UUID="GPU-a1",GPU_I_ID="5",class="idle"} 1x240
  DCGM_FI_DEV_XID_ERRORS{instance="node-b",gpu="0",UUID="GPU-b0",modelName="NVIDIA A100",err_code="79",err_msg="GPU has fallen off the bus"} 79x240
  up{instance="node-a",job="gpu"} 1x240
  up{instance="node-b",job="gpu"} 1x240
  up{instance="node-c",job="cadvisor"} 1x240
`

var evalAt = time.Unix(3600, 0)

type overviewFixture struct {
	h   *Handler
	srv *httptest.Server
}

func newOverview(t *testing.T, load string, q storage.Queryable, o OverviewOptions) overviewFixture {
	t.Helper()
	st := promqltest.LoadedStorage(t, load)
	if q == nil {
		q = st
	}
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	if o.Now == nil {
		o.Now = func() time.Time { return evalAt }
	}
	if o.ScrapeInterval == nil {
		o.ScrapeInterval = func() time.Duration { return 15 * time.Second }
	}
	rm := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(engine, st),
		AppendableV2: st,
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Parser:       parser.NewParser(parser.Options{}),
	})
	go rm.Run() // groups wait for it; Stop waits for the groups
	t.Cleanup(rm.Stop)
	h := New(Options{
		ListenAddress: "127.0.0.1:0",
		API: &APIOptions{QueryEngine: engine, Queryable: sampleAndChunk{q}, RuleManager: rm,
			BuildInfo: &apiv1.PrometheusVersion{Version: "1.2.3"}, Config: func() promconfig.Config { return promconfig.DefaultConfig },
			Parser: parser.NewParser(parser.Options{})},
		Status:   func() []StatusLine { return []StatusLine{{Name: "Node", Value: "node-a"}} },
		Overview: o,
	})
	h.SetReady(true)
	srv := httptest.NewServer(h.echo)
	t.Cleanup(srv.Close)
	return overviewFixture{h: h, srv: srv}
}

// sampleAndChunk lets a plain Queryable stand where the API takes a
// SampleAndChunkQueryable; the page reads samples only.
type sampleAndChunk struct{ storage.Queryable }

func (sampleAndChunk) ChunkQuerier(int64, int64) (storage.ChunkQuerier, error) {
	panic("not used by the overview page")
}

// cardField returns the element of a card's field.
func cardField(t *testing.T, body, instance, gpu, name string) string {
	t.Helper()
	start := strings.Index(body, `<section class="gpu-card" data-instance="`+instance+`" data-gpu="`+gpu+`"`)
	require.NotEqual(t, -1, start, "card %s/%s in\n%s", instance, gpu, body)
	card := body[start:]
	card = card[:strings.Index(card, "</section>")]
	m := regexp.MustCompile(`<span data-field="` + name + `"[^>]*>[^<]*`).FindString(card)
	require.NotEmpty(t, m, "field %s in card\n%s", name, card)
	return m
}

func TestOverviewCards(t *testing.T) {
	f := newOverview(t, overviewLoad, nil, OverviewOptions{})
	code, body := get(t, f.srv.URL+"/")
	require.Equal(t, 200, code)
	require.Contains(t, body, `<meta http-equiv="refresh" content="15">`)
	require.Contains(t, body, `data-eval-time="3600.000"`)
	require.Equal(t, 3, strings.Count(body, `<section class="gpu-card"`), body)
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		require.Contains(t, body, `<section class="node" data-instance="`+n+`">`)
	}
	require.Contains(t, body, "No GPU series from this node.", "node-c scrapes but has no GPU")

	for _, tc := range []struct{ instance, gpu, field, want string }{
		{"node-a", "0", "model", `data-value="NVIDIA H100 80GB HBM3">NVIDIA H100 80GB HBM3`},
		{"node-a", "0", "utilization", `data-value="60">60 %`},
		{"node-a", "0", "memory-used", `data-value="41943040000">39.1 GiB`},
		{"node-a", "0", "memory-total", `data-value="85520809984">79.6 GiB`},
		{"node-a", "0", "temperature", `data-value="71">71 °C`},
		{"node-a", "0", "power", `data-value="612.5">612 W`},
		{"node-a", "0", "throttle", `data-value="1">sw_thermal`},
		{"node-a", "0", "last-xid", `data-value="0">none`},
		{"node-a", "0", "bottleneck", `data-value="compute-bound">compute-bound`},
		// MIG: the instances' average activity, their summed framebuffer.
		{"node-a", "1", "utilization", `data-value="50">50 %`},
		{"node-a", "1", "memory-used", `data-value="157286400">150.0 MiB`},
		{"node-a", "1", "memory-total", `data-value="2097152000">2.0 GiB`},
		{"node-a", "1", "power", `<span data-field="power">–`},
		{"node-a", "1", "bottleneck", `data-value="GI 1 compute-bound,GI 5 idle">GI 1 compute-bound, GI 5 idle`},
		{"node-b", "0", "last-xid", `data-value="79" class="bad">79 GPU has fallen off the bus`},
		{"node-b", "0", "throttle", `data-value="0">none`},
	} {
		t.Run(tc.instance+"/"+tc.gpu+"/"+tc.field, func(t *testing.T) {
			require.Contains(t, cardField(t, body, tc.instance, tc.gpu, tc.field), tc.want)
		})
	}
	require.Contains(t, body, `<li class="gpu-workload" data-workload="train"><a href="workload/train"><code>train</code></a> <span data-field="workload-memory" data-value="1073741824">1.0 GiB</span> · SM <span data-field="workload-sm" data-value="55">55 %</span></li>`)
	require.Contains(t, body, `<h3><a href="gpu/node-a/0">GPU 0</a> `, "a card links to its GPU's page")
	require.Equal(t, 2, strings.Count(body, `<svg class="sparkline"`), "none for the GPU without utilisation or memory")
	// 60 points of utilisation, one a minute: 1 % to 60 %, a step of
	// 1 (5 %) every 5 minutes; memory flat at 49 %.
	d := regexp.MustCompile(`<path class="u" d="([^"]*)"`).FindStringSubmatch(body)[1]
	require.True(t, strings.HasPrefix(d, "M0 20h1l1-1h4l1-1h4"), d)
	x, y := followPath(t, d)
	require.Equal(t, []int{59, 8}, []int{x, y}, "from 1 %% to 60 %%: %s", d)
	require.Contains(t, body, `<path class="m" d="M0 10h59"/>`, "GPU 0 uses 49 % of FB_TOTAL")
	require.Contains(t, body, `<code data-query-field="utilization">`)
	require.Contains(t, body, `<td>Node</td><td><code>node-a</code></td>`, "the status lines stay")
	require.Contains(t, body, `<section id="alerts">`)
	// The About table ends with what the page found, after the caller's
	// lines (no scrape manager here: no Targets line).
	require.Contains(t, body, `<tr><td>Node</td><td><code>node-a</code></td></tr>`+
		`<tr><td>GPUs</td><td><code>1 on node-b, 2 on node-a</code></td></tr>`+
		`<tr><td>Alerts</td><td><code>none firing</code></td></tr></table>`)
	_, filtered := get(t, f.srv.URL+"/?node=node-b")
	require.Contains(t, filtered, `<td>GPUs</td><td><code>1 on node-b, 2 on node-a</code></td>`, "all nodes, whatever ?node= shows")
}

// TestOverviewValuesMatchTheAPI: each data-value is what the documented
// query returns at the page's evaluation time.
// followPath follows a sparkline's path to its last point.
func followPath(t *testing.T, d string) (x, y int) {
	t.Helper()
	m := regexp.MustCompile(`^M(\d+) (\d+)`).FindStringSubmatch(d)
	require.NotNil(t, m, d)
	x, _ = strconv.Atoi(m[1])
	y, _ = strconv.Atoi(m[2])
	for _, step := range regexp.MustCompile(`h(\d+)|l(\d+) ?(-?\d+)`).FindAllStringSubmatch(d[len(m[0]):], -1) {
		if step[1] != "" {
			n, _ := strconv.Atoi(step[1])
			x += n
			continue
		}
		n, _ := strconv.Atoi(step[2])
		dy, _ := strconv.Atoi(step[3])
		x, y = x+n, y+dy
	}
	return x, y
}

func TestOverviewValuesMatchTheAPI(t *testing.T) {
	f := newOverview(t, overviewLoad, nil, OverviewOptions{})
	_, body := get(t, f.srv.URL+"/")
	for _, q := range regexp.MustCompile(`<code data-query-field="(utilization|memory-used|memory-total|temperature)">([^<]*)<`).FindAllStringSubmatch(body, -1) {
		_, res := get(t, f.srv.URL+"/api/v1/query?time=3600&query="+url.QueryEscape(html.UnescapeString(q[2])))
		require.Contains(t, res, `"success"`, q[2])
		for _, gpu := range []string{"0", "1"} {
			v := regexp.MustCompile(`data-value="([^"]*)"`).FindStringSubmatch(cardField(t, body, "node-a", gpu, q[1]))[1]
			require.Contains(t, res, `"gpu":"`+gpu+`"`)
			require.Regexp(t, `"gpu":"`+gpu+`","instance":"node-a"\},"value":\[3600,"`+regexp.QuoteMeta(v)+`"\]`, res, q[1])
		}
	}
}

func TestOverviewEscapesLabelValues(t *testing.T) {
	load := overviewLoad + `  DCGM_FI_DEV_GPU_TEMP{instance="\"><img src=x onerror=alert(2)>",gpu="0",UUID="u",modelName="<b>bold</b>"} 1x240` + "\n"
	f := newOverview(t, load, nil, OverviewOptions{})
	code, body := get(t, f.srv.URL+"/")
	require.Equal(t, 200, code)
	require.NotContains(t, body, "<script>alert(1)")
	require.NotContains(t, body, "<img src=x")
	require.NotContains(t, body, "<b>bold</b>")
	require.Contains(t, body, `data-workload="&lt;script&gt;alert(1)&lt;/script&gt;"><a href="workload/%3Cscript%3Ealert%281%29%3C%2Fscript%3E"><code>&lt;script&gt;alert(1)&lt;/script&gt;</code></a>`)
	require.Contains(t, body, `<a href="gpu/%22%3E%3Cimg%20src=x%20onerror=alert%282%29%3E/0">`, "the node in the GPU page's link is escaped")
	require.Contains(t, body, `data-instance="&#34;&gt;&lt;img src=x onerror=alert(2)&gt;"`)
	require.Contains(t, body, `&lt;b&gt;bold&lt;/b&gt;`)
}

func TestOverviewNodeFilter(t *testing.T) {
	f := newOverview(t, overviewLoad, nil, OverviewOptions{})
	code, body := get(t, f.srv.URL+"/?node=node-b")
	require.Equal(t, 200, code)
	require.Equal(t, 1, strings.Count(body, `<section class="gpu-card"`))
	require.Contains(t, body, `data-instance="node-b" data-gpu="0"`)
	require.NotContains(t, body, `<section class="node" data-instance="node-a">`)

	code, body = get(t, f.srv.URL+"/?node=nope%3Cx%3E")
	require.Equal(t, 404, code)
	require.Contains(t, body, `<section id="unknown-node"><h2>No node named “nope&lt;x&gt;”</h2>`)
	require.Contains(t, body, `Known nodes: <a href="?node=node-a">node-a</a> <a href="?node=node-b">node-b</a> <a href="?node=node-c">node-c</a>`)
	require.NotContains(t, body, `class="gpu-card"`)
}

func TestOverviewEmptyTSDB(t *testing.T) {
	start := time.Now()
	f := newOverview(t, "", nil, OverviewOptions{Now: func() time.Time { return start.Add(4 * time.Second) }})
	f.h.started = start
	code, body := get(t, f.srv.URL+"/")
	require.Equal(t, 200, code)
	require.Contains(t, body, `<p id="collecting" class="notice">collecting, first data in 11 s</p>`)
	require.NotContains(t, body, `class="gpu-card"`)
	require.Contains(t, body, `<td>GPUs</td><td><code>none seen yet (first data one scrape interval after start)</code></td>`)

	f.h.SetReady(false)
	_, body = get(t, f.srv.URL+"/")
	require.Contains(t, body, "starting (TSDB opening, WAL replay)")
	require.NotContains(t, body, `<td>GPUs</td>`, "nothing to read until the TSDB is open")
}

// TestOverviewNoGPUBackend: a node whose collector runs without GPUs says
// which backend, instead of waiting for data.
func TestOverviewNoGPUBackend(t *testing.T) {
	f := newOverview(t, "load 15s\n  gpuscope_gpu_collector_backend_info{instance=\"node-a\",backend=\"none\"} 1x240\n", nil, OverviewOptions{})
	_, body := get(t, f.srv.URL+"/")
	require.Contains(t, body, `<td>GPUs</td><td><code>none (backend none)</code></td>`)
}

func TestOverviewDownTargets(t *testing.T) {
	target := func(job, instance string, err error, scraped bool) *scrape.Target {
		tg := scrape.NewTarget(labels.FromStrings(
			"__address__", instance+":9089", "__scheme__", "http", "__metrics_path__", "/metrics/gpu", "job", job, "instance", instance,
		), &promconfig.ScrapeConfig{JobName: job}, nil, nil)
		if scraped {
			tg.Report(evalAt.Add(-30*time.Second), time.Second, err)
		}
		return tg
	}
	refused := errors.New("connection refused")
	active := map[string][]*scrape.Target{
		"node-gpu": {target("node-gpu", "b", refused, true), target("node-gpu", "a", nil, true), target("node-gpu", "c", nil, false)},
		"gpu":      {target("gpu", "a", errors.New("EOF"), true)},
	}
	for _, tc := range []struct {
		node string
		want []targetView
	}{
		{"", []targetView{
			{Job: "gpu", Instance: "a", URL: "http://a:9089/metrics/gpu", Error: "EOF", Ago: 30 * time.Second, Scraped: true},
			{Job: "node-gpu", Instance: "b", URL: "http://b:9089/metrics/gpu", Error: "connection refused", Ago: 30 * time.Second, Scraped: true},
		}},
		{"b", []targetView{
			{Job: "node-gpu", Instance: "b", URL: "http://b:9089/metrics/gpu", Error: "connection refused", Ago: 30 * time.Second, Scraped: true},
		}},
	} {
		t.Run("node="+tc.node, func(t *testing.T) {
			down, line := downTargets(active, tc.node, evalAt)
			require.Equal(t, tc.want, down)
			require.Equal(t, "2 up, 2 down (gpu a: EOF; node-gpu b: connection refused)", line, "all nodes; not yet scraped is up")
		})
	}
	_, line := downTargets(map[string][]*scrape.Target{"gpu": {target("gpu", "a", nil, true)}}, "", evalAt)
	require.Equal(t, "1 up, 0 down", line)
}

// slowQueryable holds every select of one metric until the query's
// context ends: a query that times out.
type slowQueryable struct {
	storage.Queryable
	metric string
}

func (s slowQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	q, err := s.Queryable.Querier(mint, maxt)
	return slowQuerier{Querier: q, metric: s.metric}, err
}

type slowQuerier struct {
	storage.Querier
	metric string
}

func (s slowQuerier) Select(ctx context.Context, sorted bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	for _, m := range ms {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual && m.Value == s.metric {
			<-ctx.Done()
			return storage.ErrSeriesSet(ctx.Err())
		}
	}
	return s.Querier.Select(ctx, sorted, hints, ms...)
}

func TestOverviewQueryTimeout(t *testing.T) {
	st := promqltest.LoadedStorage(t, overviewLoad)
	f := newOverview(t, overviewLoad, slowQueryable{Queryable: st, metric: "DCGM_FI_DEV_GPU_UTIL"}, OverviewOptions{QueryTimeout: 200 * time.Millisecond})
	code, body := get(t, f.srv.URL+"/")
	require.Equal(t, 200, code)
	require.Contains(t, cardField(t, body, "node-a", "0", "utilization"), `class="error" data-error="query timed out">query timed out`)
	require.Contains(t, cardField(t, body, "node-a", "0", "temperature"), `data-value="71"`, "the other fields are shown")
	require.NotContains(t, body, `<svg class="sparkline"`, "the utilisation sparkline timed out too")
}

func TestOverviewAlertsAndHealth(t *testing.T) {
	f := newOverview(t, overviewLoad, nil, OverviewOptions{Health: func(context.Context) []doctor.Check {
		return []doctor.Check{
			{Name: "nvml", Status: "warn", Summary: "no NVIDIA driver found, GPU metrics off", Hint: "install the driver"},
			{Name: "data-dir", Status: "ok", Summary: "writable, <b>90%</b> free"},
		}
	}})
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yml")
	require.NoError(t, os.WriteFile(file, []byte(`groups:
- name: test
  rules:
  - alert: GPUHot
    expr: max by (instance, gpu) (DCGM_FI_DEV_GPU_TEMP) > 60
    labels: {workload: "<i>job</i>"}
    annotations: {summary: "GPU {{ $labels.gpu }} on {{ $labels.instance }} is <b>hot</b>"}
  - alert: GPUWarm
    expr: max by (instance, gpu) (DCGM_FI_DEV_GPU_TEMP) > 40
    for: 1h
`), 0o644))
	rm := f.h.opts.API.RuleManager
	require.NoError(t, rm.Update(time.Hour, []string{file}, labels.EmptyLabels(), "", nil))
	for _, g := range rm.RuleGroups() {
		g.Eval(context.Background(), evalAt.Add(-2*time.Minute))
		g.Eval(context.Background(), evalAt.Add(-time.Minute))
	}
	code, body := get(t, f.srv.URL+"/")
	require.Equal(t, 200, code)
	require.Contains(t, body, `<li class="alert firing" data-alertname="GPUHot" data-state="firing"><b>GPUHot</b> <span class="state">firing</span> for 2m · node node-a · workload <code>&lt;i&gt;job&lt;/i&gt;</code><br>GPU 0 on node-a is &lt;b&gt;hot&lt;/b&gt;</li>`)
	require.Equal(t, 2, strings.Count(body, `data-alertname="GPUWarm" data-state="pending"`))
	require.Less(t, strings.Index(body, `data-alertname="GPUHot"`), strings.Index(body, `data-alertname="GPUWarm"`), "firing first")
	require.Contains(t, body, `<li class="check warn" data-check="nvml" data-status="warn"><b>warn</b> nvml: no NVIDIA driver found, GPU metrics off <span class="hint">install the driver</span></li>`)
	require.Contains(t, body, `writable, &lt;b&gt;90%&lt;/b&gt; free`)

	require.Contains(t, body, `<td>Alerts</td><td><code>1 firing: GPUHot on node-a gpu 0</code></td>`, "firing only")

	_, body = get(t, f.srv.URL+"/?node=node-b")
	require.NotContains(t, body, `data-alertname=`, "node-b's GPU has no temperature")
	require.Contains(t, body, `<td>Alerts</td><td><code>1 firing: GPUHot on node-a gpu 0</code></td>`, "all nodes, whatever ?node= shows")
}

// TestOverviewAgent: `gpuscope agent` shows its collector's current
// values in the same cards, without TSDB, rules or sparklines.
func TestOverviewAgent(t *testing.T) {
	reg := prometheus.NewRegistry()
	gl := []string{"gpu", "UUID", "modelName"}
	util := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_GPU_UTIL"}, gl)
	used := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_FB_USED"}, append(gl, "GPU_I_ID"))
	free := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_FB_FREE"}, append(gl, "GPU_I_ID"))
	wl := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuscope_gpu_container_memory_used_bytes"}, []string{"gpu", "UUID", "workload"})
	reg.MustRegister(util, used, free, wl)
	util.WithLabelValues("0", "GPU-0", "NVIDIA L4").Set(37)
	used.WithLabelValues("0", "GPU-0", "NVIDIA L4", "").Set(1000)
	free.WithLabelValues("0", "GPU-0", "NVIDIA L4", "").Set(3000)
	wl.WithLabelValues("0", "GPU-0", "<script>x</script>").Set(1 << 30)

	h := New(Options{ListenAddress: "127.0.0.1:0", Overview: OverviewOptions{Local: reg, Node: "ws1"},
		Status: func() []StatusLine { return []StatusLine{{Name: "Mode", Value: "agent"}} }})
	h.SetReady(true)
	srv := httptest.NewServer(h.echo)
	t.Cleanup(srv.Close)
	code, body := get(t, srv.URL+"/")
	require.Equal(t, 200, code)
	require.Equal(t, 1, strings.Count(body, `<section class="gpu-card" data-instance="ws1" data-gpu="0" data-uuid="GPU-0">`), body)
	require.Contains(t, cardField(t, body, "ws1", "0", "utilization"), `data-value="37"`)
	require.Contains(t, cardField(t, body, "ws1", "0", "memory-used"), `data-value="1048576000"`)
	require.Contains(t, cardField(t, body, "ws1", "0", "memory-total"), `data-value="4194304000"`, "used + free without FB_TOTAL")
	require.Contains(t, cardField(t, body, "ws1", "0", "model"), `NVIDIA L4`)
	require.Contains(t, body, `data-workload="&lt;script&gt;x&lt;/script&gt;"`)
	require.NotContains(t, body, `<svg class="sparkline"`)
	require.NotContains(t, body, `data-field="bottleneck"`)
	require.NotContains(t, body, "api/v1/targets")
	require.Contains(t, body, "agent")
	require.NotContains(t, body, `<td>GPUs</td>`, "the agent's About table is its own lines")

	code, _ = get(t, srv.URL+"/?node=other")
	require.Equal(t, 404, code)
}

// TestGathererSourceMatchesPromQL: the agent's answer to each of the
// page's queries, the engine over one gathering of its collector, agrees
// with serve's, the engine over the same samples in a TSDB.
func TestGathererSourceMatchesPromQL(t *testing.T) {
	reg := prometheus.NewRegistry()
	util := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_GPU_UTIL"}, []string{"gpu", "UUID"})
	act := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}, []string{"gpu", "UUID", "GPU_I_ID"})
	clk := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuscope_gpu_clock_event_active"}, []string{"gpu", "UUID", "reason"})
	used := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_FB_USED"}, []string{"gpu", "UUID", "GPU_I_ID"})
	free := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_FB_FREE"}, []string{"gpu", "UUID", "GPU_I_ID"})
	xid := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_XID_ERRORS"}, []string{"gpu", "UUID", "err_code", "err_msg"})
	wl := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuscope_gpu_container_memory_used_bytes"}, []string{"gpu", "UUID", "workload"})
	reg.MustRegister(util, act, clk, used, free, xid, wl)
	util.WithLabelValues("0", "a").Set(10)
	act.WithLabelValues("0", "a", "1").Set(0.9) // `or`: GPU 0 has GPU_UTIL
	act.WithLabelValues("1", "b", "1").Set(0.5)
	act.WithLabelValues("1", "b", "2").Set(0.25)
	act.WithLabelValues("2", "c", "").Set(0.5) // not a MIG instance
	clk.WithLabelValues("0", "a", "power_cap").Set(1)
	clk.WithLabelValues("0", "a", "gpu_idle").Set(0)
	used.WithLabelValues("1", "b", "1").Set(100)
	used.WithLabelValues("1", "b", "2").Set(50)
	free.WithLabelValues("1", "b", "1").Set(900)
	xid.WithLabelValues("1", "b", "79", `GPU has "fallen" off the bus\`).Set(79)
	wl.WithLabelValues("0", "a", "<x>").Set(1 << 30)

	var load strings.Builder
	load.WriteString("load 15s\n")
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			b := labels.NewBuilder(labels.FromStrings("__name__", mf.GetName(), "instance", "n"))
			for _, lp := range m.GetLabel() {
				b.Set(lp.GetName(), lp.GetValue())
			}
			load.WriteString("  " + b.Labels().String() + " " + formatNum(m.GetGauge().GetValue()) + "\n")
		}
	}
	st := promqltest.LoadedStorage(t, load.String())
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	es := engineSource{engine: engine, queryable: st, ts: time.Unix(0, 0), timeout: time.Minute}
	// The agent's: its handler's engine over a gathering at the page's
	// evaluation time.
	h := New(Options{Overview: OverviewOptions{Local: reg, Node: "n"}})
	q, err := gather(reg, time.Unix(0, 0), labels.FromStrings("instance", "n"))
	require.NoError(t, err)
	gs := engineSource{engine: h.localEngine, queryable: q, ts: time.Unix(0, 0), timeout: time.Minute}
	for _, q := range []fieldQuery{qUtil, qThrottle, qCards, qMemTotal, qMemUsed, qTemp, qPower, qXID, qClass, qWLMem, qWLSM} {
		t.Run(q.promQL(), func(t *testing.T) {
			want, err := es.instant(context.Background(), q, nil)
			require.NoError(t, err)
			got, err := gs.instant(context.Background(), q, nil)
			require.NoError(t, err)
			require.ElementsMatch(t, toMap(want), toMap(got))
		})
	}
}

func toMap(ss []sample) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.labels.String() + "=" + formatNum(s.v)
	}
	return out
}

func TestOverviewQueriesParse(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	extra := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "instance", `a"b\c`)}
	for _, q := range []string{qUtil.promQL(extra...), qMemTotal.promQL(extra...), qThrottle.promQL(), memPercent(extra)} {
		_, err := p.ParseExpr(q)
		require.NoError(t, err, q)
	}
	require.Equal(t, `max by (instance, gpu, UUID) (DCGM_FI_DEV_GPU_UTIL{instance="a\"b\\c"}) or avg by (instance, gpu, UUID) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_ID!="", instance="a\"b\\c"}) * 100`, qUtil.promQL(extra...))
}

func TestSparkPath(t *testing.T) {
	end := time.Unix(3600, 0)
	at := func(min int, v float64) point {
		return point{t: end.Add(time.Duration(min-59) * time.Minute).UnixMilli(), v: v}
	}
	for _, tc := range []struct {
		name string
		ps   []point
		want string
	}{
		{"none", nil, ""},
		{"lone point", []point{at(59, 50)}, "M59 10h.5"},
		{"flat", []point{at(0, 0), at(1, 0), at(2, 0)}, "M0 20h2"},
		{"equal steps are one line", []point{at(0, 0), at(1, 5), at(2, 10), at(3, 10), at(4, 0)}, "M0 20l2-2h1l1 2"},
		{"a gap starts anew", []point{at(0, 100), at(1, 100), at(5, 50), at(6, 150)}, "M0 0h1M5 10l1-10"},
		{"lone point before a gap", []point{at(0, 0), at(2, 0), at(3, 0)}, "M0 20h.5M2 20h1"},
		{"NaN is a gap", []point{at(0, 0), at(1, math.NaN()), at(2, 0)}, "M0 20h.5M2 20h.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, sparkPath(tc.ps, sparkRange{start: end.Add(-59 * time.Minute), step: time.Minute, n: 60}))
		})
	}
}

// TestOverviewGrafanaLinks: with web.grafana_url set, each built-in
// dashboard links to it by its uid (and still offers its JSON); without,
// only the JSON downloads.
func TestOverviewGrafanaLinks(t *testing.T) {
	set, err := dashboards.Build()
	require.NoError(t, err)
	f := newOverview(t, overviewLoad, nil, OverviewOptions{GrafanaURL: func() string { return "https://grafana.example:3000/" }})
	f.h.MountDashboards(set)
	_, body := get(t, f.srv.URL+"/")
	require.NotEmpty(t, set.List())
	for _, d := range set.List() {
		require.Contains(t, body, `<a class="grafana" href="https://grafana.example:3000/d/`+d.UID+`">`, d.UID)
		require.Contains(t, body, `href="api/dashboards/`+d.UID+`" download="`+d.UID+`.json">JSON</a>`, d.UID)
	}

	f = newOverview(t, overviewLoad, nil, OverviewOptions{GrafanaURL: func() string { return "" }})
	f.h.MountDashboards(set)
	_, body = get(t, f.srv.URL+"/")
	require.NotContains(t, body, `class="grafana"`, "no Grafana configured: no links to one")
	require.Contains(t, body, `href="api/dashboards/`+set.List()[0].UID+`" download=`)
}
