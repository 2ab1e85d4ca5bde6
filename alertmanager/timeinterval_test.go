package alertmanager

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/api/v2/models"
	"github.com/stretchr/testify/require"
)

// TestTimeIntervals: time_intervals (and the older top-level
// mute_time_intervals) with routes' mute_time_intervals and
// active_time_intervals hold notifications back as Alertmanager's
// dispatcher does: a route muted now, or active only at another time,
// sends nothing and its group shows as muted by the interval's name; the
// others send. The intervals are always (every day of the week) and never
// (a year long past), so the outcome does not depend on the clock.
func TestTimeIntervals(t *testing.T) {
	h := newHook(t)
	am := startAM(t, t.TempDir(), fmt.Sprintf(`
route:
  receiver: hook
  group_by: [alertname]
  group_wait: 100ms
  group_interval: 300ms
  repeat_interval: 1h
  routes:
    - matchers: [alertname="MutedNow"]
      mute_time_intervals: [always]
    - matchers: [alertname="NotMutedNow"]
      mute_time_intervals: [never]
    - matchers: [alertname="ActiveNow"]
      active_time_intervals: [always]
    - matchers: [alertname="ActiveAnotherTime"]
      active_time_intervals: [never]
    - matchers: [alertname="ActiveNowMutedNow"]
      active_time_intervals: [always]
      mute_time_intervals: [always]
time_intervals:
  - name: always
    time_intervals: [{weekdays: ['sunday:saturday']}]
mute_time_intervals:
  - name: never
    time_intervals: [{years: ['1999']}]
receivers:
  - name: hook
    webhook_configs: [{url: %q}]
`, h.srv.URL+"/"))
	names := []string{"MutedNow", "NotMutedNow", "ActiveNow", "ActiveAnotherTime", "ActiveNowMutedNow"}
	var alerts []map[string]string
	for _, n := range names {
		alerts = append(alerts, gpuAlert(n, "warning", "0"))
	}
	am.post(alerts...)

	sent := func() []string {
		var out []string
		for _, m := range h.messages() {
			out = append(out, m.GroupLabels["alertname"])
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	eventually(t, "the groups outside their mute intervals notified", func() error {
		if got := sent(); !slices.Equal(got, []string{"ActiveNow", "NotMutedNow"}) {
			return fmt.Errorf("sent %v", got)
		}
		return nil
	})
	// Several group intervals more: the muted groups stay unsent.
	time.Sleep(time.Second)
	require.Equal(t, []string{"ActiveNow", "NotMutedNow"}, sent())

	// The API's alert groups say which interval holds each muted group.
	code, body := am.do(http.MethodGet, "/api/v2/alerts/groups", nil)
	require.Equal(t, http.StatusOK, code)
	var groups models.AlertGroups
	require.NoError(t, json.Unmarshal(body, &groups))
	mutedBy := map[string][]string{}
	for _, g := range groups {
		for _, a := range g.Alerts {
			mutedBy[a.Labels["alertname"]] = a.Status.MutedBy
		}
	}
	require.Equal(t, map[string][]string{
		"MutedNow":          {"always"},
		"NotMutedNow":       {},
		"ActiveNow":         {},
		"ActiveAnotherTime": {"never"},
		"ActiveNowMutedNow": {"always"},
	}, mutedBy)
}
