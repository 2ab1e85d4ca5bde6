package gpu

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/workload"
)

func TestNVMLConversions(t *testing.T) {
	m := newMockMachine(t, 2)
	clock := newFakeClock()
	c, reg := testCollector(t, mockOptions(m, clock))
	c.collectOnce(bg)

	gpu0 := map[string]string{"gpu": "0"}
	for _, tc := range []struct {
		name  string
		want  float64
		typ   dto.MetricType
		match map[string]string
	}{
		// 1024 MiB + 7 bytes: DCGM truncates to whole MiB.
		{"DCGM_FI_DEV_FB_USED", 1024, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_FB_FREE", 80004, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_FB_RESERVED", 530, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_FB_TOTAL", 81559, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_FB_USED", 1025, dto.MetricType_GAUGE, map[string]string{"gpu": "1"}},
		// 113611 mW is 113.611 W.
		{"DCGM_FI_DEV_POWER_USAGE", 113.611, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_POWER_USAGE", 114.611, dto.MetricType_GAUGE, map[string]string{"gpu": "1"}},
		// Energy stays in mJ and is a counter.
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 9876543210, dto.MetricType_COUNTER, gpu0},
		{"DCGM_FI_DEV_SM_CLOCK", 1980, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_MEM_CLOCK", 2619, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_GPU_TEMP", 40, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_MEMORY_TEMP", 45, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_GPU_UTIL", 50, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_MEM_COPY_UTIL", 20, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_DEC_UTIL", 1, dto.MetricType_GAUGE, map[string]string{"gpu": "1"}},
		{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 1, dto.MetricType_COUNTER, map[string]string{"gpu": "1"}},
		{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 2, dto.MetricType_COUNTER, gpu0},
		{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 1, dto.MetricType_COUNTER, gpu0},
		{"DCGM_FI_DEV_ROW_REMAP_FAILURE", 0, dto.MetricType_GAUGE, gpu0},
		{"DCGM_FI_DEV_VGPU_LICENSE_STATUS", 0, dto.MetricType_GAUGE, gpu0},
		// The first NVLink sample has no rate yet.
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 0, dto.MetricType_COUNTER, gpu0},
		{"DCGM_FI_DEV_XID_ERRORS", 0, dto.MetricType_GAUGE, map[string]string{"gpu": "0", "err_code": "0", "err_msg": "No Error"}},
		{"gpuscope_gpu_pcie_link_generation", 5, dto.MetricType_GAUGE, gpu0},
		{"gpuscope_gpu_pcie_link_width", 16, dto.MetricType_GAUGE, gpu0},
		// Gen 5 x16: 3938 MB/s per lane and direction.
		{"gpuscope_gpu_pcie_max_bandwidth_bytes_per_second", 63008e6, dto.MetricType_GAUGE, gpu0},
		// First cycle: no GPM interval yet, so NVML's KB/s throughput.
		{"gpuscope_gpu_pcie_tx_bytes_per_second", 1000 * 1024, dto.MetricType_GAUGE, gpu0},
		{"gpuscope_gpu_collector_up", 1, dto.MetricType_GAUGE, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var found []series
			for _, s := range gather(t, reg, tc.name) {
				if matches(s.labels, tc.match) {
					found = append(found, s)
				}
			}
			require.Len(t, found, 1)
			require.Equal(t, tc.typ, found[0].typ)
			require.InDelta(t, tc.want, found[0].value, 1e-9)
		})
	}

	// NVLINK_BANDWIDTH_TOTAL is DCGM's rate: Δ KiB / Δ s / 1000.
	m.mu.Lock()
	m.nvlinkKiB[0] += 500000
	m.mu.Unlock()
	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	require.InDelta(t, 50.0, mustLookup(t, reg, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu0), 1e-9)
	require.InDelta(t, 0.0, mustLookup(t, reg, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", map[string]string{"gpu": "1"}), 1e-9)
}

func matches(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestNVMLLabels(t *testing.T) {
	for _, tc := range []struct {
		hostnameLabel string
		want          []string
	}{
		{HostnameLabelDCGM, []string{"DCGM_FI_DRIVER_VERSION", "Hostname", "UUID", "device", "gpu", "modelName", "pci_bus_id"}},
		{HostnameLabelLower, []string{"DCGM_FI_DRIVER_VERSION", "UUID", "device", "gpu", "hostname", "modelName", "pci_bus_id"}},
		{HostnameLabelNone, []string{"DCGM_FI_DRIVER_VERSION", "UUID", "device", "gpu", "modelName", "pci_bus_id"}},
	} {
		t.Run(tc.hostnameLabel, func(t *testing.T) {
			m := newMockMachine(t, 1)
			o := mockOptions(m, newFakeClock())
			o.Config.HostnameLabel = tc.hostnameLabel
			c, reg := testCollector(t, o)
			c.collectOnce(bg)
			s := gather(t, reg, "DCGM_FI_DEV_GPU_TEMP")
			require.Len(t, s, 1)
			var names []string
			for k := range s[0].labels {
				names = append(names, k)
			}
			require.ElementsMatch(t, tc.want, names)
			require.Equal(t, "0", s[0].labels["gpu"])
			require.Equal(t, "nvidia0", s[0].labels["device"])
			require.Equal(t, "GPU-00000000-0000-4000-8000-000000000000", s[0].labels["UUID"])
			require.Equal(t, "00000000:18:00.0", s[0].labels["pci_bus_id"])
			require.Equal(t, "NVIDIA H100 80GB HBM3", s[0].labels["modelName"])
			require.Equal(t, "550.54.15", s[0].labels["DCGM_FI_DRIVER_VERSION"])
			if tc.hostnameLabel != HostnameLabelNone {
				require.Equal(t, "gpu-node-1", s[0].labels[tc.hostnameLabel])
			}
		})
	}
}

func TestPCIBusIDFallsBackToNumbers(t *testing.T) {
	// The mock server leaves BusId empty, as some drivers do for vGPUs.
	require.Equal(t, "00000001:64:02.0", pciBusID(nvml.PciInfo{Domain: 1, Bus: 0x64, Device: 2}))
	p := nvml.PciInfo{}
	for i, c := range "00000000:AB:00.0" {
		p.BusId[i] = int8(c)
	}
	require.Equal(t, "00000000:AB:00.0", pciBusID(p))
}

func TestNVMLFieldValueTypes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fill   func(*nvml.FieldValue)
		asUint bool
		want   float64
	}{
		{"double", func(fv *nvml.FieldValue) { putFieldDouble(fv, 1.5) }, false, 1.5},
		{"uint", func(fv *nvml.FieldValue) { putFieldValue(fv, nvml.VALUE_TYPE_UNSIGNED_INT, 7) }, false, 7},
		{"ulonglong", func(fv *nvml.FieldValue) { putFieldValue(fv, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, 1<<40) }, false, 1 << 40},
		{"signed", func(fv *nvml.FieldValue) { putFieldValue(fv, nvml.VALUE_TYPE_SIGNED_LONG_LONG, ^uint64(0)) }, false, -1},
		// DCGM reads memory temperature as an unsigned int whatever the type says.
		{"memory temp as uint", func(fv *nvml.FieldValue) { putFieldValue(fv, nvml.VALUE_TYPE_DOUBLE, 88) }, true, 88},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fv nvml.FieldValue
			tc.fill(&fv)
			v, ok := fieldValueFloat(&fv, tc.asUint)
			require.True(t, ok)
			require.Equal(t, tc.want, v)
		})
	}
}

