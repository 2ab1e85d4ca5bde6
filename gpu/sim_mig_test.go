package gpu

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/workload"
)

// TestSimMIG: the mig scenario is an H100 as 3g.40gb + 2 × 2g.20gb,
// published as the NVML backend publishes a GPU in MIG mode.
func TestSimMIG(t *testing.T) {
	clock := newFakeClock()
	o := simOptions(clock, SimGPU{Scenario: ScenarioMIG, Container: "/mig"}, SimGPU{Scenario: ScenarioTraining})
	o.ContainerLookup = func(id string) (workload.Metadata, bool) {
		return workload.Metadata{Name: "job" + id, Image: "img"}, true
	}
	c, reg := testCollector(t, o)
	serve := map[string][]float64{}
	for range 40 {
		c.collectOnce(bg)
		for _, name := range []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED"} {
			serve[name] = append(serve[name], mustLookup(t, reg, name, instanceOf("0", "5", "2g.20gb")))
		}
		clock.Advance(30 * time.Second)
	}

	for _, tc := range []struct {
		id, profile      string
		total            float64
		usedMin, usedMax float64
		grMin, grMax     float64
		container        string
	}{
		{"1", "3g.40gb", 40192, 30000, 31000, 0.6, 0.99, "/mig/train"},
		{"5", "2g.20gb", 19968, 11000, 12500, 0.05, 0.9, "/mig/serve"},
		{"6", "2g.20gb", 19968, 0, 0, 0, 0, ""},
	} {
		t.Run(tc.profile+" "+tc.id, func(t *testing.T) {
			m := instanceOf("0", tc.id, tc.profile)
			require.Equal(t, tc.total, mustLookup(t, reg, "DCGM_FI_DEV_FB_TOTAL", m))
			used := mustLookup(t, reg, "DCGM_FI_DEV_FB_USED", m)
			require.GreaterOrEqual(t, used, tc.usedMin)
			require.LessOrEqual(t, used, tc.usedMax)
			require.Equal(t, tc.total-used, mustLookup(t, reg, "DCGM_FI_DEV_FB_FREE", m))
			gr := mustLookup(t, reg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", m)
			require.GreaterOrEqual(t, gr, tc.grMin)
			require.LessOrEqual(t, gr, tc.grMax)
			cs := gather(t, reg, "gpuscope_gpu_container_memory_used_bytes")
			var ids []string
			for _, s := range cs {
				if s.labels["GPU_I_ID"] == tc.id {
					ids = append(ids, s.labels["id"])
					require.Equal(t, used*bytesPerMiB, s.value)
					require.Equal(t, "job"+tc.container, s.labels["name"])
				}
			}
			if tc.container == "" {
				require.Empty(t, ids)
			} else {
				require.Equal(t, []string{tc.container}, ids)
			}
		})
	}
	// The inference server's load comes in waves.
	require.Greater(t, maxOf(serve["DCGM_FI_PROF_GR_ENGINE_ACTIVE"])-minOf(serve["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]), 0.3)

	// Whole-GPU fields once; what NVML does not report in MIG mode, absent.
	require.Greater(t, mustLookup(t, reg, "DCGM_FI_DEV_POWER_USAGE", wholeGPU("0")), 250.0)
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_POWER_USAGE"), 2)
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_FB_USED"), 4, "three instances and GPU 1")
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_GPU_UTIL"), 1, "GPU 1 only")
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": "DCGM_FI_DEV_GPU_UTIL"}))
	for _, name := range []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpuscope_gpu_container_memory_used_bytes"} {
		_, ok := lookup(t, reg, name, wholeGPU("0"))
		require.False(t, ok, name)
	}
	require.Len(t, gather(t, reg, "gpuscope_gpu_container_sm_utilization_percent"), 1, "GPU 1's; none per instance")
	_, ok := lookup(t, reg, "DCGM_FI_PROF_PCIE_RX_BYTES", wholeGPU("0"))
	require.True(t, ok)
	// The profiles' memory fits the GPU's.
	sum := 0.0
	for _, s := range gather(t, reg, "DCGM_FI_DEV_FB_TOTAL") {
		if s.labels["gpu"] == "0" {
			sum += s.value
		}
	}
	require.LessOrEqual(t, sum, float64(defaultSimMemoryMiB))
}

func TestSimMIGProfileNames(t *testing.T) {
	for _, sp := range simInstanceSpecs {
		want := map[uint32]string{3: "3g.40gb", 2: "2g.20gb"}[sp.slices]
		require.Equal(t, want, dcgmProfileName(sp.slices, sp.memoryMiB))
	}
	// DCGM rounds the memory up, so an A100 80GB's whole-GPU instance
	// (81050 MiB) is 7g.80gb, not 7g.79gb (dcgm-exporter #713).
	require.Equal(t, "7g.80gb", dcgmProfileName(7, 81050))
	require.Equal(t, "1g.10gb", dcgmProfileName(1, 9856))
}

func instanceOf(gpu, id, profile string) map[string]string {
	return map[string]string{"gpu": gpu, "GPU_I_ID": id, "GPU_I_PROFILE": profile}
}
