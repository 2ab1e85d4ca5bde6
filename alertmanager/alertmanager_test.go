package alertmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-openapi/strfmt"
	"github.com/prometheus/alertmanager/api/v2/models"
	"github.com/prometheus/alertmanager/notify/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// hook is a webhook receiver: it keeps each message Alertmanager posts,
// or answers failures while fail is above 0 (counting down).
type hook struct {
	srv  *httptest.Server
	mu   sync.Mutex
	msgs []webhook.Message
	fail atomic.Int64
}

func newHook(t *testing.T) *hook {
	t.Helper()
	h := &hook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.fail.Add(-1) >= 0 {
			http.Error(w, "down for the test", http.StatusInternalServerError)
			return
		}
		var m webhook.Message
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.msgs = append(h.msgs, m)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) messages() []webhook.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.msgs)
}

// fastRoute is a route whose timers let a test see grouping and repeats
// in a second.
func fastRoute(url string) string {
	return fmt.Sprintf(`
route:
  receiver: hook
  group_by: [instance, alertname]
  group_wait: 500ms
  group_interval: 500ms
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs: [{url: %q}]
`, url+"/")
}

// running is an embedded Alertmanager running for a test.
type running struct {
	t    *testing.T
	am   *Alertmanager
	reg  *prometheus.Registry
	dir  string
	stop func()
}

func startAM(t *testing.T, dir, text string) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	am, err := New(Options{Dir: dir, Registerer: reg})
	require.NoError(t, err)
	c, err := Load(text, "")
	require.NoError(t, err)
	require.NoError(t, am.ApplyConfig(c))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- am.Run(ctx) }()
	require.NoError(t, am.WaitReady(ctx))
	var once sync.Once
	r := &running{t: t, am: am, reg: reg, dir: dir}
	r.stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(r.stop)
	return r
}

// do sends a request to the API and returns the status and body.
func (r *running) do(method, path string, body any) (int, []byte) {
	r.t.Helper()
	var b io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		require.NoError(r.t, err)
		b = bytes.NewReader(js)
	}
	req := httptest.NewRequest(method, path, b)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	r.am.Handler().ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// post sends alerts with these labels, firing since an hour ago, as
// Prometheus's notifier does.
func (r *running) post(labelSets ...map[string]string) {
	r.t.Helper()
	var alerts []map[string]any
	for _, ls := range labelSets {
		alerts = append(alerts, map[string]any{
			"labels":       ls,
			"annotations":  map[string]string{"summary": "test"},
			"startsAt":     time.Now().Add(-time.Hour).Format(time.RFC3339),
			"generatorURL": "http://gpuscope.example/graph",
		})
	}
	code, body := r.do(http.MethodPost, "/api/v2/alerts", alerts)
	require.Equal(r.t, http.StatusOK, code, string(body))
}

func (r *running) silence(name, value string) string {
	r.t.Helper()
	code, body := r.do(http.MethodPost, "/api/v2/silences", map[string]any{
		"matchers":  []map[string]any{{"name": name, "value": value, "isRegex": false, "isEqual": true}},
		"startsAt":  time.Now().Format(time.RFC3339),
		"endsAt":    time.Now().Add(time.Hour).Format(time.RFC3339),
		"createdBy": "test",
		"comment":   "test",
	})
	require.Equal(r.t, http.StatusOK, code, string(body))
	var resp struct {
		SilenceID string `json:"silenceID"`
	}
	require.NoError(r.t, json.Unmarshal(body, &resp))
	return resp.SilenceID
}

func (r *running) alerts() models.GettableAlerts {
	r.t.Helper()
	code, body := r.do(http.MethodGet, "/api/v2/alerts", nil)
	require.Equal(r.t, http.StatusOK, code, string(body))
	var out models.GettableAlerts
	require.NoError(r.t, json.Unmarshal(body, &out))
	return out
}

func gpuAlert(name, severity, gpu string) map[string]string {
	return map[string]string{"alertname": name, "severity": severity, "instance": "node-1", "gpu": gpu}
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}

