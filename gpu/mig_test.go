package gpu

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/workload"
)

// migMachine puts GPU 0 of a mock machine in MIG mode as the mig scenario
// has it: a 3g.40gb GPU instance (id 1) split into two compute instances,
// and two 2g.20gb (ids 5 and 6). Each MIG device is a go-nvml mock.Device
// with the calls the collector makes on MIG device handles.
type migMachine struct {
	*mockMachine
	parent *server.Device

	mu      sync.Mutex
	migDevs []*mock.Device // by MIG device index
	// gpmSamples records which GPU instance each GPM sample was last
	// taken for, so that GpmMetricsGet can answer per instance.
	gpmSamples map[nvml.GpmSample]int
	procs      map[int][]nvml.ProcessInfo // by MIG device index
	mps        map[int][]nvml.ProcessInfo // MPS clients, by MIG device index
}

type migInstanceSpec struct {
	profile int // NVML_GPU_INSTANCE_PROFILE_* index
	id      int
	cis     int // compute instances (MIG devices)
	usedMiB uint64
}

var errNoMIGSymbol = errors.New("undefined symbol")

var testMIGLayout = []migInstanceSpec{
	{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 1, 2, 30000},
	{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 5, 1, 12000},
	{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 6, 1, 0},
}

func newMIGMachine(t testing.TB, n int) *migMachine {
	t.Helper()
	mm := &migMachine{mockMachine: newMockMachine(t, n), gpmSamples: map[nvml.GpmSample]int{}, procs: map[int][]nvml.ProcessInfo{}, mps: map[int][]nvml.ProcessInfo{}}
	d := mm.devs[0]
	mm.parent = d
	ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	require.Equal(t, nvml.SUCCESS, ret)
	for _, spec := range testMIGLayout {
		mm.addInstance(t, spec)
	}
	// What a GPU in MIG mode answers for the whole GPU.
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		t.Error("the process list of a GPU in MIG mode needs root; read it per MIG device")
		return nil, nvml.ERROR_NO_PERMISSION
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		mm.mu.Lock()
		defer mm.mu.Unlock()
		if i < 0 || i >= 7 {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if i >= len(mm.migDevs) || mm.migDevs[i] == nil {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return mm.migDevs[i], nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		d.RLock()
		defer d.RUnlock()
		for gi := range d.GpuInstances {
			if int(gi.Info.Id) == id {
				return gi, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	d.GpmMigSampleGetFunc = func(id int, s nvml.GpmSample) nvml.Return {
		mm.mu.Lock()
		defer mm.mu.Unlock()
		mm.gpmSamples[s] = id
		return nvml.SUCCESS
	}
	whole := mm.srv.GpmMetricsGetFunc
	mm.srv.GpmMetricsGetFunc = func(req *nvml.GpmMetricsGetType) nvml.Return {
		mm.mu.Lock()
		id, ok := mm.gpmSamples[req.Sample2]
		mm.mu.Unlock()
		if !ok {
			return whole(req)
		}
		// An instance's activity is 10 × its id percent: 10%, 50%, 60%.
		for i := range req.NumMetrics {
			req.Metrics[i].Value = float64(10 * id)
		}
		return nvml.SUCCESS
	}
	return mm
}

// addInstance creates a GPU instance on the mock parent, as `nvidia-smi
// mig -cgi` does, and its MIG devices.
func (mm *migMachine) addInstance(t testing.TB, spec migInstanceSpec) {
	t.Helper()
	d := mm.parent
	p, ret := d.GetGpuInstanceProfileInfo(spec.profile)
	require.Equal(t, nvml.SUCCESS, ret)
	d.GpuInstanceCounter = uint32(spec.id)
	_, ret = d.CreateGpuInstance(&p)
	require.Equal(t, nvml.SUCCESS, ret)
	mm.mu.Lock()
	defer mm.mu.Unlock()
	for ci := range spec.cis {
		idx := len(mm.migDevs)
		mib := uint64(1 << 20)
		total := p.MemorySizeMB * mib
		mm.migDevs = append(mm.migDevs, &mock.Device{
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return spec.id, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return ci, nvml.SUCCESS },
			GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
				return nvml.DeviceAttributes{GpuInstanceSliceCount: p.SliceCount, ComputeInstanceSliceCount: p.SliceCount / uint32(spec.cis), MemorySizeMB: p.MemorySizeMB}, nvml.SUCCESS
			},
			GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
				used := spec.usedMiB*mib + 5
				return nvml.Memory_v2{Total: total, Reserved: 0, Used: used, Free: total - used}, nvml.SUCCESS
			},
			GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
				mm.mu.Lock()
				defer mm.mu.Unlock()
				return append([]nvml.ProcessInfo(nil), mm.procs[idx]...), nvml.SUCCESS
			},
			GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
				mm.mu.Lock()
				defer mm.mu.Unlock()
				if mps, ok := mm.mps[idx]; ok {
					return append([]nvml.ProcessInfo(nil), mps...), nvml.SUCCESS
				}
				return nil, nvml.ERROR_NOT_SUPPORTED
			},
		})
	}
}

