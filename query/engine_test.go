package query

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
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
