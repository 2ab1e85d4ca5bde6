package web

import (
	"context"
	"encoding/json"
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/notifier"
	promrules "github.com/prometheus/prometheus/rules"
	"github.com/stretchr/testify/require"
)

// apiAnswer is what /api/v1/query or query_range says about q.
type apiAnswer struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

// vector is a vector result's series.
func (a apiAnswer) vector(t *testing.T) []struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
} {
	t.Helper()
	var v []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	require.NoError(t, json.Unmarshal(a.Data.Result, &v))
	return v
}

func askAPI(t *testing.T, u string) (int, apiAnswer) {
	t.Helper()
	code, body := get(t, u)
	var a apiAnswer
	require.NoError(t, json.Unmarshal([]byte(body), &a), body)
	return code, a
}

var tableRowRe = regexp.MustCompile(`<tr class="row"><td><code>([^<]*)</code></td><td data-value="([^"]*)">`)

// TestGraphTable: the table tab is /api/v1/query at the panel's end, one
// row per series with its value as the API writes it.
func TestGraphTable(t *testing.T) {
	f := newHistory(t)
	for _, tc := range []struct {
		expr, typ string
		rows      int
	}{
		{`DCGM_FI_DEV_GPU_TEMP`, "vector", 3},
		{`sum by (gpu) (DCGM_FI_DEV_FB_USED) * 2^20`, "vector", 2},
		{`1 + 1`, "scalar", 1},
		{`"gpu"`, "string", 1},
		{`DCGM_FI_DEV_GPU_TEMP{gpu="0"}[3m]`, "matrix", 1},
		{`absent(nothing)`, "vector", 1},
		{`nothing`, "vector", 0},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			code, body := get(t, f.srv.URL+"/graph?"+url.Values{"g0.expr": {tc.expr}, "g0.tab": {"1"}}.Encode())
			require.Equal(t, 200, code, body)
			require.Contains(t, body, `data-tab="table"`)
			require.Contains(t, body, `<table class="result" data-result-type="`+tc.typ+`">`)
			rows := tableRowRe.FindAllStringSubmatch(body, -1)
			require.Len(t, rows, tc.rows)
			if tc.rows == 0 {
				require.Contains(t, body, "Empty query result")
				return
			}
			_, a := askAPI(t, f.srv.URL+"/api/v1/query?"+url.Values{"query": {tc.expr}, "time": {"21600"}}.Encode())
			require.Equal(t, tc.typ, a.Data.ResultType)
			if tc.typ != "vector" {
				return
			}
			for i, r := range a.vector(t) {
				require.Equal(t, r.Value[1], html.UnescapeString(rows[i][2]), "row %d's value", i)
				require.Equal(t, metricOf(r.Metric).String(), html.UnescapeString(rows[i][1]), "written as Prometheus's page and client_golang write a series")
			}
		})
	}
	_, body := get(t, f.srv.URL+"/graph?g0.expr=1%2B1&g0.tab=1")
	require.Contains(t, body, `<td><code>scalar</code></td><td data-value="2">2</td>`)
	_, body = get(t, f.srv.URL+"/graph?g0.expr=DCGM_FI_DEV_GPU_TEMP{gpu=%220%22}[3m]&g0.tab=table")
	require.Contains(t, body, `70 @21480<br>70 @21540<br>70 @21600<br>`, "a range vector's samples with their times")
}