// removeInstance destroys GPU instance id and its MIG devices.
func (mm *migMachine) removeInstance(id int) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	for i, md := range mm.migDevs {
		if md == nil {
			continue
		}
		if gi, _ := md.GetGpuInstanceId(); gi == id {
			mm.migDevs[i] = nil
		}
	}
	d := mm.parent
	d.Lock()
	defer d.Unlock()
	for gi := range d.GpuInstances {
		if int(gi.Info.Id) == id {
			delete(d.GpuInstances, gi)
		}
	}
}

func (mm *migMachine) setProcs(migDev int, procs ...nvml.ProcessInfo) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	mm.procs[migDev] = procs
}

// migCollector returns a collector on mm, whose processes live in cgroups
// named after them, after two cycles (GPM needs two samples).
func migCollector(t *testing.T, mm *migMachine, configure func(*Options)) (*Collector, *prometheus.Registry, *fakeClock) {
	t.Helper()
	proc := mm.procRoot(t)
	for pid, cg := range map[int]string{100: "/train-a", 101: "/train-b", 200: "/serve"} {
		writeProc(t, proc, pid, "0::"+cg+"\n")
	}
	clock := newFakeClock()
	o := mockOptions(mm.mockMachine, clock)
	o.ProcRoot = proc
	if configure != nil {
		configure(&o)
	}
	c, reg := testCollector(t, o)
	c.collectOnce(bg)
	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	return c, reg, clock
}

// instance selects the series of GPU 0's instance id.
func instance(id, profile string) map[string]string {
	return map[string]string{"gpu": "0", "GPU_I_ID": id, "GPU_I_PROFILE": profile}
}

// wholeGPU selects GPU i's series without instance labels.
func TestDCGMProfileName(t *testing.T) {
	// An H100's 3g.40gb and 2g.20gb, as gpu/sim's mig scenario has them.
	require.Equal(t, "3g.40gb", dcgmProfileName(3, 40192))
	require.Equal(t, "2g.20gb", dcgmProfileName(2, 19968))
	// DCGM rounds the memory up, so an A100 80GB's whole-GPU instance
	// (81050 MiB) is 7g.80gb, not 7g.79gb (dcgm-exporter #713).
	require.Equal(t, "7g.80gb", dcgmProfileName(7, 81050))
	require.Equal(t, "1g.10gb", dcgmProfileName(1, 9856))
}

func wholeGPU(i string) map[string]string {
	return map[string]string{"gpu": i, "GPU_I_ID": "", "GPU_I_PROFILE": ""}
}

