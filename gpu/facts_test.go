package gpu

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/require"
)

// factsMachine is go-nvml's DGX H100 mock with two GPUs, GPM answered per
// GPU and Init/Shutdown counted.
func factsMachine(t *testing.T) (*server.Server, *int) {
	t.Helper()
	srv := dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB, gpus.H100_SXM5_80GB)
	open := new(int)
	srv.InitFunc = func() nvml.Return { *open++; return nvml.SUCCESS }
	srv.ShutdownFunc = func() nvml.Return { *open--; return nvml.SUCCESS }
	for _, d := range srv.Devices {
		d.(*server.Device).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
			return nvml.GpmSupport{IsSupportedDevice: 1}, nvml.SUCCESS
		}
	}
	return srv, open
}

func TestReadFacts(t *testing.T) {
	noSymbol := errors.New("undefined symbol")
	for _, tc := range []struct {
		name   string
		change func(*server.Server)
		check  func(*testing.T, *Facts)
	}{
		{
			name: "driver, versions and GPUs",
			check: func(t *testing.T, f *Facts) {
				require.Equal(t, "550.54.15", f.DriverVersion)
				require.Equal(t, "12.550.54.15", f.NVMLVersion)
				require.Equal(t, "12.4", CUDAVersionString(f.CUDAVersion))
				require.Len(t, f.GPUs, 2)
				for i, g := range f.GPUs {
					require.NoError(t, g.Err)
					require.Equal(t, i, g.Index)
					require.Equal(t, "NVIDIA H100 80GB HBM3", g.Name)
					require.True(t, g.GPM)
					require.True(t, g.MIGCapable)
					require.False(t, g.MIGEnabled)
				}
				require.True(t, f.GPMLibrary)
				require.True(t, f.MIGLibrary)
			},
		},
		{
			name: "MIG on for GPU 1",
			change: func(s *server.Server) {
				ret, _ := s.Devices[1].SetMigMode(nvml.DEVICE_MIG_ENABLE)
				require.Equal(t, nvml.SUCCESS, ret)
			},
			check: func(t *testing.T, f *Facts) {
				require.False(t, f.GPUs[0].MIGEnabled)
				require.True(t, f.GPUs[1].MIGEnabled)
			},
		},
		{
			name: "GPU without MIG",
			change: func(s *server.Server) {
				s.Devices[0].(*server.Device).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
			},
			check: func(t *testing.T, f *Facts) {
				require.False(t, f.GPUs[0].MIGCapable)
				require.True(t, f.GPUs[1].MIGCapable)
			},
		},
		{
			name: "GPM unsupported by the GPU",
			change: func(s *server.Server) {
				s.Devices[1].(*server.Device).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
					return nvml.GpmSupport{IsSupportedDevice: 0}, nvml.SUCCESS
				}
			},
			check: func(t *testing.T, f *Facts) {
				require.True(t, f.GPUs[0].GPM)
				require.False(t, f.GPUs[1].GPM)
			},
		},
		{
			name: "driver without GPM calls is not asked",
			change: func(s *server.Server) {
				s.LookupSymbolFunc = func(name string) error {
					if name == "nvmlGpmSampleGet" {
						return noSymbol
					}
					return nil
				}
				for _, d := range s.Devices {
					d.(*server.Device).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
						t.Error("GpmQueryDeviceSupport called although the library lacks GPM")
						return nvml.GpmSupport{}, nvml.ERROR_FUNCTION_NOT_FOUND
					}
				}
			},
			check: func(t *testing.T, f *Facts) {
				require.False(t, f.GPMLibrary)
				require.False(t, f.GPUs[0].GPM)
			},
		},
		{
			name: "GPU that cannot be identified",
			change: func(s *server.Server) {
				s.Devices[1].(*server.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
			},
			check: func(t *testing.T, f *Facts) {
				require.NoError(t, f.GPUs[0].Err)
				require.ErrorIs(t, f.GPUs[1].Err, nvml.ERROR_GPU_IS_LOST)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, open := factsMachine(t)
			if tc.change != nil {
				tc.change(srv)
			}
			f, err := ReadFacts(srv, []string{filepath.Join(t.TempDir(), "none*")})
			require.NoError(t, err)
			require.Zero(t, *open, "NVML left initialised")
			tc.check(t, f)
		})
	}
}

func TestReadFactsErrors(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "nvidia0")
	require.NoError(t, os.WriteFile(dev, nil, 0o600))
	for _, tc := range []struct {
		name       string
		lib        nvml.Interface
		devices    []string
		wantErr    error
		wantDevice string
	}{
		{
			name:    "no driver, no device",
			lib:     &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }},
			devices: []string{filepath.Join(t.TempDir(), "nvidia[0-9]*")},
			wantErr: ErrNoDriver,
		},
		{
			name:       "device without the library",
			lib:        &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }},
			devices:    []string{filepath.Join(filepath.Dir(dev), "nvidia[0-9]*")},
			wantErr:    ErrNoDriver,
			wantDevice: dev,
		},
		{
			name:    "init refused",
			lib:     &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_NO_PERMISSION }},
			devices: []string{},
			wantErr: nvml.ERROR_NO_PERMISSION,
		},
		{
			name: "driver version unreadable",
			lib: &mock.Interface{
				InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
				ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
				SystemGetNVMLVersionFunc:   func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN },
				SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN },
			},
			devices: []string{},
			wantErr: nvml.ERROR_UNKNOWN,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ReadFacts(tc.lib, tc.devices)
			require.ErrorIs(t, err, tc.wantErr)
			require.Equal(t, tc.wantDevice, f.DeviceFile)
		})
	}
}
