// Package storage opens gpuscope's embedded Prometheus TSDB and adapts it to
// what the rest of the appliance needs: the HTTP API's admin and stats
// interface, config reloads, and readiness.
package storage

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/alecthomas/units"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/util/compression"
)

// Options configure the TSDB.
type Options struct {
	Dir string
	// Retention and MaxBytes are the flag defaults; a storage.tsdb.retention
	// section in the config file replaces them (Prometheus 3 semantics).
	Retention time.Duration
	MaxBytes  units.Base2Bytes
	// MaxExemplars sizes the exemplar ring buffer; exemplars are always on
	// so Grafana's exemplar queries get answers.
	MaxExemplars int64
	// WALCompression is "snappy" (default), "zstd" or "none".
	WALCompression string
	// MinBlockDuration is the head's block range: how much time the head
	// spans before it is compacted into a block and the WAL truncated.
	// Zero is Prometheus's 2h; shorter only for tests and benchmarks
	// (serve's hidden --storage.tsdb.min-block-duration, as Prometheus's).
	MinBlockDuration time.Duration
	// SkipBlockCheck leaves out reading every block's index and chunks at
	// Open (repair.go): then only blocks whose files do not open are set
	// aside, and damaged chunk data fails the queries that read it.
	SkipBlockCheck bool
	// Stats receives WAL replay progress; pass Ready.DBStats() so the API can
	// report replay while Open runs. Nil allocates new stats.
	Stats      *tsdb.DBStats
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// DefaultMaxExemplars is Prometheus's default for --storage.exemplars.exemplars-limit
// when exemplar storage is on.
const DefaultMaxExemplars = 100000

// DB is an open TSDB.
type DB struct {
	*tsdb.DB
	dir string
}

// Open opens (creating if needed) the TSDB in o.Dir, replaying its WAL.
// The caller holds the directory's Lock.
func Open(o Options) (*DB, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	opts := tsdb.DefaultOptions()
	opts.RetentionDuration = o.Retention.Milliseconds()
	opts.MaxBytes = int64(o.MaxBytes)
	opts.NoLockfile = true // Lock is taken earlier, by the caller
	if o.MinBlockDuration > 0 {
		opts.MinBlockDuration = o.MinBlockDuration.Milliseconds()
		opts.MaxBlockDuration = max(opts.MaxBlockDuration, opts.MinBlockDuration)
	}
	opts.EnableExemplarStorage = true
	opts.MaxExemplars = o.MaxExemplars
	if opts.MaxExemplars == 0 {
		opts.MaxExemplars = DefaultMaxExemplars
	}
	switch o.WALCompression {
	case "", "snappy":
		opts.WALCompression = compression.Snappy
	case "zstd":
		opts.WALCompression = compression.Zstd
	case "none":
		opts.WALCompression = compression.None
	default:
		return nil, fmt.Errorf("unknown WAL compression %q (want snappy, zstd or none)", o.WALCompression)
	}
	// As Prometheus does: blocks no longer than a tenth of the retention, so
	// retention can drop whole blocks on time.
	if opts.RetentionDuration > 0 && opts.RetentionDuration/10 < opts.MaxBlockDuration {
		opts.MaxBlockDuration = max(opts.MinBlockDuration, opts.RetentionDuration/10)
	}

	stats := o.Stats
	if stats == nil {
		stats = tsdb.NewDBStats()
	}
	logger := o.Logger
	// Damaged blocks are set aside before Open, which would fail on some
	// and serve read errors from the others (repair.go).
	start := time.Now()
	moved, checked, err := checkBlocks(o.Dir, !o.SkipBlockCheck, logger)
	if err != nil {
		return nil, err
	}
	logger.Info("Blocks checked", "blocks", checked, "index_and_chunks", !o.SkipBlockCheck, "set_aside", len(moved), "duration", time.Since(start).Round(time.Millisecond))
	// A record torn by a full disk would make the TSDB's repair drop
	// everything after it (walfix.go).
	start = time.Now()
	torn, _, err := dropTornRecords(filepath.Join(o.Dir, "wal"), walPos{})
	if err != nil {
		logger.Warn("Could not check the WAL for records torn by a full disk", "err", err)
	}
	for _, r := range torn {
		logger.Warn("Dropped a WAL record torn when the disk was full; the records after it are kept", "segment", r.Segment, "offset", r.Offset, "bytes", r.Bytes)
	}
	logger.Info("WAL checked for torn records", "dropped", len(torn), "duration", time.Since(start).Round(time.Millisecond))
	wal := statWAL(o.Dir)
	db, err := tsdb.Open(o.Dir, logger, o.Registerer, opts, stats)
	if err != nil {
		return nil, fmt.Errorf("open TSDB at %s: %w", o.Dir, err)
	}
	walReport(o.Dir, wal, db.Head().MaxTime(), logger)
	if o.Registerer != nil {
		quarantinedTotal := prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuscope_tsdb_blocks_quarantined_total",
			Help: "Damaged blocks this process moved to <data>/" + CorruptedDir + " at start instead of serving them.",
		})
		quarantinedTotal.Add(float64(len(moved)))
		o.Registerer.MustRegister(
			quarantinedTotal,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "gpuscope_tsdb_corrupted_blocks",
				Help: "Blocks in <data>/" + CorruptedDir + ": damaged, set aside, not served; delete them once inspected.",
			}, func() float64 { return float64(countCorrupted(o.Dir)) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "prometheus_tsdb_lowest_timestamp_seconds",
				Help: "Lowest timestamp value stored in the database.",
			}, func() float64 {
				if bb := db.Blocks(); len(bb) > 0 {
					return float64(bb[0].Meta().MinTime / 1000)
				}
				return float64(db.Head().MinTime() / 1000)
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "prometheus_tsdb_head_min_time_seconds",
				Help: "Minimum time bound of the head block.",
			}, func() float64 { return float64(db.Head().MinTime() / 1000) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "prometheus_tsdb_head_max_time_seconds",
				Help: "Maximum timestamp of the head block.",
			}, func() float64 { return float64(db.Head().MaxTime() / 1000) }),
		)
	}
	return &DB{DB: db, dir: o.Dir}, nil
}

// Dir is the data directory.
func (db *DB) Dir() string { return db.dir }
