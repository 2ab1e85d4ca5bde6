package alertmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/notify/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestResendsAtScale is issue 26's goal "1,000 firing alerts across 64
// nodes: every notification delivered once per group, no growth in
// goroutines or memory over an hour of resends", on a clock compressed
// 60 times: every duration of the embedded Alertmanager (group_wait,
// group_interval, repeat_interval, the alert and dispatcher garbage
// collection, the maintenance of the state) and Prometheus's resend delay
// (1 minute: here a second) are divided by 60, so a minute of the test is
// an hour of resends. 64 nodes × 8 GPUs × 2 alerts are 1,024 alerts in
// 128 groups (gpuscope's default group_by: node and alert name), sent as
// Prometheus's notifier sends them: every resend, all of them again, in
// batches of 256 to /api/v2/alerts, with the same start and a new end.
// With the default repeat_interval of 4 hours, each group is notified
// exactly once in the hour.
//
// By default it runs a compressed 10 minutes (10 s); GPUSCOPE_BENCH_HOUR=1
// runs the hour (60 s) and logs the samples, for BENCHMARKS.md:
//
//	GPUSCOPE_BENCH_HOUR=1 go test -run TestResendsAtScale -v ./alertmanager/
func TestResendsAtScale(t *testing.T) {
	const (
		scale   = 60
		nodes   = 64
		gpus    = 8
		names   = 2
		batch   = 256 // the notifier's maximum batch
		groups  = nodes * names
		nAlerts = nodes * gpus * names
	)
	minutes := 10
	if os.Getenv("GPUSCOPE_BENCH_HOUR") != "" {
		minutes = 60
	}
	resend := time.Minute / scale

	var (
		mu    sync.Mutex
		byKey = map[string]int{}
		// complete: the groups notified with all their alerts; again:
		// their notifications after that (a resend must cause none);
		// partial: notifications of a group before all its alerts were in
		// (on a loaded machine the dispatcher can take in a batch slower
		// than the compressed group_wait; the group is completed at its
		// next group_interval, as Alertmanager does after a restart).
		complete = map[string]bool{}
		again    = map[string]int{}
		partial  int
		alerts   = map[string]bool{}
		sent     int
		allAt    time.Time // when the last group's first notification came
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m webhook.Message
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		sent++
		byKey[m.GroupKey]++
		switch {
		case complete[m.GroupKey]:
			again[m.GroupKey]++
		case len(m.Alerts) == gpus:
			complete[m.GroupKey] = true
		default:
			partial++
		}
		if len(byKey) == groups && allAt.IsZero() {
			allAt = time.Now()
		}
		for _, a := range m.Alerts {
			alerts[a.Fingerprint] = true
		}
	}))
	defer hook.Close()

	dur := func(d time.Duration) string { return (d / scale).String() }
	am, err := New(Options{
		Dir:                         t.TempDir(),
		Registerer:                  prometheus.NewRegistry(),
		MaintenanceInterval:         DefaultMaintenanceInterval / scale,
		AlertGCInterval:             DefaultAlertGCInterval / scale,
		DispatchMaintenanceInterval: DefaultDispatchMaintenanceInterval / scale,
	})
	require.NoError(t, err)
	c, err := Load(fmt.Sprintf(`
route:
  receiver: hook
  group_by: [instance, alertname]
  group_wait: %s
  group_interval: %s
  repeat_interval: %s
receivers:
  - name: hook
    webhook_configs: [{url: %q, send_resolved: false}]
`, dur(30*time.Second), dur(5*time.Minute), dur(4*time.Hour), hook.URL+"/"), "")
	require.NoError(t, err)
	require.NoError(t, am.ApplyConfig(c))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- am.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	require.NoError(t, am.WaitReady(ctx))
	h := am.Handler()

	// The alerts as the notifier posts them, firing since now: an alert
	// older than group_wait when its group is created is flushed at once
	// (Alertmanager's dispatcher), which after a restart can send a group
	// before all its alerts are in, and again at its next group_interval.
	start := time.Now()
	type postable struct {
		Labels       map[string]string `json:"labels"`
		Annotations  map[string]string `json:"annotations"`
		StartsAt     time.Time         `json:"startsAt"`
		EndsAt       time.Time         `json:"endsAt"`
		GeneratorURL string            `json:"generatorURL"`
	}
	all := make([]postable, 0, nAlerts)
	for n := range nodes {
		for g := range gpus {
			for _, name := range []string{"GPUMemoryAlmostFull", "GPUTemperatureHigh"}[:names] {
				all = append(all, postable{
					Labels: map[string]string{"alertname": name, "instance": fmt.Sprintf("gpu-node-%02d", n),
						"gpu": strconv.Itoa(g), "severity": "warning", "cluster": "bench"},
					Annotations:  map[string]string{"summary": "GPU " + strconv.Itoa(g) + " is in trouble", "description": "Look next at the GPU."},
					StartsAt:     start,
					GeneratorURL: "http://gpuscope.example:9089/graph?g0.expr=up",
				})
			}
		}
	}
	post := func() {
		validUntil := time.Now().Add(4 * resend) // as Prometheus's ValidUntil
		for i := 0; i < len(all); i += batch {
			part := all[i:min(i+batch, len(all))]
			for k := range part {
				part[k].EndsAt = validUntil
			}
			body, err := json.Marshal(part)
			require.NoError(t, err)
			req := httptest.NewRequest(http.MethodPost, "/api/v2/alerts", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		}
	}
	type sample struct {
		at         time.Duration
		goroutines int
		heap       uint64
		sent       int
	}
	measure := func(at time.Duration) sample {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		defer mu.Unlock()
		return sample{at: at, goroutines: runtime.NumGoroutine(), heap: ms.HeapAlloc, sent: sent}
	}

	began := time.Now()
	var samples []sample
	tick := time.NewTicker(resend)
	defer tick.Stop()
	for i := 0; i < minutes; i++ {
		post()
		<-tick.C
		if i%5 == 4 || i == 1 {
			samples = append(samples, measure(time.Duration(i+1)*time.Minute))
		}
	}
	for _, s := range samples {
		t.Logf("compressed %3.0f min: %d goroutines, heap %.2f MB, %d notifications", s.at.Minutes(), s.goroutines, float64(s.heap)/1e6, s.sent)
	}

	mu.Lock()
	defer mu.Unlock()
	require.False(t, allAt.IsZero(), "every group notified")
	firstAll := allAt.Sub(began)
	t.Logf("%d alerts in %d groups all notified %s (compressed: %.0f s; group_wait %s) after the first post; %d notifications in %d compressed minutes",
		nAlerts, groups, firstAll.Round(time.Millisecond), firstAll.Seconds()*scale, dur(30*time.Second), sent, minutes)
	require.Len(t, byKey, groups)
	require.Len(t, complete, groups, "every group notified with all its alerts")
	for k, n := range again {
		require.Zero(t, n, "group %s notified %d more times after a notification with all its alerts", k, n)
	}
	require.Len(t, alerts, nAlerts, "every alert in a notification")
	if partial > 0 {
		t.Logf("%d notifications of a group before all its alerts were in (the dispatcher slower than the compressed group_wait)", partial)
	}
	require.Equal(t, groups+partial, sent, "one complete notification per group, besides the partial ones")

	// No growth after the first notifications: the goroutines are the
	// same few (one per aggregation group, and the webhook's connections,
	// some of which close after the first burst), the heap within 10 % or
	// 1 MB. Fewer is no growth.
	first, last := samples[0], samples[len(samples)-1]
	require.LessOrEqual(t, last.goroutines, first.goroutines+3, "goroutines %d → %d", first.goroutines, last.goroutines)
	require.LessOrEqual(t, float64(last.heap), float64(first.heap)+max(0.1*float64(first.heap), 1e6),
		"heap %.2f → %.2f MB", float64(first.heap)/1e6, float64(last.heap)/1e6)
}
