package gpu

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

// libnvidiaML reports whether this machine has an NVIDIA driver.
func libnvidiaML() bool {
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/lib/aarch64-linux-gnu"} {
		if _, err := os.Stat(dir + "/libnvidia-ml.so.1"); err == nil {
			return true
		}
	}
	return false
}

// TestAutoWithoutDriver is gpuscope on a machine without NVIDIA GPUs: the
// real NVML loader finds no library, the collector says so once and
// exports no GPU series, and nothing fails.
func TestAutoWithoutDriver(t *testing.T) {
	if libnvidiaML() {
		t.Skip("this machine has an NVIDIA driver")
	}
	var logs syncBuffer
	cfg := DefaultConfig() // backend auto
	c, err := New(Options{Config: cfg, Interval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		NVIDIADevices: []string{filepath.Join(t.TempDir(), "nvidia[0-9]*")}})
	require.NoError(t, err)
	reg := newRegistry(t, c)

	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	require.Eventually(t, func() bool {
		return bytes.Contains(logs.Bytes(), []byte("No NVIDIA driver found"))
	}, 5*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // a few more cycles
	cancel()
	require.NoError(t, <-done)

	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
	require.Equal(t, "none", gather(t, reg, "gpuscope_gpu_collector_backend_info")[0].labels["backend"],
		"auto without a driver runs no backend; GPUCollectorDown tells this from a broken one by it")
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		require.Regexp(t, "^gpuscope_gpu_collector_", mf.GetName(), "no GPU series without GPUs")
	}
	require.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("No NVIDIA driver found")), "logged once: %s", logs.String())
	require.NotContains(t, logs.String(), "level=WARN", "no driver is not a problem for backend auto")
}

func TestBackendNone(t *testing.T) {
	c, reg := testCollector(t, Options{Config: Config{Backend: BackendNone, HostnameLabel: HostnameLabelDCGM}})
	c.collectOnce(bg)
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
	require.Equal(t, "none", gather(t, reg, "gpuscope_gpu_collector_backend_info")[0].labels["backend"])
	require.Empty(t, gather(t, reg, "DCGM_FI_DEV_GPU_TEMP"))
}

func TestRunTwice(t *testing.T) {
	clock := newFakeClock()
	o, _ := fakeOptions(clock, oneGPU)
	c, err := New(o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	require.Eventually(t, func() bool { return c.running.Load() }, time.Second, time.Millisecond)
	require.ErrorContains(t, c.Run(ctx), "already running")
	require.ErrorContains(t, c.SampleOnce(ctx), "already running", "a cycle of its own beside Run's")
	cancel()
	require.NoError(t, <-done)
}

// TestAutoDeviceWithoutLibrary: backend auto where NVIDIA devices exist but
// libnvidia-ml cannot be loaded (a GPU node's container without the NVIDIA
// runtime) is a collector that is down, not a machine without GPUs, so
// GPUCollectorDown fires.
func TestAutoDeviceWithoutLibrary(t *testing.T) {
	for _, tc := range []struct {
		name        string
		device      string // created under the fake /dev, "" for none
		wantBackend string
		wantLog     string
	}{
		{"device node", "nvidia0", "nvml", "NVIDIA GPU present"},
		{"driver's proc entry", "gpus/0000:18:00.0", "nvml", "NVIDIA GPU present"},
		{"no device", "", "none", "No NVIDIA driver found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := t.TempDir()
			if tc.device != "" {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dev, tc.device)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(dev, tc.device), nil, 0o644))
			}
			srv := newMockMachine(t, 1).srv
			srv.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
			var logs syncBuffer
			c, reg := testCollector(t, Options{Config: DefaultConfig(), NVML: srv, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				NVIDIADevices: []string{filepath.Join(dev, "nvidia[0-9]*"), filepath.Join(dev, "gpus", "*")}})
			c.collectOnce(bg)
			require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
			require.Equal(t, tc.wantBackend, gather(t, reg, "gpuscope_gpu_collector_backend_info")[0].labels["backend"])
			require.Contains(t, logs.String(), tc.wantLog)
		})
	}
}
