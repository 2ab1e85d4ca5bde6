package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/api/v2/models"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app/apptest"
)

// embeddedConfig is gpuscope's config for these tests.
var embeddedConfig = apptest.EmbeddedConfig

func embeddedAlerts(p *process) (map[string][]*models.GettableAlert, error) {
	return p.EmbeddedAlerts()
}

// TestEmbeddedAlertmanagerReload: without the section alerts are kept and
// sent to nobody; a SIGHUP that adds a receiver sends them; one that
// breaks the section is refused, naming the line (Reload's error), and the previous
// receivers stay in effect. `gpuscope agent` has no Alertmanager.
func TestEmbeddedAlertmanagerReload(t *testing.T) {
	t.Parallel()
	hook := newWebhook(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, embeddedConfig("", "thermal"))
	p := serve(t, "", configFile(cfg))
	status := func() string {
		code, body := p.get("/api/v2/status")
		require.Equal(t, http.StatusOK, code)
		return body
	}
	require.Contains(t, status(), `receiver: nobody`)
	_, page := p.get("/")
	require.Contains(t, page, `<p class="notice" id="alerts-reach-nobody"><b>Alerts reach nobody:</b> the alertmanager: section has no receivers.`)
	eventually(t, 90*time.Second, "GPUSMUtilizationHigh held by the embedded Alertmanager", func() error {
		alerts, err := embeddedAlerts(p)
		if err != nil {
			return err
		}
		if len(alerts["GPUSMUtilizationHigh"]) == 0 {
			return fmt.Errorf("not there: %v", alerts)
		}
		return nil
	})

	withHook := embeddedConfig(fmt.Sprintf(`  route:
    receiver: hook
    group_by: [alertname]
    group_wait: 1s
  receivers:
    - name: hook
      webhook_configs: [{url: %q}]
`, hook.URL()), "thermal")
	writeConfig(t, dir, withHook)
	require.NoError(t, p.reload())
	eventually(t, 30*time.Second, "GPUSMUtilizationHigh sent once the receiver is added", func() error {
		msgs, err := hook.Messages("GPUSMUtilizationHigh", time.Time{})
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			return fmt.Errorf("not sent")
		}
		return nil
	})
	_, page = p.get("/")
	require.NotContains(t, page, "alerts-reach-nobody", "the page follows the reload")
	require.Contains(t, page, `data-receiver="hook" data-integration="webhook[0]" data-status="ok"`)

	writeConfig(t, dir, strings.Replace(withHook, "receiver: hook", "receiver: pager", 1))
	reloadErr := p.reload()
	eventually(t, 30*time.Second, "the reload refused", func() error {
		_, body := p.get("/metrics")
		if !strings.Contains(body, "\ngpuscope_config_last_reload_successful 0\n") {
			return fmt.Errorf("not refused yet")
		}
		return nil
	})
	require.Error(t, reloadErr)
	require.Regexp(t, `gpuscope\.yml:\d+: alertmanager\.route\.receiver: undefined receiver "pager" used in route`, reloadErr.Error())
	require.Contains(t, status(), `receiver: hook`, "the previous receivers stay in effect")

	agentCfg := writeConfig(t, t.TempDir(), withHook)
	agent := startAgent(t, "e2e-agent", agentCfg)
	code, _ := agent.get("/api/v2/status")
	require.Equal(t, http.StatusNotFound, code, "the agent has no Alertmanager")
}