// TestNVMLHealthFields: the fan speed, the enforced power limit, the
// recovery action and the pending row remap, read as DCGM reads them; a
// GPU without a fan, or a driver that does not know the recovery action's
// field id, loses that series only, and is no error.
func TestNVMLHealthFields(t *testing.T) {
	type want struct {
		value     float64
		published bool
	}
	for _, tc := range []struct {
		name  string
		setup func(m *mockMachine)
		want  map[string][2]want // by field, GPU 0 and GPU 1
		// errField is the one field whose read counts as an error, "" for none.
		errField string
	}{
		{
			name: "current driver",
			want: map[string][2]want{
				"DCGM_FI_DEV_FAN_SPEED":               {{0, false}, {31, true}},   // GPU 0 is an SXM module: no fan
				"DCGM_FI_DEV_ENFORCED_POWER_LIMIT":    {{700, true}, {299, true}}, // 299999 mW: whole watts, as DCGM
				"DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": {{0, true}, {1, true}},
				"DCGM_FI_DEV_ROW_REMAP_PENDING":       {{0, true}, {1, true}},
			},
		},
		{
			name: "driver older than the recovery action",
			setup: func(m *mockMachine) {
				for _, d := range m.devs {
					next := d.GetFieldValuesFunc
					d.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
						ret := next(values)
						for k := range values {
							if values[k].FieldId == nvml.FI_DEV_GET_GPU_RECOVERY_ACTION {
								values[k] = nvml.FieldValue{FieldId: values[k].FieldId, NvmlReturn: uint32(nvml.ERROR_INVALID_ARGUMENT)}
							}
						}
						return ret
					}
				}
			},
			want: map[string][2]want{
				"DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": {{0, false}, {0, false}},
				"DCGM_FI_DEV_ENFORCED_POWER_LIMIT":    {{700, true}, {299, true}},
				"DCGM_FI_DEV_MEMORY_TEMP":             {{45, true}, {0, false}}, // the batched request is untouched
			},
		},
		{
			name: "fan read fails",
			setup: func(m *mockMachine) {
				m.devs[1].GetFanSpeedFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
			},
			want: map[string][2]want{
				"DCGM_FI_DEV_FAN_SPEED":            {{0, false}, {0, false}},
				"DCGM_FI_DEV_ENFORCED_POWER_LIMIT": {{700, true}, {299, true}},
			},
			errField: "DCGM_FI_DEV_FAN_SPEED",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMockMachine(t, 2)
			if tc.setup != nil {
				tc.setup(m)
			}
			c, reg := testCollector(t, mockOptions(m, newFakeClock()))
			c.collectOnce(bg)
			for name, ws := range tc.want {
				for i, w := range ws {
					gpu := map[string]string{"gpu": fmt.Sprint(i)}
					v, ok := lookup(t, reg, name, gpu)
					require.Equal(t, w.published, ok, "%s on GPU %d published", name, i)
					require.Equal(t, w.value, v, "%s on GPU %d", name, i)
					if !w.published && (tc.errField != name || i != 1) {
						require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": fmt.Sprint(i), "field": name}), "%s on GPU %d", name, i)
					}
				}
			}
			errs := gather(t, reg, "gpuscope_gpu_collector_errors_total")
			if tc.errField == "" {
				require.Empty(t, errs)
			} else {
				require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "1", "field": tc.errField}))
			}
			require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
		})
	}
}

func TestNVMLUnsupportedFieldsOmitted(t *testing.T) {
	m := newMockMachine(t, 2)
	m.devs[1].GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	m.devs[1].GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED }
	// Drivers before 510 lack the v2 memory call: used then includes reserved,
	// and FB_RESERVED does not exist.
	m.devs[1].GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_FUNCTION_NOT_FOUND }
	m.devs[0].GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 255, nvml.SUCCESS }
	c, reg := testCollector(t, mockOptions(m, newFakeClock()))
	c.collectOnce(bg)

	gpu1 := map[string]string{"gpu": "1"}
	for _, name := range []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_FB_RESERVED"} {
		_, ok := lookup(t, reg, name, gpu1)
		require.False(t, ok, "%s must be omitted on GPU 1", name)
		require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "1", "field": name}))
	}
	// v1 memory from the mock server: 80 GiB total, nothing used.
	require.Equal(t, 81920.0, mustLookup(t, reg, "DCGM_FI_DEV_FB_TOTAL", gpu1))
	// Above 200 °C DCGM stores nothing; before any valid reading there is
	// no value (TestNVMLGPUTempAbove200KeepsTheLast has the rest).
	_, ok := lookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "0"})
	require.False(t, ok)
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": "DCGM_FI_DEV_FB_USED"}))
	// Unsupported is not an error.
	require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
}

func TestNVMLErrorOnOneGPUIsIsolated(t *testing.T) {
	for _, tc := range []struct {
		name string
		// break makes GPU 1 fail; wantField is the errors_total field label.
		breakGPU  func(m *mockMachine)
		wantField string
		// stillThere is a GPU 1 metric that must survive the failure, "" if none.
		stillThere string
	}{
		{
			name: "one field fails",
			breakGPU: func(m *mockMachine) {
				m.devs[1].GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
			},
			wantField:  "DCGM_FI_DEV_POWER_USAGE",
			stillThere: "DCGM_FI_DEV_GPU_TEMP",
		},
		{
			name: "GPU fell off the bus",
			breakGPU: func(m *mockMachine) {
				m.devs[1].GetClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
			},
			wantField: "device",
		},
		{
			name: "driver binding panics",
			breakGPU: func(m *mockMachine) {
				m.devs[1].GetTemperatureFunc = nil // the mock panics on a nil func
			},
			wantField:  "device",
			stillThere: "DCGM_FI_DEV_SM_CLOCK",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMockMachine(t, 2)
			tc.breakGPU(m)
			var logs bytes.Buffer
			o := mockOptions(m, newFakeClock())
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			c, reg := testCollector(t, o)
			c.collectOnce(bg)
			c.collectOnce(bg)

			require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
			require.Equal(t, 2.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "1", "field": tc.wantField}))
			require.Len(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"), 1, "only the failing read is counted")
			// GPU 0 is complete.
			for _, name := range []string{"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS"} {
				mustLookup(t, reg, name, map[string]string{"gpu": "0"})
			}
			_, ok := lookup(t, reg, tc.wantField, map[string]string{"gpu": "1"})
			require.False(t, ok)
			if tc.stillThere != "" {
				mustLookup(t, reg, tc.stillThere, map[string]string{"gpu": "1"})
			}
			// The reason is logged once, not at every cycle.
			require.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("GPU read failed")), logs.String())
		})
	}
}

