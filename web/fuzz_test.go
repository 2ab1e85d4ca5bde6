package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"
	apiv1 "github.com/prometheus/prometheus/web/api/v1"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/query"
	"github.com/gpuscope/gpuscope/storage"
)

// fuzzQueryTimeout is --query.timeout for FuzzQueryAPI: short, so that an
// expensive input ends as a 503 rather than stalling the fuzzer.
const fuzzQueryTimeout = 5 * time.Second

// fuzzDataEnd is the end of the data FuzzQueryAPI queries (2026-01-01
// 02:00 UTC): fixed, so that the committed seeds' times find it.
var fuzzDataEnd = time.Unix(1767232800, 0)

// fuzzEndpoints are the read endpoints FuzzQueryAPI drives; the endpoint
// argument picks one modulo their number.
var fuzzEndpoints = []string{"query", "query_range", "series", "labels", "label_values"}

// newFuzzHandler builds the handler as serve does (gpuscope's PromQL
// engine, the API over a real TSDB behind storage.Ready, the body limit),
// ready, over the two hours of data before fuzzDataEnd: DCGM gauges for four GPUs every 15 s, a
// counter, a native histogram, NaN, ±Inf and a stale marker, and a series
// whose name needs UTF-8 quoting.
func newFuzzHandler(tb testing.TB) *Handler {
	tb.Helper()
	dir := tb.TempDir()
	db, err := storage.Open(storage.Options{Dir: dir, Retention: 24 * time.Hour})
	require.NoError(tb, err)
	tb.Cleanup(func() { db.Close() })

	now := fuzzDataEnd
	app := db.Appender(context.Background())
	gpus := []string{"0", "1", "2", "3"}
	for i, ts := 0, now.Add(-2*time.Hour); !ts.After(now); i, ts = i+1, ts.Add(15*time.Second) {
		t := ts.UnixMilli()
		for g, gpu := range gpus {
			_, err := app.Append(0, labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL", "gpu", gpu, "Hostname", "node-a", "UUID", "GPU-"+gpu), t, float64((i*7+g*13)%101))
			require.NoError(tb, err)
		}
		_, err := app.Append(0, labels.FromStrings("__name__", "container_cpu_usage_seconds_total", "id", "/train"), t, float64(i)*1.5)
		require.NoError(tb, err)
		_, err = app.Append(0, labels.FromStrings("__name__", "gpu.power.watts", "gpu", "0"), t, 300+float64(i%10))
		require.NoError(tb, err)
		_, err = app.AppendHistogram(0, labels.FromStrings("__name__", "request_duration_seconds", "job", "api"), t, tsdbutil.GenerateTestHistogram(int64(i)), nil)
		require.NoError(tb, err)
		odd := []float64{math.Float64frombits(value.NormalNaN), math.Inf(1), math.Inf(-1), -0.5}
		if i%25 == 24 {
			odd[i%4] = math.Float64frombits(value.StaleNaN)
		}
		_, err = app.Append(0, labels.FromStrings("__name__", "odd", "kind", "nan"), t, odd[i%4])
		require.NoError(tb, err)
	}
	for _, v := range []float64{1, 2} {
		_, err := app.Append(0, labels.FromStrings("__name__", "demo", "gpu", "0", "v", string(rune('0'+int(v)))), now.Add(-time.Minute).UnixMilli(), v)
		require.NoError(tb, err)
	}
	require.NoError(tb, app.Commit())
	ready := storage.NewReady()
	ready.Set(db)

	reg := prometheus.NewRegistry()
	p := parser.NewParser(parser.Options{})
	engine, err := query.NewEngine(query.EngineOptions{
		Registerer: reg, DataDir: dir, Timeout: fuzzQueryTimeout,
		MaxSamples: 1e6, MaxConcurrency: 4, LookbackDelta: 5 * time.Minute, Parser: p,
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { engine.Close() })
	h := New(Options{
		ListenAddress:       "127.0.0.1:9089",
		MaxRequestBodyBytes: 32 << 20,
		Gatherer:            reg,
		Registerer:          reg,
		API: &APIOptions{
			QueryEngine: engine,
			Queryable:   ready,
			Exemplars:   ready,
			TSDB:        ready,
			TSDBDir:     db.Dir(),
			Config:      func() promconfig.Config { return promconfig.DefaultConfig },
			Flags:       map[string]string{},
			RuntimeInfo: func() (apiv1.RuntimeInfo, error) {
				return apiv1.RuntimeInfo{StartTime: now}, nil
			},
			BuildInfo:     &apiv1.PrometheusVersion{Version: "fuzz"},
			LookbackDelta: 5 * time.Minute,
			QueryTimeout:  fuzzQueryTimeout,
			Parser:        p,
		},
	})
	h.SetReady(true)
	return h
}

// fuzzRequest is the HTTP request for one fuzz input: the parameters go in
// the URL (GET) or in a form body (POST), empty ones left out, and match
// holds one match[] per line. Label values answer GET only, as in
// Prometheus. The label name is a path segment: a '/' in it would route
// to another endpoint, so it is replaced, and "", "." and ".." (which the
// router cleans away) become __name__.
func fuzzRequest(endpoint uint8, post bool, q, ts, start, end, step, timeout, match, limit, name string) *http.Request {
	path := "/api/v1/" + fuzzEndpoints[int(endpoint)%len(fuzzEndpoints)]
	if strings.HasSuffix(path, "label_values") {
		name = strings.ReplaceAll(name, "/", "_")
		if name == "" || name == "." || name == ".." {
			name = "__name__"
		}
		path = "/api/v1/label/" + name + "/values"
		post = false // the API serves label values to GET only
	}
	form := url.Values{}
	for k, v := range map[string]string{"query": q, "time": ts, "start": start, "end": end, "step": step, "timeout": timeout, "limit": limit} {
		if v != "" {
			form.Set(k, v)
		}
	}
	if match != "" {
		for _, m := range strings.Split(match, "\n") {
			form.Add("match[]", m)
		}
	}
	u := &url.URL{Path: path} // String escapes the path
	if post {
		r := httptest.NewRequest(http.MethodPost, u.String(), strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return r
	}
	u.RawQuery = form.Encode()
	return httptest.NewRequest(http.MethodGet, u.String(), nil)
}

// apiResponse is the envelope of every API answer.
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Warnings  []string        `json:"warnings"`
	Infos     []string        `json:"infos"`
}

// errorTypes are the error types each allowed HTTP status may carry.
var errorTypes = map[int][]string{
	http.StatusBadRequest:          {"bad_data"},
	http.StatusUnprocessableEntity: {"execution", "cost_limit"},
	http.StatusServiceUnavailable:  {"timeout", "unavailable"},
}

// checkAPIResponse checks the invariant of FuzzQueryAPI on one answer.
func checkAPIResponse(path string, code int, contentType string, body []byte) error {
	if !slices.Contains([]int{200, 400, 422, 503}, code) {
		return fmt.Errorf("%s: HTTP status %d: %s", path, code, body)
	}
	if contentType != "application/json" {
		return fmt.Errorf("%s: content type %q: %s", path, contentType, body)
	}
	var r apiResponse
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return fmt.Errorf("%s: body is not the API's JSON envelope: %w: %s", path, err, body)
	}
	if dec.More() {
		return fmt.Errorf("%s: data after the JSON value: %s", path, body)
	}

	if code != http.StatusOK {
		if r.Status != "error" || !slices.Contains(errorTypes[code], r.ErrorType) || r.Error == "" {
			return fmt.Errorf("%s: HTTP %d with status %q, errorType %q, error %q", path, code, r.Status, r.ErrorType, r.Error)
		}
		return nil
	}
	if r.Status != "success" || r.ErrorType != "" || r.Error != "" {
		return fmt.Errorf("%s: HTTP 200 with status %q, errorType %q, error %q", path, r.Status, r.ErrorType, r.Error)
	}
	switch {
	case strings.HasSuffix(path, "/query"), strings.HasSuffix(path, "/query_range"):
		var d struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(r.Data, &d); err != nil {
			return fmt.Errorf("%s: data: %w: %s", path, err, body)
		}
		want := []string{"matrix", "vector", "scalar", "string"}
		if strings.HasSuffix(path, "/query_range") {
			want = []string{"matrix"}
		}
		if !slices.Contains(want, d.ResultType) || len(d.Result) == 0 {
			return fmt.Errorf("%s: result type %q (want one of %v), result %q", path, d.ResultType, want, d.Result)
		}
	case strings.HasSuffix(path, "/series"):
		var d []map[string]string
		if err := json.Unmarshal(r.Data, &d); err != nil {
			return fmt.Errorf("%s: data is not a list of label sets: %w: %s", path, err, body)
		}
		for _, s := range d {
			if len(s) == 0 {
				return fmt.Errorf("%s: empty label set: %s", path, body)
			}
		}
	default: // labels, label values
		var d []string
		if err := json.Unmarshal(r.Data, &d); err != nil || d == nil {
			return fmt.Errorf("%s: data is not a list of strings (%v): %s", path, err, body)
		}
	}
	return nil
}

// TestCheckAPIResponse: the fuzz invariant refuses what it must.
func TestCheckAPIResponse(t *testing.T) {
	const js = "application/json"
	for _, c := range []struct {
		name, path, body string
		code             int
		contentType      string
		ok               bool
	}{
		{"vector", "/api/v1/query", `{"status":"success","data":{"resultType":"vector","result":[]}}`, 200, js, true},
		{"matrix", "/api/v1/query_range", `{"status":"success","data":{"resultType":"matrix","result":[]},"warnings":["w"]}`, 200, js, true},
		{"labels", "/api/v1/labels", `{"status":"success","data":["a"]}`, 200, js, true},
		{"bad data", "/api/v1/query", `{"status":"error","errorType":"bad_data","error":"parse error"}`, 400, js, true},
		{"execution", "/api/v1/query", `{"status":"error","errorType":"execution","error":"many-to-many"}`, 422, js, true},
		{"timeout", "/api/v1/query", `{"status":"error","errorType":"timeout","error":"query timed out"}`, 503, js, true},
		{"500", "/api/v1/query", `{"status":"error","errorType":"internal","error":"boom"}`, 500, js, false},
		{"type does not match status", "/api/v1/query", `{"status":"error","errorType":"bad_data","error":"x"}`, 422, js, false},
		{"error without message", "/api/v1/series", `{"status":"error","errorType":"bad_data"}`, 400, js, false},
		{"error with 200", "/api/v1/labels", `{"status":"error","errorType":"bad_data","error":"x"}`, 200, js, false},
		{"not JSON", "/api/v1/query", "Service Unavailable\n", 503, "text/plain", false},
		{"truncated JSON", "/api/v1/query", `{"status":"success","data":{`, 200, js, false},
		{"unknown field", "/api/v1/query", `{"status":"success","data":{"resultType":"vector","result":[]},"x":1}`, 200, js, false},
		{"range query answers a vector", "/api/v1/query_range", `{"status":"success","data":{"resultType":"vector","result":[]}}`, 200, js, false},
		{"series with an empty label set", "/api/v1/series", `{"status":"success","data":[{}]}`, 200, js, false},
		{"label values not a list", "/api/v1/label/gpu/values", `{"status":"success","data":null}`, 200, js, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkAPIResponse(c.path, c.code, c.contentType, []byte(c.body))
			if c.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

// FuzzQueryAPI sends the query parameters of the read endpoints (query,
// time, start, end, step, timeout, match[], limit and the label name of
// /label/<name>/values), in the URL or in a POST form, to the real handler
// over a TSDB with data. Every request must get the API's JSON envelope,
// status success or error, with an HTTP status of 200, 400, 422 or 503
// that matches its errorType: never 500, never a panic, never a hang
// beyond the query timeout. Seeds are in testdata/fuzz/FuzzQueryAPI; run
//
//	go test -run '^$' -fuzz '^FuzzQueryAPI$' -fuzztime 2m ./web
func FuzzQueryAPI(f *testing.F) {
	h := newFuzzHandler(f)
	unix := func(d time.Duration) string { return fuzzDataEnd.Add(d).Format(time.RFC3339Nano) }

	// endpoint (0 query, 1 query_range, 2 series, 3 labels, 4 label values),
	// POST, query, time, start, end, step, timeout, match[], limit, name.
	f.Add(uint8(0), false, `DCGM_FI_DEV_GPU_UTIL`, unix(0), "", "", "", "", "", "", "")
	f.Add(uint8(0), true, `avg by (gpu) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[5m]))`, unix(-30*time.Minute), "", "", "", "10s", "", "", "")
	f.Add(uint8(1), false, `rate(container_cpu_usage_seconds_total[1m])`, "", unix(-time.Hour), unix(0), "15", "", "", "", "")
	f.Add(uint8(1), true, `histogram_quantile(0.9, rate(request_duration_seconds[5m]))`, "", unix(-time.Hour), unix(0), "1m", "", "", "1", "")
	f.Add(uint8(2), false, "", "", unix(-time.Hour), "", "", "", "DCGM_FI_DEV_GPU_UTIL{gpu=~\"[01]\"}\n{__name__=~\".+\"}", "3", "")
	f.Add(uint8(3), false, "", "", "", "", "", "", `{"gpu.power.watts"}`, "", "")
	f.Add(uint8(4), false, "", "", "", "", "", "", "", "2", "gpu")
	f.Add(uint8(4), true, "", "", "", "", "", "", `odd`, "", "U__gpu_2e_power")
	f.Fuzz(func(t *testing.T, endpoint uint8, post bool, q, ts, start, end, step, timeout, match, limit, name string) {
		req := fuzzRequest(endpoint, post, q, ts, start, end, step, timeout, match, limit, name)
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.echo.ServeHTTP(rec, req)
		}()
		// A query stops at the query timeout; the minute after it is only
		// for a slow machine.
		select {
		case <-done:
		case <-time.After(fuzzQueryTimeout + time.Minute):
			t.Fatalf("%s %s: no answer %s after the query timeout", req.Method, req.URL, time.Minute)
		}
		require.NoError(t, checkAPIResponse(req.URL.Path, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes()))
	})
}
