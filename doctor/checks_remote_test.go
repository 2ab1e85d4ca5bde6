package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/config"
)

func TestScrapeChecks(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tgt := func(pool, inst, health string, ago time.Duration, lastErr string) target {
		tt := target{ScrapePool: pool, Labels: map[string]string{"instance": inst}, Health: health, ScrapeInterval: "15s", LastError: lastErr}
		if ago >= 0 {
			tt.LastScrape = now.Add(-ago)
		}
		return tt
	}
	for _, tc := range []struct {
		name    string
		targets []target
		want    []Check
	}{
		{"none", nil, nil},
		{
			name: "healthy, sorted by job",
			targets: []target{
				tgt("node-gpu", "gpu-02", "up", 9*time.Second, ""),
				tgt("gpu", "ws", "up", 3*time.Second, ""),
				tgt("node-gpu", "gpu-01", "up", 2*time.Second, ""),
			},
			want: []Check{
				{Name: "scrape/gpu", Status: StatusOK, Summary: "ws last scraped 3s ago"},
				{Name: "scrape/node-gpu", Status: StatusOK, Summary: "2 targets, last scraped 9s ago at most"},
			},
		},
		{
			name:    "down",
			targets: []target{tgt("node-agent", "gpu-01", "down", 5*time.Second, "connection refused"), tgt("node-agent", "gpu-02", "up", time.Second, "")},
			want:    []Check{{Name: "scrape/node-agent", Status: StatusWarn, Summary: "gpu-01 down (connection refused)"}},
		},
		{
			name:    "late",
			targets: []target{tgt("cadvisor", "ws", "up", 130*time.Second, "")},
			want:    []Check{{Name: "scrape/cadvisor", Status: StatusWarn, Summary: "ws last scraped 2m10s ago (every 15s)"}},
		},
		{
			name:    "first scrape pending",
			targets: []target{tgt("gpu", "ws", "unknown", -1, "")},
			want:    []Check{{Name: "scrape/gpu", Status: StatusOK, Summary: "1 target, first scrape pending", Pending: true}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireChecks(t, tc.want, scrapeChecks(tc.targets, now))
		})
	}
}