// TestNVMLHungCallDoesNotBlockCollect: one GPU's NVML call hangs. The
// other GPU keeps being read every cycle; the hung GPU is served from its
// last sample for two intervals, then without its series (its last-sample
// time stops), and counted each cycle; no second read piles up on it;
// scrapes answer at once; and shutdown does not wait for the call.
func TestNVMLHungCallDoesNotBlockCollect(t *testing.T) {
	m := newMockMachine(t, 2)
	var hang atomic.Bool
	release := make(chan struct{})
	var releaseCh atomic.Pointer[chan struct{}]
	releaseCh.Store(&release)
	var calls atomic.Int32
	m.devs[0].GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
		if hang.Load() {
			calls.Add(1)
			<-*releaseCh.Load()
		}
		return 40, nvml.SUCCESS
	}
	cfg := DefaultConfig()
	cfg.Backend = BackendNVML
	const interval = 50 * time.Millisecond
	c, err := New(Options{Config: cfg, NVML: m.srv, Interval: interval, Hostname: "h", ProcRoot: t.TempDir(), KernelLog: "-"})
	require.NoError(t, err)
	c.backend.(*nvmlBackend).eventWait = 10 * time.Millisecond
	reg := newRegistry(t, c)

	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	released := false
	defer func() {
		if !released {
			close(release)
		}
		// The hung read's goroutine ends once the call returns.
		require.Eventually(t, func() bool { return !c.backend.(*nvmlBackend).busyAny() }, 5*time.Second, time.Millisecond)
	}()

	require.Eventually(t, func() bool {
		v, ok := lookup(t, reg, "gpuscope_gpu_collector_cycles_total", nil)
		return ok && v >= 2
	}, 5*time.Second, 5*time.Millisecond)
	hang.Store(true)
	gpu0, gpu1 := map[string]string{"gpu": "0"}, map[string]string{"gpu": "1"}
	require.Eventually(t, func() bool {
		v, _ := lookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "0", "field": "timeout"})
		return v >= 1
	}, 5*time.Second, time.Millisecond)

	// Served from the last sample while it is at most two intervals old,
	// then absent; GPU 1 is read meanwhile and the collector is up.
	require.Eventually(t, func() bool {
		_, ok := lookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu0)
		return !ok
	}, 5*time.Second, time.Millisecond)
	start := time.Now()
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
	require.Equal(t, 41.0, mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu1))
	mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", gpu0) // XIDs come from the event loop
	require.Less(t, time.Since(start), time.Second, "scrapes answer at once")
	last0 := mustLookup(t, reg, "gpuscope_gpu_last_sample_timestamp_seconds", gpu0)
	last1 := mustLookup(t, reg, "gpuscope_gpu_last_sample_timestamp_seconds", gpu1)
	require.Eventually(t, func() bool {
		return mustLookup(t, reg, "gpuscope_gpu_last_sample_timestamp_seconds", gpu1) > last1
	}, 5*time.Second, time.Millisecond, "GPU 1 is still read")
	require.Equal(t, last0, mustLookup(t, reg, "gpuscope_gpu_last_sample_timestamp_seconds", gpu0), "GPU 0's last sample time stops")
	require.Equal(t, int32(1), calls.Load(), "no second read piles up on the hung call")

	// The call comes back: GPU 0 is read again.
	hang.Store(false)
	close(release)
	released = true
	require.Eventually(t, func() bool {
		_, ok := lookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu0)
		return ok
	}, 5*time.Second, time.Millisecond)

	// Hung again, then shut down: Run returns without waiting for it.
	release2 := make(chan struct{})
	releaseCh.Store(&release2)
	hang.Store(true)
	require.Eventually(t, func() bool { return c.backend.(*nvmlBackend).busyAny() }, 5*time.Second, time.Millisecond)
	stopAt := time.Now()
	cancel()
	require.NoError(t, <-done)
	require.Less(t, time.Since(stopAt), 2*time.Second, "SIGTERM completes within 2 s")
	close(release2)
}

// TestNVMLStaleGPU: a GPU whose read is still hung is served from its
// last complete sample while that is at most two intervals old, then
// without its series; it is counted every cycle and its last-sample time
// stays.
func TestNVMLStaleGPU(t *testing.T) {
	m := newMockMachine(t, 2)
	clock := newFakeClock()
	c, reg := testCollector(t, mockOptions(m, clock)) // 10 s interval
	c.collectOnce(bg)
	t0 := float64(clock.Now().Unix())
	g := c.backend.(*nvmlBackend).gpus[0]
	g.busy.Store(true) // as while a read hangs in the driver
	defer g.busy.Store(false)
	gpu0 := map[string]string{"gpu": "0"}
	for i, want := range []bool{true, true, false, false} {
		clock.Advance(10 * time.Second)
		c.collectOnce(bg)
		_, ok := lookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu0)
		require.Equal(t, want, ok, "%d s after the last sample", 10*(i+1))
		require.Equal(t, float64(i+1), mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "0", "field": "timeout"}))
		require.Equal(t, t0, mustLookup(t, reg, "gpuscope_gpu_last_sample_timestamp_seconds", gpu0))
		require.Equal(t, float64(clock.Now().Unix()), mustLookup(t, reg, "gpuscope_gpu_last_sample_timestamp_seconds", map[string]string{"gpu": "1"}))
		mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", gpu0)
		require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
	}
}

// TestNVMLHungEventWaitDoesNotBlockShutdown: an NVML event wait that
// ignores its timeout (a driver stuck on XID 119 can) must not hold up
// shutdown beyond 2 s.
func TestNVMLHungEventWaitDoesNotBlockShutdown(t *testing.T) {
	m := newMockMachine(t, 1)
	release := make(chan struct{})
	waiting := make(chan struct{}, 1)
	m.srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				select {
				case waiting <- struct{}{}:
				default:
				}
				<-release
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	var shutdowns atomic.Int32
	m.srv.ShutdownFunc = func() nvml.Return { shutdowns.Add(1); return nvml.SUCCESS }
	cfg := DefaultConfig()
	cfg.Backend = BackendNVML
	c, err := New(Options{Config: cfg, NVML: m.srv, Interval: 20 * time.Millisecond, Hostname: "h", ProcRoot: t.TempDir(), KernelLog: "-"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-waiting
	start := time.Now()
	cancel()
	require.NoError(t, <-done)
	require.Less(t, time.Since(start), 2*time.Second)
	require.Zero(t, shutdowns.Load(), "NVML is not shut down under a hung call")
	close(release)
	time.Sleep(10 * time.Millisecond) // let the left-behind loop see its context and end
}

// TestNVMLGPUIdentifiedLater: a GPU that fails identification at start
// and a GPU that appears later are read from the next cycle they answer
// in; identification and XID registration that failed are retried every
// retryEvery cycles (a sick GPU's calls can each block for long), and
// the failure is counted every cycle meanwhile.
func TestNVMLGPUIdentifiedLater(t *testing.T) {
	m := newMockMachine(t, 3)
	var uuidFails, regFails atomic.Bool
	var uuidCalls, regCalls atomic.Int32
	uuidFails.Store(true)
	regFails.Store(true)
	uuid := m.devs[1].GetUUIDFunc
	m.devs[1].GetUUIDFunc = func() (string, nvml.Return) {
		uuidCalls.Add(1)
		if uuidFails.Load() {
			return "", nvml.ERROR_UNKNOWN
		}
		return uuid()
	}
	m.devs[0].RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return {
		regCalls.Add(1)
		if regFails.Load() {
			return nvml.ERROR_UNKNOWN
		}
		return nvml.SUCCESS
	}
	var count atomic.Int32
	count.Store(2) // GPU 2 is not there yet (hot-plug, or back after a reset)
	m.srv.DeviceGetCountFunc = func() (int, nvml.Return) { return int(count.Load()), nvml.SUCCESS }
	var logs syncBuffer
	o := mockOptions(m, newFakeClock())
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, reg := testCollector(t, o)
	c.collectOnce(bg)
	c.collectOnce(bg)
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_GPU_TEMP"), 1)
	require.Equal(t, 2.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "1", "field": "device"}))
	require.Equal(t, 2.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "0", "field": "DCGM_FI_DEV_XID_ERRORS"}),
		"a failed registration is an error, not unsupported")
	_, ok := lookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "0"})
	require.False(t, ok)
	require.Equal(t, int32(1), uuidCalls.Load(), "identification is not retried at the next cycle")
	require.Equal(t, int32(1), regCalls.Load(), "nor registration")

	uuidFails.Store(false)
	regFails.Store(false)
	count.Store(3)
	c.collectOnce(bg) // cycle 3: the new GPU at once
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_GPU_TEMP"), 2)
	mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "2"})
	c.collectOnce(bg) // cycle 4
	require.Equal(t, int32(1), uuidCalls.Load())
	c.collectOnce(bg) // cycle 5: retryEvery cycles after the failures
	require.Equal(t, int32(2), uuidCalls.Load())
	require.Equal(t, int32(2), regCalls.Load())
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_GPU_TEMP"), 3)
	for _, gpu := range []string{"0", "1", "2"} {
		mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": gpu})
	}
	// XIDs of the GPUs identified later are delivered.
	m.events <- nvml.EventData{Device: m.devs[2], EventType: nvml.EventTypeXidCriticalError, EventData: 48}
	require.Eventually(t, func() bool {
		c.collectOnce(bg)
		v, ok := lookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "2", "err_code": "48"})
		return ok && v == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, strings.Count(logs.String(), "Cannot register for XID events"), logs.String())
}

