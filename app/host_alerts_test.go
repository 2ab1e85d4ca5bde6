//go:build linux

package app_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuscope/gpuscope/app"
)

// TestDiskFillingAlerts: gpuscope's data directory on a 64 MiB tmpfs,
// three quarters full and filling at 200 KiB/s, fires
// GpuscopeDataDiskFillingUp (from gpuscope's own
// gpuscope_tsdb_filesystem_*_bytes) and HostFilesystemFillingUp for that
// filesystem (from cAdvisor's root-cgroup container_fs_usage_bytes, which
// lists the tmpfs by its mount point), both with the time left, at 360×
// (rules.builtin.time_scale: the 6-hour trend is a minute, "within a day"
// 4 minutes, their 30 minutes 5 seconds). The disk never fills.
//
// HostOOMKills is tested by its promtool unit tests only: an OOM kill of
// the machine's own, which is what it is for, cannot be caused safely on
// a shared test host; the root cgroup's count it reads is tested in
// scrape/cadvisor (TestOOMKillCounted).
func TestDiskFillingAlerts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	require.NoError(t, os.Mkdir(data, 0o755))
	if err := unix.Mount("tmpfs", data, "tmpfs", 0, "size=64m"); err != nil {
		t.Skipf("cannot mount a 64 MiB tmpfs as the data directory (needs root or CAP_SYS_ADMIN): %v", err)
	}
	// Registered before serve's, so run after the process has stopped.
	t.Cleanup(func() { require.NoError(t, unix.Unmount(data, 0)) })

	// Three quarters full before gpuscope starts.
	filler := filepath.Join(data, "checkpoint.pt")
	f, err := os.Create(filler)
	require.NoError(t, err)
	defer f.Close()
	block := make([]byte, 100<<10)
	for range 48 * 10 { // 48 MiB
		_, err := f.Write(block)
		require.NoError(t, err)
	}
	require.NoError(t, f.Sync())

	cfg := writeConfig(t, dir, `
global:
  scrape_interval: 1s
  evaluation_interval: 1s
gpu: {backend: none}
rules:
  builtin:
    time_scale: 360
`)
	p := serve(t, data, configFile(cfg), with(func(s *app.Settings) { s.DiskReserve = 0 }))

	// A checkpoint written at 200 KiB/s: about 14 MiB are left, full in
	// about 70 s, within the scaled day. Stop at 60 MiB whatever happens.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for written := 48 << 20; written < 60<<20; written += len(block) {
			select {
			case <-ctx.Done():
				done <- nil
				return
			case <-tick.C:
			}
			if _, err := f.Write(block); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()

	var got map[string]promv1.Alert
	eventually(t, 70*time.Second, "GpuscopeDataDiskFillingUp and HostFilesystemFillingUp for the data directory", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := p.api().Alerts(ctx)
		if err != nil {
			return err
		}
		got = map[string]promv1.Alert{}
		for _, a := range res.Alerts {
			name := string(a.Labels["alertname"])
			switch {
			case a.State != promv1.AlertStateFiring:
			case name == "GpuscopeDataDiskFillingUp":
				got[name] = a
			case name == "HostFilesystemFillingUp" && string(a.Labels["device"]) == data:
				got[name] = a
			}
		}
		if len(got) < 2 {
			return fmt.Errorf("firing: %v", got)
		}
		return nil
	})
	cancel()
	require.NoError(t, <-done)

	data1 := got["GpuscopeDataDiskFillingUp"]
	require.Equal(t, "warning", string(data1.Labels["severity"]))
	require.Regexp(t, `^The disk of gpuscope's data directory on e2e-node will be full in [0-9hm .]+s$`, string(data1.Annotations["summary"]))
	require.Contains(t, string(data1.Annotations["runbook"]), "--storage.tsdb.retention.size")
	host := got["HostFilesystemFillingUp"]
	require.Equal(t, "/", string(host.Labels["id"]))
	require.Regexp(t, `^Filesystem `+data+` on e2e-node will be full in [0-9hm .]+s$`, string(host.Annotations["summary"]))
	require.Regexp(t, `is 7\d\.\d+% full`, string(host.Annotations["description"]))
}
