package gpu

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// decode reads a gpu: section the way the config package does.
func decode(t *testing.T, doc string) (Config, error) {
	t.Helper()
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	err := dec.Decode(&cfg)
	return cfg, err
}

func TestConfigYAML(t *testing.T) {
	cfg, err := decode(t, `
backend: sim
interval: 5s
timeout: 2s
hostname_label: hostname
families:
  ecc: true
  profiling: false
sim:
  count: 4
  time_scale: 30
  cpu_burn: true
  gpus:
    - scenario: training
      container: /system.slice/docker-abc.scope
    - scenario: leak
`)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	require.Equal(t, BackendSim, cfg.Backend)
	require.Equal(t, model.Duration(5*time.Second), cfg.Interval)
	require.Equal(t, model.Duration(2*time.Second), cfg.Timeout)
	require.Equal(t, HostnameLabelLower, cfg.HostnameLabel)
	require.Equal(t, Families{ECC: true, Processes: true}, cfg.Families, "unset keys keep their defaults")
	require.Equal(t, 4, cfg.Sim.Count)
	require.Equal(t, defaultSimModel, cfg.Sim.Model)
	require.Equal(t, 30.0, cfg.Sim.TimeScale)
	require.Equal(t, []SimGPU{{Scenario: ScenarioTraining, Container: "/system.slice/docker-abc.scope"}, {Scenario: ScenarioLeak}}, cfg.Sim.GPUs)

	_, err = decode(t, "backend: nvml\nintervall: 5s\n")
	require.ErrorContains(t, err, "intervall")

	// The defaults round-trip, so every field has a yaml tag.
	var buf bytes.Buffer
	require.NoError(t, yaml.NewEncoder(&buf).Encode(DemoConfig()))
	back, err := decode(t, buf.String())
	require.NoError(t, err)
	require.Equal(t, DemoConfig(), back)
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		err    string
	}{
		{"default", func(*Config) {}, ""},
		{"demo", func(c *Config) { *c = DemoConfig() }, ""},
		{"backend", func(c *Config) { c.Backend = "foo" }, `gpu.backend: unknown backend "foo" (want auto, nvml, sim or none)`},
		{"interval", func(c *Config) { c.Interval = model.Duration(-time.Second) }, "gpu.interval: must not be negative"},
		{"tiny interval", func(c *Config) { c.Interval = model.Duration(time.Millisecond) }, "gpu.interval: 1ms is below the minimum of 100ms"},
		{"timeout", func(c *Config) { c.Timeout = model.Duration(-time.Second) }, "gpu.timeout: must not be negative"},
		{"hostname label", func(c *Config) { c.HostnameLabel = "host" }, `gpu.hostname_label: unknown value "host" (want Hostname, hostname or none)`},
		{"sim count", func(c *Config) { c.Sim.Count = 0 }, "gpu.sim.count: must be between 1 and 1024, got 0"},
		{"sim model", func(c *Config) { c.Sim.Model = " " }, "gpu.sim.model: must not be empty"},
		{"sim memory", func(c *Config) { c.Sim.MemoryMiB = 10 }, "gpu.sim.memory_mib: must be at least 4096, got 10"},
		{"sim time scale", func(c *Config) { c.Sim.TimeScale = 0 }, "gpu.sim.time_scale: must be above 0"},
		{"sim burn cores", func(c *Config) { c.Sim.CPUBurnCores = -1 }, "gpu.sim.cpu_burn_cores: must be above 0"},
		{"sim too many gpus", func(c *Config) { c.Sim.Count = 1; c.Sim.GPUs = make([]SimGPU, 2) }, "gpu.sim.gpus: 2 entries for 1 GPUs (gpu.sim.count)"},
		{"sim scenario", func(c *Config) { c.Sim.GPUs = []SimGPU{{Scenario: "meltdown"}} }, `gpu.sim.gpus[0].scenario: unknown scenario "meltdown" (want idle, training, leak, input-bound, memory-bound, thermal, xid, mig, held-idle, orphan)`},
		{"sim relative container", func(c *Config) { c.Sim.GPUs = []SimGPU{{Container: "docker/abc"}} }, `gpu.sim.gpus[0].container: "docker/abc" is not an absolute cgroup path`},
		{"sim dotdot container", func(c *Config) { c.Sim.GPUs = []SimGPU{{Container: "/a/../b"}} }, `gpu.sim.gpus[0].container: "/a/../b" is not a clean cgroup path`},
		{"sim burning root", func(c *Config) {
			c.Sim.CPUBurn = true
			c.Sim.GPUs = []SimGPU{{Scenario: ScenarioInputBound, Container: "/"}}
		}, "gpu.sim.gpus[0].container: the root cgroup cannot be a burning container"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.change(&cfg)
			err := cfg.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
			_, err = New(Options{Config: cfg})
			require.ErrorContains(t, err, tc.err, "New refuses a bad config")
		})
	}
}
