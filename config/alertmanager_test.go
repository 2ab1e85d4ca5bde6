package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/alertmanager"
)

func TestLoadAlertmanager(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "am"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "am", "alertmanager.yml"),
		[]byte("templates: [tmpl/*.tmpl]\nroute: {receiver: ops}\nreceivers: [{name: ops, webhook_configs: [{url: 'http://hook/'}]}]\n"), 0o644))
	for _, tc := range []struct {
		name, input string
		check       func(t *testing.T, c *alertmanager.Config)
	}{
		{"no section: alerts kept, sent to nobody", "global: {scrape_interval: 15s}\n", func(t *testing.T, c *alertmanager.Config) {
			require.False(t, c.Reaches())
			require.Equal(t, alertmanager.Nobody, c.Alertmanager.Route.Receiver)
		}},
		{"empty section", "alertmanager:\n", func(t *testing.T, c *alertmanager.Config) {
			require.False(t, c.Reaches())
		}},
		{"receivers only: the default route", "global: {}\nalertmanager:\n  receivers:\n    - name: ops\n      webhook_configs: [{url: 'http://hook/'}]\ngpu: {backend: none}\n", func(t *testing.T, c *alertmanager.Config) {
			require.True(t, c.DefaultRoute)
			require.Equal(t, []string{"instance", "alertname"}, c.Alertmanager.Route.GroupByStr)
			require.Equal(t, []string{"ops"}, c.Receivers())
			require.NotContains(t, c.Text, "gpu:", "only the section")
			require.NotContains(t, c.Text, "scrape_interval")
		}},
		{"a whole alertmanager.yml, indented", "alertmanager:\n    # comment\n    route:\n      receiver: ops\n\n    receivers:\n      - name: ops\n        webhook_configs:\n          - url: http://hook/\n", func(t *testing.T, c *alertmanager.Config) {
			require.False(t, c.DefaultRoute)
			require.Equal(t, "# comment\nroute:\n  receiver: ops\n\nreceivers:\n  - name: ops\n    webhook_configs:\n      - url: http://hook/\n", c.Text)
		}},
		{"a route, between other sections: the text is the section's", "global: {}\nalertmanager:\n  route: {receiver: ops}\n  receivers: [{name: ops}]\n\ngpu:\n  backend: none\n", func(t *testing.T, c *alertmanager.Config) {
			require.Equal(t, "route: {receiver: ops}\nreceivers: [{name: ops}]\n", c.Text)
		}},
		{"flow style", "alertmanager: {route: {receiver: ops}, receivers: [{name: ops, webhook_configs: [{url: 'http://hook/'}]}]}\n", func(t *testing.T, c *alertmanager.Config) {
			require.Equal(t, "ops", c.Alertmanager.Route.Receiver)
		}},
		{"config_file, relative to the config's folder, its own relative paths to its own", "alertmanager:\n  config_file: am/alertmanager.yml\n", func(t *testing.T, c *alertmanager.Config) {
			require.Equal(t, []string{"ops"}, c.Receivers())
			require.Equal(t, []string{filepath.Join(dir, "am", "tmpl/*.tmpl")}, c.Alertmanager.Templates)
		}},
		{"templates relative to the config's folder", "alertmanager:\n  templates: [t/*.tmpl]\n", func(t *testing.T, c *alertmanager.Config) {
			require.Equal(t, []string{filepath.Join(dir, "t/*.tmpl")}, c.Alertmanager.Templates)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load([]byte(tc.input), filepath.Join(dir, "gpuscope.yml"), nil)
			require.NoError(t, err)
			require.NotNil(t, c.Alertmanager)
			tc.check(t, c.Alertmanager)
		})
	}
}

