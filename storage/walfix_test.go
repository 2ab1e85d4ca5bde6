package storage

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"
	"github.com/stretchr/testify/require"
)

// walRecords are the records a test WAL is made of: small ones and ones
// that span pages, incompressible so snappy keeps them that size.
func walRecords(n int, seed uint64) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	recs := make([][]byte, n)
	for i := range recs {
		size := 100 + rng.IntN(3000)
		if i%4 == 3 {
			size = 40_000 + rng.IntN(60_000) // two to four pages
		}
		recs[i] = make([]byte, size)
		for j := range recs[i] {
			recs[i][j] = byte(rng.Uint32())
		}
	}
	return recs
}

// writeWAL logs recs with Prometheus's WAL writer into a new segment in
// dir and returns the segment's bytes.
func writeWAL(t *testing.T, dir string, recs [][]byte) []byte {
	t.Helper()
	w, err := wlog.NewSize(nil, nil, dir, wlog.DefaultSegmentSize, compression.Snappy)
	require.NoError(t, err)
	for _, r := range recs {
		require.NoError(t, w.Log(r))
	}
	require.NoError(t, w.Close())
	b, err := os.ReadFile(filepath.Join(dir, "00000000"))
	require.NoError(t, err)
	return b
}

// readWAL reads every record of the WAL in dir with Prometheus's reader.
func readWAL(t *testing.T, dir string) ([][]byte, error) {
	t.Helper()
	sr, err := wlog.NewSegmentsReader(dir)
	require.NoError(t, err)
	defer sr.Close()
	r := wlog.NewReader(sr)
	var recs [][]byte
	for r.Next() {
		recs = append(recs, bytes.Clone(r.Record()))
	}
	return recs, r.Err()
}

// tornWAL is what a write failing for lack of space leaves: before, then
// the first fragment of a record that needed more than the rest of the
// page (the page was full and could not be written; the record's other
// fragments were dropped), then, once space was back, after from the
// start of the next page.
func tornWAL(t *testing.T, before [][]byte, torn []byte, after [][]byte) []byte {
	t.Helper()
	b := writeWAL(t, t.TempDir(), append(slices.Clone(before), torn))
	// The torn record's first fragment ends the last page that ends with
	// a first fragment.
	var head []byte
	for off := 0; off+walPageSize <= len(b); off += walPageSize {
		if fragmentAtPageEnd(b[off:off+walPageSize]) == walRecFirst {
			head = b[:off+walPageSize]
		}
	}
	require.NotNil(t, head, "the torn record spans pages")
	return append(bytes.Clone(head), writeWAL(t, t.TempDir(), after)...)
}

// fragmentAtPageEnd is the type of the fragment that ends page p, if one
// reaches its end.
func fragmentAtPageEnd(p []byte) byte {
	var last byte
	for pos := 0; pos+walHeaderSize <= len(p) && p[pos] != 0; {
		last = p[pos] & walRecTypeMask
		pos += walHeaderSize + int(p[pos+1])<<8 + int(p[pos+2])
		if pos == len(p) {
			return last
		}
	}
	return 0
}

