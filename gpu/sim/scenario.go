package sim

import "math"

// Scenario constants. Times are simulated seconds since the sim started.
const (
	simReservedMiB = 511 // what the driver keeps back on an H100 80GB

	leakBaseMiB   = 20480 // the leaking job's footprint after (re)start
	leakStepMiB   = 2048  // +2 GiB ...
	leakStepEvery = 1800  // ... every 30 minutes, the source document's case

	thermalStartC = 55
	thermalRiseC  = 40   // approaches 95 °C ...
	thermalTau    = 1500 // ... crossing 85 °C after tau·ln 4 ≈ 35 min

	xidAt   = 600 // the xid scenario's job dies of XID 79 after 10 minutes
	xidCode = 79  // GPU has fallen off the bus

	heldIdleMiB = 10240 // the held-idle job's memory: 10 GiB ...
	heldIdleSM  = 1     // ... at about 1 % SM share and GPU utilisation

	orphanMiB = 6144 // what the driver lists for the orphan scenario's gone process
	// orphanPID is the orphan scenario's process: Linux gives pids below
	// pid_max, at most maxPID, so this one exists in no pid namespace.
	orphanPID = maxPID

	boostClockMHz = 1980
	idleClockMHz  = 345
	memClockMHz   = 2619
	powerLimitW   = 700 // an H100 SXM's enforced power limit

	// The hardware-fault scenarios (hardware.go) start healthy; their
	// faults begin at these simulated times.
	eccAt          = 120 // ecc: one double-bit error, a page pending retirement, XID 48
	remapAt        = 120 // row-remap: a row remapped for an uncorrectable error, pending a reset (XID 63)
	remapFailAt    = 300 // row-remap: the next one finds no spare row (XID 64)
	nvlinkErrAt    = 60  // nvlink-errors: CRC errors at a rate, replays and a recovery
	pcieReplayAt   = 60  // pcie-replay: replays at a rate
	powerBrakeAt   = 60  // power-brake: the chassis asserts the power brake
	fanFailAt      = 60  // fan-failure: the card's fan stops
	missingAt      = 300 // missing: the GPU leaves the device list
	nvlinkCRCFlit  = 500 // nvlink-errors: flow-control CRC errors a second, past DCGM's 100/s
	nvlinkCRCData  = 50  // data CRC errors a second
	nvlinkReplayAt = 30  // a replay every 30 simulated seconds
	nvlinkRecovery = 180 // one link recovery, at this time
	pcieReplayRate = 5   // replays a second: 300 a minute, past a Gen5 x16 link's 31 (DCGM's limit)
	fanRPMPct      = 45  // the fan-failure card's fan speed before it stops
)

// simState is what a simulated GPU looks like at one instant.
type simState struct {
	util, memCopyUtil, memUsedMiB   float64
	power, temp, memTemp            float64
	smClock, memClock               float64
	grActive, smActive, smOccupancy float64
	tensor, dram                    float64
	pcieTx, pcieRx, nvlinkMBs       float64
	pcieGen                         int
	clockEvents                     uint64
	process                         bool
	// fan is the fan speed in percent; noFan for a GPU cooled by its
	// chassis (every scenario but fan-failure: an SXM module).
	fan float64
}

// noFan is simState.fan of a GPU without a fan: NVML's NOT_SUPPORTED.
const noFan = -1

