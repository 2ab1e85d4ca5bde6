package web

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/alertmanager"
	"github.com/gpuscope/gpuscope/doctor"
)

// section returns the element of body that starts with start, up to its
// closing tag end.
func section(t *testing.T, body, start, end string) string {
	t.Helper()
	i := strings.Index(body, start)
	require.NotEqual(t, -1, i, "%s in\n%s", start, body)
	j := strings.Index(body[i:], end)
	require.NotEqual(t, -1, j, "%s after %s", end, start)
	return body[i : i+j+len(end)]
}

func TestOverviewNotifications(t *testing.T) {
	now := evalAt
	for _, tc := range []struct {
		name string
		n    *Notifications
		want []string // in the block, in order
		not  []string
	}{
		{
			name: "alerts reach nobody",
			n: &Notifications{
				Nobody: "the alertmanager: section has no receivers",
				Fix:    "add a receiver to the alertmanager: section",
				Alerts: []NotifiedAlert{{Labels: map[string]string{"alertname": "GPUTemperatureHigh"}}},
			},
			want: []string{
				`<p class="notice" id="alerts-reach-nobody"><b>Alerts reach nobody:</b> the alertmanager: section has no receivers.<br><span class="hint">To fix: add a receiver to the alertmanager: section</span></p>`,
				`1 alert in the embedded Alertmanager.`,
			},
			not: []string{"<h3>Receivers</h3>", "<h3>Silences</h3>", "Not sent now"},
		},
		{
			name: "receivers, silences and what is held back",
			n: &Notifications{
				External: "1 Alertmanager of alerting.alertmanagers",
				Deliveries: []Delivery{
					{Receiver: "ops", Integration: "webhook[0]", LastAttempt: now.Add(-12 * time.Second), LastSuccess: now.Add(-12 * time.Second), Attempts: 3},
					{Receiver: "pager", Integration: "email[0]", LastAttempt: now.Add(-5 * time.Second), LastSuccess: now.Add(-time.Hour),
						LastError: `dial tcp 127.0.0.1:25: connect: connection refused <x>`, Attempts: 9, Failures: 4},
					{Receiver: "chat", Integration: "slack[0]"},
				},
				Silences: []Silence{
					{ID: "s-1", CreatedBy: "ana", Comment: "new fans on gpu-02", Matchers: `alertname="GPUTemperatureHigh", instance=~"gpu-0[12]"`,
						StartsAt: now.Add(-time.Hour), EndsAt: now.Add(90 * time.Minute)},
					{ID: "s-2", CreatedBy: "bo", Matchers: `alertname="TargetDown"`, StartsAt: now.Add(time.Hour), EndsAt: now.Add(2 * time.Hour)},
				},
				Alerts: []NotifiedAlert{
					{Labels: map[string]string{"alertname": "GPUTemperatureHigh", "instance": "gpu-02", "gpu": "3"}, SilencedBy: []string{"s-1"}},
					{Labels: map[string]string{"alertname": "GPUMetricsStale", "instance": "gpu-01", "gpu": "0"}, InhibitedBy: []string{"GPUFellOffBus on gpu-01 GPU 0"}},
					{Labels: map[string]string{"alertname": "GPUHeldIdle", "instance": "gpu-01", "gpu": "1", "workload": "<notebook>"}, MutedBy: []string{"nights"}},
					{Labels: map[string]string{"alertname": "GPUMemoryAlmostFull", "instance": "gpu-01", "gpu": "1"}},
				},
			},
			want: []string{
				`<p class="quiet">Alerts also go to 1 Alertmanager of alerting.alertmanagers.</p>`,
				`<li class="check receiver ok" data-receiver="ops" data-integration="webhook[0]" data-status="ok"><b>ok</b> ops <code>webhook[0]</code>: last attempt 12s ago, delivered</li>`,
				`<li class="check receiver fail" data-receiver="pager" data-integration="email[0]" data-status="fail"><b>fail</b> pager <code>email[0]</code>: last attempt 5s ago, failed: <span class="error">dial tcp 127.0.0.1:25: connect: connection refused &lt;x&gt;</span> (4 of 9 attempts failed; last delivered 1h ago)</li>`,
				`<li class="check receiver never" data-receiver="chat" data-integration="slack[0]" data-status="never"><b>never</b> chat <code>slack[0]</code>: not tried since gpuscope started</li>`,
				`<li class="silence" data-silence="s-1"><code>alertname=&#34;GPUTemperatureHigh&#34;, instance=~&#34;gpu-0[12]&#34;</code> by <b>ana</b>, until 1970-01-01 02:30 UTC (1h30m left): new fans on gpu-02</li>`,
				`<li class="silence" data-silence="s-2"><code>alertname=&#34;TargetDown&#34;</code> by <b>bo</b>, from 1970-01-01 02:00 UTC until 1970-01-01 03:00 UTC (2h left)</li>`,
				`<li class="alert suppressed" data-alertname="GPUHeldIdle" data-suppressed="muted"><b>GPUHeldIdle</b> · node gpu-01, GPU 1, workload &lt;notebook&gt; <span class="state">muted</span> by time interval nights</li>`,
				`<li class="alert suppressed" data-alertname="GPUMetricsStale" data-suppressed="inhibited"><b>GPUMetricsStale</b> · node gpu-01, GPU 0 <span class="state">inhibited</span> by GPUFellOffBus on gpu-01 GPU 0</li>`,
				`<li class="alert suppressed" data-alertname="GPUTemperatureHigh" data-suppressed="silenced"><b>GPUTemperatureHigh</b> · node gpu-02, GPU 3 <span class="state">silenced</span> by silence s-1 of ana</li>`,
				`4 alerts in the embedded Alertmanager, 3 not sent now. Silence or expire with <code>amtool --alertmanager.url=http://gpu-01:9089 silence add|query|expire</code>`,
			},
			not: []string{"alerts-reach-nobody", `data-alertname="GPUMemoryAlmostFull"`},
		},
		{
			name: "not running",
			n:    &Notifications{Err: "the embedded Alertmanager is not running"},
			want: []string{`<p class="error" id="notifications-error">the embedded Alertmanager is not running</p>`, "0 alerts in the embedded Alertmanager."},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked int
			f := newOverview(t, overviewLoad, nil, OverviewOptions{Notifications: func(context.Context) *Notifications {
				asked++
				return tc.n
			}})
			f.h.opts.ExternalURL.Host = "gpu-01:9089"
			code, body := get(t, f.srv.URL+"/")
			require.Equal(t, 200, code)
			require.Equal(t, 1, asked)
			block := section(t, body, `<section id="notifications">`, `</section>`)
			require.Less(t, strings.Index(body, `<section id="alerts">`), strings.Index(body, block), "after the alerts")
			at := 0
			for _, w := range tc.want {
				i := strings.Index(block[at:], w)
				require.NotEqual(t, -1, i, "%s\nafter %d in\n%s", w, at, block)
				at += i + len(w)
			}
			for _, n := range tc.not {
				require.NotContains(t, block, n)
			}
			require.NotRegexp(t, regexp.MustCompile(`<notebook>|<x>`), block, "escaped")
		})
	}

	// Without the option (the agent, or tests of other blocks): no block.
	f := newOverview(t, overviewLoad, nil, OverviewOptions{})
	_, body := get(t, f.srv.URL+"/")
	require.NotContains(t, body, `id="notifications"`)
}

