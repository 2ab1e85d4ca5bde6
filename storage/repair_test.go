package storage

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/stretchr/testify/require"
)

// logBuffer collects log lines for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

const blockSeries = 50

// writeBlock writes a block of blockSeries series `m{i}` with one sample a
// second over [from, from+span) into dir and returns its directory.
func writeBlock(t *testing.T, dir string, from time.Time, span time.Duration) string {
	t.Helper()
	w, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), dir, 2*span.Milliseconds())
	require.NoError(t, err)
	defer w.Close()
	app := w.AppenderV2(context.Background())
	for ts := from; ts.Before(from.Add(span)); ts = ts.Add(time.Second) {
		for i := range blockSeries {
			_, err := app.Append(0, labels.FromStrings("__name__", "m", "i", strconv.Itoa(i)), 0, ts.UnixMilli(), float64(ts.Unix()), nil, nil, promstorage.AppendV2Options{})
			require.NoError(t, err)
		}
	}
	require.NoError(t, app.Commit())
	id, err := w.Flush(context.Background())
	require.NoError(t, err)
	return filepath.Join(dir, id.String())
}

// samples counts the samples of m in [from, to] and the series they are in.
func samples(t *testing.T, db *DB, from, to time.Time) (series, n int) {
	t.Helper()
	q, err := db.Querier(from.UnixMilli(), to.UnixMilli())
	require.NoError(t, err)
	defer q.Close()
	set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
	var it chunkenc.Iterator
	for set.Next() {
		series++
		it = set.At().Iterator(it)
		for it.Next() != chunkenc.ValNone {
			n++
		}
		require.NoError(t, it.Err())
	}
	require.NoError(t, set.Err())
	return series, n
}

// damage changes one file of a block.
func damage(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, f(b), 0o644))
}

func garble(at float64) func([]byte) []byte {
	return func(b []byte) []byte {
		i := int(float64(len(b)) * at)
		for j := i; j < i+16 && j < len(b); j++ {
			b[j] ^= 0xa5
		}
		return b
	}
}

// TestOpenSetsDamagedBlocksAside: two blocks, the newer one damaged in each
// way a disk or a person can damage it. Open moves it to corrupted/, logs
// its range and series, counts it, and serves the older block in full;
// the TSDB takes new samples. Without the check, Open fails (bad header) or
// queries over the block fail (bad CRC).
func TestOpenSetsDamagedBlocksAside(t *testing.T) {
	base := time.Now().Add(-6 * time.Hour).Truncate(time.Hour)
	cases := []struct {
		name   string
		file   string // in the damaged block
		change func([]byte) []byte
	}{
		{"chunk data garbled", "chunks/000001", garble(0.5)},
		{"chunk file truncated", "chunks/000001", func(b []byte) []byte { return b[:len(b)/2] }},
		{"chunk file header", "chunks/000001", garble(0)},
		{"chunk file emptied", "chunks/000001", func([]byte) []byte { return nil }},
		{"index series garbled", "index", garble(0.3)},
		{"index truncated", "index", func(b []byte) []byte { return b[:len(b)-100] }},
		{"meta.json garbled", "meta.json", garble(0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeBlock(t, dir, base, time.Hour)
			bad := writeBlock(t, dir, base.Add(time.Hour), time.Hour)
			damage(t, filepath.Join(bad, c.file), c.change)

			var logs logBuffer
			reg := prometheus.NewRegistry()
			db, err := Open(Options{Dir: dir, Logger: logs.logger(), Registerer: reg})
			require.NoError(t, err)
			defer db.Close()

			require.Len(t, db.Blocks(), 1, "the damaged block is not loaded")
			require.DirExists(t, filepath.Join(dir, CorruptedDir, filepath.Base(bad)))
			require.NoDirExists(t, bad)
			series, n := samples(t, db, base, base.Add(3*time.Hour))
			require.Equal(t, blockSeries, series)
			require.Equal(t, blockSeries*3600, n, "every sample of the undamaged block")
			require.Contains(t, logs.String(), "Damaged block set aside")
			require.Contains(t, logs.String(), "block="+filepath.Base(bad))
			if c.file != "meta.json" {
				require.Contains(t, logs.String(), "from="+base.Add(time.Hour).UTC().Format(time.RFC3339))
				require.Contains(t, logs.String(), "series=50")
			}
			require.Equal(t, 1.0, metricValue(t, reg, "gpuscope_tsdb_blocks_quarantined_total"))
			require.Equal(t, 1.0, metricValue(t, reg, "gpuscope_tsdb_corrupted_blocks"))

			app := db.AppenderV2(context.Background())
			_, err = app.Append(0, labels.FromStrings("__name__", "m", "i", "new"), 0, time.Now().UnixMilli(), 1, nil, nil, promstorage.AppendV2Options{})
			require.NoError(t, err)
			require.NoError(t, app.Commit())
		})
	}
}

