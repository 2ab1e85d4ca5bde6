package alertmanager

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	amconfig "github.com/prometheus/alertmanager/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpuscope/gpuscope/rules"
)

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		check      func(t *testing.T, c *Config)
	}{
		{
			name: "empty: alerts are kept and reach nobody",
			text: "",
			check: func(t *testing.T, c *Config) {
				require.True(t, c.DefaultRoute)
				require.Equal(t, Nobody, c.Alertmanager.Route.Receiver)
				require.Len(t, c.Alertmanager.Receivers, 1)
				require.False(t, c.Reaches())
				require.Empty(t, c.Receivers())
				require.Equal(t, "the alertmanager: section has no receivers", c.Nobody())
			},
		},
		{
			name: "one receiver and no route: gpuscope's default route",
			text: "receivers:\n  - name: ops\n    webhook_configs: [{url: 'http://hook.example/'}]\n",
			check: func(t *testing.T, c *Config) {
				require.True(t, c.DefaultRoute)
				r := c.Alertmanager.Route
				require.Equal(t, "ops", r.Receiver)
				require.Equal(t, []string{"instance", "alertname"}, r.GroupByStr)
				require.Equal(t, model.Duration(4*time.Hour), *r.RepeatInterval)
				require.Equal(t, model.Duration(30*time.Second), *r.GroupWait)
				require.Empty(t, r.Routes)
				require.Len(t, c.Alertmanager.InhibitRules, 1)
				require.Equal(t, []string{"instance", "gpu"}, c.Alertmanager.InhibitRules[0].Equal)
				require.True(t, c.Reaches())
				require.Equal(t, []string{"ops"}, c.Receivers())
				require.Empty(t, c.Nobody())
				require.Contains(t, c.Text, "gpuscope's default route")
				require.Contains(t, c.Text, "http://hook.example/", "the text keeps the user's settings")
			},
		},
		{
			name: "several receivers and no route: each gets every alert",
			text: "receivers:\n  - name: a\n    webhook_configs: [{url: 'http://a/'}]\n  - name: b\n    webhook_configs: [{url: 'http://b/'}]\n",
			check: func(t *testing.T, c *Config) {
				r := c.Alertmanager.Route
				require.Equal(t, "a", r.Receiver)
				require.Len(t, r.Routes, 2)
				for i, name := range []string{"a", "b"} {
					require.Equal(t, name, r.Routes[i].Receiver)
					require.True(t, r.Routes[i].Continue)
					require.Empty(t, r.Routes[i].Matchers)
				}
				require.Equal(t, []string{"a", "b"}, c.Receivers())
			},
		},
		{
			name: "a route: taken as Alertmanager takes it",
			text: "route:\n  receiver: a\nreceivers:\n  - name: a\n    webhook_configs: [{url: 'http://a/'}]\n",
			check: func(t *testing.T, c *Config) {
				require.False(t, c.DefaultRoute)
				require.Empty(t, c.Alertmanager.Route.GroupByStr, "no grouping: Alertmanager's default")
				require.Empty(t, c.Alertmanager.InhibitRules)
				require.Equal(t, "route:\n  receiver: a\nreceivers:\n  - name: a\n    webhook_configs: [{url: 'http://a/'}]\n", c.Text)
			},
		},
		{
			name: "no route, the user's own inhibit rules: kept",
			text: "receivers: [{name: a, webhook_configs: [{url: 'http://a/'}]}]\ninhibit_rules:\n  - source_matchers: [x=\"1\"]\n    target_matchers: [y=\"1\"]\n",
			check: func(t *testing.T, c *Config) {
				require.True(t, c.DefaultRoute)
				require.Len(t, c.Alertmanager.InhibitRules, 1)
				require.Equal(t, `x="1"`, c.Alertmanager.InhibitRules[0].SourceMatchers[0].String())
			},
		},
		{
			name: "receivers without integrations reach nobody",
			text: "route: {receiver: a, routes: [{receiver: b, matchers: [x=\"1\"]}]}\nreceivers: [{name: a}, {name: b}, {name: unused, webhook_configs: [{url: 'http://u/'}]}]\n",
			check: func(t *testing.T, c *Config) {
				require.False(t, c.Reaches())
				require.Contains(t, c.Nobody(), "no receiver the routes lead to has a notifier")
			},
		},
		{
			name: "a child route's receiver that sends",
			text: "route: {receiver: a, routes: [{receiver: b, matchers: [x=\"1\"]}]}\nreceivers: [{name: a}, {name: b, webhook_configs: [{url: 'http://b/'}]}]\n",
			check: func(t *testing.T, c *Config) {
				require.True(t, c.Reaches())
				require.Equal(t, []string{"b"}, c.Receivers())
			},
		},
		{
			name: "route: with no value gets the default route",
			text: "route:\nreceivers: [{name: a, webhook_configs: [{url: 'http://a/'}]}]\n",
			check: func(t *testing.T, c *Config) {
				require.True(t, c.DefaultRoute)
				require.Equal(t, "a", c.Alertmanager.Route.Receiver)
			},
		},
		{
			name: "receivers: [] gets nobody",
			text: "receivers: []\n",
			check: func(t *testing.T, c *Config) {
				require.Equal(t, Nobody, c.Alertmanager.Route.Receiver)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.text, "")
			require.NoError(t, err)
			tc.check(t, c)
			// The text is an alertmanager.yml that loads to the same config
			// (what amtool check-config reads).
			again, err := amconfig.Load(c.Text)
			require.NoError(t, err, c.Text)
			require.Equal(t, c.Alertmanager.String(), again.String())
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text, want string
	}{
		{"unknown key, with its line", "\n\nreceivers:\n  - name: a\n    webhook_config: [{url: 'http://a/'}]\n", "line 5: field webhook_config not found"},
		{"undefined receiver", "route: {receiver: b}\nreceivers: [{name: a}]\n", `undefined receiver "b" used in route`},
		{"duplicate receiver", "receivers: [{name: a}, {name: a}]\n", `notification config name "a" is not unique`},
		{"not a mapping", "5\n", "cannot unmarshal"},
		{"a template that does not parse", "templates: [bad.tmpl]\n", "templates: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.tmpl"), []byte(`{{ define "x" }}{{ .Nope `), 0o644))
			_, err := Load(tc.text, dir)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// A glob, or a file name, that matches nothing is no error to
	// Alertmanager.
	_, err := Load("templates: ['*.none', nothere.tmpl]\n", dir)
	require.NoError(t, err)
}

