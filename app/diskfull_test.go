//go:build linux

package app_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/units"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/app/apptest"
)

// TestDiskFull runs gpuscope on a 64 MiB tmpfs with a 4 MiB disk reserve
// and fills the disk twice: once so that a commit fails and the reserve
// is released, and again to fill what the reserve freed, so commits keep
// failing. The failures are counted, GpuscopeStorageFailing fires (from
// samples stored in the room the reserve gave), queries keep working and
// gpuscope stays up. Freed, ingestion resumes by itself and the reserve is
// taken again; stopped and restarted, the data opens as it was, without a
// WAL repair, and the samples from before, during and after are returned.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	require.NoError(t, os.Mkdir(data, 0o755))
	if err := unix.Mount("tmpfs", data, "tmpfs", 0, "size=64m"); err != nil {
		t.Skipf("cannot mount a 64 MiB tmpfs as the data directory (needs root or CAP_SYS_ADMIN): %v", err)
	}
	// Registered before serve's, so run after the process has stopped.
	t.Cleanup(func() { require.NoError(t, unix.Unmount(data, 0)) })

	cfg := writeConfig(t, dir, `
global:
  scrape_interval: 1s
  evaluation_interval: 1s
cadvisor: {enabled: false}
gpu: {backend: none}
`)
	args := []apptest.Option{configFile(cfg), with(func(s *app.Settings) { s.DiskReserve = 4 * units.MiB })}
	p := serve(t, data, args...)
	reserve := filepath.Join(data, "disk-reserve")
	eventually(t, 30*time.Second, "reserve taken and some scrapes stored", func() error {
		if v := selfMetric(p, "gpuscope_tsdb_disk_reserve_bytes"); v != 4<<20 {
			return fmt.Errorf("gpuscope_tsdb_disk_reserve_bytes %v", v)
		}
		return storedSince(p, time.Now().Add(-time.Minute), 5)
	})
	fi, err := os.Stat(reserve)
	require.NoError(t, err)
	require.Equal(t, int64(4<<20), fi.Size())

	// What the API returns before the disk fills, to compare after the
	// restart.
	const upCount = `count_over_time(up{job="gpuscope"}[10m])`
	beforeAt := time.Now().Add(-time.Second)
	nBefore := scalar(t, p, beforeAt, upCount)

	// Full: a commit fails, the reserve goes, the failure is stored and
	// alerted on.
	fullAt := time.Now()
	fill(t, filepath.Join(data, "filler1"))
	eventually(t, 30*time.Second, "a commit failed for lack of space and the reserve was released", func() error {
		for _, m := range []string{"prometheus_tsdb_wal_writes_failed_total", "gpuscope_tsdb_commits_failed_disk_full_total", "gpuscope_tsdb_disk_reserve_releases_total"} {
			if v := selfMetric(p, m); v < 1 {
				return fmt.Errorf("%s = %v", m, v)
			}
		}
		if v := selfMetric(p, "gpuscope_tsdb_disk_reserve_bytes"); v != 0 {
			return fmt.Errorf("gpuscope_tsdb_disk_reserve_bytes = %v", v)
		}
		return nil
	})
	require.NoFileExists(t, reserve)
	require.Contains(t, p.out.String(), "Disk full: deleted the disk reserve")
	eventually(t, 60*time.Second, "GpuscopeStorageFailing{failure=wal} firing", func() error {
		return firing(p, "GpuscopeStorageFailing", "wal")
	})
	v, err := p.instant(`increase(prometheus_tsdb_wal_writes_failed_total{job="gpuscope"}[5m]) > 0`)
	require.NoError(t, err)
	require.Len(t, v, 1, "the WAL write failures are stored")

	// Still full: fill what the reserve freed. Commits keep failing;
	// gpuscope stays up and answers queries.
	fill(t, filepath.Join(data, "filler2"))
	failed := selfMetric(p, "gpuscope_tsdb_commits_failed_disk_full_total")
	eventually(t, 30*time.Second, "commits failing again", func() error {
		if v := selfMetric(p, "gpuscope_tsdb_commits_failed_disk_full_total"); v < failed+5 {
			return fmt.Errorf("gpuscope_tsdb_commits_failed_disk_full_total %v, was %v", v, failed)
		}
		return nil
	})
	stillFullAt := time.Now()
	v, err = p.instant(`count_over_time(up{job="gpuscope"}[10m])`)
	require.NoError(t, err, "instant query on a full disk")
	require.Len(t, v, 1)
	code, body := p.get("/api/v1/query_range?query=up&start=" + strconv.FormatInt(fullAt.Add(-time.Minute).Unix(), 10) + "&end=" + strconv.FormatInt(time.Now().Unix(), 10) + "&step=1")
	require.Equal(t, 200, code, "range query on a full disk: %s", body)
	code, _ = p.get("/-/healthy")
	require.Equal(t, 200, code)
	if exited, err := p.app.Exited(); exited {
		t.Fatalf("gpuscope stopped on a full disk: %v", err)
	}

	// Space back: ingestion resumes and the reserve is taken again, by
	// themselves.
	require.NoError(t, os.Remove(filepath.Join(data, "filler1")))
	require.NoError(t, os.Remove(filepath.Join(data, "filler2")))
	freedAt := time.Now()
	eventually(t, 30*time.Second, "new samples of up stored after space came back", func() error {
		return storedSince(p, freedAt, 2)
	})
	eventually(t, 30*time.Second, "disk reserve taken again", func() error {
		if v := selfMetric(p, "gpuscope_tsdb_disk_reserve_bytes"); v != 4<<20 {
			return fmt.Errorf("gpuscope_tsdb_disk_reserve_bytes = %v", v)
		}
		return nil
	})
	fi, err = os.Stat(reserve)
	require.NoError(t, err)
	require.Equal(t, int64(4<<20), fi.Size())
	require.Contains(t, p.out.String(), "Free space is back; disk reserve taken again")
	// A record torn by the failed writes, if any, is dropped while running
	// (storage/walfix.go) within a few seconds of the next records.
	time.Sleep(6 * time.Second)
	t.Logf("torn WAL records dropped while running: %d", len(regexp.MustCompile(`Dropped a WAL record torn`).FindAllString(p.out.String(), -1)))
	stoppedAt := time.Now().Add(-time.Second)
	nAll := scalar(t, p, stoppedAt, upCount)
	failedText := selfMetricText(p, "gpuscope_tsdb_commits_failed_disk_full_total")

	require.NoError(t, p.stop(), "a clean stop (the binary exits 0 after SIGTERM)")

	// Opens as it was: no WAL repair, no block set aside, and the samples
	// from before the disk filled, from while the reserve's room lasted
	// and from after are all there.
	p2 := serve(t, data, args...)
	out := p2.out.String()
	for _, bad := range []string{"Encountered WAL read error", "WAL was damaged", "Damaged block", "Dropped a WAL record torn"} {
		require.False(t, strings.Contains(out, bad), "the restart logged %q", bad)
	}
	for _, m := range []string{"prometheus_tsdb_wal_corruptions_total", "gpuscope_tsdb_blocks_quarantined_total", "gpuscope_tsdb_corrupted_blocks"} {
		require.Zero(t, selfMetric(p2, m), m)
	}
	// Every sample of up returned before is returned after: those from
	// before the disk filled and all of them (the room the reserve gave,
	// and after space came back).
	require.GreaterOrEqual(t, scalar(t, p2, beforeAt, upCount), nBefore, "samples of up before the disk filled")
	require.GreaterOrEqual(t, scalar(t, p2, stoppedAt, upCount), nAll, "samples of up until the stop")
	require.GreaterOrEqual(t, nAll-nBefore, stoppedAt.Sub(freedAt).Seconds()/2, "samples of up after space came back")
	// The failure counter's increase, stored in the reserve's room, too.
	require.Positive(t, scalar(t, p2, stoppedAt, fmt.Sprintf(`max_over_time(prometheus_tsdb_wal_writes_failed_total{job="gpuscope"}[%ds])`, int(stoppedAt.Sub(fullAt).Seconds())+1)))
	t.Logf("full from %s, still full at %s, freed at %s, stopped at %s: %s commits failed; samples of up %v before, %v in all",
		fullAt.Format(time.TimeOnly), stillFullAt.Format(time.TimeOnly), freedAt.Format(time.TimeOnly), stoppedAt.Format(time.TimeOnly), failedText, nBefore, nAll)
}

