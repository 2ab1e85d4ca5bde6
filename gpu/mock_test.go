package gpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// mockMachine is a DGX H100 from go-nvml's mock with its telemetry
// functions filled in by hand (the mock server only sets identity, PCI
// device id and v1 memory). Values are deterministic per GPU index.
type mockMachine struct {
	srv    *server.Server
	devs   []*server.Device
	events chan nvml.EventData

	mu sync.Mutex
	// nvlinkKiB is the cumulative NVLink counter of each GPU.
	nvlinkKiB []uint64
	// gpm[i] says whether GPU i has GPM.
	gpm   []bool
	procs [][]nvml.ProcessInfo
	// mps and graphics are the MPS client and graphics process lists.
	mps, graphics [][]nvml.ProcessInfo
	utils         [][]nvml.ProcessUtilizationSample
	// lastSeen records the timestamps passed to GetProcessUtilization.
	lastSeen [][]uint64
	proc     string
}

func newMockMachine(t testing.TB, n int) *mockMachine {
	t.Helper()
	cfgs := make([]gpus.Config, n)
	for i := range cfgs {
		cfgs[i] = gpus.H100_SXM5_80GB
	}
	m := &mockMachine{
		srv:       dgxh100.NewWithGPUs(cfgs...),
		events:    make(chan nvml.EventData, 16),
		nvlinkKiB: make([]uint64, n),
		gpm:       make([]bool, n),
		procs:     make([][]nvml.ProcessInfo, n),
		mps:       make([][]nvml.ProcessInfo, n),
		graphics:  make([][]nvml.ProcessInfo, n),
		utils:     make([][]nvml.ProcessUtilizationSample, n),
		lastSeen:  make([][]uint64, n),
	}
	for i := range m.gpm {
		m.gpm[i] = true
	}
	for i, d := range m.srv.Devices {
		dev := d.(*server.Device)
		m.devs = append(m.devs, dev)
		m.fillTelemetry(i, dev)
	}
	m.srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
				timer := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
				defer timer.Stop()
				select {
				case ed := <-m.events:
					return ed, nvml.SUCCESS
				case <-timer.C:
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	m.srv.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		return &mock.GpmSample{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}, nvml.SUCCESS
	}
	m.srv.GpmMetricsGetFunc = func(req *nvml.GpmMetricsGetType) nvml.Return {
		if req.Sample1 == nil || req.Sample2 == nil || req.Version != nvml.GPM_METRICS_GET_VERSION {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		for i := range req.NumMetrics {
			mt := &req.Metrics[i]
			switch nvml.GpmMetricId(mt.MetricId) {
			case nvml.GPM_METRIC_GRAPHICS_UTIL:
				mt.Value = 42
			case nvml.GPM_METRIC_SM_UTIL:
				mt.Value = 40
			case nvml.GPM_METRIC_SM_OCCUPANCY:
				mt.Value = 25
			case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
				mt.Value = 12.5
			case nvml.GPM_METRIC_DRAM_BW_UTIL:
				mt.Value = 30
			case nvml.GPM_METRIC_PCIE_TX_PER_SEC:
				mt.Value = 100 // MiB/s
			case nvml.GPM_METRIC_PCIE_RX_PER_SEC:
				mt.Value = 200
			case nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC:
				mt.Value = 1000
			case nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC:
				mt.Value = 2000
			default:
				mt.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			}
		}
		return nvml.SUCCESS
	}
	return m
}

func (m *mockMachine) fillTelemetry(i int, d *server.Device) {
	d.GetUUIDFunc = func() (string, nvml.Return) {
		return fmt.Sprintf("GPU-00000000-0000-4000-8000-%012d", i), nvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{Domain: 0, Bus: uint32(0x18 + i), PciDeviceId: 0x233010DE}
		for j, c := range fmt.Sprintf("00000000:%02X:00.0", 0x18+i) {
			p.BusId[j] = int8(c)
		}
		return p, nvml.SUCCESS
	}
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		switch c {
		case nvml.CLOCK_SM:
			return uint32(1980 - i), nvml.SUCCESS
		case nvml.CLOCK_MEM:
			return 2619, nvml.SUCCESS
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return uint32(40 + i), nvml.SUCCESS }
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return uint32(113611 + 1000*i), nvml.SUCCESS }
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return uint64(9876543210 + i), nvml.SUCCESS }
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return i, nvml.SUCCESS }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: uint32(50 + i), Memory: uint32(20 + i)}, nvml.SUCCESS
	}
	d.GetEncoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return 0, 167000, nvml.SUCCESS }
	d.GetDecoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return uint32(i), 167000, nvml.SUCCESS }
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		const mib = 1 << 20
		return nvml.Memory_v2{
			Total:    81559*mib + 123,         // truncates to 81559
			Reserved: 530*mib + mib - 1,       // truncates to 530
			Used:     uint64(1024+i)*mib + 7,  // truncates to 1024+i
			Free:     uint64(80004-i)*mib + 9, // truncates to 80004-i
		}, nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 2, 1, i == 1, false, nvml.SUCCESS }
	d.GetFanSpeedFunc = func() (uint32, nvml.Return) {
		if i == 0 {
			return 0, nvml.ERROR_NOT_SUPPORTED // an SXM module, cooled by the chassis
		}
		return uint32(30 + i), nvml.SUCCESS
	}
	// mW: GPU 1's limit truncates to whole watts, as DCGM's does.
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return uint32(700000 - 400001*i), nvml.SUCCESS }
	d.GetGridLicensableFeaturesFunc = func() (nvml.GridLicensableFeatures, nvml.Return) {
		return nvml.GridLicensableFeatures{}, nvml.SUCCESS
	}
	d.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		m.mu.Lock()
		defer m.mu.Unlock()
		for k := range values {
			fv := &values[k]
			switch fv.FieldId {
			case nvml.FI_DEV_MEMORY_TEMP:
				if i == 1 {
					// Like many GPUs, GPU 1 has no memory temperature sensor.
					fv.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
					continue
				}
				putFieldValue(fv, nvml.VALUE_TYPE_UNSIGNED_INT, uint64(45+i))
			case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
				putFieldValue(fv, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, m.nvlinkKiB[i]/2)
			case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
				putFieldValue(fv, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, m.nvlinkKiB[i]-m.nvlinkKiB[i]/2)
			case nvml.FI_DEV_PERF_POLICY_THERMAL:
				putFieldValue(fv, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, 1500000000)
			case nvml.FI_DEV_ECC_SBE_VOL_TOTAL:
				putFieldValue(fv, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, 3)
			case nvml.FI_DEV_GET_GPU_RECOVERY_ACTION:
				putFieldValue(fv, nvml.VALUE_TYPE_UNSIGNED_INT, uint64(i)) // GPU 1 asks for a reset
			default:
				putFieldValue(fv, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, 0)
			}
		}
		return nvml.SUCCESS
	}
	d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
		if c == nvml.PCIE_UTIL_TX_BYTES {
			return 1000, nvml.SUCCESS // KB/s
		}
		return 2000, nvml.SUCCESS
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
		return uint64(nvml.ClocksEventReasonGpuIdle | nvml.ClocksEventReasonSwThermalSlowdown), nvml.SUCCESS
	}
	d.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) {
		return uint64(nvml.ClocksEventReasonGpuIdle | nvml.ClocksEventReasonSwThermalSlowdown), nvml.SUCCESS
	}
	d.GetRetiredPagesFunc = func(nvml.PageRetirementCause) ([]uint64, nvml.Return) { return []uint64{0x1000}, nvml.SUCCESS }
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.gpm[i] {
			return nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION, IsSupportedDevice: 1}, nvml.SUCCESS
		}
		return nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION}, nvml.SUCCESS
	}
	d.GpmSampleGetFunc = func(nvml.GpmSample) nvml.Return { return nvml.SUCCESS }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return append([]nvml.ProcessInfo(nil), m.procs[i]...), nvml.SUCCESS
	}
	d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return append([]nvml.ProcessInfo(nil), m.mps[i]...), nvml.SUCCESS
	}
	d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.graphics[i] == nil {
			return nil, nvml.ERROR_NOT_SUPPORTED // as on most datacenter GPUs
		}
		return append([]nvml.ProcessInfo(nil), m.graphics[i]...), nvml.SUCCESS
	}
	d.GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.lastSeen[i] = append(m.lastSeen[i], lastSeen)
		var out []nvml.ProcessUtilizationSample
		for _, u := range m.utils[i] {
			if u.TimeStamp > lastSeen {
				out = append(out, u)
			}
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
}