// step advances the GPU to simulated time t, dt after the previous step.
func (g *simGPU) step(t, dt float64) simState {
	noise := func(sd float64) float64 { return g.rng.NormFloat64() * sd }
	var st simState
	switch g.scenario {
	case ScenarioTraining:
		st = g.busy(clamp(85+noise(3), 60, 99), 62000+noise(2), noise)
	case ScenarioLeak:
		st = g.busy(clamp(85+noise(3), 60, 99), g.leakMiB(t)+noise(1), noise)
	case ScenarioInputBound:
		// The GPU waits for input: utilisation wanders between 20 and 40 %.
		util := clamp(30+8*math.Sin(2*math.Pi*t/600)+noise(2), 20, 40)
		st = g.busy(util, 24000+noise(2), noise)
		st.power = 240 + noise(10)
		st.temp = 46 + noise(0.5)
		st.tensor = util / 100 * 0.5
		st.dram = 0.08 + math.Abs(noise(0.02))
		st.pcieRx = 1.2e9 + noise(1e8)
		st.pcieTx = 0.2e9 + noise(2e7)
		st.nvlinkMBs = 0
	case ScenarioMemoryBound:
		// Memory nearly full and its bandwidth saturated while the SMs idle.
		util := clamp(15+noise(4), 5, 25)
		st = g.busy(util, 0.95*g.memoryMiB+noise(4), noise)
		st.dram = clamp(0.88+noise(0.03), 0, 1)
		st.memCopyUtil = st.dram * 100
		st.tensor = 0.05
		st.power = 380 + noise(15)
		st.temp = 56 + noise(0.5)
	case ScenarioThermal:
		st = g.busy(clamp(100-math.Abs(noise(1.5)), 0, 100), 60000+noise(2), noise)
		st.power = 690 + noise(5)
		st.temp = thermalStartC + thermalRiseC*(1-math.Exp(-t/thermalTau)) + noise(0.3)
		if st.temp > 85 {
			st.clockEvents |= 0x20 // sw_thermal
			st.smClock = max(boostClockMHz-(st.temp-85)*40, 1200)
			g.thermalViolationNs += dt * 1e9
		}
		if st.temp > 90 {
			st.clockEvents |= 0x40 // hw_thermal
		}
	case ScenarioXID:
		if t < xidAt {
			st = g.busy(clamp(85+noise(3), 60, 99), 62000+noise(2), noise)
			break
		}
		if g.xids[xidCode] == 0 {
			g.raiseXID(xidCode)
		}
		// The job died with the XID; the GPU sits idle.
		st = g.idle(noise)
	case ScenarioMIG:
		st = g.migStep(t, noise)
	case ScenarioHeldIdle:
		// A job that holds its memory and hardly computes: a notebook's
		// kernel left open, a training loop stuck on a dead peer.
		st = g.busy(clamp(heldIdleSM+noise(0.3), 0, 3), heldIdleMiB, noise)
		st.memCopyUtil = 0
		st.power = 88 + noise(2)
		st.temp = 33 + noise(0.5)
		st.tensor = 0
		st.dram = clamp(0.005+noise(0.002), 0, 1)
		st.pcieTx = math.Max(80e3+noise(8e3), 0)
		st.pcieRx = math.Max(80e3+noise(8e3), 0)
		st.nvlinkMBs = 0
	case ScenarioECC, ScenarioRowRemap, ScenarioNVLinkErrors, ScenarioPCIeReplay, ScenarioPowerBrake, ScenarioFanFailure, ScenarioMissing:
		st = g.hardware(t, dt, noise)
	case ScenarioOrphan:
		// Nothing runs; the driver still lists orphanMiB for a process
		// that is gone (orphanPID).
		st = g.idle(noise)
		st.memUsedMiB = orphanMiB
		st.power = 76 + noise(2)
		st.process = true
	default:
		st = g.idle(noise)
	}
	if g.scenario != ScenarioFanFailure {
		st.fan = noFan
	}
	st.memTemp = st.temp + 6
	st.memUsedMiB = clamp(st.memUsedMiB, 0, g.memoryMiB-simReservedMiB)
	return st
}

// busy is a GPU running a CUDA job at the given utilisation.
func (g *simGPU) busy(util, memMiB float64, noise func(float64) float64) simState {
	return simState{
		util:        util,
		memCopyUtil: clamp(util*0.45+noise(2), 0, 100),
		memUsedMiB:  memMiB,
		power:       200 + 4.8*util + noise(15),
		temp:        40 + 0.3*util + noise(0.7),
		smClock:     boostClockMHz,
		memClock:    memClockMHz,
		grActive:    clamp(util/100+noise(0.01), 0, 1),
		smActive:    clamp(util/100*0.92+noise(0.01), 0, 1),
		smOccupancy: clamp(0.38+noise(0.02), 0, 1),
		tensor:      clamp(util/100*0.65+noise(0.03), 0, 1),
		dram:        clamp(0.42+noise(0.04), 0, 1),
		pcieTx:      math.Max(2.5e9+noise(2e8), 0),
		pcieRx:      math.Max(5e9+noise(3e8), 0),
		nvlinkMBs:   math.Max(150000+noise(10000), 0),
		pcieGen:     5,
		process:     true,
	}
}

func (g *simGPU) idle(noise func(float64) float64) simState {
	return simState{
		power:       72 + noise(2),
		temp:        31 + noise(0.5),
		smClock:     idleClockMHz,
		memClock:    memClockMHz,
		pcieTx:      math.Max(50e3+noise(5e3), 0),
		pcieRx:      math.Max(50e3+noise(5e3), 0),
		pcieGen:     1,   // idle GPUs train their link down
		clockEvents: 0x1, // gpu_idle
	}
}

// leakMiB is the leaking job's memory: a staircase of 2 GiB steps every
// 30 minutes until the next step would not fit, when the job dies of OOM,
// restarts and begins climbing again.
func (g *simGPU) leakMiB(t float64) float64 {
	maxSteps := math.Floor((g.memoryMiB - simReservedMiB - leakBaseMiB - leakStepMiB) / leakStepMiB)
	if maxSteps < 1 {
		return leakBaseMiB // a GPU too small to leak into; step clamps it
	}
	k := math.Mod(math.Floor(t/leakStepEvery), maxSteps+1)
	return leakBaseMiB + k*leakStepMiB
}

func clamp(v, lo, hi float64) float64 { return math.Min(math.Max(v, lo), hi) }