func TestNVMLXIDEvents(t *testing.T) {
	m := newMockMachine(t, 2)
	c, reg := testCollector(t, mockOptions(m, newFakeClock()))
	c.collectOnce(bg)
	for _, gpu := range []string{"0", "1"} {
		require.Equal(t, 0.0, mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": gpu, "err_code": "0", "err_msg": "No Error"}))
	}
	require.Empty(t, gather(t, reg, "gpuscope_gpu_xid_errors_total"))

	m.events <- nvml.EventData{Device: m.devs[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	m.events <- nvml.EventData{Device: m.devs[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	// An event of another type is ignored.
	m.events <- nvml.EventData{Device: m.devs[0], EventType: nvml.EventTypeSingleBitEccError, EventData: 13}
	require.Eventually(t, func() bool {
		c.collectOnce(bg)
		v, ok := lookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "1"})
		return ok && v == 2
	}, 5*time.Second, 10*time.Millisecond)

	xid := gather(t, reg, "DCGM_FI_DEV_XID_ERRORS")
	require.Len(t, xid, 2)
	for _, s := range xid {
		switch s.labels["gpu"] {
		case "0":
			require.Equal(t, 0.0, s.value)
		case "1":
			require.Equal(t, 79.0, s.value)
			require.Equal(t, "79", s.labels["err_code"])
			require.Equal(t, "GPU has fallen off the bus", s.labels["err_msg"])
		}
	}
	require.Equal(t, "Unknown Error", xidMessage(4000))
	require.Len(t, xidMessages, 173)
}

func TestNVMLXIDUnsupported(t *testing.T) {
	m := newMockMachine(t, 2)
	m.devs[1].RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	c, reg := testCollector(t, mockOptions(m, newFakeClock()))
	c.collectOnce(bg)
	mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "0"})
	_, ok := lookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "1"})
	require.False(t, ok)
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "1", "field": "DCGM_FI_DEV_XID_ERRORS"}))
}