// fakeAppliance answers /api/v1/targets and /api/v1/query as gpuscope
// does, with the given targets and per-query container counts.
func fakeAppliance(t *testing.T, targets []map[string]any, counts map[string]map[string]int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var data any
		switch r.URL.Path {
		case "/api/v1/targets":
			require.Equal(t, "active", r.URL.Query().Get("state"))
			data = map[string]any{"activeTargets": targets, "droppedTargets": []any{}}
		case "/api/v1/query":
			var result []any
			for inst, n := range counts[r.URL.Query().Get("query")] {
				result = append(result, map[string]any{"metric": map[string]string{"instance": inst}, "value": []any{1.7e9, fmt.Sprint(n)}})
			}
			data = map[string]any{"resultType": "vector", "result": result}
		default:
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": data})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestApplianceChecks(t *testing.T) {
	now := time.Now()
	targets := []map[string]any{{
		"labels": map[string]string{"instance": "ws", "job": "gpu"}, "scrapePool": "gpu", "health": "up",
		"lastScrape": now.Add(-4 * time.Second).Format(time.RFC3339Nano), "scrapeInterval": "15s", "lastError": "",
	}}
	const all, below, image = `count by (instance) (container_start_time_seconds)`,
		`count by (instance) (container_start_time_seconds{id!="/"})`,
		`count by (instance) (container_start_time_seconds{image!=""})`
	const kernelLog = `max by (instance) (gpuscope_gpu_collector_kernel_log_reading)`
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedURL := "http://" + closed.Addr().String()
	closed.Close()
	for _, tc := range []struct {
		name   string
		url    func(t *testing.T) string
		want   []Check
		hintOf map[string]string
	}{
		{
			name: "containers seen",
			url: func(t *testing.T) string {
				return fakeAppliance(t, targets, map[string]map[string]int{all: {"ws": 12}, below: {"ws": 11}, image: {"ws": 3}}).URL
			},
			want: []Check{
				{Name: "appliance", Status: StatusOK, Summary: "gpuscope answers at URL, 1 active target"},
				{Name: "containers", Status: StatusOK, Summary: "cAdvisor sees ws: 12 cgroups, 3 with an image"},
				{Name: "scrape/gpu", Status: StatusOK, Summary: "ws last scraped 4s ago"},
			},
		},
		{
			name: "only the root cgroup",
			url: func(t *testing.T) string {
				return fakeAppliance(t, targets, map[string]map[string]int{all: {"ws": 1, "gpu-01": 30}, below: {"gpu-01": 29}, image: {"gpu-01": 2}}).URL
			},
			want: []Check{
				{Name: "appliance", Status: StatusOK, Summary: "gpuscope answers at URL, 1 active target"},
				{Name: "containers", Status: StatusWarn, Summary: "cAdvisor sees gpu-01: 30 cgroups, 2 with an image; ws: 1 cgroups, 0 with an image; on ws only the root cgroup: gpuscope sees only its own container",
					Hint: "run gpuscope's container with --cgroupns host and /sys mounted (-v /sys:/sys:ro)"},
				{Name: "scrape/gpu", Status: StatusOK, Summary: "ws last scraped 4s ago"},
			},
		},
		{
			name: "a node that cannot read the kernel log",
			url: func(t *testing.T) string {
				return fakeAppliance(t, targets, map[string]map[string]int{all: {"ws": 12}, below: {"ws": 11}, image: {"ws": 3},
					kernelLog: {"ws": 0, "gpu-01": 1}}).URL
			},
			want: []Check{
				{Name: "appliance", Status: StatusOK, Summary: "gpuscope answers at URL, 1 active target"},
				{Name: "containers", Status: StatusOK, Summary: "cAdvisor sees ws: 12 cgroups, 3 with an image"},
				{Name: "xid-kernel-log/running", Status: StatusWarn, Summary: "the GPU collector on ws cannot read the kernel log: XIDs NVML does not deliver (79, 119, 120) are missed there",
					Hint: kernelLogHint},
				{Name: "scrape/gpu", Status: StatusOK, Summary: "ws last scraped 4s ago"},
			},
		},
		{
			name: "every node reads the kernel log",
			url: func(t *testing.T) string {
				return fakeAppliance(t, targets, map[string]map[string]int{all: {"ws": 12}, below: {"ws": 11}, image: {"ws": 3},
					kernelLog: {"ws": 1, "gpu-01": 1}}).URL
			},
			want: []Check{
				{Name: "appliance", Status: StatusOK, Summary: "gpuscope answers at URL, 1 active target"},
				{Name: "containers", Status: StatusOK, Summary: "cAdvisor sees ws: 12 cgroups, 3 with an image"},
				{Name: "xid-kernel-log/running", Status: StatusOK, Summary: "the GPU collector on gpu-01, ws reads XIDs from the kernel log as well as from NVML"},
				{Name: "scrape/gpu", Status: StatusOK, Summary: "ws last scraped 4s ago"},
			},
		},
		{
			name: "no container yet",
			url:  func(t *testing.T) string { return fakeAppliance(t, nil, nil).URL },
			want: []Check{
				{Name: "appliance", Status: StatusOK, Summary: "gpuscope answers at URL, 0 active targets"},
				{Name: "containers", Status: StatusWarn, Summary: "cAdvisor has published no container yet", Pending: true},
			},
		},
		{
			name: "nothing running",
			url:  func(*testing.T) string { return closedURL },
			want: []Check{{Name: "appliance", Status: StatusWarn,
				Summary: "no gpuscope answers at URL (dial tcp ADDR: connect: connection refused): the checks of a running gpuscope are skipped"}},
		},
		{
			name: "not a Prometheus API",
			url: func(t *testing.T) string {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>")) }))
				t.Cleanup(srv.Close)
				return srv.URL
			},
			want: []Check{{Name: "appliance", Status: StatusWarn,
				Summary: "no gpuscope answers at URL (/api/v1/targets: not a Prometheus API answer: invalid character '<' looking for beginning of value): the checks of a running gpuscope are skipped"}},
		},
		{
			name: "password hidden",
			url: func(t *testing.T) string {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.Error(w, "Unauthorized", http.StatusUnauthorized)
				}))
				t.Cleanup(srv.Close)
				return strings.Replace(srv.URL, "http://", "http://admin:secret@", 1)
			},
			want: []Check{{Name: "appliance", Status: StatusWarn,
				Summary: "no gpuscope answers at URL (/api/v1/targets: 401 Unauthorized): the checks of a running gpuscope are skipped"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.url(t)
			o := Options{Config: config.Default(nil), URL: u, Timeout: 2 * time.Second, Now: func() time.Time { return now }}.withDefaults()
			got := applianceChecks(context.Background(), &o)
			shown := redact(u)
			for i := range tc.want {
				tc.want[i].Summary = strings.ReplaceAll(tc.want[i].Summary, "URL", shown)
				tc.want[i].Summary = strings.ReplaceAll(tc.want[i].Summary, "ADDR", strings.TrimPrefix(u, "http://"))
			}
			requireChecks(t, tc.want, got)
			for _, c := range got {
				require.NotContains(t, c.Summary, "secret")
			}
		})
	}
	t.Run("no URL", func(t *testing.T) {
		o := Options{Config: config.Default(nil)}.withDefaults()
		require.Empty(t, applianceChecks(context.Background(), &o))
	})
}