// TestNotifyGroupsAndSilences: alerts of one node and alert name reach
// the webhook in one notification in Alertmanager's webhook format, and a
// silenced alert reaches nobody.
func TestNotifyGroupsAndSilences(t *testing.T) {
	h := newHook(t)
	am := startAM(t, t.TempDir(), fastRoute(h.srv.URL))
	id := am.silence("alertname", "GPUTemperatureHigh")
	am.post(gpuAlert("GPUMemoryAlmostFull", "critical", "0"), gpuAlert("GPUMemoryAlmostFull", "critical", "1"),
		gpuAlert("GPUTemperatureHigh", "warning", "2"))
	var m webhook.Message
	eventually(t, "one notification with both GPUs", func() error {
		for _, m = range h.messages() {
			if len(m.Alerts) == 2 {
				return nil
			}
		}
		return fmt.Errorf("%d messages, none with both", len(h.messages()))
	})
	require.Equal(t, "4", m.Version)
	require.Equal(t, "hook", m.Receiver)
	require.Equal(t, "firing", m.Status)
	require.Equal(t, map[string]string{"alertname": "GPUMemoryAlmostFull", "instance": "node-1"}, map[string]string(m.GroupLabels))
	require.Equal(t, "http://gpuscope.example/graph", m.Alerts[0].GeneratorURL)

	// The silenced alert is suppressed and never sent.
	time.Sleep(2 * time.Second)
	for _, m := range h.messages() {
		require.NotEqual(t, "GPUTemperatureHigh", m.GroupLabels["alertname"])
	}
	for _, a := range am.alerts() {
		if a.Labels["alertname"] == "GPUTemperatureHigh" {
			require.Equal(t, "suppressed", *a.Status.State)
			require.Equal(t, []string{id}, a.Status.SilencedBy)
		}
	}
	require.Equal(t, float64(len(h.messages())), sum(t, am.reg, "alertmanager_notifications_total", "hook"))
}

// TestDefaultRouteInhibits: with gpuscope's default route, a GPU off the
// bus mutes the warnings of that GPU, not those of another.
func TestDefaultRouteInhibits(t *testing.T) {
	h := newHook(t)
	am := startAM(t, t.TempDir(), fmt.Sprintf("receivers: [{name: hook, webhook_configs: [{url: %q}]}]\n", h.srv.URL))
	nodeAlert := map[string]string{"alertname": "TargetDown", "severity": "warning", "instance": "node-1"}
	am.post(gpuAlert("GPUFellOffBus", "critical", "0"), gpuAlert("GPUMetricsStale", "warning", "0"),
		gpuAlert("GPUMetricsStale", "warning", "1"), gpuAlert("GPUMemoryAlmostFull", "critical", "1"),
		gpuAlert("GPUTemperatureHigh", "warning", "1"), nodeAlert)
	eventually(t, "the stale warning of GPU 0 inhibited", func() error {
		for _, a := range am.alerts() {
			if a.Labels["alertname"] == "GPUMetricsStale" && a.Labels["gpu"] == "0" && len(a.Status.InhibitedBy) == 1 {
				return nil
			}
		}
		return fmt.Errorf("not inhibited")
	})
	for _, a := range am.alerts() {
		inhibited := a.Labels["alertname"] == "GPUMetricsStale" && a.Labels["gpu"] == "0"
		require.Equal(t, inhibited, len(a.Status.InhibitedBy) > 0, "%v: a critical that is no GPU fault inhibits nothing, nor a GPU fault an alert of no GPU", a.Labels)
	}
	code, body := am.do(http.MethodGet, "/api/v2/alerts/groups", nil)
	require.Equal(t, http.StatusOK, code)
	var groups models.AlertGroups
	require.NoError(t, json.Unmarshal(body, &groups))
	require.Len(t, groups, 5, "grouped by node and alert name")
}

// copyDir copies the state files in dir, as they are on disk now: what a
// process killed now leaves behind.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, d.Name()), b, 0o644)
	}))
	return to
}

