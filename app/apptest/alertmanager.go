package apptest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/alertmanager/api/v2/models"
)

// EmbeddedConfig is gpuscope's config for these tests: simulated GPUs and
// the built-in rules at 60× speed, gpuscope's external labels, and
// alertmanager as the section's body.
func EmbeddedConfig(alertmanager string, scenarios ...string) string {
	var gpus strings.Builder
	for _, s := range scenarios {
		fmt.Fprintf(&gpus, "      - {scenario: %s}\n", s)
	}
	return fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
  external_labels: {cluster: e2e-am, region: lab}
rules:
  builtin:
    time_scale: 60
gpu:
  backend: sim
  sim:
    count: %d
    time_scale: 60
    gpus:
%s
alertmanager:
%s`, len(scenarios), gpus.String(), alertmanager)
}

// EmbeddedAlerts returns the embedded Alertmanager's alerts, by alertname,
// from gpuscope's /api/v2/alerts.
func (c Client) EmbeddedAlerts() (map[string][]*models.GettableAlert, error) {
	resp, err := http.Get(c.URL + "/api/v2/alerts")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v2/alerts: %s", resp.Status)
	}
	var alerts models.GettableAlerts
	if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
		return nil, err
	}
	out := map[string][]*models.GettableAlert{}
	for _, a := range alerts {
		out[a.Labels["alertname"]] = append(out[a.Labels["alertname"]], a)
	}
	return out, nil
}
