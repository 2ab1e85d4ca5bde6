package sim

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
	"github.com/gpuscope/gpuscope/workload"
)

// TestSimMIG: the mig scenario is an H100 as 3g.40gb + 2 × 2g.20gb,
// published as the NVML backend publishes a GPU in MIG mode.
func TestSimMIG(t *testing.T) {
	clock := gputest.NewClock()
	o := simOptions(clock, GPU{Scenario: ScenarioMIG, Container: "/mig"}, GPU{Scenario: ScenarioTraining})
	o.ContainerLookup = func(id string) (workload.Metadata, bool) {
		return workload.Metadata{Name: "job" + id, Image: "img"}, true
	}
	c, reg := testCollector(t, o)
	serve := map[string][]float64{}
	for range 40 {
		sampleOnce(t, c)
		for _, name := range []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED"} {
			serve[name] = append(serve[name], gputest.MustLookup(t, reg, name, instanceOf("0", "5", "2g.20gb")))
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
			require.Equal(t, tc.total, gputest.MustLookup(t, reg, "DCGM_FI_DEV_FB_TOTAL", m))
			used := gputest.MustLookup(t, reg, "DCGM_FI_DEV_FB_USED", m)
			require.GreaterOrEqual(t, used, tc.usedMin)
			require.LessOrEqual(t, used, tc.usedMax)
			require.Equal(t, tc.total-used, gputest.MustLookup(t, reg, "DCGM_FI_DEV_FB_FREE", m))
			gr := gputest.MustLookup(t, reg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", m)
			require.GreaterOrEqual(t, gr, tc.grMin)
			require.LessOrEqual(t, gr, tc.grMax)
			cs := gputest.Gather(t, reg, "gpuscope_gpu_container_memory_used_bytes")
			var ids []string
			for _, s := range cs {
				if s.Labels["GPU_I_ID"] == tc.id {
					ids = append(ids, s.Labels["id"])
					require.Equal(t, used*bytesPerMiB, s.Value)
					require.Equal(t, "job"+tc.container, s.Labels["name"])
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
	require.Greater(t, gputest.MustLookup(t, reg, "DCGM_FI_DEV_POWER_USAGE", wholeGPU("0")), 250.0)
	require.Len(t, gputest.Gather(t, reg, "DCGM_FI_DEV_POWER_USAGE"), 2)
	require.Len(t, gputest.Gather(t, reg, "DCGM_FI_DEV_FB_USED"), 4, "three instances and GPU 1")
	require.Len(t, gputest.Gather(t, reg, "DCGM_FI_DEV_GPU_UTIL"), 1, "GPU 1 only")
	require.Equal(t, 0.0, gputest.MustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": "DCGM_FI_DEV_GPU_UTIL"}))
	for _, name := range []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpuscope_gpu_container_memory_used_bytes"} {
		_, ok := gputest.Lookup(t, reg, name, wholeGPU("0"))
		require.False(t, ok, name)
	}
	require.Len(t, gputest.Gather(t, reg, "gpuscope_gpu_container_sm_utilization_percent"), 1, "GPU 1's; none per instance")
	_, ok := gputest.Lookup(t, reg, "DCGM_FI_PROF_PCIE_RX_BYTES", wholeGPU("0"))
	require.True(t, ok)
	// The profiles' memory fits the GPU's.
	sum := 0.0
	for _, s := range gputest.Gather(t, reg, "DCGM_FI_DEV_FB_TOTAL") {
		if s.Labels["gpu"] == "0" {
			sum += s.Value
		}
	}
	require.LessOrEqual(t, sum, float64(defaultMemoryMiB))
}

// TestSimMIGProfileNames: the instances are named as DCGM names their
// profiles (gpu's TestDCGMProfileName).
func TestSimMIGProfileNames(t *testing.T) {
	c, reg := testCollector(t, simOptions(gputest.NewClock(), GPU{Scenario: ScenarioMIG}))
	sampleOnce(t, c)
	for _, sp := range simInstanceSpecs {
		want := map[uint32]string{3: "3g.40gb", 2: "2g.20gb"}[sp.slices]
		gputest.MustLookup(t, reg, "DCGM_FI_DEV_FB_TOTAL", instanceOf("0", strconv.Itoa(sp.id), want))
	}
}

func instanceOf(gpu, id, profile string) map[string]string {
	return map[string]string{"gpu": gpu, "GPU_I_ID": id, "GPU_I_PROFILE": profile}
}

func wholeGPU(i string) map[string]string {
	return map[string]string{"gpu": i, "GPU_I_ID": "", "GPU_I_PROFILE": ""}
}