// TestNewNotifications: the block made from the embedded Alertmanager's
// status: integrations named with their index, alerts' labels as strings;
// with Alertmanagers of alerting.alertmanagers set, alerts reach them and
// the embedded one's "nobody" is not said; a status error is shown with
// what the Alertmanager still gave.
func TestNewNotifications(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	st := alertmanager.Status{
		Nobody:     "the alertmanager: section has no receivers",
		Deliveries: []alertmanager.Delivery{{Receiver: "ops", Integration: "email", Index: 1, LastAttempt: at, LastError: "refused", Attempts: 2, Failures: 1}},
		Silences:   []alertmanager.Silence{{ID: "s-1", CreatedBy: "ana", Matchers: `alertname="X"`, EndsAt: at}},
		Alerts:     []alertmanager.Alert{{Labels: model.LabelSet{"alertname": "X", "gpu": "3"}, SilencedBy: []string{"s-1"}}},
	}
	n := NewNotifications(st, nil, 0)
	require.Equal(t, st.Nobody, n.Nobody)
	require.Empty(t, n.External)
	require.Empty(t, n.Err)
	require.Equal(t, doctor.AlertsHint, n.Fix)
	require.Equal(t, []Delivery{{Receiver: "ops", Integration: "email[1]", LastAttempt: at, LastError: "refused", Attempts: 2, Failures: 1}}, n.Deliveries)
	require.Equal(t, []Silence{{ID: "s-1", CreatedBy: "ana", Matchers: `alertname="X"`, EndsAt: at}}, n.Silences)
	require.Equal(t, []NotifiedAlert{{Labels: map[string]string{"alertname": "X", "gpu": "3"}, SilencedBy: []string{"s-1"}}}, n.Alerts)

	n = NewNotifications(st, nil, 2)
	require.Equal(t, "the Alertmanagers of alerting.alertmanagers (2 sets)", n.External)
	require.Empty(t, n.Nobody, "alerts reach the external Alertmanagers")
	require.Equal(t, "the Alertmanagers of alerting.alertmanagers (1 set)", NewNotifications(st, nil, 1).External)

	n = NewNotifications(alertmanager.Status{Nobody: st.Nobody}, alertmanager.ErrNotRunning, 0)
	require.Equal(t, alertmanager.ErrNotRunning.Error(), n.Err)
	require.Equal(t, st.Nobody, n.Nobody)
	require.Empty(t, n.Deliveries)
}
