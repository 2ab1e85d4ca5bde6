package web

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
	apiv1 "github.com/prometheus/prometheus/web/api/v1"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/accounting"
	"github.com/gpuscope/gpuscope/storage"
)

// newTestHandler builds the real handler over a real TSDB holding one
// series, `demo{gpu="0"}` = 42 at every minute of the last hour.
func newTestHandler(t *testing.T, o Options) (*Handler, *httptest.Server) {
	t.Helper()
	db, err := storage.Open(storage.Options{Dir: t.TempDir(), Retention: 24 * time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	app := db.Appender(context.Background())
	now := time.Now()
	for ts := now.Add(-time.Hour); !ts.After(now); ts = ts.Add(time.Minute) {
		_, err := app.Append(0, labels.FromStrings("__name__", "demo", "gpu", "0"), ts.UnixMilli(), 42)
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit())
	ready := storage.NewReady()
	ready.Set(db)

	reg := prometheus.NewRegistry()
	o.Gatherer, o.Registerer = reg, reg
	o.ListenAddress = "127.0.0.1:0"
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, EnableAtModifier: true, EnableNegativeOffset: true,
		NoStepSubqueryIntervalFn: func(int64) int64 { return 60000 }})
	reporter, err := accounting.New(accounting.Options{Engine: engine, Queryable: ready,
		Rules: runningGroups{rules.NewGroup(rules.GroupOptions{Name: "gpuscope.accounting", Interval: time.Minute})}})
	require.NoError(t, err)
	var digests DigestSender // a test's own
	if o.API != nil {
		digests = o.API.Digests
	}
	o.API = &APIOptions{
		QueryEngine: engine,
		Workloads:   reporter,
		Digests:     digests,
		Queryable:   ready,
		Exemplars:   ready,
		TSDB:        ready,
		TSDBDir:     db.Dir(),
		Config:      func() promconfig.Config { return promconfig.DefaultConfig },
		Flags:       map[string]string{"web.listen-address": "127.0.0.1:0"},
		RuntimeInfo: func() (apiv1.RuntimeInfo, error) {
			return apiv1.RuntimeInfo{StartTime: now}, nil
		},
		BuildInfo: &apiv1.PrometheusVersion{Version: "1.2.3"},
	}
	h := New(o)
	srv := httptest.NewServer(h.echo)
	t.Cleanup(srv.Close)
	return h, srv
}

// runningGroups stands for the rule manager, for the run report: the
// groups it runs.
type runningGroups []*rules.Group

