package sim

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// decode reads a gpu.sim section the way the config package does.
func decode(t *testing.T, doc string) (Config, error) {
	t.Helper()
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	err := dec.Decode(&cfg)
	return cfg, err
}

// TestConfigYAML: the sim: keys of the gpu: section; the section as a
// whole is config's TestGPUSectionYAML.
func TestConfigYAML(t *testing.T) {
	cfg, err := decode(t, `
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
	require.Equal(t, 4, cfg.Count)
	require.Equal(t, defaultModel, cfg.Model)
	require.Equal(t, 30.0, cfg.TimeScale)
	require.True(t, cfg.CPUBurn)
	require.Equal(t, []GPU{{Scenario: ScenarioTraining, Container: "/system.slice/docker-abc.scope"}, {Scenario: ScenarioLeak}}, cfg.GPUs)

	_, err = decode(t, "count: 2\ncout: 2\n")
	require.ErrorContains(t, err, "cout")

	// The demo round-trips, so every field has a yaml tag.
	_, demo := DemoConfig()
	var buf bytes.Buffer
	require.NoError(t, yaml.NewEncoder(&buf).Encode(demo))
	back, err := decode(t, buf.String())
	require.NoError(t, err)
	require.Equal(t, demo, back)
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		err    string
	}{
		{"default", func(*Config) {}, ""},
		{"demo", func(c *Config) { _, *c = DemoConfig() }, ""},
		{"sim count", func(c *Config) { c.Count = 0 }, "gpu.sim.count: must be between 1 and 1024, got 0"},
		{"sim model", func(c *Config) { c.Model = " " }, "gpu.sim.model: must not be empty"},
		{"sim memory", func(c *Config) { c.MemoryMiB = 10 }, "gpu.sim.memory_mib: must be at least 4096, got 10"},
		{"sim time scale", func(c *Config) { c.TimeScale = 0 }, "gpu.sim.time_scale: must be above 0"},
		{"sim burn cores", func(c *Config) { c.CPUBurnCores = -1 }, "gpu.sim.cpu_burn_cores: must be above 0"},
		{"sim too many gpus", func(c *Config) { c.Count = 1; c.GPUs = make([]GPU, 2) }, "gpu.sim.gpus: 2 entries for 1 GPUs (gpu.sim.count)"},
		{"sim scenario", func(c *Config) { c.GPUs = []GPU{{Scenario: "meltdown"}} }, `gpu.sim.gpus[0].scenario: unknown scenario "meltdown" (want idle, training, leak, input-bound, memory-bound, thermal, xid, mig, held-idle, orphan, ecc, row-remap, nvlink-errors, pcie-replay, power-brake, fan-failure, missing)`},
		{"sim relative container", func(c *Config) { c.GPUs = []GPU{{Container: "docker/abc"}} }, `gpu.sim.gpus[0].container: "docker/abc" is not an absolute cgroup path`},
		{"sim dotdot container", func(c *Config) { c.GPUs = []GPU{{Container: "/a/../b"}} }, `gpu.sim.gpus[0].container: "/a/../b" is not a clean cgroup path`},
		{"sim burning root", func(c *Config) {
			c.CPUBurn = true
			c.GPUs = []GPU{{Scenario: ScenarioInputBound, Container: "/"}}
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
			o := simOptions(gputest.NewClock())
			o.Sim = cfg
			_, _, err = newCollector(o)
			require.ErrorContains(t, err, tc.err, "the collector refuses a bad config")
		})
	}
}

// TestDemoConfig: the demo's collector settings are valid, and its
// simulated GPUs say what they show.
func TestDemoConfig(t *testing.T) {
	g, c := DemoConfig()
	require.NoError(t, g.Validate())
	require.NoError(t, c.Validate())
	require.Len(t, c.GPUs, c.Count)
	for i := range c.Count {
		sc := c.GPU(i).Scenario
		if sc != ScenarioIdle {
			require.NotEqual(t, Describe(ScenarioIdle), Describe(sc), "GPU %d's %s", i, sc)
		}
	}
	require.Equal(t, GPU{Scenario: ScenarioIdle}, DefaultConfig().GPU(3), "past the list")
	require.Equal(t, GPU{Scenario: ScenarioIdle, Container: "/a"}, Config{GPUs: []GPU{{Container: "/a"}}}.GPU(0), "no scenario")
}