func TestMIGInstances(t *testing.T) {
	mm := newMIGMachine(t, 2)
	mm.setProcs(0, nvml.ProcessInfo{Pid: 100, UsedGpuMemory: 20000 << 20})
	// A process both compute instances of GPU instance 1 list counts once.
	mm.setProcs(1, nvml.ProcessInfo{Pid: 101, UsedGpuMemory: 9000 << 20}, nvml.ProcessInfo{Pid: 100, UsedGpuMemory: 20000 << 20})
	mm.setProcs(2, nvml.ProcessInfo{Pid: 200, UsedGpuMemory: 11000 << 20})
	// GPU instance 6 runs an MPS server whose client's memory the driver
	// withholds (NVML_VALUE_NOT_AVAILABLE): its container has a process
	// count and no memory series.
	mm.setProcs(3, nvml.ProcessInfo{Pid: 300, UsedGpuMemory: 30 << 20})
	mm.mu.Lock()
	mm.mps[3] = []nvml.ProcessInfo{{Pid: 301, UsedGpuMemory: ^uint64(0)}}
	mm.mu.Unlock()
	writeProc(t, mm.procRoot(t), 300, "0::/mps-server\n")
	writeProc(t, mm.procRoot(t), 301, "0::/mps-client\n")
	_, reg, _ := migCollector(t, mm, nil)

	for _, tc := range []struct {
		name   string
		metric string
		match  map[string]string
		want   float64
	}{
		// Framebuffer per instance, from the MIG device's memory info.
		{"3g used", "DCGM_FI_DEV_FB_USED", instance("1", "3g.40gb"), 30000},
		{"3g total", "DCGM_FI_DEV_FB_TOTAL", instance("1", "3g.40gb"), 40960},
		{"3g free", "DCGM_FI_DEV_FB_FREE", instance("1", "3g.40gb"), 10959},
		{"2g used", "DCGM_FI_DEV_FB_USED", instance("5", "2g.20gb"), 12000},
		{"2g total", "DCGM_FI_DEV_FB_TOTAL", instance("6", "2g.20gb"), 20480},
		{"free 2g used", "DCGM_FI_DEV_FB_USED", instance("6", "2g.20gb"), 0},
		// GPM per GPU instance (the mock answers 10 × id percent).
		{"3g gr active", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", instance("1", "3g.40gb"), 0.1},
		{"2g gr active", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", instance("5", "2g.20gb"), 0.5},
		{"2g dram", "DCGM_FI_PROF_DRAM_ACTIVE", instance("6", "2g.20gb"), 0.6},
		// Whole-GPU fields once, without instance labels.
		{"power", "DCGM_FI_DEV_POWER_USAGE", wholeGPU("0"), 113.611},
		{"temperature", "DCGM_FI_DEV_GPU_TEMP", wholeGPU("0"), 40},
		{"pcie from GPM", "DCGM_FI_PROF_PCIE_TX_BYTES", wholeGPU("0"), 100 << 20},
		// A GPU not in MIG mode is as before.
		{"GPU 1 used", "DCGM_FI_DEV_FB_USED", wholeGPU("1"), 1025},
		{"GPU 1 util", "DCGM_FI_DEV_GPU_UTIL", wholeGPU("1"), 51},
		{"GPU 1 gr active", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", wholeGPU("1"), 0.42},
		// Processes attributed to their instance.
		{"train container", "gpuscope_gpu_container_memory_used_bytes", map[string]string{"GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb", "id": "/train-a"}, 20000 << 20},
		{"train container 2", "gpuscope_gpu_container_memory_used_bytes", map[string]string{"GPU_I_ID": "1", "id": "/train-b"}, 9000 << 20},
		{"serve container", "gpuscope_gpu_container_memory_used_bytes", map[string]string{"GPU_I_ID": "5", "GPU_I_PROFILE": "2g.20gb", "id": "/serve"}, 11000 << 20},
		{"serve processes", "gpuscope_gpu_container_processes", map[string]string{"GPU_I_ID": "5", "id": "/serve"}, 1},
		{"MPS server", "gpuscope_gpu_container_memory_used_bytes", map[string]string{"GPU_I_ID": "6", "id": "/mps-server"}, 30 << 20},
		{"MPS client", "gpuscope_gpu_container_processes", map[string]string{"GPU_I_ID": "6", "GPU_I_PROFILE": "2g.20gb", "id": "/mps-client"}, 1},
		// What the driver does not give in MIG mode is said so.
		{"no GPU_UTIL", "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": "DCGM_FI_DEV_GPU_UTIL"}, 0},
		{"no per-process SM", "gpuscope_gpu_field_supported", map[string]string{"GPU_I_ID": "5", "field": "gpuscope_gpu_container_sm_utilization_percent"}, 0},
		{"instance FB", "gpuscope_gpu_field_supported", map[string]string{"GPU_I_ID": "6", "GPU_I_PROFILE": "2g.20gb", "field": "DCGM_FI_DEV_FB_USED"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, mustLookup(t, reg, tc.metric, tc.match), 1e-9)
		})
	}

	// Nothing an instance reports is also reported for the whole GPU.
	for _, name := range []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpuscope_gpu_container_memory_used_bytes", "DCGM_FI_DEV_GPU_UTIL"} {
		_, ok := lookup(t, reg, name, wholeGPU("0"))
		require.False(t, ok, "%s of GPU 0 without instance labels", name)
	}
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_FB_USED"), 4, "three instances and GPU 1")
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_POWER_USAGE"), 2, "one per physical GPU")
	require.Len(t, gather(t, reg, "gpuscope_gpu_container_sm_utilization_percent"), 0)
	_, ok := lookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"id": "/mps-client"})
	require.False(t, ok, "memory the driver withholds is absent, not 0")
	_, ok = lookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "GPU_I_ID": "", "field": "DCGM_FI_DEV_FB_USED"})
	require.False(t, ok, "the GPU's FB fields moved to its instances")
	require.Empty(t, mm.parent.GetMemoryInfo_v2Calls(), "the GPU's memory is read per instance")
	require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
	// GPU 1, not in MIG mode, is asked once a cycle and no more.
	require.Len(t, mm.devs[1].GetMigModeCalls(), 2)
	require.Empty(t, mm.devs[1].GetMaxMigDeviceCountCalls())
}