func TestSkewCheck(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 200e6, time.UTC)
	for _, tc := range []struct {
		name       string
		rtt        time.Duration
		date       time.Time // what the node's Date header said
		status     string
		wantSkew   time.Duration
		wantWithin time.Duration
	}{
		// The node read 12:00:00.x, this host 12:00:00.2 to .2+rtt.
		{"in sync", 10 * time.Millisecond, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), StatusOK, 295 * time.Millisecond, 505 * time.Millisecond},
		{"5 s ahead", 10 * time.Millisecond, time.Date(2026, 12, 1, 12, 0, 5, 0, time.UTC), StatusWarn, 5295 * time.Millisecond, 505 * time.Millisecond},
		{"2 min behind", 0, time.Date(2026, 12, 1, 11, 58, 0, 0, time.UTC), StatusFail, -119700 * time.Millisecond, 500 * time.Millisecond},
		// A slow answer widens the uncertainty: 1.6 s could be a second
		// of skew or of waiting.
		{"slow answer", 2 * time.Second, time.Date(2026, 12, 1, 12, 0, 2, 0, time.UTC), StatusOK, 1300 * time.Millisecond, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			skew, within := estimateSkew(t0, t0.Add(tc.rtt), tc.date)
			require.Equal(t, tc.wantSkew, skew)
			require.Equal(t, tc.wantWithin, within)
			c := skewCheck("clock/gpu-01", skew, within)
			require.Equal(t, tc.status, c.Status, c.Summary)
			require.Contains(t, c.Summary, fmt.Sprintf("clock %+.1f s from this host's", skew.Seconds()))
		})
	}
}