func TestNVMLGPM(t *testing.T) {
	m := newMockMachine(t, 2)
	m.gpm[1] = false // say, an A100
	clock := newFakeClock()
	c, reg := testCollector(t, mockOptions(m, clock))
	c.collectOnce(bg)
	// GPM needs two samples one interval apart.
	require.Empty(t, gather(t, reg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"))

	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	gpu0 := map[string]string{"gpu": "0"}
	for _, tc := range []struct {
		name string
		want float64
	}{
		{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.42},
		{"DCGM_FI_PROF_SM_ACTIVE", 0.40},
		{"DCGM_FI_PROF_SM_OCCUPANCY", 0.25},
		{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.125},
		{"DCGM_FI_PROF_DRAM_ACTIVE", 0.30},
		{"DCGM_FI_PROF_PCIE_TX_BYTES", 100 * 1048576},
		{"DCGM_FI_PROF_PCIE_RX_BYTES", 200 * 1048576},
		{"DCGM_FI_PROF_NVLINK_TX_BYTES", 1000 * 1048576},
		{"DCGM_FI_PROF_NVLINK_RX_BYTES", 2000 * 1048576},
		// With GPM the PCIe rate is GPM's interval average.
		{"gpuscope_gpu_pcie_tx_bytes_per_second", 100 * 1048576},
		{"gpuscope_gpu_pcie_rx_bytes_per_second", 200 * 1048576},
	} {
		require.InDelta(t, tc.want, mustLookup(t, reg, tc.name, gpu0), 1e-9, tc.name)
	}
	gpu1 := map[string]string{"gpu": "1"}
	for _, name := range []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES"} {
		_, ok := lookup(t, reg, name, gpu1)
		require.False(t, ok, "%s is never faked on a GPU without GPM", name)
		require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "1", "field": name}))
	}
	// Without GPM the PCIe rate comes from NVML's throughput counter.
	require.Equal(t, 1000.0*1024, mustLookup(t, reg, "gpuscope_gpu_pcie_tx_bytes_per_second", gpu1))

	// Profiling can be switched off.
	o := mockOptions(newMockMachine(t, 1), clock)
	o.Config.Families.Profiling = false
	c2, reg2 := testCollector(t, o)
	c2.collectOnce(bg)
	c2.collectOnce(bg)
	require.Empty(t, gather(t, reg2, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
}

func TestNVMLOptionalFamilies(t *testing.T) {
	m := newMockMachine(t, 1)
	o := mockOptions(m, newFakeClock())
	c, reg := testCollector(t, o)
	c.collectOnce(bg)
	require.Empty(t, gather(t, reg, "DCGM_FI_DEV_THERMAL_VIOLATION"), "violations are off by default")
	// What the built-in hardware alerts read is on by default.
	for _, name := range []string{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "gpuscope_gpu_clock_event_active"} {
		require.NotEmpty(t, gather(t, reg, name), "%s is on by default", name)
	}

	o.Config.Families = Families{Violations: true}
	c, reg = testCollector(t, o)
	c.collectOnce(bg)
	for _, name := range []string{"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "gpuscope_gpu_clock_event_active"} {
		require.Empty(t, gather(t, reg, name), "%s is off when its family is", name)
	}

	o.Config.Families = Families{ECC: true, Violations: true, RetiredPages: true, NVLinkErrors: true, ClockEvents: true}
	c, reg = testCollector(t, o)
	c.collectOnce(bg)
	gpu0 := map[string]string{"gpu": "0"}
	require.Equal(t, 3.0, mustLookup(t, reg, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu0))
	require.Equal(t, 1.5e9, mustLookup(t, reg, "DCGM_FI_DEV_THERMAL_VIOLATION", gpu0))
	require.Equal(t, 1.0, mustLookup(t, reg, "DCGM_FI_DEV_RETIRED_SBE", gpu0))
	require.Equal(t, 0.0, mustLookup(t, reg, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", gpu0))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_clock_event_active", map[string]string{"gpu": "0", "reason": "gpu_idle"}))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_clock_event_active", map[string]string{"gpu": "0", "reason": "sw_thermal"}))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_clock_event_active", map[string]string{"gpu": "0", "reason": "hw_thermal"}))
	require.Empty(t, gather(t, reg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
	require.Empty(t, gather(t, reg, "gpuscope_gpu_container_memory_used_bytes"))
}

func TestNVMLProcessesToContainers(t *testing.T) {
	m := newMockMachine(t, 2)
	proc := t.TempDir()
	const dockerV1 = "12:pids:/system.slice/docker-abc.scope\n4:cpu,cpuacct:/system.slice/docker-abc.scope\n1:name=systemd:/system.slice/docker-abc.scope\n0::/system.slice/docker-abc.scope\n"
	writeProc(t, proc, 100, dockerV1)
	writeProc(t, proc, 101, dockerV1)
	writeProc(t, proc, 102, "0::/user.slice/user-1000.slice/session-2.scope\n")
	writeProc(t, proc, 104, "0::/system.slice/docker-mps.scope\n")
	writeProc(t, proc, 200, "0::/\n")
	writeProc(t, proc, 201, "0::/system.slice/docker-known.scope\n")
	// pid 556 ended long ago but is in the driver's utilisation history;
	// its pid now belongs to a process in another container.
	writeProc(t, proc, 556, "0::/system.slice/docker-other.scope\n")
	clock := newFakeClock()
	now := uint64(clock.Now().UnixMicro())
	// pid 103 has exited: no /proc entry.
	m.procs[0] = []nvml.ProcessInfo{
		{Pid: 100, UsedGpuMemory: 10 << 30},
		{Pid: 101, UsedGpuMemory: 2 << 30},
		{Pid: 102, UsedGpuMemory: 1 << 30},
		{Pid: 103, UsedGpuMemory: 1 << 30},
	}
	// An MPS client, and pid 101 again (listed twice counts once).
	m.mps[0] = []nvml.ProcessInfo{{Pid: 104, UsedGpuMemory: 3 << 30}, {Pid: 101, UsedGpuMemory: 2 << 30}}
	// Two samples of pid 100, 7 s apart, show the driver keeps a sample
	// per period; the gap spans idle periods, so the period is taken as
	// the longest the driver uses, 1 s. Each sample then counts for 1 s
	// of the 10 s interval (TestNVMLContainerSMShare has the rest).
	m.utils[0] = []nvml.ProcessUtilizationSample{
		{Pid: 100, TimeStamp: now - 9e6, SmUtil: 40},
		{Pid: 100, TimeStamp: now - 2e6, SmUtil: 60}, // 10 over the interval
		{Pid: 101, TimeStamp: now - 5e6, SmUtil: 20}, // 2
		{Pid: 102, TimeStamp: now - 3e6, SmUtil: 5},
		{Pid: 102, TimeStamp: now - 60e6, SmUtil: 99}, // before the first interval: not read
		{Pid: 556, TimeStamp: now - 1e6, SmUtil: 80},  // not running: not counted
	}
	m.procs[1] = []nvml.ProcessInfo{{Pid: 200, UsedGpuMemory: ^uint64(0)}, {Pid: 201, UsedGpuMemory: 5 << 20}} // 200: not available
	o := mockOptions(m, clock)
	o.ProcRoot = proc
	o.ContainerLookup = func(id string) (workload.Metadata, bool) {
		if id == "/system.slice/docker-abc.scope" {
			return workload.Metadata{Name: "trainer", Image: "pytorch:24.01"}, true
		}
		return workload.Metadata{}, false
	}
	c, reg := testCollector(t, o)
	c.collectOnce(bg)

	docker := map[string]string{"gpu": "0", "UUID": "GPU-00000000-0000-4000-8000-000000000000", "id": "/system.slice/docker-abc.scope", "name": "trainer", "image": "pytorch:24.01"}
	session := map[string]string{"gpu": "0", "id": "/user.slice/user-1000.slice/session-2.scope", "name": "", "image": ""}
	mps := map[string]string{"gpu": "0", "id": "/system.slice/docker-mps.scope"}
	require.Equal(t, float64(12<<30), mustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", docker))
	require.InDelta(t, 12.0, mustLookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", docker), 1e-9)
	require.Equal(t, 2.0, mustLookup(t, reg, "gpuscope_gpu_container_processes", docker))
	require.Equal(t, float64(1<<30), mustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", session))
	require.InDelta(t, 0.5, mustLookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", session), 1e-9, "the driver's older history is not read")
	require.Equal(t, float64(3<<30), mustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", mps))
	// The ended process's reused pid is not attributed.
	_, ok := lookup(t, reg, "gpuscope_gpu_container_processes", map[string]string{"id": "/system.slice/docker-other.scope"})
	require.False(t, ok)
	// Memory the driver withholds is absent, not 0; the process is counted.
	_, ok = lookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": "1", "id": "/"})
	require.False(t, ok)
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_container_processes", map[string]string{"gpu": "1", "id": "/"}))
	require.Equal(t, float64(5<<20), mustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": "1", "id": "/system.slice/docker-known.scope"}))
	require.Len(t, gather(t, reg, "gpuscope_gpu_container_memory_used_bytes"), 4)
	require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))

	// The first call asked for one interval of history; the next asks
	// only for samples newer than the last one seen.
	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	m.mu.Lock()
	require.Equal(t, []uint64{now - 10e6, now - 1e6}, m.lastSeen[0])
	m.mu.Unlock()
	// Nothing ran since: utilisation 0, memory still held.
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", docker))
	require.Equal(t, float64(12<<30), mustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", docker))
}

// TestNVMLNoPermission: running as a non-root user, the driver answers
// NO_PERMISSION for profiling (NVreg_RestrictProfilingToAdminUsers) and
// other users' process lists: unsupported, logged once, not an error.
// A process-utilisation count of 0 (go-nvml: INSUFFICIENT_SIZE with no
// samples) is an idle GPU, not an error.
func TestNVMLNoPermission(t *testing.T) {
	m := newMockMachine(t, 2)
	for _, d := range m.devs {
		d.GpmSampleGetFunc = func(nvml.GpmSample) nvml.Return { return nvml.ERROR_NO_PERMISSION }
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
	}
	m.devs[1].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	m.devs[1].GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return []nvml.ProcessUtilizationSample{}, nvml.ERROR_INSUFFICIENT_SIZE
	}
	var logs syncBuffer
	clock := newFakeClock()
	o := mockOptions(m, clock)
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, reg := testCollector(t, o)
	for range 3 {
		c.collectOnce(bg)
		clock.Advance(10 * time.Second)
	}
	require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": "gpuscope_gpu_container_memory_used_bytes"}))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "1", "field": "gpuscope_gpu_container_sm_utilization_percent"}))
	require.Empty(t, gather(t, reg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
	mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "0"})
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "field=DCGM_FI_PROF_GR_ENGINE_ACTIVE"), out)
	require.Equal(t, 1, strings.Count(out, "field=gpuscope_gpu_container_memory_used_bytes"), out)
	require.NotContains(t, out, "level=WARN")
}

// TestNVMLGPMNaN: DCGM leaves a NaN from GPM blank; so does gpuscope.
func TestNVMLGPMNaN(t *testing.T) {
	m := newMockMachine(t, 1)
	get := m.srv.GpmMetricsGetFunc
	m.srv.GpmMetricsGetFunc = func(req *nvml.GpmMetricsGetType) nvml.Return {
		ret := get(req)
		req.Metrics[0].Value = math.NaN()
		req.Metrics[1].Value = math.Inf(1)
		return ret
	}
	clock := newFakeClock()
	c, reg := testCollector(t, mockOptions(m, clock))
	c.collectOnce(bg)
	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	require.Empty(t, gather(t, reg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
	require.Empty(t, gather(t, reg, "DCGM_FI_PROF_SM_ACTIVE"))
	require.InDelta(t, 0.25, mustLookup(t, reg, "DCGM_FI_PROF_SM_OCCUPANCY", nil), 1e-9)
	require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
}

func TestNVMLOpen(t *testing.T) {
	t.Run("driver not loaded, then loaded", func(t *testing.T) {
		m := newMockMachine(t, 1)
		var loaded atomic.Bool
		var inits atomic.Int32
		m.srv.InitFunc = func() nvml.Return {
			inits.Add(1)
			if loaded.Load() {
				return nvml.SUCCESS
			}
			return nvml.ERROR_DRIVER_NOT_LOADED
		}
		var logs syncBuffer
		clock := newFakeClock()
		o := mockOptions(m, clock) // 10 s interval
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c, reg := testCollector(t, o)
		// Cycles every 10 s; opens are retried after 10, 20, 40 s.
		var tried []int
		for i := range 8 {
			before := inits.Load()
			c.collectOnce(bg)
			if inits.Load() > before {
				tried = append(tried, i)
			}
			clock.Advance(10 * time.Second)
		}
		require.Equal(t, []int{0, 1, 3, 7}, tried, "open retried with backoff")
		require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
		require.Empty(t, gather(t, reg, "DCGM_FI_DEV_GPU_TEMP"))
		require.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("GPU collector down")), logs.String())

		loaded.Store(true)
		for range 8 { // within the next backoff step (80 s)
			c.collectOnce(bg)
			clock.Advance(10 * time.Second)
		}
		require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
		mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "0"})
	})
	t.Run("a GPU lost before start", func(t *testing.T) {
		m := newMockMachine(t, 2)
		m.devs[1].GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
		c, reg := testCollector(t, mockOptions(m, newFakeClock()))
		c.collectOnce(bg)
		c.collectOnce(bg)
		require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
		require.Len(t, gather(t, reg, "DCGM_FI_DEV_GPU_TEMP"), 1)
		require.Equal(t, 2.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "1", "field": "device"}))
	})
	t.Run("dgxh100 as shipped", func(t *testing.T) {
		// go-nvml's DGX H100 mock with only the telemetry the test sets:
		// every GPU is there with its identity.
		srv := dgxh100.New()
		cfg := DefaultConfig()
		cfg.Backend = BackendNVML
		cfg.Families = Families{}
		srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		c, reg := testCollector(t, Options{Config: cfg, NVML: srv})
		c.collectOnce(bg)
		// Telemetry calls the mock has no function for fail per GPU; as
		// no GPU could be read at all, the collector is down.
		require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
		require.Equal(t, "nvml", gather(t, reg, "gpuscope_gpu_collector_backend_info")[0].labels["backend"])
		errs := gather(t, reg, "gpuscope_gpu_collector_errors_total")
		require.Len(t, errs, 8)
		for _, e := range errs {
			require.Equal(t, "device", e.labels["field"])
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a logger written from Run's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

func (s *syncBuffer) String() string { return string(s.Bytes()) }

// TestNVMLOlderDriverSymbols: a driver library that lacks a function
// gpuscope can use (older than the release that added it) must never have
// it called (go-nvml would abort the process in the dynamic linker); its
// fields are unsupported and everything else is still published.
func TestNVMLOlderDriverSymbols(t *testing.T) {
	gpmFieldNames := []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"}
	for _, tc := range []struct {
		symbol string
		// guard replaces the device functions the symbol backs with ones
		// that record a call.
		guard       func(d *server.Device, called *atomic.Bool)
		unsupported []string
		// present are fields that still have a value (the fallback).
		present []string
	}{
		{"nvmlDeviceGetMemoryInfo_v2", func(d *server.Device, c *atomic.Bool) {
			d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { c.Store(true); return nvml.Memory_v2{}, nvml.SUCCESS }
		}, []string{"DCGM_FI_DEV_FB_RESERVED"}, []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_TOTAL"}},
		{"nvmlGpmQueryDeviceSupport", func(d *server.Device, c *atomic.Bool) {
			d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { c.Store(true); return nvml.GpmSupport{}, nvml.SUCCESS }
		}, gpmFieldNames, nil},
		{"nvmlGpmMetricsGet", func(d *server.Device, c *atomic.Bool) {
			d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { c.Store(true); return nvml.GpmSupport{}, nvml.SUCCESS }
			d.GpmSampleGetFunc = func(nvml.GpmSample) nvml.Return { c.Store(true); return nvml.SUCCESS }
		}, gpmFieldNames, nil},
		{"nvmlDeviceGetCurrentClocksEventReasons", func(d *server.Device, c *atomic.Bool) {
			d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { c.Store(true); return 0, nvml.SUCCESS }
		}, nil, []string{"gpuscope_gpu_clock_event_active"}},
		{"nvmlDeviceGetRemappedRows", func(d *server.Device, c *atomic.Bool) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { c.Store(true); return 0, 0, false, false, nvml.SUCCESS }
		}, []string{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING"}, nil},
		{"nvmlDeviceGetTotalEnergyConsumption", func(d *server.Device, c *atomic.Bool) {
			d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { c.Store(true); return 0, nvml.SUCCESS }
		}, []string{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}, nil},
		{"nvmlDeviceGetFieldValues", func(d *server.Device, c *atomic.Bool) {
			d.GetFieldValuesFunc = func([]nvml.FieldValue) nvml.Return { c.Store(true); return nvml.SUCCESS }
		}, []string{"DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"}, nil},
		{"nvmlDeviceGetProcessUtilization", func(d *server.Device, c *atomic.Bool) {
			d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { c.Store(true); return nil, nvml.SUCCESS }
		}, []string{"gpuscope_gpu_container_sm_utilization_percent"}, []string{"gpuscope_gpu_container_memory_used_bytes"}},
		{"nvmlDeviceGetMPSComputeRunningProcesses", func(d *server.Device, c *atomic.Bool) {
			d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { c.Store(true); return nil, nvml.SUCCESS }
		}, nil, []string{"gpuscope_gpu_container_memory_used_bytes"}},
		{"nvmlDeviceGetGraphicsRunningProcesses", func(d *server.Device, c *atomic.Bool) {
			d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { c.Store(true); return nil, nvml.SUCCESS }
		}, nil, []string{"gpuscope_gpu_container_memory_used_bytes"}},
		{"nvmlDeviceGetGridLicensableFeatures", func(d *server.Device, c *atomic.Bool) {
			d.GetGridLicensableFeaturesFunc = func() (nvml.GridLicensableFeatures, nvml.Return) {
				c.Store(true)
				return nvml.GridLicensableFeatures{}, nvml.SUCCESS
			}
		}, []string{"DCGM_FI_DEV_VGPU_LICENSE_STATUS"}, nil},
		{"nvmlDeviceGetPcieThroughput", func(d *server.Device, c *atomic.Bool) {
			d.GetPcieThroughputFunc = func(nvml.PcieUtilCounter) (uint32, nvml.Return) { c.Store(true); return 0, nvml.SUCCESS }
		}, nil, []string{"gpuscope_gpu_pcie_link_width"}},
		{"nvmlDeviceGetPcieReplayCounter", func(d *server.Device, c *atomic.Bool) {
			d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { c.Store(true); return 0, nvml.SUCCESS }
		}, []string{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER"}, nil},
		{"nvmlDeviceGetFanSpeed", func(d *server.Device, c *atomic.Bool) {
			d.GetFanSpeedFunc = func() (uint32, nvml.Return) { c.Store(true); return 0, nvml.SUCCESS }
		}, []string{"DCGM_FI_DEV_FAN_SPEED"}, nil},
		{"nvmlDeviceGetEnforcedPowerLimit", func(d *server.Device, c *atomic.Bool) {
			d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { c.Store(true); return 0, nvml.SUCCESS }
		}, []string{"DCGM_FI_DEV_ENFORCED_POWER_LIMIT"}, nil},
	} {
		t.Run(tc.symbol, func(t *testing.T) {
			m := newMockMachine(t, 2)
			writeProc(t, m.procRoot(t), 100, "0::/system.slice/a.scope\n")
			m.procs[0] = []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1 << 30}}
			var called atomic.Bool
			for _, d := range m.devs {
				tc.guard(d, &called)
			}
			m.srv.LookupSymbolFunc = func(name string) error {
				if name == tc.symbol {
					return fmt.Errorf("undefined symbol: %s", name)
				}
				return nil
			}
			clock := newFakeClock()
			o := mockOptions(m, clock)
			o.ProcRoot = m.procRoot(t)
			o.Config.Families.ClockEvents = true
			c, reg := testCollector(t, o)
			c.collectOnce(bg)
			clock.Advance(10 * time.Second)
			c.collectOnce(bg)

			require.False(t, called.Load(), "%s was called although the library lacks it", tc.symbol)
			require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
			require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
			for _, name := range tc.unsupported {
				_, ok := lookup(t, reg, name, map[string]string{"gpu": "0"})
				require.False(t, ok, "%s is published without its function", name)
				require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": name}))
			}
			for _, name := range tc.present {
				require.NotEmpty(t, gather(t, reg, name), name)
			}
			// Everything else is still there.
			for _, name := range []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_UTIL"} {
				mustLookup(t, reg, name, map[string]string{"gpu": "1"})
			}
		})
	}
}

// TestNVMLReinit: the driver goes away under a running collector (module
// unloaded for an upgrade: every call answers UNINITIALIZED, then Init
// answers DRIVER_NOT_LOADED) and comes back. The collector reports up 0
// with the reason, shuts NVML down, initialises it again with backoff and
// serves the GPUs again once the driver is back.
func TestNVMLReinit(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail nvml.Return
	}{
		{"driver unloaded", nvml.ERROR_UNINITIALIZED},
		{"library and kernel module differ", nvml.ERROR_LIB_RM_VERSION_MISMATCH},
		{"every call fails", nvml.ERROR_UNKNOWN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMockMachine(t, 2)
			var down atomic.Bool
			var inits, shutdowns atomic.Int32
			m.srv.InitFunc = func() nvml.Return {
				inits.Add(1)
				if down.Load() {
					return nvml.ERROR_DRIVER_NOT_LOADED
				}
				return nvml.SUCCESS
			}
			m.srv.ShutdownFunc = func() nvml.Return { shutdowns.Add(1); return nvml.SUCCESS }
			for _, d := range m.devs {
				failWhile(d, &down, tc.fail)
			}
			var logs syncBuffer
			clock := newFakeClock()
			o := mockOptions(m, clock)
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			o.Config.Families.Processes = false
			c, reg := testCollector(t, o)
			cycle := func() { c.collectOnce(bg); clock.Advance(10 * time.Second) }
			cycle()
			require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
			require.Equal(t, int32(1), inits.Load())

			down.Store(true)
			cycle()
			require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil), "no GPU read: down")
			require.Equal(t, int32(1), shutdowns.Load(), "NVML shut down to be initialised again")
			require.Contains(t, logs.String(), "Re-initialising the GPU backend")
			require.Contains(t, logs.String(), tc.fail.Error())
			for range 5 {
				cycle()
			}
			require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
			require.Empty(t, gather(t, reg, "DCGM_FI_DEV_GPU_TEMP"))
			require.Less(t, inits.Load(), int32(6), "re-initialised with backoff, not every cycle")
			require.Greater(t, inits.Load(), int32(1))

			down.Store(false)
			for range 10 {
				cycle()
			}
			require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
			require.Len(t, gather(t, reg, "DCGM_FI_DEV_GPU_TEMP"), 2)
		})
	}
}

