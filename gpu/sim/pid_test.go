package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
)

func TestSimPIDValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpu  GPU
		err  string
	}{
		{"none", GPU{Scenario: ScenarioTraining}, ""},
		{"a pid", GPU{Scenario: ScenarioTraining, PID: 4242}, ""},
		{"a pid and a container: the pid wins", GPU{Scenario: ScenarioLeak, PID: 4242, Container: "/a"}, ""},
		{"the largest pid", GPU{Scenario: ScenarioXID, PID: maxPID}, ""},
		{"negative", GPU{Scenario: ScenarioTraining, PID: -1}, "gpu.sim.gpus[1].pid: must not be negative, got -1 (a host process id, or 0 for none)"},
		{"above Linux's pids", GPU{Scenario: ScenarioTraining, PID: maxPID + 1}, "gpu.sim.gpus[1].pid: 4194305 is above the largest Linux pid (4194304)"},
		{"idle by default", GPU{PID: 4242}, "gpu.sim.gpus[1].pid: an idle GPU runs no process; set a scenario such as training"},
		{"idle", GPU{Scenario: ScenarioIdle, PID: 4242}, "gpu.sim.gpus[1].pid: an idle GPU runs no process; set a scenario such as training"},
		{"mig", GPU{Scenario: ScenarioMIG, PID: 4242}, "gpu.sim.gpus[1].pid: not with the mig scenario, whose two jobs run in <container>/train and <container>/serve"},
		{"orphan", GPU{Scenario: ScenarioOrphan, PID: 4242}, "gpu.sim.gpus[1].pid: not with the orphan scenario, whose process is gone by design"},
		{"held-idle", GPU{Scenario: ScenarioHeldIdle, PID: 4242}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.GPUs = []GPU{{Scenario: ScenarioTraining}, tc.gpu}
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
// NVML backend (gputest.ProcessVanished, which the NVML backend passes
// too): the GPU has no per-container series, its other series stay; in
// the first cycle the failed read counts in
// gpuscope_gpu_collector_errors_total{gpu, field="gpuscope_gpu_container_memory_used_bytes"}
// (it may have just exited), from the second its memory is orphaned
// (gpuscope_gpu_orphaned_memory_bytes).
func TestSimPIDVanished(t *testing.T) {
	o := simOptions(gputest.NewClock(), GPU{Scenario: ScenarioTraining, PID: gputest.GonePID, Container: "/not/used"})
	o.ProcRoot = "/proc"
	c, reg := testCollector(t, o)
	gputest.ProcessVanished(t, func() { sampleOnce(t, c) }, reg)
}