// TestLoadAlertmanagerErrors: Alertmanager's loader's errors, worded as
// the rest of the file's: file, line, key path, and no Go type names.
func TestLoadAlertmanagerErrors(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "am.yml"), []byte("route:\n  receiver: b\nreceivers:\n  - name: a\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "typo.yml"), []byte("route:\n  reciever: a\nreceivers:\n  - name: a\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.tmpl"), []byte("{{ define \"x\" }}{{ .Nope "), 0o644))
	for _, tc := range []struct {
		name, input, want string
	}{
		{"unknown key below a receiver", "global:\n  scrape_interval: 15s\nalertmanager:\n  receivers:\n    - name: a\n      webhook_config: [{url: 'http://a/'}]\ngpu:\n  backend: none\n",
			`g.yml:6: alertmanager.receivers[0].webhook_config: unknown key (did you mean webhook_configs?)`},
		{"unknown key of the section", "alertmanager:\n  recievers: []\n", `g.yml:2: alertmanager.recievers: unknown key (did you mean receivers?)`},
		{"undefined receiver", "alertmanager:\n  route:\n    receiver: b\n  receivers:\n    - name: a\n", `g.yml:3: alertmanager.route.receiver: undefined receiver "b" used in route`},
		{"undefined receiver, flow style", "alertmanager: {route: {receiver: b}, receivers: [{name: a}]}\n", `g.yml:1: alertmanager.route.receiver: undefined receiver "b" used in route`},
		{"a name given twice", "alertmanager:\n  receivers:\n    - name: a\n    - name: a\n", `g.yml:4: alertmanager.receivers[1].name: notification config name "a" is not unique`},
		{"a receiver without a name", "alertmanager:\n  receivers:\n    - webhook_configs: [{url: 'http://a/'}]\n", `g.yml:3: alertmanager.receivers[0]: missing name in receiver`},
		{"a duration", "alertmanager:\n  route:\n    receiver: a\n    group_wait: soon\n  receivers: [{name: a}]\n", `g.yml:4: alertmanager.route.group_wait: "soon" is not a duration (e.g. 15s, 1m)`},
		{"a list", "alertmanager:\n  route:\n    receiver: a\n    group_by: instance\n  receivers: [{name: a}]\n", `g.yml:4: alertmanager.route.group_by: "instance" is not a list (e.g. [a, b], or one "- item" line per item)`},
		{"a number in an integration", "alertmanager:\n  receivers:\n    - name: a\n      webhook_configs: [{url: 'http://a/', max_alerts: lots}]\n", `g.yml:4: alertmanager.receivers[0].webhook_configs[0].max_alerts: "lots" is not a whole number (0 or more)`},
		{"a matcher", "alertmanager:\n  route:\n    receiver: a\n    routes:\n      - receiver: a\n        matchers: ['foo=~\"(\"']\n  receivers: [{name: a}]\n", "g.yml:6: alertmanager.route.routes[0].matchers: error parsing regexp: missing closing ): `^(?:()$`"},
		{"a global setting an integration needs", "alertmanager:\n  receivers:\n    - name: a\n      email_configs: [{to: a@b}]\n", `g.yml:4: alertmanager.receivers[0].email_configs[0]: no global SMTP smarthost set`},
		{"a host without a port", "alertmanager:\n  global:\n    smtp_smarthost: nohost\n", `g.yml:3: alertmanager.global.smtp_smarthost: address nohost: missing port in address`},
		{"not a mapping", "alertmanager: 5\n", `g.yml:1: alertmanager: "5" is not a mapping (key: value lines, or {key: value})`},
		{"a template that does not parse", "alertmanager:\n  templates: [bad.tmpl]\n", `g.yml:2: alertmanager.templates: template: bad.tmpl:1: unclosed action`},
		{"config_file and settings", "alertmanager:\n  config_file: am.yml\n  route: {receiver: a}\n", `g.yml:2: alertmanager.config_file: give either config_file or the alertmanager.yml settings, not both`},
		{"config_file missing", "alertmanager:\n  config_file: nothere.yml\n", `g.yml:2: alertmanager.config_file: open ` + filepath.Join(dir, "nothere.yml") + `: no such file or directory`},
		{"an error in config_file's file names it", "alertmanager:\n  config_file: am.yml\n",
			`g.yml:2: alertmanager.config_file: ` + filepath.Join(dir, "am.yml") + `:2: route.receiver: undefined receiver "b" used in route`},
		{"a typo in config_file's file", "alertmanager:\n  config_file: typo.yml\n",
			`g.yml:2: alertmanager.config_file: ` + filepath.Join(dir, "typo.yml") + `:2: route.reciever: unknown key (did you mean receiver?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.input), filepath.Join(dir, "g.yml"), nil)
			require.Error(t, err)
			require.Equal(t, filepath.Join(dir, tc.want), err.Error())
		})
	}
}

// TestAlertmanagerTemplateWarning: a template glob that matches nothing is
// valid to Alertmanager but most likely a mistake.
func TestAlertmanagerTemplateWarning(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpuscope.yml")
	require.NoError(t, os.WriteFile(path, []byte("alertmanager:\n  templates:\n    - tmpl/*.tmpl\n"), 0o644))
	c, err := LoadFile(path, nil)
	require.NoError(t, err)
	require.Equal(t, []string{path + `:3: alertmanager.templates[0]: "` + filepath.Join(dir, "tmpl/*.tmpl") + `" matches no file; no templates are loaded from it`}, c.Warnings)
}
