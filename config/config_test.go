package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

func TestDefaultConfig(t *testing.T) {
	cfg := Default(nil)
	require.Equal(t, 15*time.Second, cfg.ScrapeInterval())
	require.Equal(t, model.Duration(15*time.Second), cfg.Prometheus.GlobalConfig.EvaluationInterval)
	require.True(t, cfg.Cadvisor.Enabled)
	require.Equal(t, "0.0.0.0:9089", cfg.Web.ListenAddress)
	require.NotNil(t, cfg.Prometheus.StorageConfig.ExemplarsConfig, "exemplars are always on")
}

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		check func(t *testing.T, c *Config)
	}{
		{
			name:  "empty file: every default",
			input: "",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, DefaultScrapeInterval, c.ScrapeInterval())
				require.True(t, c.Cadvisor.Enabled)
			},
		},
		{
			name:  "global without intervals gets gpuscope's 15s, and so do its jobs",
			input: "global:\n  external_labels: {dc: a}\nscrape_configs:\n  - job_name: x\n    static_configs: [{targets: ['a:1']}]\n",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, DefaultScrapeInterval, c.ScrapeInterval())
				require.Equal(t, model.Duration(DefaultScrapeInterval), c.Prometheus.ScrapeConfigs[0].ScrapeInterval)
				require.Equal(t, "a", c.Prometheus.GlobalConfig.ExternalLabels.Get("dc"))
			},
		},
		{
			name:  "no global section at all",
			input: "scrape_configs:\n  - job_name: x\n    static_configs: [{targets: ['a:1']}]\n",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, model.Duration(DefaultScrapeInterval), c.Prometheus.ScrapeConfigs[0].ScrapeInterval)
			},
		},
		{
			name:  "explicit intervals are kept",
			input: "global:\n  scrape_interval: 1s\n  evaluation_interval: 2s\n",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, time.Second, c.ScrapeInterval())
				require.Equal(t, model.Duration(2*time.Second), c.Prometheus.GlobalConfig.EvaluationInterval)
			},
		},
		{
			name:  "gpuscope sections beside Prometheus ones",
			input: "global:\n  scrape_interval: 30s\ncadvisor:\n  enabled: false\n  enable_metrics: [tcp]\nweb:\n  listen_address: 127.0.0.1:1234\n",
			check: func(t *testing.T, c *Config) {
				require.False(t, c.Cadvisor.Enabled)
				require.Equal(t, []string{"tcp"}, c.Cadvisor.EnableMetrics)
				require.Equal(t, "127.0.0.1:1234", c.Web.ListenAddress)
				require.Equal(t, 30*time.Second, c.ScrapeInterval())
			},
		},
		{
			name:  "a whole flow-style file",
			input: "{global: {scrape_interval: 5s}, cadvisor: {enabled: false}}",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, 5*time.Second, c.ScrapeInterval())
				require.False(t, c.Cadvisor.Enabled)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load([]byte(tc.input), "test.yml", nil)
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

// TestLoadErrors: each bad input gets an error naming the line and what is
// wrong.
func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		want  []string
	}{
		{"unknown top-level key", "global:\n  scrape_interval: 1s\n\nfrobnicate: 1\n", []string{"line 4", "frobnicate"}},
		{"unknown key in a Prometheus section", "scrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['a:1']}]\n    scrape_intervall: 5s\n", []string{"line 4", "scrape_intervall"}},
		{"unknown key in a gpuscope section", "global: {}\ncadvisor:\n  enabled: true\n  housekeeping: 1s\n", []string{"line 4", "housekeeping"}},
		{"type error in a gpuscope section", "cadvisor:\n  enabled: sometimes\n", []string{"line 2", "sometimes"}},
		{"type error in a Prometheus section", "global:\n  scrape_interval: often\n", []string{"often"}},
		{"unknown cAdvisor metric set", "cadvisor:\n  enable_metrics: [gpu]\n", []string{"cadvisor.enable_metrics", `"gpu"`, "tcp"}},
		{"not a mapping", "- a\n- b\n", []string{"line 1", "mapping"}},
		{"broken YAML", "global:\n  scrape_interval: [1s\n", []string{"line"}},
		{"scrape timeout above gpuscope's default interval", "global:\n  scrape_timeout: 20s\n", []string{"15s", "scrape timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.input), "test.yml", nil)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestLoadFileNamesFileAndResolvesPaths(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "g.yml")
	require.NoError(t, os.WriteFile(p, []byte("rule_files: [rules/*.yml]\n"), 0o644))
	c, err := LoadFile(p, nil)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, "rules/*.yml")}, c.Prometheus.RuleFiles)
	require.Equal(t, p, c.File)

	require.NoError(t, os.WriteFile(p, []byte("bogus: 1\n"), 0o644))
	_, err = LoadFile(p, nil)
	require.ErrorContains(t, err, p)
	require.ErrorContains(t, err, "line 1")

	_, err = LoadFile(filepath.Join(dir, "missing.yml"), nil)
	require.ErrorContains(t, err, "missing.yml")
}

// TestDefaultFileIsTheDocumentedOne keeps the embedded file loadable and
// identical to what DefaultFile hands out (packaging installs it).
func TestDefaultFileIsTheDocumentedOne(t *testing.T) {
	c, err := Load(DefaultFile(), "gpuscope.yml", nil)
	require.NoError(t, err)
	require.Equal(t, Default(nil).Cadvisor, c.Cadvisor)
}

// TestRulesSection: the rules section and the rule files named by
// rule_files are checked when the file loads, errors naming file and line.
func TestRulesSection(t *testing.T) {
	c, err := Load([]byte("rules:\n  builtin:\n    disabled_groups: [gpuscope.baseline.weekly]\n    time_scale: 30\n"), "test.yml", nil)
	require.NoError(t, err)
	require.True(t, c.Rules.Builtin.Enabled, "enabled unless said otherwise")
	require.Equal(t, []string{"gpuscope.baseline.weekly"}, c.Rules.Builtin.DisabledGroups)
	require.Equal(t, 30.0, c.Rules.Builtin.TimeScale)
	require.Equal(t, 1.0, Default(nil).Rules.Builtin.TimeScale)

	for _, tc := range []struct{ input, want string }{
		{"rules:\n  builtin:\n    enable: false\n", "line 3"},
		{"rules:\n  builtin:\n    disabled_groups: [gpu]\n", `no built-in group "gpu"`},
		{"rules:\n  builtin:\n    time_scale: -1\n", "rules.builtin.time_scale"},
	} {
		_, err := Load([]byte(tc.input), "test.yml", nil)
		require.ErrorContains(t, err, tc.want, tc.input)
	}

	dir := t.TempDir()
	p := filepath.Join(dir, "g.yml")
	require.NoError(t, os.WriteFile(p, []byte("rule_files: [rules/*.yml]\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "rules"), 0o755))
	bad := filepath.Join(dir, "rules", "bad.yml")
	require.NoError(t, os.WriteFile(bad, []byte("groups:\n  - name: a\n    rules:\n      - alert: A\n        expr: rate(up[5m]\n"), 0o644))
	_, err = LoadFile(p, nil)
	require.ErrorContains(t, err, p)
	require.ErrorContains(t, err, bad+": 5:15:")
	require.NoError(t, os.WriteFile(bad, []byte("groups:\n  - name: a\n    rules:\n      - alert: A\n        expr: rate(up[5m])\n"), 0o644))
	_, err = LoadFile(p, nil)
	require.NoError(t, err)
}