// procRoot is a /proc for the machine's processes, made on first use.
func (m *mockMachine) procRoot(t testing.TB) string {
	t.Helper()
	if m.proc == "" {
		m.proc = t.TempDir()
	}
	return m.proc
}

func putFieldValue(fv *nvml.FieldValue, typ nvml.ValueType, v uint64) {
	fv.ValueType = uint32(typ)
	fv.NvmlReturn = uint32(nvml.SUCCESS)
	binary.LittleEndian.PutUint64(fv.Value[:], v)
}

func putFieldDouble(fv *nvml.FieldValue, v float64) {
	putFieldValue(fv, nvml.VALUE_TYPE_DOUBLE, math.Float64bits(v))
}

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// testCollector builds a collector for synchronous cycles (collectOnce);
// the backend is closed when the test ends.
func testCollector(t testing.TB, o Options) (*Collector, *prometheus.Registry) {
	t.Helper()
	if o.Hostname == "" {
		o.Hostname = "gpu-node-1"
	}
	if o.ProcRoot == "" {
		o.ProcRoot = t.TempDir()
	}
	c, err := New(o)
	require.NoError(t, err)
	if nb, ok := c.backend.(*nvmlBackend); ok {
		nb.eventWait = 10 * time.Millisecond // keeps closing the event loop quick
	}
	reg := newRegistry(t, c)
	t.Cleanup(func() { require.NoError(t, c.stop(false, nil)) })
	return c, reg
}

