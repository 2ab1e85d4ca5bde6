package doctor

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu"
)

// h100s is go-nvml's DGX H100 mock with n GPUs that all have GPM.
func h100s(n int) *server.Server {
	cfgs := make([]gpus.Config, n)
	for i := range cfgs {
		cfgs[i] = gpus.H100_SXM5_80GB
	}
	srv := dgxh100.NewWithGPUs(cfgs...)
	for _, d := range srv.Devices {
		d.(*server.Device).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
			return nvml.GpmSupport{IsSupportedDevice: 1}, nvml.SUCCESS
		}
	}
	return srv
}

func TestGPUChecks(t *testing.T) {
	noDevices := []string{filepath.Join(t.TempDir(), "nvidia[0-9]*")}
	kmsg := filepath.Join(t.TempDir(), "kmsg")
	touch(t, kmsg)
	kernelLog := Check{Name: "xid-kernel-log", Status: StatusOK,
		Summary: kmsg + " readable as uid 0: XIDs are read from the kernel log as well as from NVML (a running service may differ: see its gpuscope_gpu_collector_kernel_log_reading)"}
	device := filepath.Join(t.TempDir(), "nvidia0")
	touch(t, device)
	notFound := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	for _, tc := range []struct {
		name    string
		lib     nvml.Interface
		devices []string
		cfg     func(*gpu.Config)
		want    []Check // Hint is compared only when set here
	}{
		{
			name: "no driver on a machine without GPUs",
			lib:  notFound,
			want: []Check{{Name: "nvml", Status: StatusWarn, Summary: "no NVIDIA driver found, GPU metrics off"}},
		},
		{
			name:    "GPU present, library missing",
			lib:     notFound,
			devices: []string{filepath.Join(filepath.Dir(device), "nvidia[0-9]*")},
			want: []Check{{Name: "nvml", Status: StatusFail, Summary: "NVIDIA GPU present (" + device + ") but libnvidia-ml.so.1 cannot be loaded, GPU metrics off",
				Hint: "install the driver's user-space libraries, or run the container with the NVIDIA runtime (docker run --gpus all)"}},
		},
		{
			name: "no driver with backend nvml",
			lib:  notFound,
			cfg:  func(c *gpu.Config) { c.Backend = gpu.BackendNVML },
			want: []Check{{Name: "nvml", Status: StatusFail, Summary: "no NVIDIA driver found, and gpu.backend is nvml: the GPU collector is down"}},
		},
		{
			name: "NVML refuses",
			lib:  &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_NO_PERMISSION }},
			want: []Check{{Name: "nvml", Status: StatusFail, Summary: "NVML: initialise NVML: ERROR_NO_PERMISSION"}},
		},
		{
			name: "backend none",
			cfg:  func(c *gpu.Config) { c.Backend = gpu.BackendNone },
			want: []Check{{Name: "nvml", Status: StatusOK, Summary: "GPU collection off (gpu.backend: none)"}},
		},
		{
			name: "eight H100s",
			lib:  h100s(8),
			want: []Check{
				{Name: "nvml", Status: StatusOK, Summary: "libnvidia-ml.so.1 loaded, NVML 12.550.54.15"},
				{Name: "driver", Status: StatusOK, Summary: "driver 550.54.15, CUDA 12.4"},
				{Name: "gpus", Status: StatusOK, Summary: "8 GPUs: 8× NVIDIA H100 80GB HBM3"},
				{Name: "gpm", Status: StatusOK, Summary: "GPM on every GPU (0-7): DCGM_FI_PROF_* published"},
				{Name: "mig", Status: StatusOK, Summary: "MIG supported on GPU 0-7, off"},
				kernelLog,
			},
		},
		{
			name: "MIG on, GPM unsupported",
			lib: func() nvml.Interface {
				srv := h100s(2)
				ret, _ := srv.Devices[1].SetMigMode(nvml.DEVICE_MIG_ENABLE)
				require.Equal(t, nvml.SUCCESS, ret)
				for _, d := range srv.Devices {
					d.(*server.Device).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
						return nvml.GpmSupport{}, nvml.SUCCESS
					}
				}
				return srv
			}(),
			want: []Check{
				{Name: "nvml", Status: StatusOK, Summary: "libnvidia-ml.so.1 loaded, NVML 12.550.54.15"},
				{Name: "driver", Status: StatusOK, Summary: "driver 550.54.15, CUDA 12.4"},
				{Name: "gpus", Status: StatusOK, Summary: "2 GPUs: 2× NVIDIA H100 80GB HBM3"},
				{Name: "gpm", Status: StatusWarn, Summary: "no GPU has GPM: DCGM_FI_PROF_* (SM active, tensor, DRAM activity) absent"},
				{Name: "mig", Status: StatusOK, Summary: "MIG on on GPU 1: memory, engine activity and processes per GPU instance (GPU_I_ID)"},
				kernelLog,
			},
		},
		{
			name: "GPM on some GPUs, profiling off",
			lib: func() nvml.Interface {
				srv := h100s(3)
				srv.Devices[2].(*server.Device).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
					return nvml.GpmSupport{}, nvml.ERROR_NOT_SUPPORTED
				}
				return srv
			}(),
			cfg: func(c *gpu.Config) { c.Families.Profiling = false },
			want: []Check{
				{Name: "nvml", Status: StatusOK, Summary: "libnvidia-ml.so.1 loaded, NVML 12.550.54.15"},
				{Name: "driver", Status: StatusOK, Summary: "driver 550.54.15, CUDA 12.4"},
				{Name: "gpus", Status: StatusOK, Summary: "3 GPUs: 3× NVIDIA H100 80GB HBM3"},
				{Name: "gpm", Status: StatusOK, Summary: "profiling metrics off (gpu.families.profiling: false)"},
				{Name: "mig", Status: StatusOK, Summary: "MIG supported on GPU 0-2, off"},
				kernelLog,
			},
		},
		{
			name: "GPM on some GPUs",
			lib: func() nvml.Interface {
				srv := h100s(3)
				srv.Devices[2].(*server.Device).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
					return nvml.GpmSupport{}, nvml.ERROR_NOT_SUPPORTED
				}
				return srv
			}(),
			want: []Check{
				{Name: "nvml", Status: StatusOK, Summary: "libnvidia-ml.so.1 loaded, NVML 12.550.54.15"},
				{Name: "driver", Status: StatusOK, Summary: "driver 550.54.15, CUDA 12.4"},
				{Name: "gpus", Status: StatusOK, Summary: "3 GPUs: 3× NVIDIA H100 80GB HBM3"},
				{Name: "gpm", Status: StatusWarn, Summary: "GPM on GPU 0-1, not on 2: DCGM_FI_PROF_* only for the first"},
				{Name: "mig", Status: StatusOK, Summary: "MIG supported on GPU 0-2, off"},
				kernelLog,
			},
		},
		{
			name: "no GPU visible",
			lib:  h100s(0),
			want: []Check{
				{Name: "nvml", Status: StatusOK, Summary: "libnvidia-ml.so.1 loaded, NVML 12.550.54.15"},
				{Name: "driver", Status: StatusOK, Summary: "driver 550.54.15, CUDA 12.4"},
				{Name: "gpus", Status: StatusWarn, Summary: "NVML sees no GPU, GPU metrics off"},
			},
		},
		{
			name: "a lost GPU",
			lib: func() nvml.Interface {
				srv := h100s(2)
				srv.Devices[0].(*server.Device).GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
				return srv
			}(),
			want: []Check{
				{Name: "nvml", Status: StatusOK, Summary: "libnvidia-ml.so.1 loaded, NVML 12.550.54.15"},
				{Name: "driver", Status: StatusOK, Summary: "driver 550.54.15, CUDA 12.4"},
				{Name: "gpus", Status: StatusWarn, Summary: "1 of 2 GPUs identified; GPU 0: read name: ERROR_GPU_IS_LOST"},
				{Name: "gpm", Status: StatusOK, Summary: "GPM on every GPU (1): DCGM_FI_PROF_* published"},
				{Name: "mig", Status: StatusOK, Summary: "MIG supported on GPU 1, off"},
				kernelLog,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default(nil)
			if tc.cfg != nil {
				tc.cfg(&cfg.GPU.Config)
			}
			devices := tc.devices
			if devices == nil {
				devices = noDevices
			}
			o := Options{Config: cfg, NVML: tc.lib, NVIDIADevices: devices, KernelLog: kmsg, Geteuid: func() int { return 0 }}.withDefaults()
			got := gpuChecks(context.Background(), &o)
			requireChecks(t, tc.want, got)
		})
	}
}

