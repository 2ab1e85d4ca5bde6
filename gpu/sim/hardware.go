package sim

import "math"

// hardwareState is what the hardware-fault scenarios accumulate on a GPU:
// the error counters and flags NVML reports, as DCGM's fields publish
// them. Every other scenario leaves them at 0.
type hardwareState struct {
	eccDBE, retiredDBE, retiredPending float64 // ecc
	uncRemapped, remapPending          float64 // row-remap
	remapFailed, recoveryAction        float64
	nvlinkCRCFlit, nvlinkCRCData       float64 // nvlink-errors
	nvlinkReplay, nvlinkRecovery       float64
	pcieReplays                        float64 // pcie-replay
}

// hardware steps a scenario that runs a healthy training job until its
// hardware fault begins (scenario.go's constants), as a GPU in a server
// shows it:
//
//   - ecc: a double-bit ECC error (volatile and aggregate DBE +1), the
//     page it hit pending retirement until the GPU is reset (as a GPU
//     before Ampere retires pages), and XID 48;
//   - row-remap: a row remapped for an uncorrectable error, pending a GPU
//     reset, which the driver asks for as its recovery action (XID 63);
//     later a remapping that fails, out of spare rows (XID 64);
//   - nvlink-errors: CRC errors at 500 and 50 a second, a replay every 30
//     seconds and one link recovery;
//   - pcie-replay: PCIe replays at 5 a second;
//   - power-brake: the chassis asserts the power brake: clock events
//     hw_slowdown and hw_power_brake, the SM clock halved, power down;
//   - fan-failure: a PCIe card whose fan (45 %) stops: it heats past 90
//     °C, with clock events sw_thermal, then hw_slowdown and hw_thermal;
//   - missing: trains until the GPU leaves the device list (Sample).
func (g *simGPU) hardware(t, dt float64, noise func(float64) float64) simState {
	st := g.busy(clamp(85+noise(3), 60, 99), 62000+noise(2), noise)
	h := &g.hw
	switch g.scenario {
	case ScenarioECC:
		if t >= eccAt && h.eccDBE == 0 {
			h.eccDBE, h.retiredDBE, h.retiredPending = 1, 1, 1
			g.raiseXID(48)
		}
	case ScenarioRowRemap:
		if t >= remapAt && h.uncRemapped == 0 {
			h.uncRemapped, h.remapPending = 1, 1
			h.recoveryAction = 1 // NVML's GPU_RECOVERY_ACTION_GPU_RESET
			g.raiseXID(63)
		}
		if t >= remapFailAt && h.remapFailed == 0 {
			h.remapFailed = 1
			g.raiseXID(64)
		}
	case ScenarioNVLinkErrors:
		if t >= nvlinkErrAt {
			d := min(dt, t-nvlinkErrAt)
			h.nvlinkCRCFlit += math.Round(nvlinkCRCFlit * d)
			h.nvlinkCRCData += math.Round(nvlinkCRCData * d)
			h.nvlinkReplay = math.Floor((t-nvlinkErrAt)/nvlinkReplayAt) + 1
		}
		if t >= nvlinkRecovery {
			h.nvlinkRecovery = 1
		}
	case ScenarioPCIeReplay:
		if t >= pcieReplayAt {
			h.pcieReplays += math.Round(pcieReplayRate * min(dt, t-pcieReplayAt))
		}
	case ScenarioPowerBrake:
		if t >= powerBrakeAt {
			st.clockEvents |= 0x8 | 0x80 // hw_slowdown, hw_power_brake
			st.smClock = boostClockMHz / 2
			st.power = 330 + noise(10)
		}
	case ScenarioFanFailure:
		st.fan = fanRPMPct
		st.temp = 62 + noise(0.5)
		if t >= fanFailAt {
			// Heats toward 98 °C with a time constant of 2 minutes:
			// past 85 °C 2 minutes after, 90 °C 3 minutes after.
			st.fan = 0
			st.temp = 62 + 36*(1-math.Exp(-(t-fanFailAt)/120)) + noise(0.3)
		}
		if st.temp > 85 {
			st.clockEvents |= 0x20 // sw_thermal
			g.thermalViolationNs += dt * 1e9
		}
		if st.temp > 88 {
			st.clockEvents |= 0x8 // hw_slowdown: the temperature is too high
			st.smClock = max(boostClockMHz-(st.temp-85)*60, 900)
		}
		if st.temp > 90 {
			st.clockEvents |= 0x40 // hw_thermal
		}
	}
	return st
}