// TestMIGGolden pins the exposition of a GPU in MIG mode: label sets and
// which fields sit on the GPU and which on its instances.
// Regenerate with: go test ./gpu/ -run TestMIGGolden -update
func TestMIGGolden(t *testing.T) {
	mm := newMIGMachine(t, 1)
	mm.setProcs(0, nvml.ProcessInfo{Pid: 100, UsedGpuMemory: 20000 << 20})
	mm.setProcs(2, nvml.ProcessInfo{Pid: 200, UsedGpuMemory: 11000 << 20})
	_, reg, _ := migCollector(t, mm, func(o *Options) {
		o.ContainerLookup = func(id string) (workload.Metadata, bool) {
			return workload.Metadata{Name: id[1:], Image: "nvcr.io/nvidia/pytorch:24.01-py3"}, true
		}
	})
	got := exposition(t, reg)
	path := filepath.Join("testdata", "nvml_mig.golden")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

func TestMIGProfileName(t *testing.T) {
	for _, tc := range []struct {
		name       string
		giByID     nvml.Return // GetGpuInstanceById: root only
		attributes nvml.Return
		// profiles is GetGpuInstanceProfileInfo's answer to the non-root
		// path; attrsMiB the MIG device's memory size less the profile's.
		profiles nvml.Return
		attrsMiB uint64
		want     string
		errors   float64
	}{
		{"root: the GPU instance's profile, as DCGM", nvml.SUCCESS, nvml.ERROR_NOT_SUPPORTED, nvml.SUCCESS, 0, "3g.40gb", 0},
		{"not root: the MIG device's attributes", nvml.ERROR_NO_PERMISSION, nvml.SUCCESS, nvml.SUCCESS, 0, "3g.40gb", 0},
		// R12 of the second review: DCGM names the instance by its
		// profile's memory size, which the attributes' can undercut.
		{"not root, attributes smaller than the profile: the profile's size", nvml.ERROR_NO_PERMISSION, nvml.SUCCESS, nvml.SUCCESS, 1100, "3g.40gb", 0},
		{"not root, profiles not listed either: the attributes' size", nvml.ERROR_NO_PERMISSION, nvml.SUCCESS, nvml.ERROR_NO_PERMISSION, 1100, "3g.39gb", 0},
		{"neither: no profile, an error per instance and cycle", nvml.ERROR_NO_PERMISSION, nvml.ERROR_UNKNOWN, nvml.SUCCESS, 0, "", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mm := newMIGMachine(t, 1)
			byID := mm.parent.GetGpuInstanceByIdFunc
			mm.parent.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
				if tc.giByID != nvml.SUCCESS {
					return nil, tc.giByID
				}
				return byID(id)
			}
			profileInfo := mm.parent.GetGpuInstanceProfileInfoFunc
			mm.parent.GetGpuInstanceProfileInfoFunc = func(p int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
				if tc.profiles != nvml.SUCCESS {
					return nvml.GpuInstanceProfileInfo{}, tc.profiles
				}
				if profileInfo != nil {
					return profileInfo(p)
				}
				return mm.parent.Device.GetGpuInstanceProfileInfo(p)
			}
			for _, md := range mm.migDevs {
				attrs := md.GetAttributesFunc
				md.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
					if tc.attributes != nvml.SUCCESS {
						return nvml.DeviceAttributes{}, tc.attributes
					}
					a, ret := attrs()
					a.MemorySizeMB -= tc.attrsMiB
					return a, ret
				}
			}
			_, reg, _ := migCollector(t, mm, nil)
			require.Equal(t, 30000.0, mustLookup(t, reg, "DCGM_FI_DEV_FB_USED", map[string]string{"GPU_I_ID": "1", "GPU_I_PROFILE": tc.want}))
			errs, _ := lookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "0", "field": "GPU_I_PROFILE"})
			require.Equal(t, tc.errors, errs)
			if tc.giByID == nvml.ERROR_NO_PERMISSION {
				require.Len(t, mm.parent.GetGpuInstanceByIdCalls(), 1, "asked once, then known to need root")
			}
		})
	}
}

