package config

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/sim"
)

// decodeGPU reads a gpu: section the way Load does.
func decodeGPU(t *testing.T, doc string) (GPU, error) {
	t.Helper()
	cfg := defaultGPU()
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	err := dec.Decode(&cfg)
	return cfg, err
}

// TestGPUSectionYAML: the gpu: section is the collector's keys and, under
// sim:, the simulator's, with the defaults of both.
func TestGPUSectionYAML(t *testing.T) {
	cfg, err := decodeGPU(t, `
backend: sim
interval: 5s
timeout: 2s
hostname_label: hostname
families:
  ecc: false
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
	require.Equal(t, gpu.BackendSim, cfg.Backend)
	require.Equal(t, model.Duration(5*time.Second), cfg.Interval)
	require.Equal(t, model.Duration(2*time.Second), cfg.Timeout)
	require.Equal(t, gpu.HostnameLabelLower, cfg.HostnameLabel)
	require.Equal(t, gpu.Families{Processes: true, RetiredPages: true, ClockEvents: true, NVLinkErrors: true}, cfg.Families, "unset keys keep their defaults")
	require.Equal(t, 4, cfg.Sim.Count)
	require.Equal(t, sim.DefaultConfig().Model, cfg.Sim.Model)
	require.Equal(t, 30.0, cfg.Sim.TimeScale)
	require.Equal(t, []sim.GPU{{Scenario: sim.ScenarioTraining, Container: "/system.slice/docker-abc.scope"}, {Scenario: sim.ScenarioLeak}}, cfg.Sim.GPUs)

	_, err = decodeGPU(t, "backend: nvml\nintervall: 5s\n")
	require.ErrorContains(t, err, "intervall")

	// The defaults round-trip, so every field has a yaml tag.
	var demo GPU
	demo.Config, demo.Sim = sim.DemoConfig()
	var buf bytes.Buffer
	require.NoError(t, yaml.NewEncoder(&buf).Encode(demo))
	back, err := decodeGPU(t, buf.String())
	require.NoError(t, err)
	require.Equal(t, demo, back)
}

// TestGPUSectionValidate: the collector's keys are checked first, then the
// simulator's, each error naming its key.
func TestGPUSectionValidate(t *testing.T) {
	cfg := defaultGPU()
	require.NoError(t, cfg.Validate())
	cfg.Sim.Count = 0
	require.EqualError(t, cfg.Validate(), "gpu.sim.count: must be between 1 and 1024, got 0")
	cfg.Backend = "cuda"
	require.EqualError(t, cfg.Validate(), `gpu.backend: unknown backend "cuda" (want auto, nvml, sim or none)`)

	var demo GPU
	demo.Config, demo.Sim = sim.DemoConfig()
	require.NoError(t, demo.Validate())
}
