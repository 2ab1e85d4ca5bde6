package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuscope/gpuscope/scrape/families"
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

// TestLoadErrors: each bad input gets one message naming the file, the
// line and the YAML key, in the file's words: no Go type names.
func TestLoadErrors(t *testing.T) {
	const dur = ` is not a duration (e.g. 15s, 1m)`
	for _, tc := range []struct {
		name  string
		input string
		want  string
	}{
		// Wrong types, in gpuscope's sections and in Prometheus's.
		{"duration in a gpuscope section", "gpu:\n  interval: fast\n", `test.yml:2: gpu.interval: "fast"` + dur},
		{"duration, flow style", "gpu: {interval: fast}\n", `test.yml:1: gpu.interval: "fast"` + dur},
		{"duration in a list item", "gpu:\n  sim:\n    gpus:\n      - scenario: xid\n        lost_at: soon\n", `test.yml:5: gpu.sim.gpus[0].lost_at: "soon"` + dur},
		{"duration in global", "global:\n  scrape_interval: fifteen\n", `test.yml:2: global.scrape_interval: "fifteen"` + dur},
		{"duration in a scrape config", "scrape_configs:\n  - job_name: a\n    scrape_interval: 1 minute\n", `test.yml:3: scrape_configs[0].scrape_interval: "1 minute"` + dur},
		{"duration in file_sd", "scrape_configs:\n  - job_name: a\n    file_sd_configs:\n      - files: [x.yml]\n        refresh_interval: soon\n", `test.yml:5: scrape_configs[0].file_sd_configs[0].refresh_interval: "soon"` + dur},
		{"duration in nodes", "nodes:\n  refresh_interval: x\n", `test.yml:2: nodes.refresh_interval: "x"` + dur},
		{"size", "storage:\n  tsdb:\n    retention:\n      size: lots\n", `test.yml:4: storage.tsdb.retention.size: "lots" is not a size (e.g. 512MB, 50GB)`},
		{"bool", "cadvisor:\n  enabled: sometimes\n", `test.yml:2: cadvisor.enabled: "sometimes" is not a boolean (true or false)`},
		{"bool in gpu.families", "gpu:\n  families:\n    ecc: maybe\n", `test.yml:3: gpu.families.ecc: "maybe" is not a boolean (true or false)`},
		{"int", "gpu:\n  sim:\n    count: eight\n", `test.yml:3: gpu.sim.count: "eight" is not an integer`},
		{"int in remote_write", "remote_write:\n  - url: http://x/\n    queue_config: {capacity: lots}\n", `test.yml:3: remote_write[0].queue_config.capacity: "lots" is not an integer`},
		{"unsigned int in global", "global:\n  sample_limit: -1\n", `test.yml:2: global.sample_limit: "-1" is not a whole number (0 or more)`},
		{"float", "rules:\n  builtin:\n    time_scale: fast\n", `test.yml:3: rules.builtin.time_scale: "fast" is not a number`},
		{"list", "rule_files: rules/*.yml\n", `test.yml:1: rule_files: "rules/*.yml" is not a list (e.g. [a, b], or one "- item" line per item)`},
		{"list in a gpuscope section", "cadvisor:\n  enable_metrics: tcp\n", `test.yml:2: cadvisor.enable_metrics: "tcp" is not a list (e.g. [a, b], or one "- item" line per item)`},
		{"list of targets", "scrape_configs:\n  - job_name: a\n    static_configs:\n      - targets: x:1\n", `test.yml:4: scrape_configs[0].static_configs[0].targets: "x:1" is not a list (e.g. [a, b], or one "- item" line per item)`},
		{"section not a mapping", "cadvisor: true\n", `test.yml:1: cadvisor: "true" is not a mapping (key: value lines, or {key: value})`},
		{"string given a list", "web: {listen_address: [1]}\n", `test.yml:1: web.listen_address: a list is not a string`},
		{"label value given a list", "global: {external_labels: {a: [1]}}\n", `test.yml:1: global.external_labels.a: a list is not a string`},

		// Unknown keys, with the key meant.
		{"unknown section", "global:\n  scrape_interval: 1s\n\ngrafana: {}\n", "test.yml:4: grafana: unknown section (want one of accounting, alerting, alertmanager, cadvisor, digests, global, gpu, nodes, otlp, remote_read, remote_write, rule_files, rules, runtime, scrape_config_files, scrape_configs, self_metrics, storage, tracing, users, web, workloads)"},
		{"misspelt section", "scrape_config: []\n", "test.yml:1: scrape_config: unknown key (did you mean scrape_configs?)"},
		{"unknown key in cadvisor", "global: {}\ncadvisor:\n  enabled: true\n  housekeeping: 1s\n", "test.yml:4: cadvisor.housekeeping: unknown key (did you mean housekeeping_interval?)"},
		{"unknown key in gpu", "gpu:\n  backend: auto\n\n\n  famlies: {}\n", "test.yml:5: gpu.famlies: unknown key (did you mean families?)"},
		{"unknown key in gpu.families", "gpu:\n  families:\n    ec: true\n", "test.yml:3: gpu.families.ec: unknown key (did you mean ecc?)"},
		{"unknown key in cadvisor.families", "cadvisor:\n  families:\n    memory_detial: true\n", "test.yml:3: cadvisor.families.memory_detial: unknown key (did you mean memory_detail?)"},
		{"bool in self_metrics.families", "self_metrics:\n  families:\n    go_runtime: yes please\n", `test.yml:3: self_metrics.families.go_runtime: "yes please" is not a boolean (true or false)`},
		{"unknown key in self_metrics", "self_metrics:\n  familes: {}\n", "test.yml:2: self_metrics.familes: unknown key (did you mean families?)"},
		{"unknown key in gpu.sim", "gpu:\n  sim:\n    cout: 2\n", "test.yml:3: gpu.sim.cout: unknown key (did you mean count?)"},
		{"unknown key in a sim GPU", "gpu:\n  sim:\n    gpus:\n      - scenaro: leak\n", "test.yml:4: gpu.sim.gpus[0].scenaro: unknown key (did you mean scenario?)"},
		{"unknown key in web", "web:\n  listen_adress: :1\n", "test.yml:2: web.listen_adress: unknown key (did you mean listen_address?)"},
		{"unknown key in nodes", "nodes:\n  statics: [a:1]\n", "test.yml:2: nodes.statics: unknown key (did you mean static?)"},
		{"unknown key in nodes' HTTP client", "nodes:\n  basic_auth: {usrname: x}\n", "test.yml:2: nodes.basic_auth.usrname: unknown key (did you mean username?)"},
		{"unknown key in rules", "rules:\n  bultin: {}\n", "test.yml:2: rules.bultin: unknown key (did you mean builtin?)"},
		{"unknown key in rules.builtin", "rules:\n  builtin:\n    enable: false\n", "test.yml:3: rules.builtin.enable: unknown key (did you mean enabled?)"},
		{"unknown key in global", "global:\n  scrape_intervall: 1s\n", "test.yml:2: global.scrape_intervall: unknown key (did you mean scrape_interval?)"},
		{"unknown key in a scrape config", "scrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['a:1']}]\n    scrape_intervall: 5s\n", "test.yml:4: scrape_configs[0].scrape_intervall: unknown key (did you mean scrape_interval?)"},
		{"service discovery gpuscope lacks", "scrape_configs:\n  - job_name: a\n    consul_sd_configs: []\n", "test.yml:3: scrape_configs[0].consul_sd_configs: unknown key (the service discovery gpuscope has: dns_sd_configs, file_sd_configs, http_sd_configs, static_configs)"},
		{"unknown key in storage", "storage:\n  tsdb:\n    retention:\n      sizee: 1GB\n", "test.yml:4: storage.tsdb.retention.sizee: unknown key (did you mean size?)"},
		{"key given twice", "gpu:\n  backend: sim\ngpu:\n  backend: none\n", "test.yml:3: gpu: key given twice; keep one"},

		// Values the sections' validation refuses.
		{"built-in rule misspelt", "rules:\n  builtin:\n    disabled_rules: [GPUMemAlmostFull]\n", "test.yml:3: rules.builtin.disabled_rules: no built-in rule \"GPUMemAlmostFull\" (`gpuscope rules export` lists them); did you mean GPUMemoryAlmostFull?"},
		{"listen address without a port", "web:\n  listen_address: 9089\n", `test.yml:2: web.listen_address: "9089" is not host:port (e.g. 0.0.0.0:9089 or :9089)`},
		{"listen port out of range", "web:\n  listen_address: ':99999'\n", `test.yml:2: web.listen_address: port 99999 of ":99999" is not between 0 and 65535`},
		{"external URL not absolute", "web:\n  external_url: gpu-01:9089\n", `test.yml:2: web.external_url: "gpu-01:9089" is not an absolute URL (e.g. http://gpu-01:9089/)`},
		{"CORS origin not a regexp", "web:\n  cors_origin: '(('\n", "test.yml:2: web.cors_origin: \"((\" is not a regular expression: error parsing regexp: missing closing ): `^(?:(()$`"},
		{"unknown backend", "gpu:\n  backend: cuda\n", `test.yml:2: gpu.backend: unknown backend "cuda" (want auto, nvml, sim or none)`},
		{"unknown cAdvisor metric set", "cadvisor:\n  enable_metrics: [gpu]\n", `test.yml:2: cadvisor.enable_metrics: unknown metric set "gpu" (known: advtcp, app, cpu, cpuLoad, cpu_topology, cpuset, disk, diskIO, hugetlb, memory, memory_numa, network, oom_event, percpu, perf_event, pressure, process, referenced_memory, resctrl, sched, tcp, udp)`},
		{"docker endpoint without a scheme", "cadvisor:\n  docker_endpoint: /run/docker.sock\n", `test.yml:2: cadvisor.docker_endpoint: "/run/docker.sock" is not a unix:// or tcp:// address (e.g. unix:///var/run/docker.sock)`},
		{"docker endpoint with a relative socket", "cadvisor:\n  docker_endpoint: unix://docker.sock\n", `test.yml:2: cadvisor.docker_endpoint: "unix://docker.sock" names no absolute socket path (e.g. unix:///var/run/docker.sock)`},
		{"docker endpoint tcp without a host", "cadvisor:\n  docker_endpoint: 'tcp://'\n", `test.yml:2: cadvisor.docker_endpoint: "tcp://" names no host:port (e.g. tcp://127.0.0.1:2375)`},
		{"podman endpoint over tcp", "cadvisor:\n  podman_endpoint: tcp://127.0.0.1:8888\n", `test.yml:2: cadvisor.podman_endpoint: "tcp://127.0.0.1:8888" is not a unix:// address (e.g. unix:///var/run/podman/podman.sock)`},
		{"containerd endpoint as a URL", "cadvisor:\n  containerd_endpoint: unix:///run/containerd/containerd.sock\n", `test.yml:2: cadvisor.containerd_endpoint: "unix:///run/containerd/containerd.sock" is not an absolute socket path (e.g. /run/containerd/containerd.sock)`},
		{"containerd endpoint empty", "cadvisor:\n  containerd_endpoint: ''\n", `test.yml:2: cadvisor.containerd_endpoint: "" is not an absolute socket path (e.g. /run/containerd/containerd.sock)`},
		{"negative price", "accounting:\n  price_per_kwh: -0.3\n", "test.yml:2: accounting.price_per_kwh: -0.3 is not a price or amount per kWh (0 or more, e.g. 0.30)"},
		{"price not a number", "accounting:\n  price_per_kwh: cheap\n", `test.yml:2: accounting.price_per_kwh: "cheap" is not a number`},
		{"user's receiver unknown", "users:\n  alice: {email: alice@lab.example, receiver: team-vision}\nalertmanager:\n  receivers:\n    - name: admin\n    - name: oncall\n",
			`test.yml:2: users.alice.receiver: "team-vision" is not a receiver of the alertmanager: section (it has admin, oncall)`},
		{"user's receiver without an alertmanager section", "users:\n  alice:\n    receiver: team-vision\n",
			`test.yml:3: users.alice.receiver: "team-vision" is not a receiver of the alertmanager: section (it has nobody)`},
		{"user's email not an address", "users:\n  alice:\n    email: alice at lab\n",
			`test.yml:3: users.alice.email: "alice at lab" is not an email address (e.g. alice@lab.example)`},
		{"user with nothing", "users:\n  alice: {}\n", `test.yml:2: users.alice: gives no email, chat or receiver`},
		{"digest schedule unparsable", "digests:\n  enabled: true\n  schedule: every monday\n", `test.yml:3: digests.schedule: "every monday" is not a day and time or a time ("Mon 08:00" weekly, "08:00" daily)`},
		{"negative price per GPU-hour", "accounting:\n  price_per_gpu_hour:\n    default: 1.2\n    NVIDIA H100 80GB HBM3: -2.5\n", `test.yml:2: accounting.price_per_gpu_hour: "NVIDIA H100 80GB HBM3": -2.5 is not a price per GPU-hour (0 or more, e.g. 2.50)`},
		{"flat price per GPU-hour", "accounting:\n  price_per_gpu_hour: 2.5\n", `test.yml:2: accounting.price_per_gpu_hour: "2.5" is not a mapping (key: value lines, or {key: value}) of GPU model to price; one price for every model is {default: 2.5}`},
		{"price per GPU-hour not a number", "accounting:\n  price_per_gpu_hour:\n    default: .nan\n", `test.yml:2: accounting.price_per_gpu_hour: "default": NaN is not a price per GPU-hour (0 or more, e.g. 2.50)`},
		{"relabel action", "scrape_configs:\n  - job_name: a\n    relabel_configs:\n      - action: foo\n", `test.yml:4: scrape_configs[0].relabel_configs[0].action: unknown relabel action "foo"`},
		{"scrape timeout above the job's interval", "global:\n  scrape_interval: 1m\nscrape_configs:\n  - job_name: a\n    scrape_timeout: 3m\n", `test.yml:4: scrape_configs[0]: scrape timeout greater than scrape interval for scrape config with job name "a"`},
		{"scrape timeout above gpuscope's default interval", "global:\n  scrape_timeout: 20s\n", "test.yml:1: global: with gpuscope's default 15s intervals: global scrape timeout greater than scrape interval"},

		{"same remote_write twice", "remote_write:\n  - url: http://a/write\n  - url: http://b/write\n  - url: http://a/write\n", "test.yml:4: remote_write[2]: the same as remote_write[0]; remote storage refuses duplicates (give them different settings or remove one)"},
		{"same remote_read twice", "remote_read:\n  - url: http://a/read\n  - url: http://a/read\n", "test.yml:3: remote_read[1]: the same as remote_read[0]; remote storage refuses duplicates (give them different settings or remove one)"},

		// Not a config at all.
		{"not a mapping", "- a\n- b\n", "test.yml:1: the config must be a mapping of sections (global, scrape_configs, gpu, ...)"},
		{"broken YAML", "global:\n  scrape_interval: [1s\n", "test.yml:1: invalid YAML: did not find expected ',' or ']'"},
		{"misindented key", "global:\n  scrape_interval: 15s\n   evaluation_interval: 30s\n", `test.yml:3: invalid YAML: mapping values are not allowed in this context (check the indentation of this line and the next: YAML nests by indentation, with spaces, and a key needs "key: value")`},
		{"key given twice in a Prometheus section", "global:\n  scrape_interval: 15s\n  scrape_interval: 30s\n", "test.yml:3: global.scrape_interval: key given twice; keep one"},

		// A file written as one flow mapping is re-rendered before it is
		// decoded; the lines are still the file's.
		{"flow-style file", "{global: {scrape_interval: 1s},\n gpu: {interval: fast, famlies: {}}}\n", `test.yml:2: gpu.interval: "fast"` + dur + "\n" + "test.yml:2: gpu.famlies: unknown key (did you mean families?)"},

		// Every bad value, not just the first.
		{"two errors", "gpu:\n  interval: fast\n  timeout: slow\n", `test.yml:2: gpu.interval: "fast"` + dur + "\n" + `test.yml:3: gpu.timeout: "slow"` + dur},
		// ... of every kind, in every section (the newcomer trial's three
		// cases): a type error beside a refused value, two refused values
		// of one section, a reserved job name beside a Prometheus error.
		{"type error and refused value", "web:\n  listen_address: 9089\naccounting:\n  price_per_kwh: cheap\n",
			`test.yml:2: web.listen_address: "9089" is not host:port (e.g. 0.0.0.0:9089 or :9089)` + "\n" + `test.yml:4: accounting.price_per_kwh: "cheap" is not a number`},
		// A typo in global: beside one in a gpuscope section: each once,
		// in line order (the walk's errors came with both sections').
		{"typos in global and gpu", "global:\n  scrape_intervall: 15s\ngpu:\n  backend: auto\n  famlies: {}\n",
			"test.yml:2: global.scrape_intervall: unknown key (did you mean scrape_interval?)" + "\n" + "test.yml:5: gpu.famlies: unknown key (did you mean families?)"},
		{"two refused values of a section", "web:\n  listen_address: ':99999'\n  external_url: gpu-01:9089\n",
			`test.yml:2: web.listen_address: port 99999 of ":99999" is not between 0 and 65535` + "\n" + `test.yml:3: web.external_url: "gpu-01:9089" is not an absolute URL (e.g. http://gpu-01:9089/)`},
		{"reserved job and a Prometheus error", "global:\n  scrape_interval: fast\nscrape_configs:\n  - job_name: gpuscope\n",
			`test.yml:2: global.scrape_interval: "fast"` + dur + "\n" + `test.yml:4: scrape_configs[0]: job_name "gpuscope" is reserved for gpuscope's built-in collector; choose another name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.input), "test.yml", nil)
			require.EqualError(t, err, tc.want)
		})
	}
}

// TestErrorWithoutFile: the embedded default has no file name; errors
// then say "line N".
func TestErrorWithoutFile(t *testing.T) {
	_, err := Load([]byte("gpu:\n  interval: fast\n"), "", nil)
	require.EqualError(t, err, `line 2: gpu.interval: "fast" is not a duration (e.g. 15s, 1m)`)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, Error{Line: 2, Key: "gpu.interval", Err: e.Err}, *e)
}

func TestLoadFileNamesFileAndResolvesPaths(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "g.yml")
	require.NoError(t, os.WriteFile(p, []byte("rule_files: [rules/*.yml]\n"), 0o644))
	c, err := LoadFile(p, nil)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, "rules/*.yml")}, c.Prometheus.RuleFiles)
	require.Equal(t, p, c.File)

	for file, want := range map[string]string{
		"passwd":           filepath.Join(dir, "passwd"),
		"/etc/ldap-passwd": "/etc/ldap-passwd",
		"":                 "",
	} {
		require.NoError(t, os.WriteFile(p, fmt.Appendf(nil, "workloads:\n  passwd_file: %q\n", file), 0o644))
		c, err = LoadFile(p, nil)
		require.NoError(t, err)
		require.Equal(t, want, c.Workloads.PasswdFile, "passwd_file %q", file)
	}

	require.NoError(t, os.WriteFile(p, []byte("gpu:\n  intervall: 1s\n"), 0o644))
	_, err = LoadFile(p, nil)
	require.EqualError(t, err, p+":2: gpu.intervall: unknown key (did you mean interval?)")

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
		{"rules:\n  builtin:\n    enable: false\n", "test.yml:3: rules.builtin.enable"},
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

// TestRuleFileWarnings: a rule_files pattern that matches no file is valid,
// as in Prometheus, but a warning names it, with file and line.
func TestRuleFileWarnings(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "g.yml")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "rules"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules", "a.yml"), []byte("groups: []\n"), 0o644))
	require.NoError(t, os.WriteFile(p, []byte("global: {}\nrule_files:\n  - rules/*.yml\n  - rules/doesnotexist.yml\n  - other/*.yml\n"), 0o644))
	c, err := LoadFile(p, nil)
	require.NoError(t, err)
	require.Equal(t, []string{
		p + `:4: rule_files: "rules/doesnotexist.yml" matches no file; no rules are loaded from it`,
		p + `:5: rule_files: "other/*.yml" matches no file; no rules are loaded from it`,
	}, c.Warnings)

	require.NoError(t, os.WriteFile(p, []byte("rule_files: [rules/*.yml]\n"), 0o644))
	c, err = LoadFile(p, nil)
	require.NoError(t, err)
	require.Empty(t, c.Warnings)
}

// TestWebValidate: what serve's listener, external URL and CORS check
// take, check config takes, and nothing else.
func TestWebValidate(t *testing.T) {
	for _, w := range []Web{
		{},
		{ListenAddress: "0.0.0.0:9089", CORSOrigin: ".*"},
		{ListenAddress: ":9089"},
		{ListenAddress: "[::1]:0"},
		{ListenAddress: "localhost:http"},
		{ExternalURL: "https://gpus.example.com/gpuscope/"},
		{CORSOrigin: `https?://(a|b)\.com`},
	} {
		require.NoError(t, w.Validate(), "%+v", w)
	}
	for _, tc := range []struct {
		web  Web
		want string
	}{
		{Web{ListenAddress: "9089"}, `web.listen_address: "9089" is not host:port (e.g. 0.0.0.0:9089 or :9089)`},
		{Web{ListenAddress: "0.0.0.0"}, `web.listen_address: "0.0.0.0" is not host:port (e.g. 0.0.0.0:9089 or :9089)`},
		{Web{ListenAddress: ":nosuchservice"}, `web.listen_address: ":nosuchservice" has no valid port (e.g. 0.0.0.0:9089 or :9089)`},
		{Web{ListenAddress: "host:70000"}, `web.listen_address: port 70000 of "host:70000" is not between 0 and 65535`},
		{Web{ExternalURL: "/gpuscope"}, `web.external_url: "/gpuscope" is not an absolute URL (e.g. http://gpu-01:9089/)`},
		{Web{GrafanaURL: "grafana:3000"}, `web.grafana_url: "grafana:3000" is not an http or https URL (e.g. http://grafana.example:3000/)`},
		{Web{GrafanaURL: "javascript:alert(1)"}, `web.grafana_url: "javascript:alert(1)" is not an http or https URL (e.g. http://grafana.example:3000/)`},
	} {
		require.EqualError(t, tc.web.Validate(), tc.want)
	}
}

// TestValidFilesWalkClean: the walk that explains errors agrees with the
// decoders on valid files that set almost every key, so it never blames a
// good value when another one is bad.
func TestValidFilesWalkClean(t *testing.T) {
	full, err := os.ReadFile(filepath.Join("testdata", "full.yml"))
	require.NoError(t, err)
	for name, data := range map[string][]byte{"full.yml": full, "gpuscope.yml": DefaultFile()} {
		t.Run(name, func(t *testing.T) {
			c, err := Load(data, name, nil)
			require.NoError(t, err)
			if name == "full.yml" {
				require.Equal(t, families.Cadvisor{MemoryDetail: true, CPUDetail: true, PressureDetail: true, SpecDetail: true}, c.Cadvisor.Families)
				require.Equal(t, families.Self{GoRuntime: true, TSDBDetail: true, RuleDetail: true}, c.SelfMetrics.Families)
			} else {
				// The embedded defaults keep every group off: the diet.
				require.Zero(t, c.Cadvisor.Families)
				require.Zero(t, c.SelfMetrics.Families)
			}
			p, err := split(data)
			require.NoError(t, err)
			s := walkFile(p.root)
			require.Empty(t, s.errs)
		})
	}
}

// TestLoadAliasBomb: aliases can make a small file a huge tree; explaining
// an error in one stays quick.
func TestLoadAliasBomb(t *testing.T) {
	// 1,000 scrape configs of 200 relabel configs of 100 source labels:
	// 20 million values from a 10 kB file.
	bomb := "scrape_configs:\n  - &c {job_name: a, scrape_interval: fast, relabel_configs: [&r {source_labels: [&l x" +
		strings.Repeat(", *l", 99) + "]}" + strings.Repeat(", *r", 199) + "]}\n" + strings.Repeat("  - *c\n", 999)
	start := time.Now()
	_, err := Load([]byte(bomb), "test.yml", nil)
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second)
}

// TestLocate: an error found after loading (serve's reserved job names)
// gets the file, line and key too.
func TestLocate(t *testing.T) {
	c, err := Load([]byte("global: {}\nscrape_configs:\n  - job_name: mine\n    static_configs: [{targets: ['a:1']}]\n  - job_name: gpu\n    static_configs: [{targets: ['a:1']}]\n"), "test.yml", nil)
	require.NoError(t, err)
	require.EqualError(t, c.Locate(errors.New(`scrape_configs: job_name "gpu" is reserved`)), `test.yml:5: scrape_configs[1]: job_name "gpu" is reserved`)
	require.EqualError(t, c.Locate(errors.New("something else")), "test.yml: something else")
	require.NoError(t, c.Locate(nil))
	// The embedded defaults locate errors by the line of the key in
	// config/gpuscope.yml.
	line := 1 + slices.IndexFunc(strings.Split(string(defaultFile), "\n"), func(l string) bool { return strings.HasPrefix(l, "  backend:") })
	require.Positive(t, line-1)
	require.EqualError(t, Default(nil).Locate(errors.New("gpu.backend: x")), fmt.Sprintf("line %d: gpu.backend: x", line))
}