// TestMIGForeignPIDNamespace is R6 of the second review: outside the host's
// pid namespace the per-container series are off on a GPU in MIG mode
// too, not partial (NVML lists only the processes gpuscope's namespace
// sees, by its pids).
func TestMIGForeignPIDNamespace(t *testing.T) {
	mm := newMIGMachine(t, 1)
	mm.setProcs(0, nvml.ProcessInfo{Pid: 100, UsedGpuMemory: 20000 << 20})
	proc := mm.procRoot(t)
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "self", "ns"), 0o755))
	require.NoError(t, os.Symlink("pid:[4026532412]", filepath.Join(proc, "self", "ns", "pid")))
	_, reg, _ := migCollector(t, mm, nil)
	require.Empty(t, gather(t, reg, "gpuscope_gpu_container_memory_used_bytes"))
	require.Empty(t, gather(t, reg, "gpuscope_gpu_container_processes"))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"GPU_I_ID": "1", "field": "gpuscope_gpu_container_memory_used_bytes"}))
	for _, md := range mm.migDevs {
		require.Empty(t, md.GetComputeRunningProcessesCalls(), "the process lists are not read")
	}
	require.Equal(t, 30000.0, mustLookup(t, reg, "DCGM_FI_DEV_FB_USED", map[string]string{"GPU_I_ID": "1"}), "the rest is read")
	require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
}