// failWhile makes every function of d that returns an nvml.Return answer
// ret while cond is set, and behave as before otherwise.
func failWhile(d *server.Device, cond *atomic.Bool, ret nvml.Return) {
	failFuncsWhile(reflect.ValueOf(d).Elem(), cond, ret)
}

func failFuncsWhile(v reflect.Value, cond *atomic.Bool, ret nvml.Return) {
	retType := reflect.TypeOf(nvml.SUCCESS)
	for i := range v.NumField() {
		f := v.Field(i)
		ft := f.Type()
		if v.Type().Field(i).Anonymous && ft.Kind() == reflect.Pointer && !f.IsNil() && ft.Elem().Kind() == reflect.Struct {
			failFuncsWhile(f.Elem(), cond, ret)
			continue
		}
		if v.Type().Field(i).Anonymous && ft.Kind() == reflect.Struct {
			failFuncsWhile(f, cond, ret)
			continue
		}
		if !f.CanSet() || ft.Kind() != reflect.Func || ft.NumOut() == 0 || ft.Out(ft.NumOut()-1) != retType || f.IsNil() {
			continue
		}
		orig := reflect.ValueOf(f.Interface())
		f.Set(reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
			if !cond.Load() {
				return orig.Call(args)
			}
			out := make([]reflect.Value, ft.NumOut())
			for j := range out {
				out[j] = reflect.Zero(ft.Out(j))
			}
			out[len(out)-1] = reflect.ValueOf(ret)
			return out
		}))
	}
}