// TestKillLosesNothing: the state on disk the moment after a silence was
// answered and a notification sent, which is what a kill -9 then leaves,
// holds both: an Alertmanager started on it keeps the silence and does
// not notify the same alerts again before the repeat interval, while a
// new alert of the group is notified. Started on the state from before
// the notification, it notifies again: the log is what prevents it.
func TestKillLosesNothing(t *testing.T) {
	h := newHook(t)
	first := startAM(t, t.TempDir(), fastRoute(h.srv.URL))
	before := copyDir(t, first.dir)
	id := first.silence("alertname", "GPUTemperatureHigh")
	first.post(gpuAlert("GPUMemoryAlmostFull", "critical", "0"))
	eventually(t, "notified", func() error {
		if len(h.messages()) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	// The log is written before the pipeline returns, just after the
	// webhook answered.
	var killed string
	eventually(t, "notification log on disk", func() error {
		killed = copyDir(t, first.dir)
		b, err := os.ReadFile(filepath.Join(killed, "nflog"))
		if err != nil || len(b) == 0 {
			return fmt.Errorf("nflog: %d bytes, %v", len(b), err)
		}
		return nil
	})
	first.stop()
	require.Len(t, h.messages(), 1)

	second := startAM(t, killed, fastRoute(h.srv.URL))
	code, body := second.do(http.MethodGet, "/api/v2/silences", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), id, "the silence held")
	second.post(gpuAlert("GPUMemoryAlmostFull", "critical", "0"))
	time.Sleep(2 * time.Second) // group_wait and three group intervals
	require.Len(t, h.messages(), 1, "notified again before the repeat interval")
	second.post(gpuAlert("GPUMemoryAlmostFull", "critical", "1"))
	eventually(t, "a new alert of the group notified", func() error {
		if msgs := h.messages(); len(msgs) != 2 || len(msgs[1].Alerts) != 2 {
			return fmt.Errorf("%d messages", len(msgs))
		}
		return nil
	})
	second.stop()

	third := startAM(t, before, fastRoute(h.srv.URL))
	third.post(gpuAlert("GPUMemoryAlmostFull", "critical", "0"))
	eventually(t, "without the log, notified again", func() error {
		if msgs := h.messages(); len(msgs) != 3 {
			return fmt.Errorf("%d messages", len(msgs))
		}
		return nil
	})
	code, body = third.do(http.MethodGet, "/api/v2/silences", nil)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, string(body), id)
}

// TestReceiverDown: a receiver that fails is retried with Alertmanager's
// back-off, each failed request counted, until it answers; one that never
// answers counts a failed notification once the notification's time is
// up (10 s, Alertmanager's least).
func TestReceiverDown(t *testing.T) {
	h := newHook(t)
	h.fail.Store(2)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	am := startAM(t, t.TempDir(), fmt.Sprintf(`
route:
  receiver: hook
  group_by: [instance, alertname]
  group_wait: 100ms
  group_interval: 300ms
  repeat_interval: 1h
  routes:
    - matchers: [alertname="Dead"]
      receiver: dead
receivers:
  - name: hook
    webhook_configs: [{url: %q}]
  - name: dead
    webhook_configs: [{url: %q}]
`, h.srv.URL+"/", dead.URL+"/"))
	am.post(gpuAlert("GPUMemoryAlmostFull", "critical", "0"), gpuAlert("Dead", "critical", "0"))
	eventually(t, "delivered after two failures", func() error {
		if len(h.messages()) == 0 {
			return fmt.Errorf("not delivered")
		}
		return nil
	})
	require.Equal(t, 2.0, sum(t, am.reg, "alertmanager_notification_requests_failed_total", "hook"))
	require.Equal(t, 3.0, sum(t, am.reg, "alertmanager_notification_requests_total", "hook"))
	require.Equal(t, 1.0, sum(t, am.reg, "alertmanager_notifications_total", "hook"))
	require.Equal(t, 0.0, sum(t, am.reg, "alertmanager_notifications_failed_total", "hook"))
	eventually(t, "the dead receiver's notification failed", func() error {
		if n := sum(t, am.reg, "alertmanager_notifications_failed_total", "dead"); n != 1 {
			return fmt.Errorf("alertmanager_notifications_failed_total %g", n)
		}
		return nil
	})
	require.Greater(t, sum(t, am.reg, "alertmanager_notification_requests_failed_total", "dead"), 1.0, "retried")
}

// sum adds up the webhook series of family name for receiver.
func sum(t *testing.T, reg *prometheus.Registry, name, receiver string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var n float64
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["integration"] == "webhook" && labels["receiver_name"] == receiver {
				n += m.GetCounter().GetValue()
			}
		}
		return n
	}
	t.Fatalf("no family %s", name)
	return 0
}

// TestApplyConfigKeepsOldOnError: a config that fails to apply changes
// nothing; notifications go on with the previous one.
func TestApplyConfigKeepsOldOnError(t *testing.T) {
	h := newHook(t)
	am := startAM(t, t.TempDir(), fastRoute(h.srv.URL))
	old := am.am.Config()
	bad, err := Load(fastRoute(h.srv.URL), "")
	require.NoError(t, err)
	bad.Alertmanager.Templates = []string{filepath.Join(t.TempDir(), "*.tmpl")}
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(bad.Alertmanager.Templates[0]), "x.tmpl"), []byte("{{ nope"), 0o644))
	require.ErrorContains(t, am.am.ApplyConfig(bad), "templates: ")
	require.Same(t, old, am.am.Config())
	am.post(gpuAlert("GPUMemoryAlmostFull", "critical", "0"))
	eventually(t, "notified with the old config", func() error {
		if len(h.messages()) == 0 {
			return fmt.Errorf("not delivered")
		}
		return nil
	})
}

