package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestReserveReleasedOnDiskFullOnly: the reserve is taken at Run, deleted
// by a commit failing with ENOSPC (not by other failures), and taken
// again when there is room. The real disk-full path is in
// e2e/diskfull_test.go.
func TestReserveReleasedOnDiskFullOnly(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	r := NewReserve(ReserveOptions{Dir: dir, Size: 1 << 20, Interval: 20 * time.Millisecond, Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	path := filepath.Join(dir, ReserveFile)
	require.Eventually(t, func() bool { return metricValue(t, reg, "gpuscope_tsdb_disk_reserve_bytes") == 1<<20 }, 10*time.Second, 10*time.Millisecond)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, int64(1<<20), fi.Size())
	require.Positive(t, metricValue(t, reg, "gpuscope_tsdb_filesystem_avail_bytes"))
	require.Positive(t, metricValue(t, reg, "gpuscope_tsdb_filesystem_size_bytes"))

	r.CommitFailed(errors.New("out of order sample"))
	r.CommitFailed(fmt.Errorf("write to WAL: %w", &os.PathError{Op: "write", Path: "x", Err: syscall.EIO}))
	require.FileExists(t, path, "only a full disk releases the reserve")
	require.Zero(t, metricValue(t, reg, "gpuscope_tsdb_disk_reserve_releases_total"))

	r.CommitFailed(fmt.Errorf("write to WAL: log samples: %w", &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}))
	r.CommitFailed(fmt.Errorf("write to WAL: log samples: %w", &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}))
	require.Equal(t, 1.0, metricValue(t, reg, "gpuscope_tsdb_disk_reserve_releases_total"), "released once")
	require.Equal(t, 2.0, metricValue(t, reg, "gpuscope_tsdb_commits_failed_disk_full_total"))

	// This disk has room: the reserve comes back at the next check.
	require.Eventually(t, func() bool { return metricValue(t, reg, "gpuscope_tsdb_disk_reserve_bytes") == 1<<20 }, 10*time.Second, 10*time.Millisecond)
	require.FileExists(t, path)
}

// TestReserveZeroSize: no file, the free-space metrics still there.
func TestReserveZeroSize(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	r := NewReserve(ReserveOptions{Dir: dir, Registerer: reg})
	require.NoError(t, r.Run(context.Background()))
	r.CommitFailed(syscall.ENOSPC)
	require.NoFileExists(t, filepath.Join(dir, ReserveFile))
	require.Positive(t, metricValue(t, reg, "gpuscope_tsdb_filesystem_avail_bytes"))
}
