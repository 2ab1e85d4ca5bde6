package sim

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
	"github.com/gpuscope/gpuscope/workload"
)

// simTrace runs the sim for the given simulated duration, one cycle per
// step, and returns metric name's value on GPU 0 at every step.
func simTrace(t *testing.T, o testOptions, clock *gputest.Clock, name string, match map[string]string, duration, step time.Duration) (*prometheus.Registry, []float64) {
	t.Helper()
	c, reg := testCollector(t, o)
	var out []float64
	for elapsed := time.Duration(0); elapsed <= duration; elapsed += step {
		sampleOnce(t, c)
		out = append(out, gputest.MustLookup(t, reg, name, match))
		clock.Advance(step)
	}
	return reg, out
}

func TestSimLeakStaircase(t *testing.T) {
	clock := gputest.NewClock()
	o := simOptions(clock, GPU{Scenario: ScenarioLeak})
	gpu0 := map[string]string{"gpu": "0"}
	c, reg := testCollector(t, o)
	var used, util []float64
	// Four simulated hours sampled every five minutes.
	for range 4 * 12 {
		sampleOnce(t, c)
		used = append(used, gputest.MustLookup(t, reg, "DCGM_FI_DEV_FB_USED", gpu0))
		util = append(util, gputest.MustLookup(t, reg, "DCGM_FI_DEV_GPU_UTIL", gpu0))
		clock.Advance(5 * time.Minute)
	}
	// A staircase: flat within each half hour, +2 GiB at each step.
	for i, v := range used {
		step := float64(i / 6) // six samples per 30 minutes
		require.InDelta(t, 20480+2048*step, v, 8, "sample %d at %d min", i, i*5)
	}
	// Utilisation stays that of a healthy training job.
	require.InDelta(t, 85, mean(util), 3)
	require.GreaterOrEqual(t, minOf(util), 60.0)
	// The leaking container holds the memory.
	mem := gputest.MustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": "0", "id": "/gpuscope-sim/gpu0"})
	require.Equal(t, used[len(used)-1]*bytesPerMiB, mem)
}

func TestSimLeakRestartsWhenFull(t *testing.T) {
	c, sim, err := newCollector(simOptions(gputest.NewClock(), GPU{Scenario: ScenarioLeak}))
	require.NoError(t, err)
	sampleOnce(t, c)
	require.NoError(t, sim.Close())
	g := sim.gpus[0]
	peak := 0.0
	for step := 0; step < 40; step++ {
		v := g.leakMiB(float64(step)*leakStepEvery + 1)
		require.LessOrEqual(t, v+simReservedMiB, g.memoryMiB, "the leak never exceeds the framebuffer")
		peak = max(peak, v)
	}
	require.Greater(t, peak/g.memoryMiB, 0.9, "it gets close to full, so the FB_USED/FB_TOTAL > 0.9 alert fires")
	// After the OOM the job starts over.
	require.Equal(t, float64(leakBaseMiB), g.leakMiB(29*leakStepEvery+1))
}

func TestSimThermal(t *testing.T) {
	clock := gputest.NewClock()
	o := simOptions(clock, GPU{Scenario: ScenarioThermal})
	o.Config.Families.ClockEvents = true
	o.Config.Families.Violations = true
	reg, temps := simTrace(t, o, clock, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "0"}, 60*time.Minute, time.Minute)
	crossed := -1
	for i, v := range temps {
		if v > 85 && crossed < 0 {
			crossed = i
		}
	}
	require.Less(t, temps[0], 60.0)
	require.GreaterOrEqual(t, crossed, 30, "climbs, not jumps")
	require.LessOrEqual(t, crossed, 40)
	require.Greater(t, temps[len(temps)-1], 88.0)
	// Climbing: each ten minutes warmer than the last.
	for i := 10; i < len(temps); i += 10 {
		require.Greater(t, temps[i], temps[i-10])
	}
	gpu0 := map[string]string{"gpu": "0"}
	require.Equal(t, 1.0, gputest.MustLookup(t, reg, "gpuscope_gpu_clock_event_active", map[string]string{"gpu": "0", "reason": "sw_thermal"}))
	require.Greater(t, gputest.MustLookup(t, reg, "DCGM_FI_DEV_THERMAL_VIOLATION", gpu0), 0.0)
	require.Less(t, gputest.MustLookup(t, reg, "DCGM_FI_DEV_SM_CLOCK", gpu0), float64(boostClockMHz))
	require.Greater(t, gputest.MustLookup(t, reg, "DCGM_FI_DEV_GPU_UTIL", gpu0), 95.0)
}

