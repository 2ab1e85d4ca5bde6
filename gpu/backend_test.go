package gpu

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/workload"
)

// fakeBackend is a Backend made through Options.NewBackend, as gpu/sim's
// simulator is; it reports what sample builds with the exported API.
type fakeBackend struct {
	env    *BackendEnv
	sample func(env *BackendEnv, now time.Time) *Sample
	closed int
}

func (b *fakeBackend) Name() string               { return "fake" }
func (b *fakeBackend) Open(context.Context) error { return nil }
func (b *fakeBackend) Sample(_ context.Context, now time.Time) *Sample {
	return b.sample(b.env, now)
}

func (b *fakeBackend) Close() error {
	b.closed++
	return nil
}

// fakeOptions are Options whose backend is a fakeBackend reporting
// sample; the backend is there once New has made it.
func fakeOptions(clock *fakeClock, sample func(*BackendEnv, time.Time) *Sample) (Options, *fakeBackend) {
	b := &fakeBackend{sample: sample}
	cfg := DefaultConfig()
	cfg.Backend = BackendSim
	return Options{
		Config: cfg, Now: clock.Now, Interval: 15 * time.Second,
		NewBackend: func(env *BackendEnv) (Backend, error) {
			b.env = env
			return b, nil
		},
	}, b
}

// oneGPU is a GPU whose temperature is 40 °C.
func oneGPU(env *BackendEnv, now time.Time) *Sample {
	s := NewSample(now)
	g := NewGPUSample(env.Identity(0, "GPU-0", "00000000:18:00.0", "NVIDIA H100 80GB HBM3", "580.105.08"))
	g.Set(FieldGPUTemp, 40)
	s.AddGPU(g)
	return s
}

func TestNewBackend(t *testing.T) {
	t.Run("sim needs it", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Backend = BackendSim
		_, err := New(Options{Config: cfg})
		require.ErrorContains(t, err, "gpu.backend: sim needs the simulator")
	})
	t.Run("its error is New's", func(t *testing.T) {
		bad := errors.New("gpu.sim.count: must be between 1 and 1024, got 0")
		_, err := New(Options{Config: DefaultConfig(), NewBackend: func(*BackendEnv) (Backend, error) { return nil, bad }})
		require.Equal(t, bad, err)
	})
	t.Run("in place of the config's", func(t *testing.T) {
		clock := newFakeClock()
		o, b := fakeOptions(clock, oneGPU)
		o.Config.Backend = BackendNVML
		c, reg := testCollector(t, o)
		c.collectOnce(bg)
		require.Equal(t, 40.0, mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "0", "Hostname": "gpu-node-1"}))
		require.Equal(t, "fake", gather(t, reg, "gpuscope_gpu_collector_backend_info")[0].labels["backend"])
		require.NoError(t, c.stop(false, nil))
		require.Equal(t, 1, b.closed, "the collector closes what it opened")
	})
}

