package gpu

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

const (
	procModuleVersion     = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Thu Feb 22 01:44:30 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
	procOpenModuleVersion = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (dvs-builder@U16-I3-B03-4-3)  Wed Jul 16 19:00:00 UTC 2025\n"
)

// fakeUpgrade lays out what restartWouldLoadMatch reads: a /proc whose
// self/maps maps libnvidia-ml.so.<loaded>, whose driver/nvidia/version is
// module (a format string of procModuleVersion's kind and a version), and
// a library directory whose libnvidia-ml.so.1 points at
// libnvidia-ml.so.<onDisk>. An empty version leaves that part out.
func fakeUpgrade(t *testing.T, loaded, moduleFormat, module, onDisk string) string {
	t.Helper()
	proc, lib := t.TempDir(), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "self"), 0o755))
	maps := "7f0c1a000000-7f0c1a100000 r-xp 00000000 fe:00 131 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
	if loaded != "" {
		path := filepath.Join(lib, "libnvidia-ml.so."+loaded)
		require.NoError(t, os.WriteFile(path, nil, 0o644))
		maps += "7f0c1b000000-7f0c1b200000 r-xp 00000000 fe:00 4242 " + path + " (deleted)\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(proc, "self", "maps"), []byte(maps), 0o644))
	if module != "" {
		require.NoError(t, os.MkdirAll(filepath.Join(proc, "driver", "nvidia"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(proc, "driver", "nvidia", "version"), []byte(fmt.Sprintf(moduleFormat, module)), 0o644))
	}
	if onDisk != "" {
		target := filepath.Join(lib, "libnvidia-ml.so."+onDisk)
		require.NoError(t, os.WriteFile(target, nil, 0o644))
		require.NoError(t, os.Symlink(filepath.Base(target), filepath.Join(lib, nvmlLibrary)))
	}
	return proc
}

func TestRestartWouldLoadMatch(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		loaded, format, module, disk string
		want                         bool
	}{
		{"upgraded in place, module reloaded: a restart loads the new library", "550.54.15", procModuleVersion, "580.65.06", "580.65.06", true},
		{"the open kernel module", "550.54.15", procOpenModuleVersion, "580.65.06", "580.65.06", true},
		{"library upgraded, old module still loaded: only a reboot helps", "580.65.06", procModuleVersion, "550.54.15", "580.65.06", false},
		{"both upgraded past the loaded library, differently", "550.54.15", procModuleVersion, "580.65.06", "580.76.05", false},
		{"nothing differs", "550.54.15", procModuleVersion, "550.54.15", "550.54.15", false},
		{"no kernel module version", "550.54.15", procModuleVersion, "", "580.65.06", false},
		{"no NVML mapped", "", procModuleVersion, "580.65.06", "580.65.06", false},
		{"no library beside it", "550.54.15", procModuleVersion, "580.65.06", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := restartWouldLoadMatch(fakeUpgrade(t, tc.loaded, tc.format, tc.module, tc.disk))
			require.Equal(t, tc.want, why != "", why)
			if tc.want {
				require.Contains(t, why, "NVML library "+tc.loaded+" is loaded")
			}
		})
	}
}

// TestNVMLDriverUpgradedInPlace is R9 of the second review: after an
// in-place driver upgrade, a failed nvmlInit keeps go-nvml's old library
// loaded, so nvmlInit answers LIB_RM_VERSION_MISMATCH until gpuscope
// restarts. Where a restart would load a library that matches the kernel
// module, Run ends with ErrRestartNeeded (the supervisor starts gpuscope
// again); where it would not (the old module is still loaded), the
// collector stays down with the reason and gpuscope runs on.
func TestNVMLDriverUpgradedInPlace(t *testing.T) {
	for _, tc := range []struct {
		name         string
		loaded, disk string
		module       string
		wantRestart  bool
	}{
		{"module reloaded: restart", "550.54.15", "580.65.06", "580.65.06", true},
		{"old module still loaded: stay down", "580.65.06", "580.65.06", "550.54.15", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMockMachine(t, 1)
			m.srv.InitFunc = func() nvml.Return { return nvml.ERROR_LIB_RM_VERSION_MISMATCH }
			var logs syncBuffer
			cfg := DefaultConfig()
			cfg.Backend = BackendNVML
			c, err := New(Options{Config: cfg, NVML: m.srv, Interval: 20 * time.Millisecond, Hostname: "h", KernelLog: "-",
				ProcRoot: fakeUpgrade(t, tc.loaded, procModuleVersion, tc.module, tc.disk),
				Logger:   slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			reg := newRegistry(t, c)
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			select {
			case err := <-done:
				require.True(t, tc.wantRestart, "Run ended: %v", err)
				require.ErrorIs(t, err, ErrRestartNeeded)
				require.ErrorIs(t, err, nvml.ERROR_LIB_RM_VERSION_MISMATCH)
				require.Contains(t, err.Error(), "NVML library "+tc.loaded+" is loaded")
				require.Contains(t, logs.String(), "GPU collector stopping gpuscope so that it is started again")
			case <-time.After(time.Second): // 50 cycles; restartVotes opens within the first few
				require.False(t, tc.wantRestart, "Run did not end")
				require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
				require.Contains(t, logs.String(), "ERROR_LIB_RM_VERSION_MISMATCH")
				cancel()
				require.NoError(t, <-done)
			}
		})
	}
}