// TestGraphGraph: the graph tab is /api/v1/query_range over
// g0.range_input to g0.end_input at Prometheus's own step (a 250th of
// the range, whole seconds), or the URL's.
func TestGraphGraph(t *testing.T) {
	f := newHistory(t)
	for _, tc := range []struct {
		params url.Values
		step   float64
	}{
		{url.Values{"g0.range_input": {"6h"}, "g0.end_input": {"1970-01-01 06:00:00"}}, 86},
		{url.Values{"g0.range_input": {"1h"}}, 14},
		{url.Values{"g0.range_input": {"6h"}, "g0.res_type": {"fixed"}, "g0.res_step": {"300"}}, 300},
		{url.Values{"g0.range_input": {"6h"}, "g0.res_type": {"auto"}, "g0.res_density": {"low"}}, 216},
		{url.Values{"g0.range_input": {"2h"}, "g0.step_input": {"60"}, "g0.moment_input": {"1970-01-01 05:00:00"}}, 60},
	} {
		t.Run(tc.params.Encode(), func(t *testing.T) {
			tc.params.Set("g0.expr", `DCGM_FI_DEV_FB_USED{gpu="0"} * 2^20`)
			tc.params.Set("g0.tab", "0")
			code, body := get(t, f.srv.URL+"/graph?"+tc.params.Encode())
			require.Equal(t, 200, code, body)
			fig := figure(t, body, "g0")
			m := regexp.MustCompile(`<li class="series s0" data-series="([^"]*)" data-values="([^"]*)"`).FindStringSubmatch(fig)
			require.NotNil(t, m, fig)
			require.Equal(t, `{UUID="GPU-0", gpu="0", instance="n1", modelName="NVIDIA H100 80GB HBM3"}`, html.UnescapeString(m[1]), "the series' labels, as Prometheus writes them")
			end := historyEnd
			if v := tc.params.Get("g0.moment_input"); v != "" {
				end, _ = time.Parse("2006-01-02 15:04:05", v)
			}
			rng, _ := time.ParseDuration(tc.params.Get("g0.range_input"))
			a := pageAxis{start: unixSeconds(end.Add(-rng)), end: unixSeconds(end), step: tc.step, points: int(rng.Seconds()/tc.step) + 1}
			vs, _ := legendValues(t, body, "g0", html.UnescapeString(m[1]))
			sameFloats(t, only(t, queryRange(t, f.srv.URL, tc.params.Get("g0.expr"), a)), vs, "the graph's points")
			require.Contains(t, body, `<svg class="graph"`)
		})
	}
}

// TestGraphErrors: a bad expression or parameter shows the error as the
// API words it, with its status; the form keeps what was typed.
func TestGraphErrors(t *testing.T) {
	f := newHistory(t)
	for _, tc := range []struct {
		name   string
		params url.Values
		code   int
		typ    string
		// api is the API request whose error the page must show; "" when
		// the parameter is the page's own (Prometheus's UI checks it).
		api, want string
	}{
		{"unclosed", url.Values{"g0.expr": {`rate(x[5m]`}, "g0.tab": {"1"}}, 400, "bad_data", "/api/v1/query?query=" + url.QueryEscape(`rate(x[5m]`), ""},
		{"unclosed graph", url.Values{"g0.expr": {`sum(up`}, "g0.tab": {"0"}}, 400, "bad_data",
			"/api/v1/query_range?start=0&end=1&step=1&query=" + url.QueryEscape(`sum(up`), ""},
		{"range vector in a graph", url.Values{"g0.expr": {`up[5m]`}, "g0.tab": {"0"}}, 400, "bad_data",
			"/api/v1/query_range?start=0&end=1&step=1&query=" + url.QueryEscape(`up[5m]`), ""},
		{"many-to-many", url.Values{"g0.expr": {`DCGM_FI_DEV_GPU_TEMP + on() DCGM_FI_DEV_GPU_TEMP`}, "g0.tab": {"1"}}, 422, "execution",
			"/api/v1/query?time=21600&query=" + url.QueryEscape(`DCGM_FI_DEV_GPU_TEMP + on() DCGM_FI_DEV_GPU_TEMP`), ""},
		{"bad range", url.Values{"g0.expr": {`up`}, "g0.range_input": {"an hour"}}, 400, "bad_data", "", `invalid parameter &#34;g0.range_input&#34;: cannot parse &#34;an hour&#34; to a valid duration`},
		{"bad end", url.Values{"g0.expr": {`up`}, "g0.end_input": {"tomorrow"}}, 400, "bad_data", "",
			`invalid parameter &#34;g0.end_input&#34;: cannot parse &#34;tomorrow&#34; to a valid timestamp (2006-01-02 15:04:05 in UTC, RFC 3339 or Unix seconds)`},
		{"bad tab", url.Values{"g0.expr": {`up`}, "g0.tab": {"9"}}, 400, "bad_data", "", `invalid parameter &#34;g0.tab&#34;: &#34;9&#34; is neither graph (0) nor table (1)`},
		{"too many points", url.Values{"g0.expr": {`up`}, "g0.tab": {"0"}, "g0.res_type": {"fixed"}, "g0.res_step": {"0.1"}}, 400, "bad_data", "",
			"exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, f.srv.URL+"/graph?"+tc.params.Encode())
			require.Equal(t, tc.code, code, body)
			want := tc.want
			if tc.api != "" {
				apiCode, a := askAPI(t, f.srv.URL+tc.api)
				require.Equal(t, tc.code, apiCode, "the API's status")
				require.Equal(t, tc.typ, a.ErrorType)
				want = html.EscapeString(a.Error)
			}
			m := regexp.MustCompile(`<p class="error" id="error-0" data-error-type="([^"]*)">Error executing query: ([^<]*)</p>`).FindStringSubmatch(body)
			require.NotNil(t, m, body)
			require.Equal(t, tc.typ, m[1])
			require.Equal(t, html.UnescapeString(want), html.UnescapeString(m[2]), "the API's words")
			m = regexp.MustCompile(`<textarea name="g0.expr"[^>]*>([^<]*)</textarea>`).FindStringSubmatch(body)
			require.NotNil(t, m)
			require.Equal(t, tc.params.Get("g0.expr"), html.UnescapeString(m[1]), "the expression stays in the form")
			require.Contains(t, body, "<title>gpuscope · graph")
		})
	}
}

