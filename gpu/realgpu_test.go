//go:build realgpu

package gpu

// The real-hardware check: on a machine with an NVIDIA GPU and driver,
//
//	go test -tags realgpu -run TestRealGPU -v ./gpu/
//
// reads every GPU through the NVML backend and compares it with
// nvidia-smi. Tolerances (values are taken a moment apart, and some move
// by themselves):
//
//	memory.total   ±1 MiB        (same NVML call underneath)
//	memory.used    ±64 MiB       (either with or without the reserved part,
//	                              as nvidia-smi's accounting differs by driver)
//	utilization    ±15 points    (instantaneous, changes between reads)
//	temperature    ±3 °C
//	power.draw     ±15 W or ±15 %, whichever is larger
//	clocks.sm      ±100 MHz or ±10 %, whichever is larger (DVFS)
//	clocks.mem     ±1 %
//
// The identity labels must match exactly: UUID and pci_bus_id.

import (
	"math"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type smiGPU struct {
	index, uuid, busID                                      string
	util, memUsed, memTotal, temp, power, smClock, memClock float64
}

func nvidiaSMI(t *testing.T) []smiGPU {
	t.Helper()
	out, err := exec.Command("nvidia-smi",
		"--query-gpu=index,uuid,pci.bus_id,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,clocks.sm,clocks.mem",
		"--format=csv,noheader,nounits").Output()
	require.NoError(t, err, "nvidia-smi")
	var gpus []smiGPU
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, ",")
		require.Len(t, f, 10, line)
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		num := func(s string) float64 {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return math.NaN() // [N/A], [Not Supported]
			}
			return v
		}
		gpus = append(gpus, smiGPU{
			index: f[0], uuid: f[1], busID: f[2],
			util: num(f[3]), memUsed: num(f[4]), memTotal: num(f[5]), temp: num(f[6]),
			power: num(f[7]), smClock: num(f[8]), memClock: num(f[9]),
		})
	}
	return gpus
}

func TestRealGPUAgainstNvidiaSMI(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Backend = BackendNVML
	c, reg := testCollector(t, Options{Config: cfg, ProcRoot: "/proc", Interval: time.Second})
	c.collectOnce(bg)
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil), "NVML must load on a GPU machine")
	smi := nvidiaSMI(t)
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_FB_TOTAL"), len(smi), "every GPU nvidia-smi lists")

	for _, g := range smi {
		t.Run("gpu"+g.index, func(t *testing.T) {
			m := map[string]string{"gpu": g.index}
			temp := gather(t, reg, "DCGM_FI_DEV_GPU_TEMP")
			for _, s := range temp {
				if s.labels["gpu"] == g.index {
					require.Equal(t, g.uuid, s.labels["UUID"])
					require.True(t, strings.EqualFold(g.busID, s.labels["pci_bus_id"]), "%s vs %s", g.busID, s.labels["pci_bus_id"])
				}
			}
			within := func(name string, want, tol float64) {
				t.Helper()
				if math.IsNaN(want) {
					t.Logf("%s: nvidia-smi has no value", name)
					return
				}
				got, ok := lookup(t, reg, name, m)
				require.True(t, ok, "%s missing while nvidia-smi reports %v", name, want)
				require.InDelta(t, want, got, tol, name)
			}
			within("DCGM_FI_DEV_FB_TOTAL", g.memTotal, 1)
			used := mustLookup(t, reg, "DCGM_FI_DEV_FB_USED", m)
			reserved, _ := lookup(t, reg, "DCGM_FI_DEV_FB_RESERVED", m)
			if math.Abs(used-g.memUsed) > 64 {
				require.InDelta(t, g.memUsed, used+reserved, 64, "DCGM_FI_DEV_FB_USED (+reserved)")
			}
			within("DCGM_FI_DEV_GPU_UTIL", g.util, 15)
			within("DCGM_FI_DEV_GPU_TEMP", g.temp, 3)
			within("DCGM_FI_DEV_POWER_USAGE", g.power, math.Max(15, 0.15*g.power))
			within("DCGM_FI_DEV_SM_CLOCK", g.smClock, math.Max(100, 0.10*g.smClock))
			within("DCGM_FI_DEV_MEM_CLOCK", g.memClock, math.Max(1, 0.01*g.memClock))
		})
	}

	// A second cycle a second later: GPM and the NVLink rate have an
	// interval now, and nothing failed.
	time.Sleep(time.Second)
	c.collectOnce(bg)
	for _, e := range gather(t, reg, "gpuscope_gpu_collector_errors_total") {
		t.Errorf("read failed on a healthy GPU: %v = %v", e.labels, e.value)
	}
	for _, s := range gather(t, reg, "gpuscope_gpu_field_supported") {
		if s.value == 0 {
			t.Logf("not supported: gpu %s %s", s.labels["gpu"], s.labels["field"])
		}
	}
	if v, ok := lookup(t, reg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", map[string]string{"gpu": "0"}); ok {
		require.GreaterOrEqual(t, v, 0.0)
		require.LessOrEqual(t, v, 1.0)
	}
}