// TestNVMLForeignPIDNamespace: outside the host's pid namespace NVML's
// pids cannot be joined to containers; the per-container metrics are
// unsupported, with one log line, rather than wrong.
func TestNVMLForeignPIDNamespace(t *testing.T) {
	for _, tc := range []struct {
		name, ns string
		want     bool // container series published
	}{
		{"host", "pid:[4026531836]", true},
		{"container's own", "pid:[4026532412]", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMockMachine(t, 1)
			proc := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(proc, "self", "ns"), 0o755))
			require.NoError(t, os.Symlink(tc.ns, filepath.Join(proc, "self", "ns", "pid")))
			writeProc(t, proc, 100, "0::/system.slice/a.scope\n")
			m.procs[0] = []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1 << 30}}
			var logs syncBuffer
			o := mockOptions(m, newFakeClock())
			o.ProcRoot = proc
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			c, reg := testCollector(t, o)
			c.collectOnce(bg)
			c.collectOnce(bg)
			_, ok := lookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"id": "/system.slice/a.scope"})
			require.Equal(t, tc.want, ok)
			require.Equal(t, boolValue(tc.want), mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": "gpuscope_gpu_container_memory_used_bytes"}))
			require.Equal(t, boolValue(!tc.want), float64(strings.Count(logs.String(), "not in the host's pid namespace")))
			require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
		})
	}
}

// TestNVMLContainerSMShare is R4 of the second review: NVML returns a
// process utilisation sample only for the driver's sample periods in
// which the process used the GPU, so the mean of the samples read a job
// that computes one period in ten as busy as one that never stops, and
// GPUHeldIdle (under 5 % for 30 minutes) never fired for it. The share is
// now the interval's average, each sample weighted by the driver's sample
// period as its timestamps show it. A driver that returns one sample per
// process and read shows no period: the samples' mean is kept.
func TestNVMLContainerSMShare(t *testing.T) {
	const s = uint64(1e6) // µs
	for _, tc := range []struct {
		name string
		// samples of pids 100 (/busy), 101 (/bursty) and 102 (/once), as
		// offsets in µs before the read, with their SM percent.
		samples []nvml.ProcessUtilizationSample
		want    map[string]float64
	}{
		{
			name: "one period in six of 1/6 s",
			samples: append(periodic(100, 60, s/6, 100), // busy: all 60 periods of the 10 s interval
				nvml.ProcessUtilizationSample{Pid: 101, TimeStamp: 9 * s, SmUtil: 100},
				nvml.ProcessUtilizationSample{Pid: 101, TimeStamp: 9*s - s/6, SmUtil: 100}, // a burst of two periods
				nvml.ProcessUtilizationSample{Pid: 102, TimeStamp: 4 * s, SmUtil: 90},      // one period
			),
			want: map[string]float64{"/busy": 100, "/bursty": 100 * 2.0 / 60, "/once": 90.0 / 60},
		},
		{
			name: "periods of 1 s, a sample listed twice",
			samples: append(periodic(100, 10, s, 50),
				nvml.ProcessUtilizationSample{Pid: 101, TimeStamp: 3 * s, SmUtil: 100},
				nvml.ProcessUtilizationSample{Pid: 101, TimeStamp: 3 * s, SmUtil: 100},
				nvml.ProcessUtilizationSample{Pid: 101, TimeStamp: 2 * s, SmUtil: 100},
			),
			want: map[string]float64{"/busy": 50, "/bursty": 20},
		},
		{
			name: "one sample per process: no period, their mean",
			samples: []nvml.ProcessUtilizationSample{
				{Pid: 100, TimeStamp: 1 * s, SmUtil: 97},
				{Pid: 101, TimeStamp: 2 * s, SmUtil: 30},
			},
			want: map[string]float64{"/busy": 97, "/bursty": 30},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMockMachine(t, 1)
			proc := t.TempDir()
			for pid, id := range map[int]string{100: "/busy", 101: "/bursty", 102: "/once"} {
				writeProc(t, proc, pid, "0::"+id+"\n")
			}
			clock := newFakeClock()
			now := uint64(clock.Now().UnixMicro())
			m.procs[0] = []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1 << 30}, {Pid: 101, UsedGpuMemory: 1 << 30}, {Pid: 102, UsedGpuMemory: 1 << 30}}
			for _, u := range tc.samples {
				u.TimeStamp = now - u.TimeStamp
				m.utils[0] = append(m.utils[0], u)
			}
			o := mockOptions(m, clock) // 10 s interval
			o.ProcRoot = proc
			c, reg := testCollector(t, o)
			c.collectOnce(bg)
			for id, want := range tc.want {
				require.InDelta(t, want, mustLookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", map[string]string{"id": id}), 1e-3, id)
			}
			// The next interval has no sample: nothing ran.
			clock.Advance(10 * time.Second)
			c.collectOnce(bg)
			for id := range tc.want {
				require.Zero(t, mustLookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", map[string]string{"id": id}), id)
			}
		})
	}
	// The period is learnt once: a later read with one sample of a
	// bursty process counts it for one period of the interval.
	t.Run("period kept from an earlier read", func(t *testing.T) {
		m := newMockMachine(t, 1)
		proc := t.TempDir()
		writeProc(t, proc, 100, "0::/busy\n")
		clock := newFakeClock()
		m.procs[0] = []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1 << 30}}
		now := uint64(clock.Now().UnixMicro())
		for _, u := range periodic(100, 20, s/2, 100) {
			u.TimeStamp = now - u.TimeStamp
			m.utils[0] = append(m.utils[0], u)
		}
		o := mockOptions(m, clock)
		o.ProcRoot = proc
		c, reg := testCollector(t, o)
		c.collectOnce(bg)
		require.InDelta(t, 100.0, mustLookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", nil), 1e-6)
		clock.Advance(10 * time.Second)
		m.mu.Lock()
		m.utils[0] = append(m.utils[0], nvml.ProcessUtilizationSample{Pid: 100, TimeStamp: now + 5*s, SmUtil: 100})
		m.mu.Unlock()
		c.collectOnce(bg)
		require.InDelta(t, 5.0, mustLookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", nil), 1e-6, "one half-second period in 10 s")
	})
}

