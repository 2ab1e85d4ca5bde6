//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/api/v2/models"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app/apptest"
	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// The webhook receiver the alert tests listen with (apptest's).
type (
	webhook        = apptest.Webhook
	webhookMessage = apptest.WebhookMessage
	webhookAlert   = apptest.WebhookAlert
)

var newWebhook = apptest.NewWebhook

// realAlertmanager is a running Alertmanager built from ../tools.
type realAlertmanager struct {
	t       *testing.T
	bin     string
	args    []string
	URL     string
	cmd     *exec.Cmd
	out     *pkgtest.SyncBuffer
	exited  chan struct{}
	storage string
}

// startAlertmanager runs Alertmanager with config on a free port, its
// cluster listener off (parallel tests would share its port), and waits
// until it is ready.
func startAlertmanager(t *testing.T, config string) *realAlertmanager {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "alertmanager.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(config), 0o644))
	port := freePort(t)
	am := &realAlertmanager{
		t:       t,
		bin:     neighbourTools(t).Alertmanager,
		URL:     "http://127.0.0.1:" + strconv.Itoa(port),
		storage: filepath.Join(dir, "data"),
	}
	am.args = []string{
		"--config.file=" + cfg,
		"--storage.path=" + am.storage,
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(port),
		"--cluster.listen-address=",
		"--log.level=debug",
	}
	am.start()
	return am
}

func (am *realAlertmanager) addr() string { return strings.TrimPrefix(am.URL, "http://") }