func TestSimXIDOnce(t *testing.T) {
	clock := gputest.NewClock()
	c, reg := testCollector(t, simOptions(clock, GPU{Scenario: ScenarioXID}))
	var codes []float64
	for range 30 {
		sampleOnce(t, c)
		xid := gputest.Gather(t, reg, "DCGM_FI_DEV_XID_ERRORS")
		require.Len(t, xid, 1)
		codes = append(codes, xid[0].Value)
		if xid[0].Value == 79 {
			require.Equal(t, "79", xid[0].Labels["err_code"])
			require.Equal(t, "GPU has fallen off the bus", xid[0].Labels["err_msg"])
		} else {
			require.Equal(t, "No Error", xid[0].Labels["err_msg"])
		}
		clock.Advance(time.Minute)
	}
	for i, v := range codes {
		if i < 10 {
			require.Zero(t, v, "minute %d", i)
		} else {
			require.Equal(t, 79.0, v, "minute %d: the last XID stays", i)
		}
	}
	require.Equal(t, 1.0, gputest.MustLookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "0", "err_code": "79"}), "raised once")
	// The job died with the XID.
	require.Empty(t, gputest.Gather(t, reg, "gpuscope_gpu_container_memory_used_bytes"))
	require.Zero(t, gputest.MustLookup(t, reg, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "0"}))
}