// TestMIGParentGPM is R7 of the second review: a GPU in MIG mode is asked
// for its links' GPM metrics only (the engine activity is per instance),
// and INVALID_ARGUMENT there is read as unsupported, not an error per field
// and cycle.
func TestMIGParentGPM(t *testing.T) {
	t.Run("links only", func(t *testing.T) {
		mm := newMIGMachine(t, 1)
		var mu sync.Mutex
		var asked []nvml.GpmMetricId
		get := mm.srv.GpmMetricsGetFunc
		mm.srv.GpmMetricsGetFunc = func(req *nvml.GpmMetricsGetType) nvml.Return {
			mm.mu.Lock()
			_, instance := mm.gpmSamples[req.Sample2]
			mm.mu.Unlock()
			if !instance {
				mu.Lock()
				for i := range req.NumMetrics {
					asked = append(asked, nvml.GpmMetricId(req.Metrics[i].MetricId))
				}
				mu.Unlock()
			}
			return get(req)
		}
		_, reg, _ := migCollector(t, mm, nil)
		mu.Lock()
		require.ElementsMatch(t, []nvml.GpmMetricId{nvml.GPM_METRIC_PCIE_TX_PER_SEC, nvml.GPM_METRIC_PCIE_RX_PER_SEC,
			nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC}, asked)
		mu.Unlock()
		require.Equal(t, float64(100<<20), mustLookup(t, reg, "DCGM_FI_PROF_PCIE_TX_BYTES", wholeGPU("0")))
		require.Equal(t, float64(2000<<20), mustLookup(t, reg, "DCGM_FI_PROF_NVLINK_RX_BYTES", wholeGPU("0")))
		require.InDelta(t, 0.1, mustLookup(t, reg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", instance("1", "3g.40gb")), 1e-9)
	})
	for _, tc := range []struct {
		name     string
		breakGPM func(mm *migMachine)
	}{
		{"the sample answers INVALID_ARGUMENT", func(mm *migMachine) {
			mm.parent.GpmSampleGetFunc = func(nvml.GpmSample) nvml.Return { return nvml.ERROR_INVALID_ARGUMENT }
		}},
		{"each metric answers INVALID_ARGUMENT", func(mm *migMachine) {
			get := mm.srv.GpmMetricsGetFunc
			mm.srv.GpmMetricsGetFunc = func(req *nvml.GpmMetricsGetType) nvml.Return {
				mm.mu.Lock()
				_, instance := mm.gpmSamples[req.Sample2]
				mm.mu.Unlock()
				if instance {
					return get(req)
				}
				for i := range req.NumMetrics {
					req.Metrics[i].NvmlReturn = uint32(nvml.ERROR_INVALID_ARGUMENT)
				}
				return nvml.SUCCESS
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mm := newMIGMachine(t, 1)
			tc.breakGPM(mm)
			_, reg, _ := migCollector(t, mm, nil)
			require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
			require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "GPU_I_ID": "", "field": "DCGM_FI_PROF_PCIE_TX_BYTES"}))
			require.Empty(t, gather(t, reg, "DCGM_FI_PROF_PCIE_TX_BYTES"))
			require.InDelta(t, 0.5, mustLookup(t, reg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", instance("5", "2g.20gb")), 1e-9, "the instances are read")
			// Without GPM's PCIe, NVML's throughput call stands in.
			require.Equal(t, 1000.0*1024, mustLookup(t, reg, "gpuscope_gpu_pcie_tx_bytes_per_second", map[string]string{"gpu": "0"}))
		})
	}
}

// TestMIGReconfigured: instances destroyed or created while gpuscope runs
// go and come at the next cycle; the GPM samples of a gone one are freed.
func TestMIGReconfigured(t *testing.T) {
	mm := newMIGMachine(t, 1)
	allocs, frees := 0, 0 // cycles run on the test's goroutine
	mm.srv.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		allocs++
		return &mock.GpmSample{FreeFunc: func() nvml.Return { frees++; return nvml.SUCCESS }}, nvml.SUCCESS
	}
	c, reg, clock := migCollector(t, mm, nil)
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_FB_USED"), 3)
	require.Equal(t, 2+3*2, allocs, "two GPM samples for the GPU and two per instance")

	mm.removeInstance(6)
	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_FB_USED"), 2)
	_, ok := lookup(t, reg, "DCGM_FI_DEV_FB_USED", map[string]string{"GPU_I_ID": "6"})
	require.False(t, ok)
	require.Equal(t, 2, frees, "the destroyed instance's two samples")

	mm.addInstance(t, migInstanceSpec{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 13, 1, 100})
	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	require.Equal(t, 100.0, mustLookup(t, reg, "DCGM_FI_DEV_FB_USED", map[string]string{"GPU_I_ID": "13", "GPU_I_PROFILE": "1g.10gb"}))
	// A new instance's GPM needs a second sample, like a new GPU's.
	_, ok = lookup(t, reg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", map[string]string{"GPU_I_ID": "13"})
	require.False(t, ok)
	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	require.InDelta(t, 1.3, mustLookup(t, reg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", map[string]string{"GPU_I_ID": "13"}), 1e-9)

	// Closing frees every sample: the GPU's, the live instances' and the
	// destroyed one's (freed when it went).
	require.NoError(t, c.stop(false, nil))
	require.Equal(t, allocs, frees)
}

// TestMIGOlderDriver: a library without the MIG calls, or without GPM per
// GPU instance, is never called for them; the rest is published.
func TestMIGOlderDriver(t *testing.T) {
	for _, tc := range []struct {
		name        string
		missing     string
		wantFB      map[string]string // where DCGM_FI_DEV_FB_USED is
		gpmSupport  float64           // gpuscope_gpu_field_supported of an instance's GR_ENGINE_ACTIVE, -1 none
		migGPMCalls bool
	}{
		{"no nvmlGpmMigSampleGet", "nvmlGpmMigSampleGet", map[string]string{"GPU_I_ID": "5"}, 0, false},
		{"no nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetMigDeviceHandleByIndex", wholeGPU("0"), -1, false},
		{"no nvmlDeviceGetMigMode", "nvmlDeviceGetMigMode", wholeGPU("0"), -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mm := newMIGMachine(t, 1)
			mm.srv.LookupSymbolFunc = func(name string) error {
				if name == tc.missing {
					return errNoMIGSymbol
				}
				return nil
			}
			if tc.missing != "nvmlGpmMigSampleGet" {
				mm.parent.GetMigModeFunc = func() (int, int, nvml.Return) {
					t.Error("GetMigMode called although the library lacks MIG calls")
					return 0, 0, nvml.ERROR_FUNCTION_NOT_FOUND
				}
				// Without the MIG calls the GPU is read as a whole.
				mm.parent.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
					return nvml.Memory_v2{Total: 81559 << 20, Used: 42000 << 20, Free: 39559 << 20}, nvml.SUCCESS
				}
				mm.parent.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
			}
			_, reg, _ := migCollector(t, mm, nil)
			_, ok := lookup(t, reg, "DCGM_FI_DEV_FB_USED", tc.wantFB)
			require.True(t, ok)
			_, ok = lookup(t, reg, "DCGM_FI_DEV_POWER_USAGE", wholeGPU("0"))
			require.True(t, ok)
			v, ok := lookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"GPU_I_ID": "5", "field": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"})
			if tc.gpmSupport < 0 {
				require.False(t, ok)
			} else {
				require.Equal(t, tc.gpmSupport, v)
			}
			require.Equal(t, tc.migGPMCalls, len(mm.parent.GpmMigSampleGetCalls()) > 0)
			require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
		})
	}
}

// TestMIGDeviceLost: GPU_IS_LOST from a MIG device is the GPU's: one
// device error and none of its series, as for any lost GPU.
func TestMIGDeviceLost(t *testing.T) {
	mm := newMIGMachine(t, 2)
	c, reg, clock := migCollector(t, mm, nil)
	mm.migDevs[2].GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_GPU_IS_LOST }
	clock.Advance(10 * time.Second)
	c.collectOnce(bg)
	for _, s := range gather(t, reg, "DCGM_FI_DEV_FB_USED") {
		require.Equal(t, "1", s.labels["gpu"])
	}
	_, ok := lookup(t, reg, "DCGM_FI_DEV_POWER_USAGE", wholeGPU("0"))
	require.False(t, ok)
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "0", "field": "device"}))
}

// TestMIGEnumerationFails: when the instances cannot be listed, their
// fields fail (counted once per enabled field and cycle) and the GPU does
// not fall back to whole-GPU values that would change the series' labels.
func TestMIGEnumerationFails(t *testing.T) {
	for _, processes := range []bool{true, false} {
		mm := newMIGMachine(t, 1)
		c, reg, clock := migCollector(t, mm, func(o *Options) { o.Config.Families.Processes = processes })
		mm.parent.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		clock.Advance(10 * time.Second)
		c.collectOnce(bg)
		require.Empty(t, gather(t, reg, "DCGM_FI_DEV_FB_USED"))
		require.Empty(t, gather(t, reg, "gpuscope_gpu_container_memory_used_bytes"))
		_, ok := lookup(t, reg, "DCGM_FI_DEV_POWER_USAGE", wholeGPU("0"))
		require.True(t, ok)
		for _, f := range []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"} {
			require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "0", "field": f}), f)
		}
		// A family switched off is not read, so it does not fail.
		_, ok = lookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"field": "gpuscope_gpu_container_memory_used_bytes"})
		require.Equal(t, processes, ok)
	}
}
