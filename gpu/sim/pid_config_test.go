package sim_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/config"
)

// TestSimPIDConfigFile: gpu.sim.gpus[i].pid as the config file gives it,
// and a bad one named by file, line and key.
func TestSimPIDConfigFile(t *testing.T) {
	c, err := config.Load([]byte("gpu:\n  backend: sim\n  sim:\n    gpus:\n      - {scenario: training, pid: 4242}\n"), "test.yml", nil)
	require.NoError(t, err)
	require.Equal(t, 4242, c.GPU.Sim.GPUs[0].PID)

	for _, tc := range []struct{ name, input, want string }{
		{"negative", "gpu:\n  sim:\n    gpus:\n      - scenario: training\n        pid: -7\n",
			"test.yml:5: gpu.sim.gpus[0].pid: must not be negative, got -7 (a host process id, or 0 for none)"},
		{"not a number", "gpu:\n  sim:\n    gpus:\n      - scenario: training\n        pid: init\n",
			`test.yml:5: gpu.sim.gpus[0].pid: "init" is not an integer`},
		{"idle", "gpu:\n  sim:\n    gpus:\n      - scenario: training\n      - pid: 1\n",
			"test.yml:5: gpu.sim.gpus[1].pid: an idle GPU runs no process; set a scenario such as training"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load([]byte(tc.input), "test.yml", nil)
			require.EqualError(t, err, tc.want)
		})
	}
}