func TestClockChecks(t *testing.T) {
	node := func(offset time.Duration, noDate bool) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			require.Equal(t, "/-/healthy", r.URL.Path)
			if noDate {
				w.Header()["Date"] = nil
			} else {
				w.Header().Set("Date", time.Now().Add(offset).UTC().Format(http.TimeFormat))
			}
			w.Write([]byte("gpuscope is Healthy.\n"))
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedAddr := closed.Addr().String()
	closed.Close()

	yml := fmt.Sprintf(`nodes:
  static:
    - {address: %s, name: in-sync}
    - {address: %s, name: ahead}
    - {address: %s, name: behind}
    - {address: %s, name: no-date}
    - {address: %s, name: gone}
`, node(0, false), node(10*time.Second, false), node(-5*time.Minute, false), node(0, true), closedAddr)
	cfg, err := config.Load([]byte(yml), "", nil)
	require.NoError(t, err)
	o := Options{Config: cfg, Timeout: 2 * time.Second}.withDefaults()
	got := clockChecks(context.Background(), &o)
	require.Len(t, got, 5)
	for i, want := range []struct{ name, status, summary string }{
		{"clock/in-sync", StatusOK, " s from this host's"},
		{"clock/ahead", StatusWarn, ": more than 1s"},
		{"clock/behind", StatusFail, ": more than 30s"},
		{"clock/no-date", StatusWarn, "sent no usable Date header; clock not compared"},
		{"clock/gone", StatusWarn, "node unreachable at http://" + closedAddr + "/-/healthy: dial tcp " + closedAddr + ": connect: connection refused"},
	} {
		require.Equal(t, want.name, got[i].Name)
		require.Equal(t, want.status, got[i].Status, got[i].Summary)
		require.Contains(t, got[i].Summary, want.summary)
	}
	require.Contains(t, got[1].Hint, "sync the clocks")

	o = Options{Config: config.Default(nil)}.withDefaults()
	require.Empty(t, clockChecks(context.Background(), &o), "no nodes, no clock checks")
}

// TestSettingsCheck: a doctor run that looks at another data directory or
// at the host's driver while the running gpuscope runs the demo says so,
// and names the flags to give; a gpuscope that does not say its flags is
// no check at all.
func TestSettingsCheck(t *testing.T) {
	serve := func(t *testing.T, flags map[string]string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/api/v1/status/flags" || flags == nil {
				http.NotFound(w, r)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": flags})
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	demo := config.Default(nil)
	demo.GPU.Backend = "sim"
	for _, tc := range []struct {
		name    string
		flags   map[string]string
		cfg     *config.Config
		dataDir string
		want    Check
		found   bool
	}{
		{"same", map[string]string{"storage.tsdb.path": "data/", "demo": "false"}, config.Default(nil), "data", ok("settings", "these checks looked at what the running gpuscope uses"), true},
		{"the demo, checked as a plain serve", map[string]string{"storage.tsdb.path": "data-demo/", "demo": "true"}, config.Default(nil), "data/",
			warn("settings", "the running gpuscope was started otherwise: it keeps its data in data-demo/, these checks looked at data/; it runs the demo's simulated GPUs, these checks looked at this host's driver",
				"run `gpuscope doctor --storage.tsdb.path=data-demo/ --demo` (with serve's --config.file too) to check what it uses"), true},
		{"the demo, checked with --demo", map[string]string{"storage.tsdb.path": "data-demo/", "demo": "true"}, demo, "data-demo", ok("settings", "these checks looked at what the running gpuscope uses"), true},
		{"another data directory", map[string]string{"storage.tsdb.path": "/var/lib/gpuscope", "demo": "false"}, config.Default(nil), "data/",
			warn("settings", "the running gpuscope was started otherwise: it keeps its data in /var/lib/gpuscope, these checks looked at data/",
				"run `gpuscope doctor --storage.tsdb.path=/var/lib/gpuscope` (with serve's --config.file too) to check what it uses"), true},
		{"flags not served", nil, config.Default(nil), "data/", Check{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Config: tc.cfg, URL: serve(t, tc.flags), DataDir: tc.dataDir}.withDefaults()
			got, found := settingsCheck(context.Background(), &o)
			require.Equal(t, tc.found, found)
			require.Equal(t, tc.want, got)
		})
	}
}