// TestOpenSkipBlockCheck: without the full check a block whose files do
// not open is still set aside (else Open would fail), and one with
// damaged chunk data is loaded.
func TestOpenSkipBlockCheck(t *testing.T) {
	base := time.Now().Add(-6 * time.Hour).Truncate(time.Hour)
	dir := t.TempDir()
	header := writeBlock(t, dir, base, time.Hour)
	data := writeBlock(t, dir, base.Add(time.Hour), time.Hour)
	damage(t, filepath.Join(header, "chunks/000001"), garble(0))
	damage(t, filepath.Join(data, "chunks/000001"), garble(0.5))
	db, err := Open(Options{Dir: dir, SkipBlockCheck: true})
	require.NoError(t, err)
	defer db.Close()
	require.Len(t, db.Blocks(), 1)
	require.Equal(t, filepath.Base(data), db.Blocks()[0].Meta().ULID.String())
	require.DirExists(t, filepath.Join(dir, CorruptedDir, filepath.Base(header)))
}

// TestOpenWithoutCheckFails shows what Prometheus's tsdb.Open does alone
// with the same damage: a bad chunk file header stops it; garbled chunk
// data opens and then fails the query.
func TestOpenWithoutCheckFails(t *testing.T) {
	base := time.Now().Add(-6 * time.Hour).Truncate(time.Hour)
	dir := t.TempDir()
	bad := writeBlock(t, dir, base, time.Hour)
	damage(t, filepath.Join(bad, "chunks/000001"), garble(0))
	_, err := tsdb.Open(dir, nil, nil, tsdb.DefaultOptions(), nil)
	require.ErrorContains(t, err, "corrupted block")

	dir = t.TempDir()
	bad = writeBlock(t, dir, base, time.Hour)
	damage(t, filepath.Join(bad, "chunks/000001"), garble(0.5))
	db, err := tsdb.Open(dir, nil, nil, tsdb.DefaultOptions(), nil)
	require.NoError(t, err)
	defer db.Close()
	q, err := db.Querier(base.UnixMilli(), base.Add(time.Hour).UnixMilli())
	require.NoError(t, err)
	defer q.Close()
	set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
	var it chunkenc.Iterator
	for set.Next() {
		it = set.At().Iterator(it)
		for it.Next() != chunkenc.ValNone {
		}
		if it.Err() != nil {
			break
		}
	}
	require.Error(t, errorsJoin(set.Err(), it.Err()), "queries over the damaged chunk fail")
}

