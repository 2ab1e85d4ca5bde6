package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckConfig: `gpuscope check config` fails what serve would refuse,
// with file, line and key, and warns about what is valid but likely a
// mistake.
func TestCheckConfig(t *testing.T) {
	const dur = ` is not a duration (e.g. 15s, 1m)`
	for _, tc := range []struct {
		name   string
		input  string
		rules  bool   // create rules/a.yml beside the file
		stdout string // @ stands for the file's path
		stderr string
	}{
		{
			name:   "valid",
			input:  "global:\n  scrape_interval: 15s\nweb:\n  listen_address: :9089\n",
			stdout: "SUCCESS: @ is valid gpuscope config\n",
		},
		{
			name:   "wrong-type duration",
			input:  "global: {}\ngpu:\n  interval: fast\n",
			stderr: `FAILED: @:3: gpu.interval: "fast"` + dur + "\n",
		},
		{
			name:   "wrong-type duration in global",
			input:  "global:\n  scrape_interval: fifteen\n",
			stderr: `FAILED: @:2: global.scrape_interval: "fifteen"` + dur + "\n",
		},
		{
			name:   "wrong-type size",
			input:  "storage:\n  tsdb:\n    retention:\n      size: lots\n",
			stderr: `FAILED: @:4: storage.tsdb.retention.size: "lots" is not a size (e.g. 512MB, 50GB)` + "\n",
		},
		{
			name:   "wrong-type bool",
			input:  "cadvisor:\n  enabled: sometimes\n",
			stderr: `FAILED: @:2: cadvisor.enabled: "sometimes" is not a boolean (true or false)` + "\n",
		},
		{
			name:   "wrong-type int",
			input:  "gpu:\n  sim:\n    count: eight\n",
			stderr: `FAILED: @:3: gpu.sim.count: "eight" is not an integer` + "\n",
		},
		{
			name:   "wrong-type list",
			input:  "rule_files: rules/*.yml\n",
			stderr: `FAILED: @:1: rule_files: "rules/*.yml" is not a list (e.g. [a, b], or one "- item" line per item)` + "\n",
		},
		{
			name:   "unknown key in gpu",
			input:  "gpu:\n  backend: auto\n  famlies: {ecc: true}\n",
			stderr: "FAILED: @:3: gpu.famlies: unknown key (did you mean families?)\n",
		},
		{
			name:   "unknown key in global",
			input:  "global:\n  scrape_intervall: 1s\n",
			stderr: "FAILED: @:2: global.scrape_intervall: unknown key (did you mean scrape_interval?)\n",
		},
		{
			name:   "unknown section",
			input:  "grafana:\n  url: http://grafana:3000\n",
			stderr: "FAILED: @:1: grafana: unknown section (want one of accounting, alerting, alertmanager, cadvisor, digests, global, gpu, nodes, otlp, remote_read, remote_write, rule_files, rules, runtime, scrape_config_files, scrape_configs, self_metrics, storage, tracing, users, web, workloads)\n",
		},
		{
			name:   "alertmanager section",
			input:  "alertmanager:\n  receivers:\n    - name: ops\n      webhook_configs: [{url: 'http://hook.example/'}]\n",
			stdout: "SUCCESS: @ is valid gpuscope config\n",
		},
		{
			name:   "undefined receiver in the alertmanager section",
			input:  "alertmanager:\n  route:\n    receiver: pager\n  receivers:\n    - name: ops\n",
			stderr: `FAILED: @:3: alertmanager.route.receiver: undefined receiver "pager" used in route` + "\n",
		},
		{
			name:   "unknown key in the alertmanager section",
			input:  "alertmanager:\n  receivers:\n    - name: ops\n      webhook_config: [{url: 'http://hook.example/'}]\n",
			stderr: "FAILED: @:4: alertmanager.receivers[0].webhook_config: unknown key (did you mean webhook_configs?)\n",
		},
		{
			name:   "listen address without a port",
			input:  "web: {listen_address: 9089}\n",
			stderr: `FAILED: @:1: web.listen_address: "9089" is not host:port (e.g. 0.0.0.0:9089 or :9089)` + "\n",
		},
		{
			name:   "two errors, one per line",
			input:  "gpu:\n  interval: fast\n  timeout: slow\n",
			stderr: `FAILED: @:2: gpu.interval: "fast"` + dur + "\n" + `        @:3: gpu.timeout: "slow"` + dur + "\n",
		},
		{
			name:   "rule file that does not exist",
			input:  "rule_files:\n  - rules/*.yml\n  - rules/doesnotexist.yml\n",
			rules:  true,
			stdout: "SUCCESS: @ is valid gpuscope config\n",
			stderr: `WARNING: @:3: rule_files: "rules/doesnotexist.yml" matches no file; no rules are loaded from it` + "\n",
		},
		{
			name:   "reserved job name",
			input:  "scrape_configs:\n  - job_name: cadvisor\n    static_configs: [{targets: ['a:1']}]\n",
			stderr: `FAILED: @:2: scrape_configs[0]: job_name "cadvisor" is reserved for gpuscope's built-in collector; choose another name` + "\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f := filepath.Join(dir, "gpuscope.yml")
			require.NoError(t, os.WriteFile(f, []byte(tc.input), 0o644))
			if tc.rules {
				require.NoError(t, os.Mkdir(filepath.Join(dir, "rules"), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(dir, "rules", "a.yml"), []byte("groups: []\n"), 0o644))
			}
			var stdout, stderr bytes.Buffer
			failed := checkConfigFiles([]string{f}, &stdout, &stderr, nil)
			require.Equal(t, strings.ReplaceAll(tc.stdout, "@", f), stdout.String())
			require.Equal(t, strings.ReplaceAll(tc.stderr, "@", f), stderr.String())
			if tc.stdout == "" {
				require.Equal(t, 1, failed)
			} else {
				require.Zero(t, failed)
			}
		})
	}
}
