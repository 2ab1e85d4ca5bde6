//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v2"
)

// TestGrafanaProvision runs the real command and reads what Grafana would.
func TestGrafanaProvision(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "global:\n  scrape_interval: 30s\n")
	out, code := run(t, "grafana", "provision", dir, "--url", "http://gpuscope:9089", "--config.file", cfg)
	require.Equal(t, 0, code, out)

	b, err := os.ReadFile(filepath.Join(dir, "provisioning/datasources/gpuscope.yaml"))
	require.NoError(t, err)
	var ds struct {
		Datasources []struct {
			UID      string         `yaml:"uid"`
			Type     string         `yaml:"type"`
			JSONData map[string]any `yaml:"jsonData"`
		} `yaml:"datasources"`
	}
	require.NoError(t, yaml.Unmarshal(b, &ds))
	require.Equal(t, "prometheus", ds.Datasources[0].Type)
	require.Equal(t, "3.16.0", ds.Datasources[0].JSONData["prometheusVersion"], "the Prometheus release gpuscope embeds (go.mod: v0.316.0)")
	require.Equal(t, "30s", ds.Datasources[0].JSONData["timeInterval"])

	jsons, err := filepath.Glob(filepath.Join(dir, "provisioning/dashboards/gpuscope/*.json"))
	require.NoError(t, err)
	require.Len(t, jsons, 4)
	for _, f := range jsons {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Contains(t, string(b), `"uid": "${datasource}"`, f)
		require.Contains(t, string(b), `"value": "gpuscope"`, "%s defaults to the provisioned data source", f)
	}

	out, code = run(t, "dashboards", "export", filepath.Join(dir, "export"))
	require.Equal(t, 0, code, out)
	exported, _ := filepath.Glob(filepath.Join(dir, "export/*.json"))
	require.Len(t, exported, 4)

	out, code = run(t, "grafana", "provision", dir)
	require.NotEqual(t, 0, code, "without --url")
	require.Contains(t, out, "--url")
}
