//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/api/v2/models"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app/apptest"
)

// The embedded Alertmanager (docs/notifications.md), tested as users
// meet it: the real binary with simulated GPUs firing the built-in
// alerts, a webhook receiver on loopback, and the real amtool against
// gpuscope's URL.

// embeddedConfig is gpuscope's config for these tests (apptest's).
var embeddedConfig = apptest.EmbeddedConfig

// amtool runs the real amtool against url.
func amtool(t *testing.T, url string, args ...string) string {
	t.Helper()
	cmd := exec.Command(neighbourTools(t).Amtool, append([]string{"--alertmanager.url=" + url}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "amtool %v:\n%s", args, out)
	return string(out)
}

func embeddedAlerts(p *process) (map[string][]*models.GettableAlert, error) {
	return p.client().EmbeddedAlerts()
}

// TestEmbeddedAlertmanagerWebhook: with only a receiver in the
// alertmanager: section, the built-in alerts reach a webhook in
// Alertmanager's format through gpuscope's default route (one
// notification for both memory-bound GPUs' alert), the real amtool
// silences, lists and expires against gpuscope's URL, a silenced alert is
// suppressed and never sent, the exported config passes amtool
// check-config, a receiver that is down is retried and counted, and the
// delivery counters are stored while the Alertmanager's internals are not
// (the series diet).
func TestEmbeddedAlertmanagerWebhook(t *testing.T) {
	t.Parallel()
	hook := newWebhook(t)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // a receiver that is down: connection refused
	dir := t.TempDir()
	cfg := writeConfig(t, dir, embeddedConfig(fmt.Sprintf(`  receivers:
    - name: ops
      webhook_configs: [{url: %q}]
    - name: down
      webhook_configs: [{url: %q}]
`, hook.URL(), down.URL), "memory-bound", "memory-bound", "thermal"))
	started := time.Now()
	p := serve(t, "", "--config.file="+cfg, "--rules.alert.resend-delay=2s")

	// GPUTemperatureHigh (GPU 2) fires a minute or so in: silenced before.
	id := strings.TrimSpace(amtool(t, p.URL, "silence", "add", "alertname=GPUTemperatureHigh",
		"--author=e2e", "--comment=gpuscope e2e: the hot GPU is known", "--duration=1h"))
	// Only the id: amtool (stamped 0.34.x) prints no "versions are
	// different" warning, as /api/v2/status reports the embedded
	// Alertmanager's release, not gpuscope's.
	require.Regexp(t, `^[0-9a-f-]{36}$`, id)
	require.Contains(t, amtool(t, p.URL, "silence", "query", "--quiet"), id)
	// The default route is what runs.
	shown := amtool(t, p.URL, "config", "show")
	require.Contains(t, shown, "repeat_interval: 4h")
	require.Contains(t, shown, "- instance\n  - alertname", "group_by")

	// GPUMemoryAlmostFull of GPUs 0 and 1: one group (node and alert
	// name), one notification after the default route's group_wait.
	var full webhookMessage
	eventually(t, 150*time.Second, "GPUMemoryAlmostFull of GPUs 0 and 1 in one notification", func() error {
		msgs, err := hook.Messages("GPUMemoryAlmostFull", time.Time{})
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if len(m.Alerts) == 2 {
				full = m
				return nil
			}
		}
		return fmt.Errorf("%d notifications, none with both GPUs", len(msgs))
	})
	t.Logf("GPUMemoryAlmostFull for both GPUs delivered %s after start", time.Since(started).Round(time.Second))
	require.Equal(t, "4", full.Version)
	require.Equal(t, "ops", full.Receiver)
	require.Equal(t, map[string]string{"alertname": "GPUMemoryAlmostFull", "instance": "e2e-node"}, full.GroupLabels)
	var gpus []string
	for _, a := range full.Alerts {
		checkGPUScopeAlert(t, a, "critical")
		gpus = append(gpus, a.Labels["gpu"])
	}
	slices.Sort(gpus)
	require.Equal(t, []string{"0", "1"}, gpus)
	require.Contains(t, amtool(t, p.URL, "alert", "query"), "GPUMemoryAlmostFull")

	// The silenced alert: active in gpuscope, suppressed by the silence,
	// never sent.
	eventually(t, 150*time.Second, "GPUTemperatureHigh suppressed by the silence", func() error {
		alerts, err := embeddedAlerts(p)
		if err != nil {
			return err
		}
		for _, a := range alerts["GPUTemperatureHigh"] {
			if *a.Status.State == "suppressed" && slices.Contains(a.Status.SilencedBy, id) {
				return nil
			}
		}
		return fmt.Errorf("not suppressed: %v", alerts["GPUTemperatureHigh"])
	})
	// The overview page shows the silence and the alert it holds back.
	_, page := p.get("/")
	require.Contains(t, page, `<li class="silence" data-silence="`+id+`"><code>alertname=&#34;GPUTemperatureHigh&#34;</code> by <b>e2e</b>`)
	require.Contains(t, page, `data-alertname="GPUTemperatureHigh" data-suppressed="silenced"><b>GPUTemperatureHigh</b> · node e2e-node, GPU 2 <span class="state">silenced</span> by silence `+id+` of e2e</li>`)
	time.Sleep(35 * time.Second) // past the group's first flush (group_wait 30s)
	require.NotContains(t, hook.Alertnames(), "GPUTemperatureHigh", "a silenced alert was sent")
	require.NotContains(t, amtool(t, p.URL, "alert", "query"), "GPUTemperatureHigh", "amtool lists active alerts only")

	// Expired, the silence no longer holds the alert.
	amtool(t, p.URL, "silence", "expire", id)
	require.NotContains(t, amtool(t, p.URL, "silence", "query", "--quiet"), id)
	require.Contains(t, amtool(t, p.URL, "silence", "query", "--expired", "--quiet"), id)
	eventually(t, 10*time.Second, "GPUTemperatureHigh active again", func() error {
		alerts, err := embeddedAlerts(p)
		if err != nil {
			return err
		}
		if a := alerts["GPUTemperatureHigh"]; len(a) != 1 || *a[0].Status.State != "active" {
			return fmt.Errorf("%v", a)
		}
		return nil
	})

	// The config in effect, exported, is a valid alertmanager.yml.
	exported := filepath.Join(dir, "alertmanager.yml")
	out, err := exec.Command(binary, "alertmanager", "export", "--config.file="+cfg, exported).CombinedOutput()
	require.NoError(t, err, "%s", out)
	check, err := exec.Command(neighbourTools(t).Amtool, "check-config", exported).CombinedOutput()
	require.NoError(t, err, "%s", check)
	require.Contains(t, string(check), "SUCCESS")
	require.Contains(t, string(check), "2 receivers")

	// Delivery is counted and stored, the receiver that is down retried
	// with back-off; the internals are not stored (the diet).
	for q, least := range map[string]float64{
		`sum(alertmanager_notifications_total{integration="webhook",receiver_name="ops"})`:                 1,
		`sum(alertmanager_notification_requests_failed_total{integration="webhook",receiver_name="ops"})`:  0,
		`sum(alertmanager_notification_requests_failed_total{integration="webhook",receiver_name="down"})`: 2,
	} {
		eventually(t, 15*time.Second, q, func() error {
			v, err := p.instant(q)
			if err != nil {
				return err
			}
			if len(v) != 1 || float64(v[0].Value) < least || (least == 0 && v[0].Value != 0) {
				return fmt.Errorf("%v", v)
			}
			return nil
		})
	}
	// The overview page has each receiver's last attempt and its result.
	_, page = p.get("/")
	require.Contains(t, page, `<li class="check receiver ok" data-receiver="ops" data-integration="webhook[0]" data-status="ok"><b>ok</b> ops <code>webhook[0]</code>: last attempt `)
	require.Regexp(t, `<li class="check receiver fail" data-receiver="down" data-integration="webhook\[0\]" data-status="fail"><b>fail</b> down <code>webhook\[0\]</code>: last attempt [^<]* ago, failed: <span class="error">[^<]*(connection refused|context deadline exceeded)</span> \(\d+ of \d+ attempts failed\)</li>`, page)
	require.NotContains(t, page, "alerts-reach-nobody")
	for _, q := range []string{`alertmanager_silences{state="expired"}`, `alertmanager_alerts{state="active"}`} {
		v, err := p.instant(q)
		require.NoError(t, err)
		require.NotEmpty(t, v, q)
	}
	v, err := p.instant(`{__name__=~"alertmanager_nflog_.+|alertmanager_dispatcher_.+"}`)
	require.NoError(t, err)
	require.Empty(t, v, "the Alertmanager's internals are off by default")
}