// periodic is n samples of pid, one every period µs (offsets before the
// read: period, 2 period, ...), at sm percent.
func periodic(pid uint32, n int, period uint64, sm uint32) []nvml.ProcessUtilizationSample {
	out := make([]nvml.ProcessUtilizationSample, n)
	for i := range out {
		out[i] = nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: uint64(i) * period, SmUtil: sm}
	}
	return out
}

// TestNVMLGraphicsProcessesCounted is R8 of the second review: graphics
// contexts (Xorg, desktop applications on RTX and workstation GPUs) count
// in a container's memory and processes, and the HELP texts say so
// rather than "compute processes".
func TestNVMLGraphicsProcessesCounted(t *testing.T) {
	m := newMockMachine(t, 1)
	proc := t.TempDir()
	writeProc(t, proc, 300, "0::/system.slice/display-manager.service\n")
	writeProc(t, proc, 301, "0::/system.slice/display-manager.service\n")
	m.procs[0] = []nvml.ProcessInfo{{Pid: 301, UsedGpuMemory: 2 << 20}}
	m.graphics[0] = []nvml.ProcessInfo{{Pid: 300, UsedGpuMemory: 64 << 20}, {Pid: 301, UsedGpuMemory: 4 << 20}}
	o := mockOptions(m, newFakeClock())
	o.ProcRoot = proc
	c, reg := testCollector(t, o)
	c.collectOnce(bg)
	dm := map[string]string{"id": "/system.slice/display-manager.service"}
	require.Equal(t, 2.0, mustLookup(t, reg, "gpuscope_gpu_container_processes", dm), "Xorg, and a process with both contexts once")
	require.Equal(t, float64(68<<20), mustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", dm))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		switch mf.GetName() {
		case "gpuscope_gpu_container_processes", "gpuscope_gpu_container_memory_used_bytes", "gpuscope_gpu_container_sm_utilization_percent":
			require.NotContains(t, mf.GetHelp(), "compute processes of", mf.GetName())
			if mf.GetName() != "gpuscope_gpu_container_sm_utilization_percent" {
				require.Contains(t, mf.GetHelp(), "graphics contexts", mf.GetName())
			}
		}
	}
}

// TestNVMLGPUTempAbove200KeepsTheLast is finding 21: DCGM stores no GPU
// temperature above 200 °C (a sensor glitch) and answers OK, so its last
// value stays the latest; gpuscope serves that one too, none before any.
func TestNVMLGPUTempAbove200KeepsTheLast(t *testing.T) {
	m := newMockMachine(t, 1)
	var temp atomic.Uint32
	temp.Store(255)
	m.devs[0].GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return temp.Load(), nvml.SUCCESS }
	c, reg := testCollector(t, mockOptions(m, newFakeClock()))
	gpu0 := map[string]string{"gpu": "0"}
	for _, step := range []struct {
		reading uint32
		want    float64 // -1: no series
	}{{255, -1}, {61, 61}, {255, 61}, {4000, 61}, {200, 200}} {
		temp.Store(step.reading)
		c.collectOnce(bg)
		v, ok := lookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu0)
		if step.want < 0 {
			require.False(t, ok, "reading %d", step.reading)
			continue
		}
		require.True(t, ok, "reading %d", step.reading)
		require.Equal(t, step.want, v, "reading %d", step.reading)
	}
	require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
}

// TestNVMLVGPULicense is finding 22: DCGM publishes 0 without GRID
// licensing, the vGPU feature's state where it is listed, and nothing
// where licensing is supported but no vGPU feature is listed.
func TestNVMLVGPULicense(t *testing.T) {
	feature := func(code nvml.GridLicenseFeatureCode, state uint32) nvml.GridLicensableFeature {
		return nvml.GridLicensableFeature{FeatureCode: uint32(code), FeatureState: state}
	}
	for _, tc := range []struct {
		name string
		lf   nvml.GridLicensableFeatures
		want float64 // -1: no series
	}{
		{"no GRID licensing", nvml.GridLicensableFeatures{}, 0},
		{"vGPU licensed", nvml.GridLicensableFeatures{IsGridLicenseSupported: 1, LicensableFeaturesCount: 2,
			GridLicensableFeatures: [3]nvml.GridLicensableFeature{feature(nvml.GRID_LICENSE_FEATURE_CODE_NVIDIA_RTX, 0), feature(nvml.GRID_LICENSE_FEATURE_CODE_VGPU, 1)}}, 1},
		{"vGPU not licensed", nvml.GridLicensableFeatures{IsGridLicenseSupported: 1, LicensableFeaturesCount: 1,
			GridLicensableFeatures: [3]nvml.GridLicensableFeature{feature(nvml.GRID_LICENSE_FEATURE_CODE_VGPU, 0)}}, 0},
		{"no vGPU feature listed: blank", nvml.GridLicensableFeatures{IsGridLicenseSupported: 1, LicensableFeaturesCount: 1,
			GridLicensableFeatures: [3]nvml.GridLicensableFeature{feature(nvml.GRID_LICENSE_FEATURE_CODE_NVIDIA_RTX, 1)}}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMockMachine(t, 1)
			m.devs[0].GetGridLicensableFeaturesFunc = func() (nvml.GridLicensableFeatures, nvml.Return) { return tc.lf, nvml.SUCCESS }
			c, reg := testCollector(t, mockOptions(m, newFakeClock()))
			c.collectOnce(bg)
			v, ok := lookup(t, reg, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", nil)
			require.Equal(t, tc.want >= 0, ok)
			if ok {
				require.Equal(t, tc.want, v)
			}
			require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
		})
	}
}