// TestDropTornRecords: a record torn by a full disk makes Prometheus's
// reader (and so the repair at start) stop there; once it is zeroed every
// record before and after it reads again, and nothing else changes.
func TestDropTornRecords(t *testing.T) {
	recs := walRecords(24, 1)
	before, torn, after := recs[:10], bytes.Repeat(recs[11], 2), recs[12:]

	t.Run("torn record dropped, the records after it kept", func(t *testing.T) {
		dir := t.TempDir()
		seg := filepath.Join(dir, "00000000")
		require.NoError(t, os.WriteFile(seg, tornWAL(t, before, torn, after), 0o644))
		got, err := readWAL(t, dir)
		require.ErrorContains(t, err, "unexpected full record", "what the TSDB's reader makes of it")
		require.Equal(t, before, got)

		dropped, next, err := dropTornRecords(dir, walPos{})
		require.NoError(t, err)
		require.Len(t, dropped, 1)
		require.Equal(t, 0, dropped[0].Segment)
		require.Zero(t, (dropped[0].Offset+dropped[0].Bytes)%walPageSize, "zeroed to the end of its page")
		fi, err := os.Stat(seg)
		require.NoError(t, err)
		require.Equal(t, 0, next.Segment)
		require.Greater(t, next.Offset, fi.Size()-walPageSize, "read to the last page (the rest is padding)")

		got, err = readWAL(t, dir)
		require.NoError(t, err)
		require.Equal(t, len(before)+len(after), len(got))
		require.Equal(t, before, got[:len(before)])
		require.Equal(t, after, got[len(before):])

		// Again from where it stopped: nothing more.
		dropped, next2, err := dropTornRecords(dir, next)
		require.NoError(t, err)
		require.Empty(t, dropped)
		require.Equal(t, next, next2)
	})

	t.Run("torn record at the end of a segment, the next segment kept", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "00000003"), tornWAL(t, before, torn, nil), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "00000004"), writeWAL(t, t.TempDir(), after), 0o644))
		_, err := readWAL(t, dir)
		require.ErrorContains(t, err, "unexpected full record")

		dropped, _, err := dropTornRecords(dir, walPos{Segment: 3})
		require.NoError(t, err)
		require.Len(t, dropped, 1)
		require.Equal(t, 3, dropped[0].Segment)
		got, err := readWAL(t, dir)
		require.NoError(t, err)
		require.Equal(t, append(append([][]byte{}, before...), after...), got)
	})

	cases := []struct {
		name string
		wal  func(t *testing.T) []byte
	}{
		{"whole WAL", func(t *testing.T) []byte { return writeWAL(t, t.TempDir(), recs) }},
		{"torn record last, nothing after it yet", func(t *testing.T) []byte { return tornWAL(t, before, torn, nil) }},
		{"garbled after a torn record", func(t *testing.T) []byte {
			b := tornWAL(t, before, torn, after)
			i := len(b) - len(writeWAL(t, t.TempDir(), after)) + 3 // in the first record's CRC
			b[i] ^= 0xff
			return b
		}},
		{"cut off in a record", func(t *testing.T) []byte {
			b := writeWAL(t, t.TempDir(), recs)
			return b[:len(b)*2/3]
		}},
	}
	for _, c := range cases {
		t.Run("left alone: "+c.name, func(t *testing.T) {
			dir := t.TempDir()
			want := c.wal(t)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "00000000"), want, 0o644))
			dropped, _, err := dropTornRecords(dir, walPos{})
			require.NoError(t, err)
			require.Empty(t, dropped)
			got, err := os.ReadFile(filepath.Join(dir, "00000000"))
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got), "segment changed")
		})
	}

	t.Run("no WAL", func(t *testing.T) {
		dropped, next, err := dropTornRecords(filepath.Join(t.TempDir(), "wal"), walPos{})
		require.NoError(t, err)
		require.Empty(t, dropped)
		require.Equal(t, walPos{}, next)
	})
}

