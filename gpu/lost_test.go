package gpu

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// lostGPUCheck runs cycles of c and checks GPU 1 is present, lost (its
// series gone, one device error per cycle, GPU 0 untouched, the collector
// up, one log line) and back (series again, one log line).
func lostGPUCheck(t *testing.T, logs *bytes.Buffer, cycle func(), c *Collector) {
	t.Helper()
	reg := newRegistry(t, c)
	gpu0, gpu1 := map[string]string{"gpu": "0"}, map[string]string{"gpu": "1"}
	device1 := map[string]string{"gpu": "1", "field": "device"}

	cycle() // before
	mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu1)
	require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))

	for i := 1; i <= 3; i++ { // lost
		cycle()
		for _, name := range []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"} {
			_, ok := lookup(t, reg, name, gpu1)
			require.False(t, ok, "%s of the lost GPU is served", name)
		}
		// XID 79 stays visible: it is what the GPU last said.
		require.Equal(t, 79.0, mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "1", "err_code": "79", "err_msg": "GPU has fallen off the bus"}))
		require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "1", "err_code": "79"}))
		for _, s := range gather(t, reg, "gpuscope_gpu_field_supported") {
			if s.labels["gpu"] == "1" {
				require.Equal(t, "DCGM_FI_DEV_XID_ERRORS", s.labels["field"], "only the XID field of the lost GPU is reported")
			}
		}
		mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu0)
		require.Equal(t, float64(i), mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", device1))
		require.Len(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"), 1, "only the device error is counted")
		require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
	}

	cycle() // back
	mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu1)
	require.Equal(t, 79.0, mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", gpu1), "the last XID never resets")
	require.Equal(t, 3.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", device1), "the counter keeps its count")

	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "GPU read failed"), out)
	require.Contains(t, out, `gpu=1 field=device err=ERROR_GPU_IS_LOST`)
	require.Equal(t, 1, strings.Count(out, "GPU read works again"), out)
}

// TestSimGPULostAndBack: gpu.sim.gpus[].lost_at/lost_for make a simulated
// GPU fall off the bus for a while, as NVML reports it.
func TestSimGPULostAndBack(t *testing.T) {
	clock := newFakeClock()
	o := simOptions(clock, SimGPU{Scenario: ScenarioTraining},
		SimGPU{Scenario: ScenarioTraining, LostAt: model.Duration(10 * time.Second), LostFor: model.Duration(30 * time.Second)})
	var logs bytes.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, _ := testCollector(t, o)
	// Cycles at 0 s (before), 10, 20, 30 s (lost) and 40 s (back).
	first := true
	lostGPUCheck(t, &logs, func() {
		if !first {
			clock.Advance(10 * time.Second)
		}
		first = false
		c.collectOnce(bg)
	}, c)
}

// TestNVMLGPULostAndBack: a GPU whose reads answer GPU_IS_LOST has its
// series dropped (even those read before the loss showed) except its XID
// series (the driver reported XID 79), one device error per cycle, and is
// read again when it answers again.
func TestNVMLGPULostAndBack(t *testing.T) {
	m := newMockMachine(t, 2)
	var logs bytes.Buffer
	o := mockOptions(m, newFakeClock())
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, _ := testCollector(t, o)
	lost := false
	// The loss shows only at the power reading, after the clocks and the
	// temperature were read.
	power := m.devs[1].GetPowerUsageFunc
	m.devs[1].GetPowerUsageFunc = func() (uint32, nvml.Return) {
		if lost {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return power()
	}
	n := 0
	lostGPUCheck(t, &logs, func() {
		if n == 1 {
			// The driver reports the loss as XID 79 before reads fail.
			m.events <- nvml.EventData{Device: m.devs[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
			g := c.backend.(*nvmlBackend).gpus[1]
			require.Eventually(t, func() bool {
				g.xid.mu.Lock()
				defer g.xid.mu.Unlock()
				return g.xid.last == 79
			}, 5*time.Second, time.Millisecond)
		}
		lost = n >= 1 && n <= 3
		n++
		c.collectOnce(bg)
	}, c)
}

func TestSimLostValidation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Sim.GPUs = []SimGPU{{LostFor: model.Duration(time.Second)}}
	require.ErrorContains(t, cfg.Validate(), "gpu.sim.gpus[0].lost_for: set lost_at too")
	cfg.Sim.GPUs = []SimGPU{{LostAt: model.Duration(-time.Second)}}
	require.ErrorContains(t, cfg.Validate(), "must not be negative")
	cfg.Sim.GPUs = []SimGPU{{LostAt: model.Duration(time.Second)}}
	require.NoError(t, cfg.Validate(), "lost for good")
}