func TestSimScenarios(t *testing.T) {
	clock := gputest.NewClock()
	o := simOptions(clock,
		GPU{Scenario: ScenarioIdle},
		GPU{Scenario: ScenarioTraining, Container: "/system.slice/docker-train.scope"},
		GPU{Scenario: ScenarioInputBound},
		GPU{Scenario: ScenarioMemoryBound},
	)
	o.ContainerLookup = func(id string) (workload.Metadata, bool) {
		if id == "/system.slice/docker-train.scope" {
			return workload.Metadata{Name: "train", Image: "pytorch"}, true
		}
		return workload.Metadata{}, false
	}
	c, reg := testCollector(t, o)
	samples := map[string][]float64{}
	ratio := map[string][]float64{}
	for range 60 {
		sampleOnce(t, c)
		for _, s := range gputest.Gather(t, reg, "DCGM_FI_DEV_GPU_UTIL") {
			samples[s.Labels["gpu"]] = append(samples[s.Labels["gpu"]], s.Value)
		}
		for _, gpu := range []string{"0", "1", "2", "3"} {
			m := map[string]string{"gpu": gpu}
			ratio[gpu] = append(ratio[gpu], gputest.MustLookup(t, reg, "DCGM_FI_DEV_FB_USED", m)/gputest.MustLookup(t, reg, "DCGM_FI_DEV_FB_TOTAL", m))
		}
		clock.Advance(30 * time.Second)
	}
	for _, tc := range []struct {
		gpu, scenario    string
		utilMin, utilMax float64
		memMin, memMax   float64
	}{
		{"0", "idle", 0, 0, 0, 0},
		{"1", "training", 70, 99, 0.7, 0.8},
		{"2", "input-bound", 20, 40, 0.25, 0.35},
		{"3", "memory-bound", 5, 25, 0.9, 0.97},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			require.GreaterOrEqual(t, minOf(samples[tc.gpu]), tc.utilMin)
			require.LessOrEqual(t, maxOf(samples[tc.gpu]), tc.utilMax)
			require.GreaterOrEqual(t, minOf(ratio[tc.gpu]), tc.memMin)
			require.LessOrEqual(t, maxOf(ratio[tc.gpu]), tc.memMax)
		})
	}
	// Noise: a busy GPU's utilisation is not a constant.
	require.Greater(t, maxOf(samples["1"])-minOf(samples["1"]), 2.0)
	require.InDelta(t, 85, mean(samples["1"]), 2)

	// Memory-bound: the memory interface is busy while the SMs idle.
	require.Greater(t, gputest.MustLookup(t, reg, "DCGM_FI_PROF_DRAM_ACTIVE", map[string]string{"gpu": "3"}), 0.8)
	require.Less(t, gputest.MustLookup(t, reg, "DCGM_FI_PROF_DRAM_ACTIVE", map[string]string{"gpu": "2"}), 0.2)

	// Processes sit in their containers; the idle GPU has none.
	train := map[string]string{"gpu": "1", "id": "/system.slice/docker-train.scope", "name": "train", "image": "pytorch"}
	require.Greater(t, gputest.MustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", train), 60e9)
	require.InDelta(t, gputest.MustLookup(t, reg, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "1"}),
		gputest.MustLookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", train), 1e-9)
	gputest.MustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": "2", "id": "/gpuscope-sim/gpu2", "name": ""})
	_, ok := gputest.Lookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": "0"})
	require.False(t, ok)

	// Idle GPUs train their PCIe link down and say why their clocks are low.
	require.Equal(t, 1.0, gputest.MustLookup(t, reg, "gpuscope_gpu_pcie_link_generation", map[string]string{"gpu": "0"}))
	require.Equal(t, 5.0, gputest.MustLookup(t, reg, "gpuscope_gpu_pcie_link_generation", map[string]string{"gpu": "1"}))
	require.Equal(t, 63.008e9, gputest.MustLookup(t, reg, "gpuscope_gpu_pcie_max_bandwidth_bytes_per_second", map[string]string{"gpu": "0"}))

	// Energy is a counter that grows with power.
	sampleOnce(t, c)
	e1 := gputest.MustLookup(t, reg, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", map[string]string{"gpu": "1"})
	clock.Advance(time.Minute)
	sampleOnce(t, c)
	e2 := gputest.MustLookup(t, reg, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", map[string]string{"gpu": "1"})
	require.InDelta(t, 60*600*1000, e2-e1, 60*150*1000, "about 600 W for a minute, in mJ")
}

// TestSimEnergyInRealTime: at a time scale (the demo's 30), the scenarios
// run faster but energy is power over real time, as GPU-hours are: a
// minute of wall clock is a minute of the GPU's power, whatever the
// scale (the demo once reported 18 kW per H100).
func TestSimEnergyInRealTime(t *testing.T) {
	for _, scale := range []float64{1, 30} {
		clock := gputest.NewClock()
		o := simOptions(clock)
		o.Sim.TimeScale = scale
		c, reg := testCollector(t, o)
		gpu0 := map[string]string{"gpu": "0"}
		sampleOnce(t, c)
		e1 := gputest.MustLookup(t, reg, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu0)
		var watts float64
		for range 60 {
			clock.Advance(time.Second)
			sampleOnce(t, c)
			watts += gputest.MustLookup(t, reg, "DCGM_FI_DEV_POWER_USAGE", gpu0)
		}
		e2 := gputest.MustLookup(t, reg, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu0)
		// Each second's energy is that second's power (whole mJ).
		require.InDelta(t, watts*1000, e2-e1, 61, "time scale %g: energy over a minute against the minute's power readings", scale)
	}
}

func TestSimIdentity(t *testing.T) {
	clock := gputest.NewClock()
	o := simOptions(clock)
	o.Sim.Count = 64
	c, reg := testCollector(t, o)
	sampleOnce(t, c)
	temps := gputest.Gather(t, reg, "DCGM_FI_DEV_GPU_TEMP")
	require.Len(t, temps, 64)
	uuids, buses := map[string]bool{}, map[string]bool{}
	for _, s := range temps {
		require.Equal(t, "NVIDIA H100 80GB HBM3", s.Labels["modelName"])
		require.Equal(t, "nvidia"+s.Labels["gpu"], s.Labels["device"])
		require.Regexp(t, `^GPU-5171[0-9a-f]{4}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, s.Labels["UUID"])
		require.Regexp(t, `^[0-9A-F]{8}:[0-9A-F]{2}:00\.0$`, s.Labels["pci_bus_id"])
		uuids[s.Labels["UUID"]], buses[s.Labels["pci_bus_id"]] = true, true
	}
	require.Len(t, uuids, 64)
	require.Len(t, buses, 64)
	require.Equal(t, 81559.0, gputest.MustLookup(t, reg, "DCGM_FI_DEV_FB_TOTAL", map[string]string{"gpu": "63"}))
	require.Equal(t, "sim", gputest.Gather(t, reg, "gpuscope_gpu_collector_backend_info")[0].Labels["backend"])
}

func TestSimTimeScaleAndSeed(t *testing.T) {
	run := func(seed uint64) []float64 {
		clock := gputest.NewClock()
		o := simOptions(clock, GPU{Scenario: ScenarioLeak})
		o.Sim.TimeScale = 60
		o.Sim.Seed = seed
		_, used := simTrace(t, o, clock, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "0"}, 2*time.Minute, 30*time.Second)
		return used
	}
	require.Equal(t, run(7), run(7), "the same seed replays the same noise")
	require.NotEqual(t, run(7), run(8))

	// At 60x, 30 real seconds are 30 simulated minutes: one leak step.
	clock := gputest.NewClock()
	o := simOptions(clock, GPU{Scenario: ScenarioLeak})
	o.Sim.TimeScale = 60
	_, used := simTrace(t, o, clock, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "0"}, 90*time.Second, 30*time.Second)
	require.Len(t, used, 4)
	for i, v := range used {
		require.InDelta(t, 20480+2048*float64(i), v, 8)
	}
}

func TestDemoConfigRuns(t *testing.T) {
	clock := gputest.NewClock()
	cfg, sim := DemoConfig()
	sim.CPUBurn = false // burning is tested on its own
	c, reg := testCollector(t, testOptions{Options: gpu.Options{Config: cfg, Now: clock.Now}, Sim: sim})
	for range 5 {
		sampleOnce(t, c)
		clock.Advance(15 * time.Second)
	}
	require.Len(t, gputest.Gather(t, reg, "DCGM_FI_DEV_GPU_TEMP"), 8)
	// Both GPUs of the training job report the same container; GPU 6 is
	// in MIG mode with two jobs in two of its three instances.
	require.Len(t, gputest.Gather(t, reg, "gpuscope_gpu_container_memory_used_bytes"), 8)
	require.Len(t, gputest.Gather(t, reg, "DCGM_FI_DEV_FB_USED"), 10)
	require.Equal(t, 1.0, gputest.MustLookup(t, reg, "gpuscope_gpu_container_processes", map[string]string{"gpu": "6", "GPU_I_PROFILE": "3g.40gb", "id": "/gpuscope-demo/mig/train"}))
	v, ok := gputest.Lookup(t, reg, "gpuscope_gpu_container_processes", map[string]string{"gpu": "1", "id": "/gpuscope-demo/train"})
	require.True(t, ok)
	require.Equal(t, 1.0, v)
	// The thermal GPU runs flat out: the GPU_UTIL > 95 rule has a series.
	require.Greater(t, gputest.MustLookup(t, reg, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "5"}), 95.0)
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func minOf(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}