// TestReserveDropsTornRecord: after a commit failed for lack of space, the
// running appliance zeroes the torn record once records follow it, so
// neither its checkpoints nor its next start stop there.
func TestReserveDropsTornRecord(t *testing.T) {
	recs := walRecords(16, 2)
	dir := t.TempDir()
	wal := filepath.Join(dir, "wal")
	require.NoError(t, os.Mkdir(wal, 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(wal, "00000000"), tornWAL(t, recs[:6], bytes.Repeat(recs[7], 2), recs[8:]), 0o644))
	_, err := readWAL(t, wal)
	require.ErrorContains(t, err, "unexpected full record")

	var logs logBuffer
	r := NewReserve(ReserveOptions{Dir: dir, Size: 1 << 20, Interval: 10 * time.Millisecond, Logger: logs.logger()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	// Not looked for before a commit fails for lack of space.
	time.Sleep(50 * time.Millisecond)
	_, err = readWAL(t, wal)
	require.Error(t, err)

	r.CommitFailed(fmt.Errorf("write to WAL: log samples: %w", &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}))
	require.Eventually(t, func() bool { _, err := readWAL(t, wal); return err == nil }, 10*time.Second, 10*time.Millisecond)
	got, err := readWAL(t, wal)
	require.NoError(t, err)
	require.Equal(t, append(append([][]byte{}, recs[:6]...), recs[8:]...), got)
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "Dropped a WAL record torn when the disk was full; the records after it are kept")
	}, 10*time.Second, 10*time.Millisecond)
}

// TestOpenDropsTornRecord: a TSDB WAL with a samples record torn by a full
// disk. Open drops that record and replays the samples after it; the
// TSDB alone would repair the WAL by cutting it at the torn record.
func TestOpenDropsTornRecord(t *testing.T) {
	base := time.Now().Add(-time.Hour).Truncate(time.Minute)
	var (
		enc    record.Encoder
		series []record.RefSeries
	)
	for i := range blockSeries {
		series = append(series, record.RefSeries{Ref: chunks.HeadSeriesRef(i + 1), Labels: labels.FromStrings("__name__", "m", "i", strconv.Itoa(i))})
	}
	samplesAt := func(from, to int) []byte { // one record, seconds [from, to)
		var s []record.RefSample
		for sec := from; sec < to; sec++ {
			for _, r := range series {
				s = append(s, record.RefSample{Ref: r.Ref, T: base.Add(time.Duration(sec) * time.Second).UnixMilli(), V: float64(sec)})
			}
		}
		return enc.Samples(s, nil)
	}
	var before, after [][]byte
	before = append(before, enc.Series(series, nil))
	for sec := range 10 {
		before = append(before, samplesAt(sec, sec+1))
	}
	torn := samplesAt(10, 1010) // 50,000 samples: many pages
	for sec := 1010; sec < 1020; sec++ {
		after = append(after, samplesAt(sec, sec+1))
	}
	wal := tornWAL(t, before, torn, after)

	for _, fix := range []bool{true, false} {
		t.Run(fmt.Sprintf("dropTornRecords=%v", fix), func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "wal"), 0o777))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "wal", "00000000"), wal, 0o644))
			var logs logBuffer
			var db interface {
				Querier(int64, int64) (promstorage.Querier, error)
				Close() error
			}
			if fix {
				d, err := Open(Options{Dir: dir, Logger: logs.logger()})
				require.NoError(t, err)
				db = d
			} else {
				d, err := tsdb.Open(dir, logs.logger(), nil, tsdb.DefaultOptions(), nil)
				require.NoError(t, err)
				db = d
			}
			defer db.Close()
			q, err := db.Querier(base.UnixMilli(), base.Add(time.Hour).UnixMilli())
			require.NoError(t, err)
			defer q.Close()
			set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
			var (
				it   chunkenc.Iterator
				secs = map[int]int{}
			)
			for set.Next() {
				it = set.At().Iterator(it)
				for it.Next() != chunkenc.ValNone {
					_, v := it.At()
					secs[int(v)]++
				}
			}
			require.NoError(t, set.Err())
			for sec := range 1020 {
				want := blockSeries
				if sec >= 10 && (sec < 1010 || !fix) {
					want = 0 // the torn record's, and without the fix all after it
				}
				require.Equal(t, want, secs[sec], "samples at second %d", sec)
			}
			if fix {
				require.Contains(t, logs.String(), "Dropped a WAL record torn when the disk was full; the records after it are kept")
				require.NotContains(t, logs.String(), "WAL was damaged")
			} else {
				require.Contains(t, logs.String(), "unexpected full record")
			}
		})
	}
}
