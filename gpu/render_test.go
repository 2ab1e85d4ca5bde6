package gpu

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
)

// TestRenderLeavesOutOnlyTheBadSeries: a series whose label value is not
// valid UTF-8 (here put in the sample by hand, past the collector's own
// escaping) is left out, counted and logged once; every other series of
// every GPU is published, in the registry and in the exposition.
func TestRenderLeavesOutOnlyTheBadSeries(t *testing.T) {
	m := newMockMachine(t, 2)
	var logs syncBuffer
	o := mockOptions(m, newFakeClock())
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, reg := testCollector(t, o)
	c.collectOnce(bg)
	good := c.snap.Load().s

	// The same sample with a container whose id is a raw invalid path.
	bad := func() *Sample {
		s := *good
		s.gpus = append([]GPUSample(nil), good.gpus...)
		s.gpus[0].containers = []Container{
			{id: "/user.slice/bad\xff.scope", processes: 1, memoryBytes: 1 << 30, smPercent: 50},
			{id: "/system.slice/ok.scope", processes: 1, memoryBytes: 2 << 30, smPercent: 20},
		}
		return &s
	}
	for range 2 {
		c.snap.Store(&snapshot{s: bad()})
		for _, gpu := range []string{"0", "1"} {
			for _, name := range []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS", "gpuscope_gpu_last_sample_timestamp_seconds"} {
				mustLookup(t, reg, name, map[string]string{"gpu": gpu})
			}
		}
		require.Equal(t, float64(2<<30), mustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"id": "/system.slice/ok.scope"}))
		require.Len(t, gather(t, reg, "gpuscope_gpu_container_memory_used_bytes"), 1, "the bad container's series are left out")
		require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
	}
	// Memory, processes and SM of the bad container, in each of two
	// samples: each sample is rendered once however often it is scraped.
	require.Equal(t, 6.0, mustLookup(t, reg, "gpuscope_gpu_collector_render_errors_total", nil))
	require.Equal(t, 1, strings.Count(logs.String(), "GPU series left out"), logs.String())
	require.Contains(t, logs.String(), "not valid UTF-8")

	// The exposition /metrics/gpu serves has every GPU too.
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).
		ServeHTTP(rec, httptest.NewRequest("GET", "/metrics/gpu", nil))
	require.Equal(t, 200, rec.Code)
	for _, want := range []string{`DCGM_FI_DEV_GPU_TEMP{`, `gpu="0"`, `gpu="1"`, `gpuscope_gpu_collector_render_errors_total 6`} {
		require.Contains(t, rec.Body.String(), want)
	}
}

// TestRenderSurvivesAPanic: a render that panics part-way keeps what it
// rendered and counts the failure, rather than leaving the sample empty
// for every later scrape.
func TestRenderSurvivesAPanic(t *testing.T) {
	m := newMockMachine(t, 2)
	c, reg := testCollector(t, mockOptions(m, newFakeClock()))
	c.collectOnce(bg)
	s := *c.snap.Load().s
	s.gpus = append([]GPUSample(nil), s.gpus...)
	s.gpus[1].info = nil // GPU 1's render dereferences it
	c.snap.Store(&snapshot{s: &s})
	mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "0"})
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_render_errors_total", nil))
}

// TestIdentityLabelsAreValid: strings the driver gives are label values
// too; a broken one is escaped, not fatal.
func TestIdentityLabelsAreValid(t *testing.T) {
	id := newIdentity(0, "GPU-\xff", "00000000:18:00.0", "NVIDIA \xfe", "550.54.15", "host\x80", true)
	require.Equal(t, []string{"0", `GPU-\xff`, "00000000:18:00.0", "nvidia0", `NVIDIA \xfe`, `host\x80`, "550.54.15"}, id.dcgmLabels)
}