// TestEmbeddedAlertmanagerSurvivesKill9: killed with SIGKILL while alerts
// fire, and started again on the same data directory, gpuscope keeps the
// silence set before, does not notify the alerts it had notified again
// before their repeat interval although they fire again, and notifies an
// alert whose cause began while it was down (a target that went away)
// once it evaluates it.
func TestEmbeddedAlertmanagerSurvivesKill9(t *testing.T) {
	t.Parallel()
	hook := newWebhook(t)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "e2e_target_up 1")
	}))
	defer target.Close()
	data := t.TempDir()
	cfg := writeConfig(t, t.TempDir(), embeddedConfig(fmt.Sprintf(`  route:
    receiver: hook
    group_by: [alertname, instance]
    group_wait: 1s
    group_interval: 1s
    repeat_interval: 1h
  receivers:
    - name: hook
      webhook_configs: [{url: %q}]
`, hook.URL()), "memory-bound", "thermal")+fmt.Sprintf(`
scrape_configs:
  - job_name: e2e-target
    static_configs: [{targets: [%q]}]
`, strings.TrimPrefix(target.URL, "http://")))
	p := serve(t, data, "--config.file="+cfg, "--rules.alert.resend-delay=2s")

	id := strings.TrimSpace(amtool(t, p.URL, "silence", "add", "alertname=GPUTemperatureHigh",
		"--author=e2e", "--comment=gpuscope e2e: survives a kill -9", "--duration=1h"))
	firstAlerts := []string{"GPUSMUtilizationHigh", "GPUMemoryAlmostFull"}
	eventually(t, 120*time.Second, "first alerts notified", func() error {
		for _, name := range firstAlerts {
			msgs, err := hook.Messages(name, time.Time{})
			if err != nil {
				return err
			}
			if len(msgs) == 0 {
				return fmt.Errorf("%s not notified", name)
			}
		}
		return nil
	})
	before := map[string]int{}
	for _, name := range firstAlerts {
		msgs, _ := hook.Messages(name, time.Time{})
		before[name] = len(msgs)
	}
	// The test's target was up until now. The appliance's own jobs may
	// have been down: at the test's 1 s scrape interval (and timeout), on
	// a machine loaded by the parallel tests, five scaled minutes (5 s) of
	// cAdvisor scrapes can time out, and TargetDown on them is right.
	require.Empty(t, targetDowns(t, hook, "e2e-target", time.Time{}), "TargetDown of the test's target before it went away")
	// The guarantee is Alertmanager's: a notification the log holds is not
	// sent again. The log is written just after the receiver answered, so
	// a kill in between would send it again, in gpuscope as in a
	// standalone Alertmanager; kill once the log on disk has both groups.
	eventually(t, 30*time.Second, "the notifications in the log on disk", func() error {
		b, err := os.ReadFile(filepath.Join(data, "alertmanager", "nflog"))
		if err != nil {
			return err
		}
		for _, name := range firstAlerts {
			if !bytes.Contains(b, []byte(`alertname="`+name+`"`)) {
				return fmt.Errorf("%s not logged yet", name)
			}
		}
		return nil
	})

	p.signal(syscall.SIGKILL)
	require.Equal(t, -1, p.wait(30*time.Second), "killed by a signal")
	// While gpuscope is down, the target goes away.
	target.Close()
	p2 := serve(t, data, "--config.file="+cfg, "--rules.alert.resend-delay=2s")
	restarted := time.Now()

	require.Contains(t, amtool(t, p2.URL, "silence", "query", "--quiet"), id, "the silence held")
	eventually(t, 120*time.Second, "the first alerts firing again, in the Alertmanager", func() error {
		alerts, err := embeddedAlerts(p2)
		if err != nil {
			return err
		}
		for _, name := range firstAlerts {
			if len(alerts[name]) == 0 {
				return fmt.Errorf("%s not there", name)
			}
		}
		return nil
	})
	eventually(t, 60*time.Second, "TargetDown, whose target went away while gpuscope was down, notified", func() error {
		if len(targetDowns(t, hook, "e2e-target", restarted)) == 0 {
			return fmt.Errorf("not notified")
		}
		return nil
	})
	// Well past group_wait and a few group intervals since they are back.
	time.Sleep(5 * time.Second)
	for _, name := range firstAlerts {
		msgs, err := hook.Messages(name, time.Time{})
		require.NoError(t, err)
		require.Len(t, msgs, before[name], "%s notified again before its repeat interval", name)
	}
	t.Logf("after the restart: the silence held, %v not notified again, TargetDown notified", firstAlerts)

	// The held silence still suppresses the alert it was set for.
	eventually(t, 150*time.Second, "GPUTemperatureHigh suppressed by the silence set before the kill", func() error {
		alerts, err := embeddedAlerts(p2)
		if err != nil {
			return err
		}
		for _, a := range alerts["GPUTemperatureHigh"] {
			if *a.Status.State == "suppressed" && slices.Contains(a.Status.SilencedBy, id) {
				return nil
			}
		}
		return fmt.Errorf("not suppressed: %v", alerts["GPUTemperatureHigh"])
	})
	time.Sleep(3 * time.Second)
	require.NotContains(t, hook.Alertnames(), "GPUTemperatureHigh")
	for _, f := range []string{"silences", "nflog"} {
		_, err := os.Stat(filepath.Join(data, "alertmanager", f))
		require.NoError(t, err)
	}
}

// targetDowns returns the TargetDown notifications of job's targets
// received after since.
func targetDowns(t *testing.T, hook *webhook, job string, since time.Time) []webhookMessage {
	t.Helper()
	msgs, err := hook.Messages("TargetDown", since)
	require.NoError(t, err)
	var out []webhookMessage
	for _, m := range msgs {
		if m.CommonLabels["job"] == job {
			out = append(out, m)
		}
	}
	return out
}
