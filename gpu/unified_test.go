package gpu

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

// gb10MemInfo is the head of a DGX Spark's /proc/meminfo.
const gb10MemInfo = `MemTotal:       127600748 kB
MemFree:        110123456 kB
MemAvailable:   118566368 kB
Buffers:          123456 kB
Cached:          8765432 kB
`

// TestNVMLUnifiedMemory: DGX Spark's GB10 and other integrated GPUs answer
// NOT_SUPPORTED for framebuffer memory. Their DCGM_FI_DEV_FB_* hold the
// system memory instead (as nvtop and nvitop show it), marked by
// gpuscope_gpu_memory_unified 1, so that the memory bar,
// GPUMemoryAlmostFull and the leak and exhaustion rules have data.
func TestNVMLUnifiedMemory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v2      bool // the driver has the v2 call (it answers NOT_SUPPORTED too)
		meminfo string
		// want FB total, free, used (MiB); nil: no FB series, an error.
		want []float64
	}{
		{"v2 and v1 not supported", true, gb10MemInfo, []float64{124610, 115787, 8822}},
		{"only v1, not supported", false, gb10MemInfo, []float64{124610, 115787, 8822}},
		{"no MemAvailable", true, "MemTotal:       127600748 kB\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMockMachine(t, 2)
			d := m.devs[0]
			d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED }
			d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_NOT_SUPPORTED }
			if !tc.v2 {
				m.srv.LookupSymbolFunc = func(name string) error {
					if name == "nvmlDeviceGetMemoryInfo_v2" {
						return os.ErrNotExist
					}
					return nil
				}
			}
			proc := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(proc, "meminfo"), []byte(tc.meminfo), 0o644))
			var logs syncBuffer
			o := mockOptions(m, newFakeClock())
			o.ProcRoot = proc
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			c, reg := testCollector(t, o)
			c.collectOnce(bg)
			c.collectOnce(bg)
			gpu0 := map[string]string{"gpu": "0"}
			if tc.want == nil {
				_, ok := lookup(t, reg, "gpuscope_gpu_memory_unified", gpu0)
				require.False(t, ok, "no memory figures, no mark")
				_, ok = lookup(t, reg, "DCGM_FI_DEV_FB_TOTAL", gpu0)
				require.False(t, ok)
				require.Equal(t, 2.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "0", "field": "DCGM_FI_DEV_FB_USED"}))
				return
			}
			for i, name := range []string{"DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED"} {
				require.Equal(t, tc.want[i], mustLookup(t, reg, name, gpu0), name)
				require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": name}))
			}
			_, ok := lookup(t, reg, "DCGM_FI_DEV_FB_RESERVED", gpu0)
			require.False(t, ok)
			require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": "DCGM_FI_DEV_FB_RESERVED"}))
			require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_memory_unified", gpu0))
			require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_memory_unified", map[string]string{"gpu": "1"}), "a discrete GPU's figures are its own")
			require.NotEqual(t, tc.want[0], mustLookup(t, reg, "DCGM_FI_DEV_FB_TOTAL", map[string]string{"gpu": "1"}))
			// The DCGM series keep their names and labels.
			s := gather(t, reg, "DCGM_FI_DEV_FB_USED")[0]
			require.Contains(t, s.labels, "modelName")
			require.NotContains(t, s.labels, "unified")
			require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
			require.Equal(t, 1, strings.Count(logs.String(), "no framebuffer of its own"), logs.String())
		})
	}
}

// TestNVMLFramebufferErrorIsNotUnified: only NOT_SUPPORTED means a GPU
// without a framebuffer; another failure is an error, not the host's
// memory.
func TestNVMLFramebufferErrorIsNotUnified(t *testing.T) {
	m := newMockMachine(t, 1)
	m.devs[0].GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED }
	m.devs[0].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_UNKNOWN }
	proc := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(proc, "meminfo"), []byte(gb10MemInfo), 0o644))
	o := mockOptions(m, newFakeClock())
	o.ProcRoot = proc
	c, reg := testCollector(t, o)
	c.collectOnce(bg)
	require.Empty(t, gather(t, reg, "DCGM_FI_DEV_FB_TOTAL"))
	require.Empty(t, gather(t, reg, "gpuscope_gpu_memory_unified"))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "0", "field": "DCGM_FI_DEV_FB_USED"}))
}
