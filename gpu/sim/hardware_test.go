package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
)

// TestSimHardwareFaults: each hardware-fault scenario runs a healthy
// training job, then shows its fault in the series the built-in hardware
// alerts read, as NVML reports it, and the others stay healthy. One cycle
// every 30 simulated seconds for 6 minutes.
func TestSimHardwareFaults(t *testing.T) {
	type check struct {
		name  string
		match map[string]string // besides the GPU
		// before and after are the values before the fault begins and at
		// the end; absent marks a series that must not be there.
		before, after float64
	}
	const absent = -1
	scenarios := []struct {
		scenario string
		checks   []check
	}{
		{ScenarioECC, []check{
			{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", nil, 0, 1},
			{"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", nil, 0, 1},
			{"DCGM_FI_DEV_RETIRED_DBE", nil, 0, 1},
			{"DCGM_FI_DEV_RETIRED_PENDING", nil, 0, 1},
			{"gpuscope_gpu_xid_errors_total", map[string]string{"err_code": "48"}, absent, 1},
			{"DCGM_FI_DEV_ROW_REMAP_PENDING", nil, 0, 0},
		}},
		{ScenarioRowRemap, []check{
			{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", nil, 0, 1},
			{"DCGM_FI_DEV_ROW_REMAP_PENDING", nil, 0, 1},
			{"DCGM_FI_DEV_ROW_REMAP_FAILURE", nil, 0, 1},
			{"DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", nil, 0, 1},
			{"gpuscope_gpu_xid_errors_total", map[string]string{"err_code": "63"}, absent, 1},
			{"gpuscope_gpu_xid_errors_total", map[string]string{"err_code": "64"}, absent, 1},
			{"DCGM_FI_DEV_XID_ERRORS", map[string]string{"err_code": "64"}, absent, 64},
			{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", nil, 0, 0},
		}},
		{ScenarioNVLinkErrors, []check{
			// From 60 s to 360 s: 300 s of errors.
			{"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", nil, 0, 300 * nvlinkCRCFlit},
			{"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", nil, 0, 300 * nvlinkCRCData},
			{"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", nil, 0, 11},
			{"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", nil, 0, 1},
		}},
		{ScenarioPCIeReplay, []check{
			{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", nil, 0, 300 * pcieReplayRate},
		}},
		{ScenarioPowerBrake, []check{
			{"gpuscope_gpu_clock_event_active", map[string]string{"reason": "hw_power_brake"}, 0, 1},
			{"gpuscope_gpu_clock_event_active", map[string]string{"reason": "hw_slowdown"}, 0, 1},
			{"DCGM_FI_DEV_SM_CLOCK", nil, boostClockMHz, boostClockMHz / 2},
		}},
		{ScenarioFanFailure, []check{
			{"DCGM_FI_DEV_FAN_SPEED", nil, fanRPMPct, 0},
			{"gpuscope_gpu_clock_event_active", map[string]string{"reason": "hw_slowdown"}, 0, 1},
			{"gpuscope_gpu_clock_event_active", map[string]string{"reason": "sw_thermal"}, 0, 1},
			{"gpuscope_gpu_clock_event_active", map[string]string{"reason": "hw_thermal"}, 0, 1},
			{"gpuscope_gpu_clock_event_active", map[string]string{"reason": "hw_power_brake"}, 0, 0},
		}},
		{ScenarioMissing, []check{
			{"DCGM_FI_DEV_GPU_TEMP", nil, 40, absent},
			{"gpuscope_gpu_container_processes", nil, 1, absent},
		}},
		// A healthy GPU for contrast: no errors, no fan, the H100's
		// 700 W limit, nothing to recover from.
		{ScenarioTraining, []check{
			{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", nil, 0, 0},
			{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", nil, 0, 0},
			{"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", nil, 0, 0},
			{"DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", nil, 0, 0},
			{"DCGM_FI_DEV_ENFORCED_POWER_LIMIT", nil, powerLimitW, powerLimitW},
			{"DCGM_FI_DEV_FAN_SPEED", nil, absent, absent},
			{"gpuscope_gpu_clock_event_active", map[string]string{"reason": "hw_slowdown"}, 0, 0},
		}},
	}
	clock := gputest.NewClock()
	var gpus []GPU
	for _, sc := range scenarios {
		gpus = append(gpus, GPU{Scenario: sc.scenario})
	}
	o := simOptions(clock, gpus...)
	o.Config.Families = gpu.Families{Processes: true, ECC: true, RetiredPages: true, NVLinkErrors: true, ClockEvents: true}
	c, reg := testCollector(t, o)
	value := func(i int, ch check) float64 {
		match := map[string]string{"gpu": fmt.Sprint(i)}
		for k, v := range ch.match {
			match[k] = v
		}
		v, ok := gputest.Lookup(t, reg, ch.name, match)
		if !ok {
			return absent
		}
		return v
	}
	at := func(simSeconds float64) map[string]float64 {
		out := map[string]float64{}
		for i, sc := range scenarios {
			for _, ch := range sc.checks {
				out[fmt.Sprint(i, ch.name, ch.match)] = value(i, ch)
			}
		}
		return out
	}
	var before map[string]float64
	for step := 0; step <= 12; step++ { // 0 .. 360 s
		sampleOnce(t, c)
		if step == 1 { // 30 s: before every fault
			before = at(30)
		}
		clock.Advance(30 * time.Second)
	}
	after := at(360)
	for i, sc := range scenarios {
		t.Run(sc.scenario, func(t *testing.T) {
			for _, ch := range sc.checks {
				key := fmt.Sprint(i, ch.name, ch.match)
				if ch.name == "DCGM_FI_DEV_GPU_TEMP" && ch.before != absent {
					require.Greater(t, before[key], 0.0, "%s%v before", ch.name, ch.match)
				} else {
					require.Equal(t, ch.before, before[key], "%s%v before the fault", ch.name, ch.match)
				}
				require.Equal(t, ch.after, after[key], "%s%v at 6 minutes", ch.name, ch.match)
			}
		})
	}
	// The missing GPU is gone without an error: one GPU fewer.
	require.Len(t, gputest.Gather(t, reg, "DCGM_FI_DEV_GPU_TEMP"), len(scenarios)-1)
	require.Empty(t, gputest.Gather(t, reg, "gpuscope_gpu_collector_errors_total"))
}