// TestHandlerBeforeAndAfterRun: the API answers 503 until Run serves and
// once it has stopped; Run needs a config.
func TestHandlerBeforeAndAfterRun(t *testing.T) {
	reg := prometheus.NewRegistry()
	am, err := New(Options{Dir: t.TempDir(), Registerer: reg})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	am.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v2/status", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.ErrorContains(t, am.Run(context.Background()), "no config applied")
	require.False(t, am.Reaches())
	require.True(t, strings.HasPrefix(am.Nobody(), "the embedded Alertmanager has no config"))

	r := startAM(t, t.TempDir(), "")
	code, body := r.do(http.MethodGet, "/api/v2/status", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `receiver: nobody`)
	r.stop()
	code, _ = r.do(http.MethodGet, "/api/v2/status", nil)
	require.Equal(t, http.StatusServiceUnavailable, code)
}

// TestStatusSpeaksForAlertmanager: /api/v2/status's uptime is when the
// Alertmanager started, though its API is built on the first request,
// later; the rest of the answer is the API's own.
func TestStatusSpeaksForAlertmanager(t *testing.T) {
	r := startAM(t, t.TempDir(), "")
	time.Sleep(10 * time.Millisecond) // the API, built below, would say now
	code, body := r.do(http.MethodGet, "/api/v2/status", nil)
	require.Equal(t, http.StatusOK, code, string(body))
	var status struct {
		Uptime      strfmt.DateTime `json:"uptime"`
		VersionInfo struct {
			Version   string `json:"version"`
			GoVersion string `json:"goVersion"`
		} `json:"versionInfo"`
		Config struct{ Original string } `json:"config"`
	}
	require.NoError(t, json.Unmarshal(body, &status))
	require.Equal(t, r.am.startTime.UTC().Truncate(time.Millisecond), time.Time(status.Uptime).UTC())
	require.Equal(t, runtime.Version(), status.VersionInfo.GoVersion)
	require.Contains(t, status.Config.Original, "receiver: nobody")
}

// TestApplyConfigWhileRunning: a receiver added while alerts are held
// gets them; the alerts stay across the swap.
func TestApplyConfigWhileRunning(t *testing.T) {
	h := newHook(t)
	am := startAM(t, t.TempDir(), "")
	am.post(gpuAlert("GPUMemoryAlmostFull", "critical", "0"))
	require.False(t, am.am.Reaches())
	c, err := Load(fastRoute(h.srv.URL), "")
	require.NoError(t, err)
	require.NoError(t, am.am.ApplyConfig(c))
	require.True(t, am.am.Reaches())
	eventually(t, "the held alert sent to the new receiver", func() error {
		if len(h.messages()) == 0 {
			return fmt.Errorf("not sent")
		}
		return nil
	})
	require.Len(t, am.alerts(), 1)
}

// TestRunOnce: an Alertmanager runs once; a second Run says so.
func TestRunOnce(t *testing.T) {
	r := startAM(t, t.TempDir(), "")
	require.ErrorContains(t, r.am.Run(context.Background()), "Run called twice")
}

// TestAPIBuiltOnFirstRequest: the API v2, with its OpenAPI spec, is
// built by the first request, not by Run (BENCHMARKS.md, issue 26's idle
// cost), and serves every request after it; alerts are dispatched
// without it.
func TestAPIBuiltOnFirstRequest(t *testing.T) {
	r := startAM(t, t.TempDir(), "")
	inst := r.am.current.Load()
	require.NotNil(t, inst)
	require.Nil(t, inst.handler.Load(), "not built by Run")
	require.Nil(t, inst.api)
	s, err := r.am.Status(context.Background())
	require.NoError(t, err, "the overview's status needs no API")
	require.Empty(t, s.Alerts)
	code, _ := r.do(http.MethodGet, "/api/v2/status", nil)
	require.Equal(t, http.StatusOK, code)
	h := inst.handler.Load()
	require.NotNil(t, h, "built by the first request")
	r.post(gpuAlert("GPUMemoryAlmostFull", "critical", "0"))
	require.Same(t, h, inst.handler.Load(), "built once")
	require.Len(t, r.alerts(), 1)
}
