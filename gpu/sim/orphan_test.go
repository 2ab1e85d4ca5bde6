package sim

import (
	"testing"
	"time"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
	"github.com/stretchr/testify/require"
)

// TestSimHeldIdleAndOrphan: the held-idle scenario's job holds 10 GiB in
// its container at about 1 % SM share; the orphan scenario's 6 GiB belong
// to a process that is gone: no per-container series, and
// gpuscope_gpu_orphaned_memory_bytes from the second cycle.
func TestSimHeldIdleAndOrphan(t *testing.T) {
	clock := gputest.NewClock()
	o := simOptions(clock, GPU{Scenario: ScenarioHeldIdle}, GPU{Scenario: ScenarioOrphan})
	// A /proc where init is visible, as gpuscope's own: without it
	// (hidepid) no pid is taken for gone.
	o.ProcRoot = t.TempDir()
	writeProc(t, o.ProcRoot, 1, "0::/init.scope\n")
	c, reg := testCollector(t, o)
	gpu0, gpu1 := map[string]string{"gpu": "0"}, map[string]string{"gpu": "1"}
	for i := range 20 {
		sampleOnce(t, c)
		clock.Advance(15 * time.Second)

		held := gputest.Gather(t, reg, "gpuscope_gpu_container_memory_used_bytes")
		require.Len(t, held, 1, "the held-idle job only")
		require.Equal(t, "0", held[0].Labels["gpu"])
		require.Equal(t, "/gpuscope-sim/gpu0", held[0].Labels["id"])
		require.Equal(t, float64(10<<30), held[0].Value, "10 GiB")
		require.LessOrEqual(t, gputest.MustLookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", gpu0), 3.0)
		require.LessOrEqual(t, gputest.MustLookup(t, reg, "DCGM_FI_DEV_GPU_UTIL", gpu0), 3.0)
		require.Equal(t, 0.0, gputest.MustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", gpu0))

		require.Equal(t, 6144.0, gputest.MustLookup(t, reg, "DCGM_FI_DEV_FB_USED", gpu1))
		want := 0.0
		if i > 0 {
			want = 1
		}
		require.Equal(t, want, gputest.MustLookup(t, reg, "gpuscope_gpu_orphaned_processes", gpu1), "cycle %d", i)
		require.Equal(t, want*(6<<30), gputest.MustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", gpu1), "cycle %d", i)
	}
	require.Equal(t, 1.0, gputest.MustLookup(t, reg, "gpuscope_gpu_collector_errors_total",
		map[string]string{"gpu": "1", "field": "gpuscope_gpu_container_memory_used_bytes"}), "the first cycle's failed read")
}