// TestResolvePathsAsLoadFile: relative paths mean what they mean to
// Alertmanager's LoadFile, for a text loaded from elsewhere.
func TestResolvePathsAsLoadFile(t *testing.T) {
	dir := t.TempDir()
	text := `
global:
  http_config: {tls_config: {ca_file: ca.pem}}
templates: [tmpl/*.tmpl, /abs/*.tmpl]
route: {receiver: a}
receivers:
  - name: a
    webhook_configs:
      - url: http://a/
        http_config: {basic_auth: {username: u, password_file: pw}}
    slack_configs:
      - api_url: http://slack/
        channel: x
        http_config: {authorization: {credentials_file: token}}
    discord_configs:
      - webhook_url: http://d/
        http_config: {tls_config: {cert_file: c.pem, key_file: k.pem}}
`
	path := filepath.Join(dir, "alertmanager.yml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	want, err := amconfig.LoadFile(path)
	require.NoError(t, err)
	got, err := amconfig.Load(text)
	require.NoError(t, err)
	resolvePaths(dir, got)
	require.Equal(t, want.String(), got.String())
	require.Equal(t, filepath.Join(dir, "tmpl/*.tmpl"), got.Templates[0])
	require.Equal(t, filepath.Join(dir, "pw"), got.Receivers[0].WebhookConfigs[0].HTTPConfig.BasicAuth.PasswordFile)
	require.Equal(t, filepath.Join(dir, "k.pem"), got.Receivers[0].DiscordConfigs[0].HTTPConfig.TLSConfig.KeyFile)
}

// TestDefaultInhibitRuleNamesTheFaults: the default inhibit rule's
// sources are critical alerts of the built-in pack, with the labels the
// rule compares, and its targets are the pack's other severities.
func TestDefaultInhibitRuleNamesTheFaults(t *testing.T) {
	severities := map[string]string{}
	byLabels := map[string][]string{}
	for _, f := range rules.Pack() {
		var rf rulefmt.RuleGroups
		require.NoError(t, yaml.Unmarshal(f.Data, &rf), f.Name)
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				severities[r.Alert] = r.Labels["severity"]
				byLabels[r.Alert] = append(byLabels[r.Alert], r.Expr)
			}
		}
	}
	for _, name := range gpuFaults {
		require.Equal(t, "critical", severities[name], "%s is a critical alert of the pack", name)
	}
	var others []string
	for _, s := range severities {
		if s != "critical" && !slices.Contains(others, s) {
			others = append(others, s)
		}
	}
	slices.Sort(others)
	require.Equal(t, []string{"info", "warning"}, others, "the default inhibit rule's targets")
	c, err := Load("", "")
	require.NoError(t, err)
	var sources []string
	for _, m := range c.Alertmanager.InhibitRules[0].SourceMatchers {
		sources = append(sources, m.String())
	}
	require.ElementsMatch(t, []string{`severity="critical"`, `alertname=~"` + strings.Join(gpuFaults, "|") + `"`}, sources)
	// GPUFellOffBus aggregates by instance, job, gpu and Hostname: the
	// rule may compare no label it drops.
	require.Contains(t, byLabels["GPUFellOffBus"][0], "max by (instance, job, gpu, Hostname)")
}