// TestGraphPanels: panels are read as Prometheus's page reads them, g0,
// g1, … up to the first without an expression; no parameter is an empty
// form.
func TestGraphPanels(t *testing.T) {
	f := newHistory(t)
	code, body := get(t, f.srv.URL+"/graph")
	require.Equal(t, 200, code)
	require.Contains(t, body, `<fieldset class="panel" id="panel-0" data-panel="0" data-tab="table" data-end="21600" data-range="3600" data-step="14">`)
	require.NotContains(t, body, `class="error"`)
	require.NotContains(t, body, `<table class="result"`)

	code, body = get(t, f.srv.URL+"/graph?g0.expr=up&g0.tab=1&g1.expr=DCGM_FI_DEV_GPU_TEMP&g1.tab=0&g3.expr=ignored")
	require.Equal(t, 200, code)
	require.Equal(t, 2, strings.Count(body, `<fieldset class="panel"`))
	require.Contains(t, body, `id="panel-1" data-panel="1" data-tab="graph" data-end="21600"`)
	require.Contains(t, body, `<figure class="chart" id="g1"`)
	// A tab link switches that panel only.
	require.Contains(t, body, `href="graph?g0.expr=up&amp;g0.tab=1&amp;g1.expr=DCGM_FI_DEV_GPU_TEMP&amp;g1.tab=table&amp;g3.expr=ignored"`)
	require.NotContains(t, body, "ignored</textarea>")
}

// TestGeneratorURLOpensGraph: the generatorURL Prometheus's rule manager
// gives an alert (rules.SendAlerts: <external URL>/graph?g0.expr=…&g0.tab=1)
// opens /graph with the alert's expression as a table.
func TestGeneratorURLOpensGraph(t *testing.T) {
	f := newHistory(t)
	var sent []*notifier.Alert
	notify := promrules.SendAlerts(senderFunc(func(as ...*notifier.Alert) { sent = append(sent, as...) }), f.srv.URL)
	expr := `max by (instance, gpu) (DCGM_FI_DEV_FB_USED) / max by (instance, gpu) (DCGM_FI_DEV_FB_TOTAL) > 0.5`
	notify(context.Background(), expr, &promrules.Alert{Labels: labels.FromStrings("alertname", "GPUMemoryAlmostFull"), FiredAt: historyEnd})
	require.Len(t, sent, 1)
	require.True(t, strings.HasPrefix(sent[0].GeneratorURL, f.srv.URL+"/graph?g0.expr="), sent[0].GeneratorURL)
	code, body := get(t, sent[0].GeneratorURL)
	require.Equal(t, 200, code, body)
	require.Contains(t, html.UnescapeString(body), expr+`</textarea>`)
	require.Contains(t, body, `data-tab="table"`)
	rows := tableRowRe.FindAllStringSubmatch(body, -1)
	require.Len(t, rows, 1, "GPU 0 is over half full at the end")
	require.Equal(t, `{gpu="0", instance="n1"}`, html.UnescapeString(rows[0][1]))
}

type senderFunc func(...*notifier.Alert)

func (f senderFunc) Send(as ...*notifier.Alert) { f(as...) }

func metricOf(m map[string]string) model.Metric {
	out := model.Metric{}
	for k, v := range m {
		out[model.LabelName(k)] = model.LabelValue(v)
	}
	return out
}