func (g runningGroups) RuleGroups() []*rules.Group { return g }

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestReadinessGatesTheAPI(t *testing.T) {
	h, srv := newTestHandler(t, Options{})

	code, _ := get(t, srv.URL+"/-/healthy")
	require.Equal(t, 200, code, "healthy before ready")
	code, _ = get(t, srv.URL+"/-/ready")
	require.Equal(t, 503, code)
	code, _ = get(t, srv.URL+"/api/v1/query?query=demo")
	require.Equal(t, 503, code, "API answers 503 until the TSDB is open")
	code, body := get(t, srv.URL+"/api/v1/status/walreplay")
	require.Equal(t, 200, code, "WAL replay progress is readable during replay: %s", body)

	h.SetReady(true)
	code, _ = get(t, srv.URL+"/-/ready")
	require.Equal(t, 200, code)
	code, body = get(t, srv.URL+"/api/v1/query?query=demo")
	require.Equal(t, 200, code, body)
	var r struct {
		Data struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.Len(t, r.Data.Result, 1)
	require.Equal(t, "42", r.Data.Result[0].Value[1])
}

func TestAPIErrorsAndLimits(t *testing.T) {
	h, srv := newTestHandler(t, Options{MaxRequestBodyBytes: 1024})
	h.SetReady(true)

	code, body := get(t, srv.URL+"/api/v1/query?query="+url.QueryEscape("rate(demo[5m]"))
	require.Equal(t, 400, code)
	require.Contains(t, body, `"errorType":"bad_data"`)

	code, body = get(t, srv.URL+"/api/v1/query_range?query=demo&start=0&end=100000&step=1")
	require.Equal(t, 400, code)
	require.Contains(t, body, "exceeded maximum resolution of 11,000 points")

	// A body over the limit is refused before it is read.
	resp, err := http.Post(srv.URL+"/api/v1/query", "application/x-www-form-urlencoded", strings.NewReader("query="+strings.Repeat("a", 4096)))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	// Admin endpoints are off unless enabled.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/admin/tsdb/snapshot", nil)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NotEqual(t, 200, resp.StatusCode)
	require.Contains(t, string(b), "admin APIs disabled")

	// Lifecycle endpoints are not routed unless enabled.
	resp, err = http.Post(srv.URL+"/-/quit", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.NotEqual(t, 200, resp.StatusCode)
}

func TestLifecycleReload(t *testing.T) {
	h, srv := newTestHandler(t, Options{EnableLifecycle: true, AllowUnauthenticatedAdmin: true})
	h.SetReady(true)
	go func() {
		rc := <-h.Reload()
		rc <- nil
	}()
	resp, err := http.Post(srv.URL+"/-/reload", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	resp, err = http.Post(srv.URL+"/-/quit", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	select {
	case <-h.Quit():
	case <-time.After(time.Second):
		t.Fatal("/-/quit did not close Quit()")
	}
}

// TestSelfListenerServesMetrics: the collectors' endpoints answer on the
// in-memory listener the built-in jobs scrape, without the API.
func TestSelfListenerServesMetrics(t *testing.T) {
	self := NewSelfListener("localhost:9089")
	h, _ := newTestHandler(t, Options{Self: self})
	h.MountMetrics("/metrics/demo", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "demo_metric 1\n")
	}))
	ctx, cancel := context.WithCancel(context.Background())
	l, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, l) }()

	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return self.Dial(ctx) },
	}}
	resp, err := client.Get("http://anything/metrics/demo")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "demo_metric 1\n", string(b))

	// A scrape many times the pipe's buffer (a cAdvisor page of hundreds
	// of containers) flows through whole.
	big := strings.Repeat("big_metric{container=\"c\"} 1\n", 100_000)
	h.MountMetrics("/metrics/big", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, big)
	}))
	resp, err = client.Get("http://anything/metrics/big")
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Greater(t, len(big), 40*selfPipeBytes)
	require.Equal(t, big, string(b))

	resp, err = client.Get("http://anything/api/v1/query?query=1")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 404, resp.StatusCode, "the self listener serves only /metrics*")

	resp, err = http.Get("http://" + l.Addr().String() + "/metrics")
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(b), "promhttp_metric_handler_requests_total")

	// Go's profiles, at Prometheus's paths; not on the self listener.
	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/heap?debug=1":      "heap profile:",
		"/debug/pprof/goroutine?debug=1": "goroutine profile:",
		"/debug/pprof/profile?seconds=1": "", // a gzipped protobuf
		"/debug/pprof/cmdline":           "web.test",
	} {
		resp, err = http.Get("http://" + l.Addr().String() + path)
		require.NoError(t, err)
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, path)
		require.Contains(t, string(b), want, path)
		require.NotEmpty(t, b, path)
	}
	resp, err = client.Get("http://anything/debug/pprof/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 404, resp.StatusCode, "the self listener serves only /metrics*")

	cancel()
	require.NoError(t, <-done)
}

func TestListenPortInUse(t *testing.T) {
	l, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, err = Listen(l.Addr().String())
	require.ErrorContains(t, err, "address already in use")
	require.ErrorContains(t, err, "another process uses this port: stop it or set --web.listen-address to a free address")
}

// TestListenErrorsSayWhatToDo: only a port in use suggests another port.
func TestListenErrorsSayWhatToDo(t *testing.T) {
	for _, tc := range []struct{ address, want string }{
		{"9089", "missing port in address (--web.listen-address and web.listen_address take host:port, e.g. 0.0.0.0:9089 or :9089)"},
		{"192.0.2.1:9089", "this machine has no such address"},
	} {
		_, err := Listen(tc.address)
		require.ErrorContains(t, err, tc.want, tc.address)
		require.NotContains(t, err.Error(), "free address", tc.address)
	}
}

// TestMountAlertmanager: the embedded Alertmanager's API answers under
// /api/v2/ on the public listener, and only its alerts endpoint, for the
// notifier, on the self listener.
func TestMountAlertmanager(t *testing.T) {
	self := NewSelfListener("localhost:9089")
	h, srv := newTestHandler(t, Options{Self: self})
	h.MountAlertmanager(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "alertmanager "+r.Method+" "+r.URL.Path)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	l, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, l) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	for _, path := range []string{"/api/v2/status", "/api/v2/silences", "/api/v2/alerts/groups"} {
		code, body := get(t, srv.URL+path)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "alertmanager GET "+path, body)
	}
	h.SetReady(true)
	code, body := get(t, srv.URL+"/api/v1/status/buildinfo")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "1.2.3", "the API v1 is Prometheus's")

	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return self.Dial(ctx) },
	}}
	resp, err := client.Post("http://localhost:9089/api/v2/alerts", "application/json", strings.NewReader("[]"))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "alertmanager POST /api/v2/alerts", string(b))
	resp, err = client.Get("http://localhost:9089/api/v2/silences")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "the self listener serves only the alerts endpoint")
	resp, err = client.Get("http://localhost:9089/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
