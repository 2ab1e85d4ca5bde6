package gpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestSimPIDValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpu  SimGPU
		err  string
	}{
		{"none", SimGPU{Scenario: ScenarioTraining}, ""},
		{"a pid", SimGPU{Scenario: ScenarioTraining, PID: 4242}, ""},
		{"a pid and a container: the pid wins", SimGPU{Scenario: ScenarioLeak, PID: 4242, Container: "/a"}, ""},
		{"the largest pid", SimGPU{Scenario: ScenarioXID, PID: maxPID}, ""},
		{"negative", SimGPU{Scenario: ScenarioTraining, PID: -1}, "gpu.sim.gpus[1].pid: must not be negative, got -1 (a host process id, or 0 for none)"},
		{"above Linux's pids", SimGPU{Scenario: ScenarioTraining, PID: maxPID + 1}, "gpu.sim.gpus[1].pid: 4194305 is above the largest Linux pid (4194304)"},
		{"idle by default", SimGPU{PID: 4242}, "gpu.sim.gpus[1].pid: an idle GPU runs no process; set a scenario such as training"},
		{"idle", SimGPU{Scenario: ScenarioIdle, PID: 4242}, "gpu.sim.gpus[1].pid: an idle GPU runs no process; set a scenario such as training"},
		{"mig", SimGPU{Scenario: ScenarioMIG, PID: 4242}, "gpu.sim.gpus[1].pid: not with the mig scenario, whose two jobs run in <container>/train and <container>/serve"},
		{"orphan", SimGPU{Scenario: ScenarioOrphan, PID: 4242}, "gpu.sim.gpus[1].pid: not with the orphan scenario, whose process is gone by design"},
		{"held-idle", SimGPU{Scenario: ScenarioHeldIdle, PID: 4242}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Sim.GPUs = []SimGPU{{Scenario: ScenarioTraining}, tc.gpu}
			err := cfg.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.err)
		})
	}
}

// TestSimPIDVanished: a simulated GPU process whose pid does not exist is
// what a GPU process that the driver lists but that is gone is to the
// NVML backend: the GPU has no per-container series, its other series
// stay; in the first cycle the failed read counts in
// gpuscope_gpu_collector_errors_total{gpu, field="gpuscope_gpu_container_memory_used_bytes"}
// (it may have just exited), from the second its memory is orphaned
// (gpuscope_gpu_orphaned_memory_bytes).
func TestSimPIDVanished(t *testing.T) {
	// Linux gives pids below pid_max, at most maxPID: this one never exists.
	const gone = maxPID
	check := func(t *testing.T, c *Collector, reg prometheus.Gatherer) {
		t.Helper()
		for range 3 {
			c.collectOnce(bg)
		}
		for _, name := range []string{"gpuscope_gpu_container_memory_used_bytes", "gpuscope_gpu_container_sm_utilization_percent", "gpuscope_gpu_container_processes"} {
			require.Empty(t, gather(t, reg, name), name)
		}
		require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total",
			map[string]string{"gpu": "0", "field": "gpuscope_gpu_container_memory_used_bytes"}), "one failed read, in the first cycle")
		require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_processes", map[string]string{"gpu": "0"}))
		require.Positive(t, mustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", map[string]string{"gpu": "0"}))
		mustLookup(t, reg, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "0"})
		require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
	}
	t.Run("sim", func(t *testing.T) {
		o := simOptions(newFakeClock(), SimGPU{Scenario: ScenarioTraining, PID: gone, Container: "/not/used"})
		o.ProcRoot = "/proc"
		c, reg := testCollector(t, o)
		check(t, c, reg)
	})
	t.Run("nvml", func(t *testing.T) {
		m := newMockMachine(t, 1)
		m.procs[0] = []nvml.ProcessInfo{{Pid: gone, UsedGpuMemory: 1 << 30}}
		o := mockOptions(m, newFakeClock())
		o.ProcRoot = "/proc"
		c, reg := testCollector(t, o)
		check(t, c, reg)
	})
}