// fill writes path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			require.True(t, errors.Is(err, syscall.ENOSPC), "filling %s: %v", path, err)
			return
		}
	}
}

// storedSince checks that at least n samples of up{job="gpuscope"} newer
// than since are stored.
func storedSince(p *process, since time.Time, n int) error {
	v, err := p.instant(fmt.Sprintf(`count_over_time(up{job="gpuscope"}[%dms])`, time.Since(since).Milliseconds()))
	if err != nil {
		return err
	}
	if len(v) != 1 || int(v[0].Value) < n {
		return fmt.Errorf("samples of up since %s: %v, want %d", since.Format(time.TimeOnly), v, n)
	}
	return nil
}

// firing checks that an alert of that name and failure label is firing.
func firing(p *process, name, failure string) error {
	code, body := p.get("/api/v1/alerts")
	if code != 200 {
		return fmt.Errorf("/api/v1/alerts: %d %s", code, body)
	}
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return err
	}
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == name && a.Labels["failure"] == failure && a.State == "firing" {
			return nil
		}
	}
	return fmt.Errorf("no firing %s{failure=%q} in %s", name, failure, body)
}

var metricLine = regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*) (\S+)$`)

// selfMetricText is the value of an unlabelled metric on the process's
// own /metrics, as text ("" if absent).
func selfMetricText(p *process, name string) string {
	code, body := p.get("/metrics")
	if code != 200 {
		return ""
	}
	for _, m := range metricLine.FindAllStringSubmatch(body, -1) {
		if m[1] == name {
			return m[2]
		}
	}
	return ""
}

// selfMetric is selfMetricText as a number; -1 if absent.
func selfMetric(p *process, name string) float64 {
	v, err := strconv.ParseFloat(selfMetricText(p, name), 64)
	if err != nil {
		return -1
	}
	return v
}