func newRegistry(t testing.TB, c *Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	return reg
}

func mockOptions(m *mockMachine, clock *fakeClock) Options {
	cfg := DefaultConfig()
	cfg.Backend = BackendNVML
	// The host's kernel log is not the mock's: tests that read one give
	// their own (KernelLog).
	return Options{Config: cfg, NVML: m.srv, Now: clock.Now, Interval: 10 * time.Second, KernelLog: "-"}
}

// series is one gathered sample.
type series struct {
	labels map[string]string
	value  float64
	typ    dto.MetricType
}

// gather returns every series of the named metric.
func gather(t testing.TB, reg prometheus.Gatherer, name string) []series {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out []series
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			s := series{labels: map[string]string{}, typ: mf.GetType()}
			for _, lp := range m.GetLabel() {
				s.labels[lp.GetName()] = lp.GetValue()
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				s.value = m.GetCounter().GetValue()
			default:
				s.value = m.GetGauge().GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}

// lookup returns the value of the series of name whose labels include
// match, and whether there is exactly one.
func lookup(t testing.TB, reg prometheus.Gatherer, name string, match map[string]string) (float64, bool) {
	t.Helper()
	var found []series
	for _, s := range gather(t, reg, name) {
		ok := true
		for k, v := range match {
			if s.labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		return 0, false
	}
	return found[0].value, true
}

func mustLookup(t testing.TB, reg prometheus.Gatherer, name string, match map[string]string) float64 {
	t.Helper()
	v, ok := lookup(t, reg, name, match)
	require.Truef(t, ok, "want exactly one %s%v", name, match)
	return v
}

// writeProc creates <root>/<pid>/cgroup and a stat with start time
// 1000+pid.
func writeProc(t testing.TB, root string, pid int, content string) {
	t.Helper()
	writeProcStart(t, root, pid, content, uint64(1000+pid))
}

// writeProcStart creates <root>/<pid>/cgroup and a stat whose field 22,
// the start time, is start.
func writeProcStart(t testing.TB, root string, pid int, content string, start uint64) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup"), []byte(content), 0o644))
	stat := fmt.Sprintf("%d (python3 (x) y) S 1 %d %d 0 -1 4194560 1234 0 0 0 5 6 0 0 20 0 12 0 %d 2000000000 5000 18446744073709551615\n", pid, pid, pid, start)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644))
}

var bg = context.Background()