// TestSampleBuilder: what a backend outside this package reports with
// NewSample, NewGPUSample and BackendEnv is labelled and published as the
// NVML backend's is.
func TestSampleBuilder(t *testing.T) {
	clock := newFakeClock()
	var lastAnswer time.Time
	o, _ := fakeOptions(clock, func(env *BackendEnv, now time.Time) *Sample {
		s := NewSample(now)
		id0 := env.Identity(0, "GPU-0", "00000000:18:00.0", "NVIDIA H100 80GB HBM3", "580.105.08")
		g := NewGPUSample(id0)
		g.Set(FieldGPUTemp, 41)
		g.Set(FieldGPUUtil, 99)
		g.SetUnsupported(FieldGPUUtil) // drops the value
		g.SetUnsupported(FieldMemoryTemp)
		g.Set(FieldXID, 13)
		g.AddXIDCount(13, 2)
		g.SetClockEvents(0x20)
		g.Set(FieldECCDBEVolTotal, 7) // a family that is off
		g.SetContainers([]Container{env.Container("/c", 1<<30, 12, 2)}, Orphans{})
		s.AddGPU(g)

		id1 := env.Identity(1, "GPU-1", "00000000:2A:00.0", "NVIDIA H100 80GB HBM3", "580.105.08")
		lost := NewGPUSample(id1)
		lost.Set(FieldXID, 79)
		lost.AddXIDCount(79, 1)
		s.AddUnreadGPU(lost, lastAnswer)
		s.AddError(id1, "device", nvml.ERROR_GPU_IS_LOST)
		s.AddError(nil, "driver", errors.New("the driver went away"))

		id2 := env.Identity(2, "GPU-2", "00000000:3A:00.0", "NVIDIA H100 80GB HBM3", "580.105.08")
		mig := NewGPUSample(id2)
		mig.Set(FieldPowerUsage, 300)
		mig.Set(FieldFBUsed, 1000) // the sum of the instances: dropped
		in := NewInstanceSample(id2.Instance(1, 3, 40192))
		in.Set(FieldFBUsed, 30000)
		in.SetContainers([]Container{env.Container("/c/train", 30000<<20, 0, 1)}, Orphans{})
		in.SetUnsupported(FieldContainerSM)
		mig.AddInstance(in)
		s.AddGPU(mig)
		return s
	})
	o.Config.Families.ClockEvents = true
	o.Config.Families.ECC = false
	o.ContainerLookup = func(id string) (workload.Metadata, bool) { return workload.Metadata{Name: "n" + id}, true }
	c, reg := testCollector(t, o)
	lastAnswer = clock.Now().Add(-time.Minute)
	c.collectOnce(bg)

	gpu0, gpu1, gpu2 := map[string]string{"gpu": "0"}, map[string]string{"gpu": "1"}, map[string]string{"gpu": "2"}
	require.Equal(t, 41.0, mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "0", "UUID": "GPU-0", "pci_bus_id": "00000000:18:00.0", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu-node-1", "DCGM_FI_DRIVER_VERSION": "580.105.08"}))
	_, ok := lookup(t, reg, "DCGM_FI_DEV_GPU_UTIL", gpu0)
	require.False(t, ok, "unsupported")
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": "DCGM_FI_DEV_GPU_UTIL"}))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": "DCGM_FI_DEV_MEMORY_TEMP"}))
	require.Equal(t, 13.0, mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "0", "err_code": "13"}))
	require.Equal(t, 2.0, mustLookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "0", "err_code": "13"}))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_clock_event_active", map[string]string{"gpu": "0", "reason": "sw_thermal"}))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_clock_event_active", map[string]string{"gpu": "0", "reason": "gpu_idle"}))
	require.Empty(t, gather(t, reg, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), "a family that is off is not published")
	c0 := map[string]string{"gpu": "0", "id": "/c", "name": "n/c"}
	require.Equal(t, float64(1<<30), mustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", c0))
	require.Equal(t, 12.0, mustLookup(t, reg, "gpuscope_gpu_container_sm_utilization_percent", c0))
	require.Equal(t, 2.0, mustLookup(t, reg, "gpuscope_gpu_container_processes", c0))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", gpu0))
	require.Equal(t, float64(clock.Now().Unix()), mustLookup(t, reg, "gpuscope_gpu_last_sample_timestamp_seconds", gpu0))

	// The GPU that was not read: its XID series and when it last answered.
	require.Equal(t, 79.0, mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", gpu1))
	require.Equal(t, float64(lastAnswer.Unix()), mustLookup(t, reg, "gpuscope_gpu_last_sample_timestamp_seconds", gpu1))
	_, ok = lookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu1)
	require.False(t, ok)
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "1", "field": "device"}))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "", "field": "driver"}))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil), "two GPUs answered")

	// MIG: whole-GPU fields on the GPU, instance fields per instance.
	require.Equal(t, 300.0, mustLookup(t, reg, "DCGM_FI_DEV_POWER_USAGE", gpu2))
	inst := map[string]string{"gpu": "2", "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb"}
	require.Equal(t, 30000.0, mustLookup(t, reg, "DCGM_FI_DEV_FB_USED", inst))
	require.Len(t, gather(t, reg, "DCGM_FI_DEV_FB_USED"), 1, "the instance's only")
	require.Equal(t, float64(30000<<20), mustLookup(t, reg, "gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": "2", "GPU_I_ID": "1", "id": "/c/train", "name": "n/c/train"}))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "2", "GPU_I_ID": "1", "field": "gpuscope_gpu_container_sm_utilization_percent"}))
}

func TestSampleNoGPUAnswered(t *testing.T) {
	clock := newFakeClock()
	o, _ := fakeOptions(clock, func(env *BackendEnv, now time.Time) *Sample {
		s := NewSample(now)
		id := env.Identity(0, "GPU-0", "00000000:18:00.0", "m", "d")
		s.AddUnreadGPU(NewGPUSample(id), time.Time{})
		s.AddError(id, "device", nvml.ERROR_GPU_IS_LOST)
		return s
	})
	c, reg := testCollector(t, o)
	c.collectOnce(bg)
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil), "a cycle that read no GPU")
	require.Empty(t, gather(t, reg, "gpuscope_gpu_last_sample_timestamp_seconds"), "never answered")
}

func TestFieldString(t *testing.T) {
	require.Equal(t, "DCGM_FI_DEV_SM_CLOCK", FieldSMClock.String())
	require.Equal(t, "gpuscope_gpu_container_memory_used_bytes", FieldContainerMemory.String())
	require.Equal(t, "Field(255)", Field(255).String())
}
