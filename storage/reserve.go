package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"golang.org/x/sys/unix"
)

// ReserveFile is the name of the disk reserve in the data directory.
const ReserveFile = "disk-reserve"

// A full disk fails every WAL write, and a failed write keeps the whole
// commit out of the head: the scrape's samples, and with them gpuscope's
// own prometheus_tsdb_wal_writes_failed_total, which the built-in
// GpuscopeStorageFailing alert watches. A rule over stored data cannot
// fire about storage that stores nothing. So gpuscope keeps a reserve: a
// file of Size bytes in the data directory, deleted the moment a commit
// fails for lack of space. The next scrapes are stored again, the failure
// counter's increase with them, and the alert fires and is sent while the
// freed room lasts. Once free space is back (at least twice the reserve),
// the reserve is taken again.

// ReserveOptions configure a Reserve.
type ReserveOptions struct {
	Dir  string
	Size int64 // 0: no reserve, only the free-space metrics
	// Interval is how often free space is checked to take the reserve
	// back. Default 5s.
	Interval   time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Reserve is the disk reserve of the data directory.
type Reserve struct {
	o    ReserveOptions
	path string

	mu       sync.Mutex // taking and releasing
	held     atomic.Int64
	lowSpace atomic.Bool // logged that there is no room to take it
	released atomic.Bool // released since last taken
	releases prometheus.Counter
	full     prometheus.Counter

	// A commit that failed for lack of space may have left a torn record
	// in the WAL (walfix.go). Until a minute after the last such failure,
	// Run looks for it from tornFrom on and zeroes it once records follow
	// (with no reserve, Run returns at once and the next start does it).
	tornMu    sync.Mutex
	tornFrom  walPos
	tornUntil time.Time // zero: not looking
}

// NewReserve returns a Reserve; Run takes it.
func NewReserve(o ReserveOptions) *Reserve {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Interval == 0 {
		o.Interval = 5 * time.Second
	}
	r := &Reserve{o: o, path: filepath.Join(o.Dir, ReserveFile)}
	r.releases = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpuscope_tsdb_disk_reserve_releases_total",
		Help: "Times the disk reserve in the data directory was deleted because a commit failed for lack of space.",
	})
	r.full = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpuscope_tsdb_commits_failed_disk_full_total",
		Help: "Commits (a scrape's samples, a rule group's results, a remote-write request) refused because the data directory's disk is full.",
	})
	if o.Registerer != nil {
		o.Registerer.MustRegister(r.releases, r.full,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "gpuscope_tsdb_disk_reserve_bytes",
				Help: "Bytes held in the data directory's disk reserve (0 while released).",
			}, func() float64 { return float64(r.held.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "gpuscope_tsdb_filesystem_avail_bytes",
				Help: "Bytes free to gpuscope on the data directory's filesystem.",
			}, func() float64 { a, _, _ := r.statfs(); return float64(a) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "gpuscope_tsdb_filesystem_size_bytes",
				Help: "Size of the data directory's filesystem.",
			}, func() float64 { _, s, _ := r.statfs(); return float64(s) }),
		)
	}
	return r
}

// Run takes the reserve (an existing reserve file is kept) and takes it
// again whenever it was released and free space is back. It returns when
// ctx ends; the reserve file stays for the next start.
func (r *Reserve) Run(ctx context.Context) error {
	if r.o.Size <= 0 {
		return nil
	}
	r.take()
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if r.held.Load() == 0 {
				r.take()
			}
			r.dropTorn()
		}
	}
}

// dropTorn zeroes the records torn by a full disk that records now
// follow, while looking for them.
func (r *Reserve) dropTorn() {
	r.tornMu.Lock()
	from, until := r.tornFrom, r.tornUntil
	r.tornMu.Unlock()
	if until.IsZero() {
		return
	}
	torn, next, err := dropTornRecords(filepath.Join(r.o.Dir, "wal"), from)
	if err != nil {
		r.o.Logger.Warn("Could not check the WAL for records torn by the full disk", "err", err)
	}
	for _, t := range torn {
		r.o.Logger.Warn("Dropped a WAL record torn when the disk was full; the records after it are kept", "segment", t.Segment, "offset", t.Offset, "bytes", t.Bytes)
	}
	r.tornMu.Lock()
	defer r.tornMu.Unlock()
	r.tornFrom = next
	if r.tornUntil.Equal(until) && time.Now().After(until) {
		r.tornUntil = time.Time{}
	}
}

// CommitFailed is told of every failed commit; one that failed for lack
// of space releases the reserve.
func (r *Reserve) CommitFailed(err error) {
	if !errors.Is(err, syscall.ENOSPC) {
		return
	}
	r.full.Inc()
	r.tornMu.Lock()
	if r.tornUntil.IsZero() {
		// The segment written to, or the one before if it just rotated.
		if _, last, err := wlog.Segments(filepath.Join(r.o.Dir, "wal")); err == nil {
			r.tornFrom = walPos{Segment: max(0, last-1)}
		}
	}
	r.tornUntil = time.Now().Add(time.Minute)
	r.tornMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	held := r.held.Load()
	if held == 0 {
		return
	}
	if err := os.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.o.Logger.Error("Disk full, and the disk reserve could not be deleted", "file", r.path, "err", err)
		return
	}
	r.held.Store(0)
	r.released.Store(true)
	r.releases.Inc()
	r.o.Logger.Error("Disk full: deleted the disk reserve so that gpuscope's own metrics and alerts are stored meanwhile; free space in the data directory",
		"dir", r.o.Dir, "released_bytes", held, "err", err)
}

// take creates the reserve file if there is room for it with as much
// free beside it.
func (r *Reserve) take() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fi, err := os.Stat(r.path); err == nil && fi.Size() >= r.o.Size {
		r.held.Store(fi.Size())
		return
	}
	avail, _, err := r.statfs()
	if err != nil {
		r.o.Logger.Warn("Cannot read the data directory's free space; no disk reserve", "dir", r.o.Dir, "err", err)
		return
	}
	if avail < uint64(2*r.o.Size) {
		if !r.lowSpace.Swap(true) {
			r.o.Logger.Warn("Too little free space to take the disk reserve; taking it once there is twice its size",
				"dir", r.o.Dir, "avail_bytes", avail, "reserve_bytes", r.o.Size)
		}
		return
	}
	if err := writeReserve(r.path, r.o.Size); err != nil {
		r.o.Logger.Warn("Could not take the disk reserve", "file", r.path, "err", err)
		_ = os.Remove(r.path)
		return
	}
	r.held.Store(r.o.Size)
	r.lowSpace.Store(false)
	if r.released.Swap(false) {
		r.o.Logger.Info("Free space is back; disk reserve taken again", "file", r.path, "bytes", r.o.Size)
	}
}

// writeReserve writes size bytes that no filesystem can compress or
// leave sparse, and syncs them.
func writeReserve(path string, size int64) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	buf := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{})
	for left := size; left > 0; left -= int64(len(buf)) {
		_, _ = rng.Read(buf)
		n := min(int64(len(buf)), left)
		if _, err := f.Write(buf[:n]); err != nil {
			return fmt.Errorf("write disk reserve: %w", err)
		}
	}
	return f.Sync()
}

// statfs is the free space (to unprivileged users) and size of the data
// directory's filesystem.
func (r *Reserve) statfs() (avail, size uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(r.o.Dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}
