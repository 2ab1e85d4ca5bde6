package query

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"
)

// TestEngineQueueErrors: a query that cannot get one of the
// --query.max-concurrency slots before its deadline (or before it is
// cancelled) fails with Prometheus's timeout (cancel) error, which the
// API answers with 503 errorType timeout (499 canceled), not with a bare
// context error (422 execution).
func TestEngineQueueErrors(t *testing.T) {
	st := teststorage.New(t)
	e, err := NewEngine(EngineOptions{
		DataDir:        t.TempDir(),
		Timeout:        50 * time.Millisecond,
		MaxSamples:     1e6,
		MaxConcurrency: 1,
		LookbackDelta:  5 * time.Minute,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })

	// A query within the limit runs.
	q, err := e.NewInstantQuery(context.Background(), st, nil, "1", time.Now())
	require.NoError(t, err)
	require.NoError(t, q.Exec(context.Background()).Err)
	q.Close()

	// Two queries are prepared (which takes a slot for a moment too), then
	// the only slot is taken: their execution waits in the queue.
	timedOut, err := e.NewInstantQuery(context.Background(), st, nil, "1", time.Now())
	require.NoError(t, err)
	defer timedOut.Close()
	canceled, err := e.NewInstantQuery(context.Background(), st, nil, "1", time.Now())
	require.NoError(t, err)
	defer canceled.Close()
	slot, err := e.tracker.Insert(context.Background(), "a long query")
	require.NoError(t, err)
	defer e.tracker.Delete(slot)

	err = timedOut.Exec(context.Background()).Err
	var errTimeout promql.ErrQueryTimeout
	require.True(t, errors.As(err, &errTimeout), "error %T %v", err, err)
	require.EqualError(t, err, "query timed out in query queue")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = canceled.Exec(ctx).Err
	var errCanceled promql.ErrQueryCanceled
	require.True(t, errors.As(err, &errCanceled), "error %T %v", err, err)
}

// failingQuerier's series sets fail with err.
type failingQuerier struct {
	storage.Querier
	err error
}

func (q failingQuerier) Select(context.Context, bool, *storage.SelectHints, ...*labels.Matcher) storage.SeriesSet {
	return storage.ErrSeriesSet(q.err)
}

// TestEngineStorageTimeout: a query whose deadline passes while the
// storage reads its series fails with Prometheus's timeout error (API:
// 503 timeout), as one whose deadline passes between steps does; other
// storage errors are left as they are.
func TestEngineStorageTimeout(t *testing.T) {
	e, err := NewEngine(EngineOptions{DataDir: t.TempDir(), Timeout: time.Minute, MaxSamples: 1e6, MaxConcurrency: 1, LookbackDelta: 5 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	now := time.Now()
	for _, tc := range []struct {
		name    string
		err     error
		timeout bool
		message string
	}{
		{"deadline", fmt.Errorf("read chunks: %w", context.DeadlineExceeded), true, "query timed out in expression evaluation: expanding series: read chunks: context deadline exceeded"},
		{"other error", errors.New("disk on fire"), false, "expanding series: disk on fire"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := storage.QueryableFunc(func(int64, int64) (storage.Querier, error) {
				return failingQuerier{storage.NoopQuerier(), tc.err}, nil
			})
			instant, err := e.NewInstantQuery(context.Background(), q, nil, "up", now)
			require.NoError(t, err)
			defer instant.Close()
			rng, err := e.NewRangeQuery(context.Background(), q, nil, "rate(up[1m])", now.Add(-time.Hour), now, time.Minute)
			require.NoError(t, err)
			defer rng.Close()
			for _, qry := range []promql.Query{instant, rng} {
				err := qry.Exec(context.Background()).Err
				var timeout promql.ErrQueryTimeout
				require.Equal(t, tc.timeout, errors.As(err, &timeout), "error %T %v", err, err)
				require.EqualError(t, err, tc.message)
			}
		})
	}
}
