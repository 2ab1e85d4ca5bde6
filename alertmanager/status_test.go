package alertmanager

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// TestStatus: what the overview page shows. Each integration's last
// attempt and its result (a receiver that answers, one that is down and
// retried, one never tried), the active silences with their matchers as
// amtool writes them, and each alert held with what holds it back:
// silenced (by the silence's ID), inhibited (by the named alert), muted
// (by the time interval), or nothing.
func TestStatus(t *testing.T) {
	h := newHook(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	quiet := newHook(t)
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
    - matchers: [alertname="Quiet"]
      receiver: quiet
    - matchers: [alertname="Night"]
      mute_time_intervals: [always]
inhibit_rules:
  - source_matchers: [alertname="GPUFellOffBus"]
    target_matchers: [severity="warning"]
    equal: [instance, gpu]
time_intervals:
  - name: always
    time_intervals: [{weekdays: ['sunday:saturday']}]
receivers:
  - name: hook
    webhook_configs: [{url: %q}]
  - name: dead
    webhook_configs: [{url: %q}]
  - name: quiet
    webhook_configs: [{url: %q}, {url: %q}]
`, h.srv.URL+"/", dead.URL+"/", quiet.srv.URL+"/", quiet.srv.URL+"/2"))
	id := am.silence("alertname", "GPUTemperatureHigh")
	am.post(gpuAlert("GPUMemoryAlmostFull", "critical", "0"), gpuAlert("Dead", "critical", "0"),
		gpuAlert("GPUTemperatureHigh", "warning", "1"), gpuAlert("GPUFellOffBus", "critical", "2"),
		gpuAlert("GPUMetricsStale", "warning", "2"), gpuAlert("Night", "warning", "3"))

	var s Status
	eventually(t, "the hook delivered to and the dead receiver tried twice", func() error {
		var err error
		if s, err = am.am.Status(context.Background()); err != nil {
			return err
		}
		for _, d := range s.Deliveries {
			if d.Receiver == "dead" && d.Failures >= 2 {
				return nil
			}
		}
		return fmt.Errorf("%+v", s.Deliveries)
	})
	require.Empty(t, s.Nobody)

	require.Len(t, s.Deliveries, 4, "one per integration of a receiver a route leads to")
	byName := map[string]Delivery{}
	for _, d := range s.Deliveries {
		byName[fmt.Sprintf("%s/%s[%d]", d.Receiver, d.Integration, d.Index)] = d
	}
	ok := byName["hook/webhook[0]"]
	require.False(t, ok.LastAttempt.IsZero())
	require.Equal(t, ok.LastAttempt, ok.LastSuccess)
	require.Empty(t, ok.LastError)
	require.Zero(t, ok.Failures)
	require.Equal(t, len(h.messages()), ok.Attempts, "an attempt per notification sent")
	down := byName["dead/webhook[0]"]
	require.Contains(t, down.LastError, "connection refused")
	require.True(t, down.LastSuccess.IsZero())
	require.Equal(t, down.Attempts, down.Failures)
	for _, k := range []string{"quiet/webhook[0]", "quiet/webhook[1]"} {
		require.True(t, byName[k].LastAttempt.IsZero(), "%s never tried", k)
	}

	require.Len(t, s.Silences, 1)
	require.Equal(t, id, s.Silences[0].ID)
	require.Equal(t, "test", s.Silences[0].CreatedBy)
	require.Equal(t, `alertname="GPUTemperatureHigh"`, s.Silences[0].Matchers)
	require.WithinDuration(t, time.Now().Add(time.Hour), s.Silences[0].EndsAt, time.Minute)

	held := map[string]Alert{}
	for _, a := range s.Alerts {
		held[string(a.Labels[model.AlertNameLabel])] = a
	}
	require.Len(t, held, 6)
	for name, want := range map[string]Alert{
		"GPUMemoryAlmostFull": {Receivers: []string{"hook"}},
		"Dead":                {Receivers: []string{"dead"}},
		"GPUTemperatureHigh":  {Receivers: []string{"hook"}, SilencedBy: []string{id}},
		"GPUFellOffBus":       {Receivers: []string{"hook"}},
		"GPUMetricsStale":     {Receivers: []string{"hook"}, InhibitedBy: []string{"GPUFellOffBus on node-1 GPU 2"}},
		"Night":               {Receivers: []string{"hook"}, MutedBy: []string{"always"}},
	} {
		got := held[name]
		require.Equal(t, want.Receivers, got.Receivers, name)
		require.ElementsMatch(t, want.SilencedBy, got.SilencedBy, name)
		require.ElementsMatch(t, want.InhibitedBy, got.InhibitedBy, name)
		require.ElementsMatch(t, want.MutedBy, got.MutedBy, name)
	}

	// Stopped, it says so.
	am.stop()
	_, err := am.am.Status(context.Background())
	require.ErrorIs(t, err, ErrNotRunning)
}
