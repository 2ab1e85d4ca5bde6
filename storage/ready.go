package storage

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
)

// Ready stands in for the DB while it opens. The HTTP API is built and
// served before the WAL is replayed (so /-/healthy and
// /api/v1/status/walreplay answer during a long replay); until Set is
// called every method returns tsdb.ErrNotReady, which the API reports as
// "unavailable".
type Ready struct {
	db           atomic.Pointer[DB]
	stats        *tsdb.DBStats
	commitFailed atomic.Pointer[func(error)]
}

// NewReady returns an empty Ready whose DBStats are to be passed to Open.
func NewReady() *Ready { return &Ready{stats: tsdb.NewDBStats()} }

// DBStats is where Open reports WAL replay progress.
func (r *Ready) DBStats() *tsdb.DBStats { return r.stats }

// Set publishes the open DB.
func (r *Ready) Set(db *DB) { r.db.Store(db) }

// Get returns the DB, or nil before Set.
func (r *Ready) Get() *DB { return r.db.Load() }

// Querier implements storage.Queryable.
func (r *Ready) Querier(mint, maxt int64) (storage.Querier, error) {
	if db := r.Get(); db != nil {
		return db.Querier(mint, maxt)
	}
	return nil, tsdb.ErrNotReady
}

// ChunkQuerier implements storage.ChunkQueryable.
func (r *Ready) ChunkQuerier(mint, maxt int64) (storage.ChunkQuerier, error) {
	if db := r.Get(); db != nil {
		return db.ChunkQuerier(mint, maxt)
	}
	return nil, tsdb.ErrNotReady
}

// ExemplarQuerier implements storage.ExemplarQueryable.
func (r *Ready) ExemplarQuerier(ctx context.Context) (storage.ExemplarQuerier, error) {
	if db := r.Get(); db != nil {
		return db.ExemplarQuerier(ctx)
	}
	return nil, tsdb.ErrNotReady
}

// OnCommitFailed has f told of every failed commit (Reserve.CommitFailed
// releases the disk reserve when the disk is full).
func (r *Ready) OnCommitFailed(f func(error)) { r.commitFailed.Store(&f) }

// AppenderV2 implements storage.AppendableV2.
func (r *Ready) AppenderV2(ctx context.Context) storage.AppenderV2 {
	if db := r.Get(); db != nil {
		app := db.AppenderV2(ctx)
		if f := r.commitFailed.Load(); f != nil {
			return watchedAppender{AppenderV2: app, failed: *f}
		}
		return app
	}
	return notReadyAppender{}
}

// watchedAppender reports failed commits.
type watchedAppender struct {
	storage.AppenderV2
	failed func(error)
}

func (a watchedAppender) Commit() error {
	err := a.AppenderV2.Commit()
	if err != nil {
		a.failed(err)
	}
	return err
}

// StartTime implements storage.Storage's StartTime, for remote write.
func (r *Ready) StartTime() (int64, error) {
	if db := r.Get(); db != nil {
		return db.StartTime()
	}
	return 0, tsdb.ErrNotReady
}

// CleanTombstones implements api_v1.TSDBAdminStats.
func (r *Ready) CleanTombstones() error {
	if db := r.Get(); db != nil {
		return db.CleanTombstones()
	}
	return tsdb.ErrNotReady
}

// Delete implements api_v1.TSDBAdminStats.
func (r *Ready) Delete(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) error {
	if db := r.Get(); db != nil {
		return db.Delete(ctx, mint, maxt, ms...)
	}
	return tsdb.ErrNotReady
}

// Snapshot implements api_v1.TSDBAdminStats.
func (r *Ready) Snapshot(dir string, withHead bool) error {
	if db := r.Get(); db != nil {
		return db.Snapshot(dir, withHead)
	}
	return tsdb.ErrNotReady
}

// Stats implements api_v1.TSDBAdminStats (head cardinality statistics).
func (r *Ready) Stats(statsByLabelName string, limit int) (*tsdb.Stats, error) {
	if db := r.Get(); db != nil {
		return db.Head().Stats(statsByLabelName, limit), nil
	}
	return nil, tsdb.ErrNotReady
}

// WALReplayStatus implements api_v1.TSDBAdminStats; it answers during
// replay.
func (r *Ready) WALReplayStatus() (tsdb.WALReplayStatus, error) {
	return r.stats.Head.WALReplayStatus.GetWALReplayStatus(), nil
}

// BlockMetas implements api_v1.TSDBAdminStats.
func (r *Ready) BlockMetas() ([]tsdb.BlockMeta, error) {
	if db := r.Get(); db != nil {
		return db.DB.BlockMetas(), nil
	}
	return nil, tsdb.ErrNotReady
}

var errNotReady = errors.New("TSDB not ready")

type notReadyAppender struct{}

func (notReadyAppender) Append(storage.SeriesRef, labels.Labels, int64, int64, float64, *histogram.Histogram, *histogram.FloatHistogram, storage.AppendV2Options) (storage.SeriesRef, error) {
	return 0, errNotReady
}
func (notReadyAppender) Commit() error   { return errNotReady }
func (notReadyAppender) Rollback() error { return errNotReady }
