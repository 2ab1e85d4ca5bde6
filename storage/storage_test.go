package storage

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/stretchr/testify/require"
)

// TestReadyBeforeAndAfterOpen: until Set, every path reports ErrNotReady
// (the API turns it into "unavailable"); afterwards data written through
// Ready is readable through it and survives a reopen.
func TestReadyBeforeAndAfterOpen(t *testing.T) {
	ready := NewReady()
	_, err := ready.Querier(0, 1)
	require.ErrorIs(t, err, tsdb.ErrNotReady)
	_, err = ready.ExemplarQuerier(context.Background())
	require.ErrorIs(t, err, tsdb.ErrNotReady)
	_, err = ready.Stats("__name__", 10)
	require.ErrorIs(t, err, tsdb.ErrNotReady)
	app := ready.AppenderV2(context.Background())
	_, err = app.Append(0, labels.FromStrings("__name__", "x"), 0, 1, 1, nil, nil, promstorage.AppendV2Options{})
	require.Error(t, err, "appends before open fail instead of vanishing")
	_, err = ready.WALReplayStatus()
	require.NoError(t, err, "replay progress is readable before open")

	dir := t.TempDir()
	db, err := Open(Options{Dir: dir, Retention: time.Hour, Stats: ready.DBStats()})
	require.NoError(t, err)
	ready.Set(db)
	now := time.Now().UnixMilli()
	app = ready.AppenderV2(context.Background())
	_, err = app.Append(0, labels.FromStrings("__name__", "x", "gpu", "0"), 0, now, 7, nil, nil, promstorage.AppendV2Options{})
	require.NoError(t, err)
	require.NoError(t, app.Commit())
	require.Equal(t, 1, countSeries(t, ready, now))
	st, err := ready.Stats("__name__", 10)
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.NumSeries)
	require.NoError(t, db.Close())

	db, err = Open(Options{Dir: dir, Retention: time.Hour})
	require.NoError(t, err)
	defer db.Close()
	r2 := NewReady()
	r2.Set(db)
	require.Equal(t, 1, countSeries(t, r2, now), "the committed sample survives a reopen (WAL replay)")
}

func TestOpenRejectsUnknownCompression(t *testing.T) {
	_, err := Open(Options{Dir: t.TempDir(), WALCompression: "lz4"})
	require.ErrorContains(t, err, `unknown WAL compression "lz4"`)
}

func countSeries(t *testing.T, r *Ready, ts int64) int {
	q, err := r.Querier(ts-1, ts+1)
	require.NoError(t, err)
	defer q.Close()
	set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
	n := 0
	for set.Next() {
		n++
	}
	require.NoError(t, set.Err())
	return n
}