// start runs the process (again, after kill) with the same flags, port
// and storage.
func (am *realAlertmanager) start() {
	am.t.Helper()
	am.cmd = exec.Command(am.bin, am.args...)
	out := &pkgtest.SyncBuffer{}
	am.out = out
	am.cmd.Stdout, am.cmd.Stderr = out, out
	require.NoError(am.t, am.cmd.Start())
	exited := make(chan struct{})
	am.exited = exited
	go func() {
		_ = am.cmd.Wait()
		close(exited)
	}()
	cmd := am.cmd
	am.t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if am.t.Failed() {
			logOutput(am.t, "alertmanager", out.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			am.t.Fatalf("alertmanager exited before ready:\n%s", out.String())
		default:
		}
		if resp, err := http.Get(am.URL + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	am.t.Fatalf("alertmanager not ready after 30s:\n%s", out.String())
}

// kill stops Alertmanager with SIGKILL: no snapshot of its state is
// written on the way out.
func (am *realAlertmanager) kill() {
	am.t.Helper()
	require.NoError(am.t, am.cmd.Process.Signal(syscall.SIGKILL))
	<-am.exited
}

// alerts returns Alertmanager's alerts from its API v2, by alertname.
func (am *realAlertmanager) alerts() (map[string][]*models.GettableAlert, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, am.URL+"/api/v2/alerts", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v2/alerts: %s: %s", resp.Status, b)
	}
	var alerts models.GettableAlerts
	if err := json.Unmarshal(b, &alerts); err != nil {
		return nil, err
	}
	out := map[string][]*models.GettableAlert{}
	for _, a := range alerts {
		out[a.Labels["alertname"]] = append(out[a.Labels["alertname"]], a)
	}
	return out, nil
}

// amtool runs the real amtool against am.
func (am *realAlertmanager) amtool(args ...string) string {
	am.t.Helper()
	cmd := exec.Command(neighbourTools(am.t).Amtool, append([]string{"--alertmanager.url=" + am.URL}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(am.t, err, "amtool %v:\n%s", args, out)
	return string(out)
}

// amGPUScopeConfig is gpuscope's config for the tests against the real
// Alertmanager: simulated GPUs and the built-in rules at 60× speed.
func amGPUScopeConfig(am *realAlertmanager, scenarios ...string) string {
	var gpus strings.Builder
	for _, s := range scenarios {
		fmt.Fprintf(&gpus, "      - {scenario: %s}\n", s)
	}
	return fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
  external_labels: {cluster: e2e-am, region: lab}
alerting:
  alertmanagers:
    - static_configs: [{targets: [%q]}]
rules:
  builtin:
    time_scale: 60
gpu:
  backend: sim
  sim:
    count: %d
    time_scale: 60
    gpus:
%s`, am.addr(), len(scenarios), gpus.String())
}

// checkGPUScopeAlert checks what gpuscope put on an alert that went
// through Alertmanager: its external labels, the node and the rule's
// severity.
func checkGPUScopeAlert(t *testing.T, a webhookAlert, severity string) {
	t.Helper()
	require.Equal(t, "e2e-am", a.Labels["cluster"], "external label, %v", a.Labels)
	require.Equal(t, "lab", a.Labels["region"], "external label, %v", a.Labels)
	require.Equal(t, "e2e-node", a.Labels["instance"], "%v", a.Labels)
	require.Equal(t, severity, a.Labels["severity"], "%v", a.Labels)
	require.Equal(t, "firing", a.Status)
	require.NotEmpty(t, a.Annotations["summary"])
}

// TestAlertmanagerRoutesGroupsAndSilences: the sim scenarios' alerts reach
// a real Alertmanager with gpuscope's external labels; its config groups
// them by alertname and instance (both memory-bound GPUs' alerts in one
// notification) and routes critical ones to one webhook receiver, the
// rest to another; a silence set with amtool stops the silenced alert's
// notifications while the other group's go on.
func TestAlertmanagerRoutesGroupsAndSilences(t *testing.T) {
	t.Parallel()
	critical, others := newWebhook(t), newWebhook(t)
	am := startAlertmanager(t, fmt.Sprintf(`
route:
  receiver: others
  group_by: [alertname, instance]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 3s
  routes:
    - matchers: ['severity="critical"']
      receiver: critical
receivers:
  - name: critical
    webhook_configs: [{url: %q}]
  - name: others
    webhook_configs: [{url: %q}]
`, critical.URL(), others.URL()))
	started := time.Now()
	serve(t, "", "--config.file="+writeConfig(t, t.TempDir(), amGPUScopeConfig(am, "memory-bound", "memory-bound", "thermal")),
		"--rules.alert.resend-delay=2s")

	// Memory-bound: GPUMemoryAlmostFull (critical) for GPUs 0 and 1, in
	// one group, to the critical receiver.
	var full webhookMessage
	eventually(t, 120*time.Second, "GPUMemoryAlmostFull of GPUs 0 and 1 in one notification to the critical receiver", func() error {
		msgs, err := critical.Messages("GPUMemoryAlmostFull", time.Time{})
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
	require.Equal(t, "critical", full.Receiver)
	require.Equal(t, "4", full.Version)
	require.Equal(t, map[string]string{"alertname": "GPUMemoryAlmostFull", "instance": "e2e-node"}, full.GroupLabels)
	require.Equal(t, "e2e-am", full.CommonLabels["cluster"])
	var gpus []string
	for _, a := range full.Alerts {
		checkGPUScopeAlert(t, a, "critical")
		gpus = append(gpus, a.Labels["gpu"])
	}
	slices.Sort(gpus)
	require.Equal(t, []string{"0", "1"}, gpus)

	// Thermal: GPUSMUtilizationHigh (warning) for GPU 2, to the other
	// receiver.
	eventually(t, 60*time.Second, "GPUSMUtilizationHigh of GPU 2 to the others receiver", func() error {
		msgs, err := others.Messages("GPUSMUtilizationHigh", time.Time{})
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			return fmt.Errorf("not received")
		}
		return nil
	})
	busy, err := others.Messages("GPUSMUtilizationHigh", time.Time{})
	require.NoError(t, err)
	require.Equal(t, "others", busy[0].Receiver)
	require.Len(t, busy[0].Alerts, 1)
	require.Equal(t, "2", busy[0].Alerts[0].Labels["gpu"])
	checkGPUScopeAlert(t, busy[0].Alerts[0], "warning")
	// Routing: no alert reached the wrong receiver.
	require.NotContains(t, others.Alertnames(), "GPUMemoryAlmostFull")
	require.NotContains(t, critical.Alertnames(), "GPUSMUtilizationHigh")

	// Alertmanager's own view: the alerts are active, with gpuscope's
	// generator URL.
	active, err := am.alerts()
	require.NoError(t, err)
	require.Len(t, active["GPUMemoryAlmostFull"], 2)
	require.Len(t, active["GPUSMUtilizationHigh"], 1)
	require.Equal(t, "active", *active["GPUSMUtilizationHigh"][0].Status.State)
	require.Contains(t, string(active["GPUSMUtilizationHigh"][0].GeneratorURL), "/graph?g0.expr=")

	// A silence set with amtool.
	id := strings.TrimSpace(am.amtool("silence", "add", "alertname=GPUSMUtilizationHigh",
		"--author=e2e", "--comment=gpuscope e2e: silence the busy GPU", "--duration=1h"))
	require.Regexp(t, `^[0-9a-f-]{36}$`, id)
	require.Contains(t, am.amtool("silence", "query", "--quiet"), id)
	eventually(t, 10*time.Second, "GPUSMUtilizationHigh suppressed by the silence", func() error {
		active, err := am.alerts()
		if err != nil {
			return err
		}
		for _, a := range active["GPUSMUtilizationHigh"] {
			if *a.Status.State == "suppressed" && slices.Contains(a.Status.SilencedBy, id) {
				return nil
			}
		}
		return fmt.Errorf("not suppressed: %v", active["GPUSMUtilizationHigh"])
	})
	// A notification already on its way when the silence came may still
	// land; after a group interval and a second, none may.
	time.Sleep(2 * time.Second)
	silenced := time.Now()
	// Over five repeat intervals the critical group is notified again
	// (repeat_interval 3s) and the silenced one not at all, though
	// gpuscope keeps sending it and it is still firing.
	eventually(t, 30*time.Second, "GPUMemoryAlmostFull notified again after the silence", func() error {
		msgs, err := critical.Messages("GPUMemoryAlmostFull", silenced)
		if err != nil {
			return err
		}
		if len(msgs) < 3 || time.Since(silenced) < 15*time.Second {
			return fmt.Errorf("%d notifications since the silence", len(msgs))
		}
		return nil
	})
	after, err := others.Messages("GPUSMUtilizationHigh", silenced)
	require.NoError(t, err)
	require.Empty(t, after, "silenced alert notified")
	active, err = am.alerts()
	require.NoError(t, err)
	require.Len(t, active["GPUSMUtilizationHigh"], 1, "still sent by gpuscope")
	require.Equal(t, "suppressed", *active["GPUSMUtilizationHigh"][0].Status.State)
	before, err := others.Messages("GPUSMUtilizationHigh", time.Time{})
	require.NoError(t, err)
	t.Logf("GPUSMUtilizationHigh: %d notifications before the silence, none in the %s after; GPUMemoryAlmostFull notified on",
		len(before), time.Since(silenced).Round(time.Second))
}

// TestAlertmanagerRestartLosesNoFiringAlert: Alertmanager keeps alerts
// in memory only (its --storage.path holds silences and the notification
// log), so after a crash its alerts are those the rule senders send
// again. Killed with SIGKILL while gpuscope's alerts fire, and started
// again on the same port and storage, it has every alert that was firing
// back, with its original start, and an alert that began firing while it
// was down is delivered: gpuscope resends firing alerts every
// --rules.alert.resend-delay.
func TestAlertmanagerRestartLosesNoFiringAlert(t *testing.T) {
	t.Parallel()
	hook := newWebhook(t)
	am := startAlertmanager(t, fmt.Sprintf(`
route:
  receiver: hook
  group_by: [alertname, instance]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs: [{url: %q}]
`, hook.URL()))
	started := time.Now()
	p := serve(t, "", "--config.file="+writeConfig(t, t.TempDir(), amGPUScopeConfig(am, "memory-bound", "thermal")),
		"--rules.alert.resend-delay=2s")

	// GPUSMUtilizationHigh (GPU 1, ~10 s) and GPUMemoryAlmostFull (GPU 0,
	// ~20 s) come first; GPUTemperatureHigh (GPU 1) a minute or so later.
	firstAlerts := []string{"GPUSMUtilizationHigh", "GPUMemoryAlmostFull"}
	eventually(t, 120*time.Second, "first alerts delivered", func() error {
		for _, name := range firstAlerts {
			msgs, err := hook.Messages(name, time.Time{})
			if err != nil {
				return err
			}
			if len(msgs) == 0 {
				return fmt.Errorf("%s not delivered", name)
			}
		}
		return nil
	})
	t.Logf("first alerts delivered %s after start", time.Since(started).Round(time.Second))
	beforeAlerts, err := am.alerts()
	require.NoError(t, err)
	require.NotContains(t, beforeAlerts, "GPUTemperatureHigh", "fired too soon for this test")
	before := map[string]time.Time{} // fingerprint: startsAt
	for _, name := range firstAlerts {
		require.Len(t, beforeAlerts[name], 1, name)
		a := beforeAlerts[name][0]
		before[*a.Fingerprint] = time.Time(*a.StartsAt)
	}

	am.kill()
	killed := time.Now()
	eventually(t, 150*time.Second, "GPUTemperatureHigh firing in gpuscope while Alertmanager is down", func() error {
		return apiFiring(p, "GPUTemperatureHigh", "1")
	})
	// gpuscope did try to send it (and the others): the sends failed.
	eventually(t, 15*time.Second, "failed sends counted", func() error {
		v, err := p.instant(`sum(prometheus_notifications_errors_total)`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value == 0 {
			return fmt.Errorf("prometheus_notifications_errors_total %v", v)
		}
		return nil
	})
	t.Logf("Alertmanager down %s", time.Since(killed).Round(time.Second))

	am.start()
	restarted := time.Now()
	eventually(t, 30*time.Second, "every firing alert back in the restarted Alertmanager", func() error {
		after, err := am.alerts()
		if err != nil {
			return err
		}
		for _, name := range append(firstAlerts, "GPUTemperatureHigh") {
			if len(after[name]) == 0 {
				return fmt.Errorf("%s missing: %v", name, after)
			}
		}
		for fp, startsAt := range before {
			found := false
			for _, as := range after {
				for _, a := range as {
					if *a.Fingerprint == fp {
						found = true
						if !time.Time(*a.StartsAt).Equal(startsAt) {
							return fmt.Errorf("%s starts at %s, was %s", a.Labels["alertname"], time.Time(*a.StartsAt), startsAt)
						}
					}
				}
			}
			if !found {
				return fmt.Errorf("alert %s missing", fp)
			}
		}
		return nil
	})
	t.Logf("all firing alerts back %s after the restart", time.Since(restarted).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, "GPUTemperatureHigh, fired while Alertmanager was down, delivered", func() error {
		msgs, err := hook.Messages("GPUTemperatureHigh", restarted)
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			return fmt.Errorf("not delivered")
		}
		return nil
	})
	msgs, err := hook.Messages("GPUTemperatureHigh", time.Time{})
	require.NoError(t, err)
	hot := msgs[0].Alerts[0]
	checkGPUScopeAlert(t, hot, "warning")
	require.Equal(t, "1", hot.Labels["gpu"])
	require.True(t, hot.StartsAt.Before(restarted), "starts at %s, while Alertmanager was down (restarted %s)", hot.StartsAt, restarted)
}
