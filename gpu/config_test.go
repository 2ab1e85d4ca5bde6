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

// decode reads a gpu: section but its sim: (gpu/sim's) the way the config
// package does.
func decode(t *testing.T, doc string) (Config, error) {
	t.Helper()
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	err := dec.Decode(&cfg)
	return cfg, err
}

// TestConfigYAML: the collector's keys of the gpu: section; the section
// with its sim: is config's TestGPUSectionYAML.
func TestConfigYAML(t *testing.T) {
	cfg, err := decode(t, `
backend: sim
interval: 5s
timeout: 2s
hostname_label: hostname
families:
  ecc: false
  violations: true
  profiling: false
`)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	require.Equal(t, BackendSim, cfg.Backend)
	require.Equal(t, model.Duration(5*time.Second), cfg.Interval)
	require.Equal(t, model.Duration(2*time.Second), cfg.Timeout)
	require.Equal(t, HostnameLabelLower, cfg.HostnameLabel)
	require.Equal(t, Families{Processes: true, RetiredPages: true, Violations: true, ClockEvents: true, NVLinkErrors: true}, cfg.Families, "unset keys keep their defaults")

	_, err = decode(t, "backend: nvml\nintervall: 5s\n")
	require.ErrorContains(t, err, "intervall")

	// Every key set round-trips, so every field has a yaml tag.
	all := Config{Backend: BackendSim, Interval: model.Duration(5 * time.Second), Timeout: model.Duration(time.Second), HostnameLabel: HostnameLabelNone,
		Families: Families{Profiling: true, Processes: true, ECC: true, RetiredPages: true, Violations: true, ClockEvents: true, NVLinkErrors: true, PerProcess: true}}
	var buf bytes.Buffer
	require.NoError(t, yaml.NewEncoder(&buf).Encode(all))
	back, err := decode(t, buf.String())
	require.NoError(t, err)
	require.Equal(t, all, back)
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		err    string
	}{
		{"default", func(*Config) {}, ""},
		{"backend", func(c *Config) { c.Backend = "foo" }, `gpu.backend: unknown backend "foo" (want auto, nvml, sim or none)`},
		{"interval", func(c *Config) { c.Interval = model.Duration(-time.Second) }, "gpu.interval: must not be negative"},
		{"tiny interval", func(c *Config) { c.Interval = model.Duration(time.Millisecond) }, "gpu.interval: 1ms is not above the minimum of 100ms"},
		// Finding 24: GPM needs its samples more than 100 ms apart.
		{"interval at the minimum", func(c *Config) { c.Interval = model.Duration(100 * time.Millisecond) }, "gpu.interval: 100ms is not above the minimum of 100ms"},
		{"interval above the minimum", func(c *Config) { c.Interval = model.Duration(101 * time.Millisecond) }, ""},
		{"timeout", func(c *Config) { c.Timeout = model.Duration(-time.Second) }, "gpu.timeout: must not be negative"},
		{"hostname label", func(c *Config) { c.HostnameLabel = "host" }, `gpu.hostname_label: unknown value "host" (want Hostname, hostname or none)`},
		{"per-process series", func(c *Config) { c.Families.PerProcess = true }, ""},
		{"per-process series without the processes", func(c *Config) { c.Families.PerProcess, c.Families.Processes = true, false },
			"gpu.families.per_process: needs gpu.families.processes, with which the GPU processes are read"},
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