func errorsJoin(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// TestOpenLeavesSoundBlocks: nothing is moved, no corrupted/ is made.
func TestOpenLeavesSoundBlocks(t *testing.T) {
	base := time.Now().Add(-6 * time.Hour).Truncate(time.Hour)
	dir := t.TempDir()
	writeBlock(t, dir, base, time.Hour)
	writeBlock(t, dir, base.Add(time.Hour), time.Hour)
	reg := prometheus.NewRegistry()
	db, err := Open(Options{Dir: dir, Registerer: reg})
	require.NoError(t, err)
	defer db.Close()
	require.Len(t, db.Blocks(), 2)
	require.NoDirExists(t, filepath.Join(dir, CorruptedDir))
	require.Equal(t, 0.0, metricValue(t, reg, "gpuscope_tsdb_blocks_quarantined_total"))
}

// TestOpenRepairsDamagedWAL: the newest WAL segment truncated mid-record
// (a torn write) or garbled in the middle (a bad sector). Open keeps every
// commit before the damage, logs what it dropped, and takes new samples;
// the repaired WAL replays cleanly after.
func TestOpenRepairsDamagedWAL(t *testing.T) {
	cases := []struct {
		name        string
		change      func([]byte) []byte // nil: cut inside the last record
		keepAtLeast float64             // fraction of the commits that must survive
	}{
		{"truncated mid-record", nil, 0.9},
		{"garbled in the middle", garble(0.5), 0.3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := Open(Options{Dir: dir, WALCompression: "none"})
			require.NoError(t, err)
			start := time.Now().Add(-time.Hour).Truncate(time.Second)
			const commits = 200
			for k := range commits {
				app := db.AppenderV2(context.Background())
				ts := start.Add(time.Duration(k) * time.Second)
				for i := range blockSeries {
					_, err := app.Append(0, labels.FromStrings("__name__", "m", "i", strconv.Itoa(i)), 0, ts.UnixMilli(), float64(k), nil, nil, promstorage.AppendV2Options{})
					require.NoError(t, err)
				}
				require.NoError(t, app.Commit())
			}
			require.NoError(t, db.Close())

			segs := statWAL(dir)
			require.NotEmpty(t, segs)
			newest := filepath.Join(dir, "wal", segs[len(segs)-1].name)
			// Close starts a new, empty segment; damage the one with data.
			for i := len(segs) - 1; i >= 0; i-- {
				if segs[i].info.Size() > 0 {
					newest = filepath.Join(dir, "wal", segs[i].name)
					break
				}
			}
			if c.change == nil {
				// A torn write: the file ends inside the last record
				// (Close padded the page after it; a crash would not).
				end := lastRecordEnd(t, newest)
				c.change = func(b []byte) []byte { return b[:end-7] }
			}
			damage(t, newest, c.change)

			var logs logBuffer
			reg := prometheus.NewRegistry()
			db, err = Open(Options{Dir: dir, Logger: logs.logger(), Registerer: reg})
			require.NoError(t, err, logs.String())
			series, n := samples(t, db, start, start.Add(commits*time.Second))
			require.Equal(t, blockSeries, series)
			require.GreaterOrEqual(t, n, int(c.keepAtLeast*commits*blockSeries), "commits before the damage are kept")
			require.Less(t, n, commits*blockSeries, "what follows the damage is gone")
			require.Zero(t, n%blockSeries, "a commit is kept whole or not at all")
			require.Contains(t, logs.String(), "WAL was damaged and repaired")
			require.Contains(t, logs.String(), "kept_until=")
			t.Log(logs.String())

			// Every kept commit is a prefix: commits 0..n/series-1.
			kept := n / blockSeries
			s2, n2 := samples(t, db, start, start.Add(time.Duration(kept-1)*time.Second))
			require.Equal(t, blockSeries, s2)
			require.Equal(t, n, n2)

			app := db.AppenderV2(context.Background())
			_, err = app.Append(0, labels.FromStrings("__name__", "m", "i", "0"), 0, time.Now().UnixMilli(), 1, nil, nil, promstorage.AppendV2Options{})
			require.NoError(t, err)
			require.NoError(t, app.Commit())
			require.NoError(t, db.Close())

			logs = logBuffer{}
			db, err = Open(Options{Dir: dir, Logger: logs.logger()})
			require.NoError(t, err)
			defer db.Close()
			require.NotContains(t, logs.String(), "WAL was damaged", "the repaired WAL replays cleanly")
			_, n3 := samples(t, db, start, time.Now())
			require.Equal(t, n+1, n3)
		})
	}
}

// metricValue is the value of a counter or gauge in reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// lastRecordEnd is where the last record of a WAL segment ends (the rest
// of its page is padding).
func lastRecordEnd(t *testing.T, path string) int {
	t.Helper()
	seg, err := wlog.OpenReadSegment(path)
	require.NoError(t, err)
	defer seg.Close()
	r := wlog.NewReader(seg)
	var end int64
	for r.Next() {
		end = r.Offset()
	}
	require.NoError(t, r.Err())
	return int(end)
}

// BenchmarkVerifyBlock: the start-up check's cost per block of 20,000
// series × 2 h at 15 s (a 2 h block of a 16-node cluster), reported as
// bytes of block read per second.
func BenchmarkVerifyBlock(b *testing.B) {
	dir := b.TempDir()
	w, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), dir, (2 * time.Hour).Milliseconds())
	require.NoError(b, err)
	from := time.Now().Add(-3 * time.Hour).Truncate(2 * time.Hour)
	for ts := from; ts.Before(from.Add(2 * time.Hour)); ts = ts.Add(15 * time.Second) {
		app := w.AppenderV2(context.Background())
		for i := range 20000 {
			_, err := app.Append(0, labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL", "gpu", strconv.Itoa(i%8), "instance", "node-"+strconv.Itoa(i/8)), 0, ts.UnixMilli(), float64(i+int(ts.Unix()%97)), nil, nil, promstorage.AppendV2Options{})
			require.NoError(b, err)
		}
		require.NoError(b, app.Commit())
	}
	id, err := w.Flush(context.Background())
	require.NoError(b, err)
	require.NoError(b, w.Close())
	bdir := filepath.Join(dir, id.String())
	var size int64
	require.NoError(b, filepath.Walk(bdir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			size += fi.Size()
		}
		return err
	}))
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		require.NoError(b, verifyBlock(bdir, true))
	}
}