// requireChecks compares checks by name, status and summary, and by hint
// where want has one; every warn and fail must have a hint.
func requireChecks(t *testing.T, want, got []Check) {
	t.Helper()
	require.Len(t, got, len(want), "got %+v", got)
	for i := range want {
		g := got[i]
		if want[i].Hint == "" {
			g.Hint = ""
		}
		require.Equal(t, want[i], g)
		if got[i].Status != StatusOK {
			require.NotEmpty(t, got[i].Hint, "%s: a %s without a hint", got[i].Name, got[i].Status)
		}
	}
}

func TestKernelLogCheck(t *testing.T) {
	readable := filepath.Join(t.TempDir(), "kmsg")
	touch(t, readable)
	missing := filepath.Join(t.TempDir(), "kmsg")
	for _, tc := range []struct {
		name, path string
		want       Check
	}{
		{"readable", readable, Check{Name: "xid-kernel-log", Status: StatusOK,
			Summary: readable + " readable as uid 998: XIDs are read from the kernel log as well as from NVML (a running service may differ: see its gpuscope_gpu_collector_kernel_log_reading)"}},
		{"not readable", missing, Check{Name: "xid-kernel-log", Status: StatusWarn,
			Summary: missing + " cannot be read as uid 998 (no such file or directory): XIDs NVML does not deliver (79 fallen off the bus, 119 and 120 GSP errors) are missed",
			Hint:    kernelLogHint}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{KernelLog: tc.path, Geteuid: func() int { return 998 }}.withDefaults()
			requireChecks(t, []Check{tc.want}, []Check{kernelLogCheck(&o)})
		})
	}
	require.Contains(t, kernelLogHint, "ProtectKernelLogs=no", "the packaged unit closes the log; the hint says how to open it")
	require.Contains(t, kernelLogHint, "CAP_SYSLOG")
	require.Contains(t, kernelLogHint, "DeviceAllow=/dev/kmsg r")
}
