package storage

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	promscrape "github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb"
)

// DefaultRemoteFlushDeadline is Prometheus's --storage.remote.flush-deadline.
const DefaultRemoteFlushDeadline = time.Minute

// RemoteOptions configure remote write (and remote read).
type RemoteOptions struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Local is the TSDB the queues' WAL watchers read from.
	Local *Ready
	// Dir is the TSDB directory: remote write tails <Dir>/wal, so every
	// sample that reaches the TSDB is sent, and a receiver that is down
	// for a while gets the backlog from the WAL when it returns.
	Dir string
	// FlushDeadline bounds how long shutdown and reload wait for queued
	// samples to be sent.
	FlushDeadline time.Duration
	// ScrapeManager, when set, lets the queues send metric metadata once
	// the scrape manager exists: it is built after the remote storage,
	// whose fanout it appends to.
	ScrapeManager *ReadyScrapeManager
}

// Remote is Prometheus's remote storage (storage/remote), wired as
// cmd/prometheus wires it: one queue per remote_write entry, each tailing
// the TSDB's WAL; remote_read endpoints are merged into queries.
type Remote struct {
	*remote.Storage
	closeOnce sync.Once
	closeErr  error
}

// NewRemote creates the remote storage. Like upstream's NewStorage it
// starts one goroutine (the highest-timestamp metric); Close stops it.
// Queues start on ApplyConfig, which must come after the TSDB is open.
func NewRemote(o RemoteOptions) *Remote {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.FlushDeadline == 0 {
		o.FlushDeadline = DefaultRemoteFlushDeadline
	}
	var sm remote.ReadyScrapeManager
	if o.ScrapeManager != nil {
		sm = o.ScrapeManager
	}
	return &Remote{Storage: remote.NewStorage(o.Logger, o.Registerer, o.Local.StartTime, o.Dir, o.FlushDeadline, sm, false)}
}

// Close stops the queues, sending what they hold until the flush deadline.
// It is safe to call more than once.
func (r *Remote) Close() error {
	r.closeOnce.Do(func() { r.closeErr = r.Storage.Close() })
	return r.closeErr
}

// ReadyScrapeManager holds the scrape manager for those built before it,
// as cmd/prometheus's readyScrapeManager does: until Set, Get answers
// tsdb.ErrNotReady.
type ReadyScrapeManager struct {
	m atomic.Pointer[promscrape.Manager]
}

// Set publishes the scrape manager.
func (r *ReadyScrapeManager) Set(m *promscrape.Manager) { r.m.Store(m) }

// Get returns the scrape manager, or tsdb.ErrNotReady before Set.
func (r *ReadyScrapeManager) Get() (*promscrape.Manager, error) {
	if m := r.m.Load(); m != nil {
		return m, nil
	}
	return nil, tsdb.ErrNotReady
}

// NewFanout combines the local TSDB with remote storage as Prometheus's
// fanoutStorage does: appends go to both (the TSDB keeps the samples, the
// remote side only tracks the highest timestamp; the queues read the
// samples back from the WAL), queries merge local data with remote_read
// endpoints, best effort. Closing the fanout closes neither: the TSDB and
// the remote storage each have their own shutdown stage.
func NewFanout(logger *slog.Logger, local *Ready, r *Remote) storage.Storage {
	return storage.NewFanout(logger, localStorage{local}, unclosed{r.Storage})
}

// localStorage completes Ready into a storage.Storage for the fanout.
type localStorage struct{ *Ready }

// Appender implements storage.Appendable for callers still on the V1
// append interface.
func (l localStorage) Appender(ctx context.Context) storage.Appender {
	if db := l.Get(); db != nil {
		return db.Appender(ctx)
	}
	return notReadyAppenderV1{}
}

func (localStorage) Close() error { return nil }

type unclosed struct{ *remote.Storage }

func (unclosed) Close() error { return nil }

type notReadyAppenderV1 struct{}

func (notReadyAppenderV1) SetOptions(*storage.AppendOptions) {}

func (notReadyAppenderV1) Append(storage.SeriesRef, labels.Labels, int64, float64) (storage.SeriesRef, error) {
	return 0, tsdb.ErrNotReady
}

func (notReadyAppenderV1) AppendExemplar(storage.SeriesRef, labels.Labels, exemplar.Exemplar) (storage.SeriesRef, error) {
	return 0, tsdb.ErrNotReady
}

func (notReadyAppenderV1) AppendHistogram(storage.SeriesRef, labels.Labels, int64, *histogram.Histogram, *histogram.FloatHistogram) (storage.SeriesRef, error) {
	return 0, tsdb.ErrNotReady
}

func (notReadyAppenderV1) AppendHistogramSTZeroSample(storage.SeriesRef, labels.Labels, int64, int64, *histogram.Histogram, *histogram.FloatHistogram) (storage.SeriesRef, error) {
	return 0, tsdb.ErrNotReady
}

func (notReadyAppenderV1) UpdateMetadata(storage.SeriesRef, labels.Labels, metadata.Metadata) (storage.SeriesRef, error) {
	return 0, tsdb.ErrNotReady
}

func (notReadyAppenderV1) AppendSTZeroSample(storage.SeriesRef, labels.Labels, int64, int64) (storage.SeriesRef, error) {
	return 0, tsdb.ErrNotReady
}

func (notReadyAppenderV1) Commit() error   { return tsdb.ErrNotReady }
func (notReadyAppenderV1) Rollback() error { return tsdb.ErrNotReady }
