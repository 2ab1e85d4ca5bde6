// Package query builds the PromQL engine that the HTTP API, the rules, the
// overview page and the run reports share: one set of limits (timeout,
// samples, concurrency) for every reader of the TSDB.
package query

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
)

// EngineOptions configure the PromQL engine.
type EngineOptions struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// DataDir holds the active query tracker's file, so queries running at a
	// crash are logged at the next start, as in Prometheus.
	DataDir    string
	Timeout    time.Duration
	MaxSamples int
	// MaxConcurrency is how many queries run at once; 0 means the CPUs
	// gpuscope may use (GOMAXPROCS, which follows a cgroup CPU limit), at
	// most Prometheus's 20: a query runs on one CPU, and more queries than
	// CPUs only take turns, with each other and with the scrapes.
	MaxConcurrency int
	LookbackDelta  time.Duration
	Parser         parser.Parser
}

// Engine is a PromQL engine with the state that belongs to it.
type Engine struct {
	*promql.Engine
	tracker *promql.ActiveQueryTracker
	// noStepSubqueryInterval is the step of `expr[5m:]` subqueries: the
	// rule evaluation interval, as in Prometheus; it follows config reloads.
	noStepSubqueryInterval atomic.Int64
}

// NewEngine creates the engine with the @ modifier and negative offsets on,
// as Prometheus always runs it.
func NewEngine(o EngineOptions) (*Engine, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxConcurrency <= 0 {
		o.MaxConcurrency = min(20, runtime.GOMAXPROCS(0))
	}
	tracker, err := promql.NewActiveQueryTracker(o.DataDir, o.MaxConcurrency, o.Logger.With("component", "activeQueryTracker"))
	if err != nil {
		return nil, fmt.Errorf("create active query tracker in %s: %w", o.DataDir, err)
	}
	e := &Engine{tracker: tracker}
	e.noStepSubqueryInterval.Store(time.Minute.Milliseconds())
	e.Engine = promql.NewEngine(promql.EngineOpts{
		Logger:                   o.Logger.With("component", "query engine"),
		Reg:                      o.Registerer,
		MaxSamples:               o.MaxSamples,
		Timeout:                  o.Timeout,
		ActiveQueryTracker:       queueTracker{tracker},
		LookbackDelta:            o.LookbackDelta,
		NoStepSubqueryIntervalFn: func(int64) int64 { return e.noStepSubqueryInterval.Load() },
		EnableAtModifier:         true,
		EnableNegativeOffset:     true,
		Parser:                   o.Parser,
	})
	return e, nil
}

// NewInstantQuery is promql.Engine's, with timeouts reported as timeouts
// (see timeoutQuery).
func (e *Engine) NewInstantQuery(ctx context.Context, q storage.Queryable, opts promql.QueryOpts, qs string, ts time.Time) (promql.Query, error) {
	qry, err := e.Engine.NewInstantQuery(ctx, q, opts, qs, ts)
	if err != nil {
		return nil, err
	}
	return timeoutQuery{qry}, nil
}

// NewRangeQuery is promql.Engine's, with timeouts reported as timeouts
// (see timeoutQuery).
func (e *Engine) NewRangeQuery(ctx context.Context, q storage.Queryable, opts promql.QueryOpts, qs string, start, end time.Time, interval time.Duration) (promql.Query, error) {
	qry, err := e.Engine.NewRangeQuery(ctx, q, opts, qs, start, end, interval)
	if err != nil {
		return nil, err
	}
	return timeoutQuery{qry}, nil
}

// timeoutQuery reports a query that ran out of --query.timeout while the
// storage was reading its series ("expanding series: context deadline
// exceeded") as promql.ErrQueryTimeout, as the engine reports one that
// runs out of it between steps: the API answers 503 errorType timeout
// either way, not 422 execution, which says the query itself is wrong.
type timeoutQuery struct{ promql.Query }

func (q timeoutQuery) Exec(ctx context.Context) *promql.Result {
	res := q.Query.Exec(ctx)
	var timeout promql.ErrQueryTimeout
	if res.Err != nil && errors.Is(res.Err, context.DeadlineExceeded) && !errors.As(res.Err, &timeout) {
		res.Err = fmt.Errorf("%w: %w", promql.ErrQueryTimeout("expression evaluation"), res.Err)
	}
	return res
}

// SetEvaluationInterval sets the step of subqueries without one.
func (e *Engine) SetEvaluationInterval(d time.Duration) {
	e.noStepSubqueryInterval.Store(d.Milliseconds())
}

// Close releases the active query tracker's file.
func (e *Engine) Close() error {
	return e.tracker.Close()
}

// queueTracker is the active query tracker, which is also the queue of
// queries waiting for one of --query.max-concurrency slots. A query whose
// deadline passes while it waits gets Prometheus's timeout error ("query
// timed out in query queue", 503 with errorType timeout from the API), as
// in Prometheus's releases; the engine passes the bare context error on
// (422, "context deadline exceeded") unless its query-cost feature is on.
type queueTracker struct{ *promql.ActiveQueryTracker }

func (t queueTracker) Insert(ctx context.Context, q string) (int, error) {
	i, err := t.ActiveQueryTracker.Insert(ctx, q)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return i, promql.ErrQueryTimeout("query queue")
	case errors.Is(err, context.Canceled):
		return i, promql.ErrQueryCanceled("query queue")
	}
	return i, err
}
