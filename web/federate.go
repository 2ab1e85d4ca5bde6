package web

// The federation handler is ported from Prometheus's web/federate.go
// (github.com/prometheus/prometheus v0.316.0, Apache License 2.0,
// Copyright The Prometheus Authors), where it is an unexported method of
// Prometheus's own web.Handler. The logic is kept line for line so that a
// Prometheus federating from gpuscope sees what it would see federating
// from another Prometheus; only the wiring (options instead of the
// handler's fields, counters per handler instead of package variables,
// echo instead of Prometheus's router) differs.

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/timestamp"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"google.golang.org/protobuf/proto"
)

// FederationOptions configure /federate.
type FederationOptions struct {
	// Queryable is the local TSDB. As in Prometheus, federation serves
	// local data only, never what remote_read would add.
	Queryable storage.Queryable
	// LookbackDelta is how old the latest sample of a series may be to be
	// served (--query.lookback-delta).
	LookbackDelta time.Duration
	// ExternalLabels returns the config's global.external_labels, added to
	// every series that lacks them.
	ExternalLabels func() labels.Labels
	Parser         parser.Parser
	Registerer     prometheus.Registerer
	// Now is the evaluation time; nil means time.Now.
	Now func() time.Time
}

// federation serves GET /federate.
type federation struct {
	opts     FederationOptions
	logger   *slog.Logger
	errors   prometheus.Counter
	warnings prometheus.Counter
}

// MountFederation serves /federate?match[]=… : the latest sample of every
// matching series within the lookback delta, in the exposition format the
// client asks for (protobuf or text), for a Prometheus that scrapes
// gpuscope with honor_labels: true. Like the API it answers 503 until the
// TSDB is open, and compresses when the client accepts gzip.
func (h *Handler) MountFederation(o FederationOptions) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ExternalLabels == nil {
		o.ExternalLabels = labels.EmptyLabels
	}
	if o.Parser == nil {
		o.Parser = parser.NewParser(parser.Options{})
	}
	f := &federation{
		opts:   o,
		logger: h.opts.Logger.With("handler", "federation"),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "prometheus_web_federation_errors_total",
			Help: "Total number of errors that occurred while sending federation responses.",
		}),
		warnings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "prometheus_web_federation_warnings_total",
			Help: "Total number of warnings that occurred while sending federation responses.",
		}),
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(f.errors, f.warnings)
	}
	h.echo.GET("/federate", echo.WrapHandler(h.testReady(f.serve)), middleware.Gzip())
}

func (f *federation) serve(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()

	if err := req.ParseForm(); err != nil {
		http.Error(w, fmt.Sprintf("error parsing form values: %v", err), http.StatusBadRequest)
		return
	}

	matcherSets, err := f.opts.Parser.ParseMetricSelectors(req.Form["match[]"])
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}

	var (
		now    = f.opts.Now()
		mint   = timestamp.FromTime(now.Add(-f.opts.LookbackDelta))
		maxt   = timestamp.FromTime(now)
		format = expfmt.NegotiateAccept(req.Header, expfmt.NewFormat(expfmt.TypeProtoDelim), expfmt.NewFormat(expfmt.TypeProtoText), expfmt.NewFormat(expfmt.TypeProtoCompact), expfmt.NewFormat(expfmt.TypeTextPlain))
		enc    = expfmt.NewEncoder(w, format)
	)
	w.Header().Set("Content-Type", string(format))

	q, err := f.opts.Queryable.Querier(mint, maxt)
	if err != nil {
		f.errors.Inc()
		if errors.Is(err, tsdb.ErrNotReady) {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer q.Close()

	vec := make(promql.Vector, 0, 8000)

	hints := &storage.SelectHints{Start: mint, End: maxt}

	var sets []storage.SeriesSet
	for _, mset := range matcherSets {
		s := q.Select(ctx, true, hints, mset...)
		sets = append(sets, s)
	}

	set := storage.NewMergeSeriesSet(sets, 0, storage.ChainedSeriesMerge)
	it := storage.NewBuffer(int64(f.opts.LookbackDelta / 1e6))
	var chkIter chunkenc.Iterator
Loop:
	for set.Next() {
		s := set.At()

		chkIter = s.Iterator(chkIter)
		it.Reset(chkIter)

		var (
			t  int64
			v  float64
			fh *histogram.FloatHistogram
		)
		valueType := it.Seek(maxt)
		switch valueType {
		case chunkenc.ValFloat:
			t, v = it.At()
		case chunkenc.ValFloatHistogram, chunkenc.ValHistogram:
			t, fh = it.AtFloatHistogram(nil)
		default:
			sample, ok := it.PeekBack(1)
			if !ok {
				continue Loop
			}
			t = sample.T()
			switch sample.Type() {
			case chunkenc.ValFloat:
				v = sample.F()
			case chunkenc.ValHistogram:
				// ToFloat(nil) returns an independent copy of the buffered histogram.
				fh = sample.H().ToFloat(nil)
			case chunkenc.ValFloatHistogram:
				// The buffer is reset and reused for every series, so retain a copy.
				fh = sample.FH().Copy()
			default:
				continue Loop
			}
		}
		// The exposition formats do not support stale markers, so drop them. This
		// is good enough for staleness handling of federated data, as the
		// interval-based limits on staleness will do the right thing for supported
		// use cases (which is to say federating aggregated time series).
		if value.IsStaleNaN(v) || (fh != nil && value.IsStaleNaN(fh.Sum)) {
			continue
		}

		vec = append(vec, promql.Sample{
			Metric: s.Labels(),
			T:      t,
			F:      v,
			H:      fh,
		})
	}
	if ws := set.Warnings(); len(ws) > 0 {
		f.logger.Debug("Federation select returned warnings", "warnings", ws)
		f.warnings.Add(float64(len(ws)))
	}
	if set.Err() != nil {
		f.errors.Inc()
		http.Error(w, set.Err().Error(), http.StatusInternalServerError)
		return
	}

	slices.SortFunc(vec, func(a, b promql.Sample) int {
		ni := a.Metric.Get(labels.MetricName)
		nj := b.Metric.Get(labels.MetricName)
		return strings.Compare(ni, nj)
	})

	externalLabels := f.opts.ExternalLabels().Map()
	if _, ok := externalLabels[model.InstanceLabel]; !ok {
		externalLabels[model.InstanceLabel] = ""
	}
	externalLabelNames := make([]string, 0, len(externalLabels))
	for ln := range externalLabels {
		externalLabelNames = append(externalLabelNames, ln)
	}
	sort.Strings(externalLabelNames)

	var (
		lastMetricName                          string
		lastWasHistogram, lastHistogramWasGauge bool
		protMetricFam                           *dto.MetricFamily
	)
	for _, s := range vec {
		isHistogram := s.H != nil
		formatType := format.FormatType()
		if isHistogram &&
			!s.H.UsesCustomBuckets() &&
			formatType != expfmt.TypeProtoDelim &&
			formatType != expfmt.TypeProtoText &&
			formatType != expfmt.TypeProtoCompact {
			// Can't serve a native histogram with a non-protobuf format.
			// (We can serve an NHCB, though, as it is converted to a
			// classic histogram for federation.)
			continue
		}

		nameSeen := false
		globalUsed := map[string]struct{}{}
		protMetric := &dto.Metric{}

		err := s.Metric.Validate(func(l labels.Label) error {
			if l.Value == "" {
				// No value means unset. Never consider those labels.
				// This is also important to protect against nameless metrics.
				return nil
			}
			if l.Name == labels.MetricName {
				nameSeen = true
				// We already have the name in the current MetricDescriptor,
				// and we ignore nameless metrics.
				if l.Value == lastMetricName &&
					// The sample type matches (float vs histogram).
					lastWasHistogram == isHistogram &&
					// If it was a histogram, the histogram type
					// (counter vs gauge) also matches.
					(!isHistogram ||
						lastHistogramWasGauge == (s.H.CounterResetHint == histogram.GaugeType)) {
					return nil
				}

				// Since we now check for the sample type and
				// type of histogram above, we will end up
				// creating multiple metric families for the
				// same metric name. This would technically be
				// an invalid exposition. But since the consumer
				// of this is Prometheus, and Prometheus can
				// parse it fine, we allow it and bend the rules
				// to make federation possible in those cases.

				// Need to start a new MetricDescriptor. Ship
				// off the old one (if any) before creating the
				// new one.
				if protMetricFam != nil {
					if err := enc.Encode(protMetricFam); err != nil {
						return err
					}
				}
				protMetricFam = &dto.MetricFamily{
					Type: dto.MetricType_UNTYPED.Enum(),
					Name: proto.String(l.Value),
				}
				if isHistogram {
					if s.H.CounterResetHint == histogram.GaugeType {
						protMetricFam.Type = dto.MetricType_GAUGE_HISTOGRAM.Enum()
					} else {
						protMetricFam.Type = dto.MetricType_HISTOGRAM.Enum()
					}
				}
				lastMetricName = l.Value
				return nil
			}
			protMetric.Label = append(protMetric.Label, &dto.LabelPair{
				Name:  proto.String(l.Name),
				Value: proto.String(l.Value),
			})
			if _, ok := externalLabels[l.Name]; ok {
				globalUsed[l.Name] = struct{}{}
			}
			return nil
		})
		if err != nil {
			f.errors.Inc()
			f.logger.Error("federation failed", "err", err)
			return
		}
		if !nameSeen {
			f.logger.Warn("Ignoring nameless metric during federation", "metric", s.Metric)
			continue
		}
		// Attach global labels if they do not exist yet.
		for _, ln := range externalLabelNames {
			lv := externalLabels[ln]
			if _, ok := globalUsed[ln]; !ok {
				protMetric.Label = append(protMetric.Label, &dto.LabelPair{
					Name:  proto.String(ln),
					Value: proto.String(lv),
				})
			}
		}

		protMetric.TimestampMs = proto.Int64(s.T)
		if !isHistogram {
			lastHistogramWasGauge = false
			protMetric.Untyped = &dto.Untyped{
				Value: proto.Float64(s.F),
			}
		} else {
			lastHistogramWasGauge = s.H.CounterResetHint == histogram.GaugeType
			if s.H.UsesCustomBuckets() {
				protMetric.Histogram = makeClassicHistogram(s.H)
			} else {
				protMetric.Histogram = makeNativeHistogram(s.H)
			}
		}
		lastWasHistogram = isHistogram
		protMetricFam.Metric = append(protMetricFam.Metric, protMetric)
	}
	// Still have to ship off the last MetricDescriptor, if any.
	if protMetricFam != nil {
		if err := enc.Encode(protMetricFam); err != nil {
			f.errors.Inc()
			f.logger.Error("federation failed", "err", err)
		}
	}
}

// makeNativeHistogram creates a dto.Histogram representing a native histogram.
// Use only for standard exponential schemas.
func makeNativeHistogram(h *histogram.FloatHistogram) *dto.Histogram {
	result := &dto.Histogram{
		SampleCountFloat: proto.Float64(h.Count),
		SampleSum:        proto.Float64(h.Sum),
		Schema:           proto.Int32(h.Schema),
		ZeroThreshold:    proto.Float64(h.ZeroThreshold),
		ZeroCountFloat:   proto.Float64(h.ZeroCount),
		NegativeCount:    h.NegativeBuckets,
		PositiveCount:    h.PositiveBuckets,
	}
	if len(h.PositiveSpans) > 0 {
		result.PositiveSpan = make([]*dto.BucketSpan, len(h.PositiveSpans))
		for i, sp := range h.PositiveSpans {
			result.PositiveSpan[i] = &dto.BucketSpan{
				Offset: proto.Int32(sp.Offset),
				Length: proto.Uint32(sp.Length),
			}
		}
	}
	if len(h.NegativeSpans) > 0 {
		result.NegativeSpan = make([]*dto.BucketSpan, len(h.NegativeSpans))
		for i, sp := range h.NegativeSpans {
			result.NegativeSpan[i] = &dto.BucketSpan{
				Offset: proto.Int32(sp.Offset),
				Length: proto.Uint32(sp.Length),
			}
		}
	}
	return result
}

// makeClassicHistogram creates a dto.Histogram representing a classic
// histogram. Use only for NHCB (schema -53).
func makeClassicHistogram(h *histogram.FloatHistogram) *dto.Histogram {
	result := &dto.Histogram{
		SampleCountFloat: proto.Float64(h.Count),
		SampleSum:        proto.Float64(h.Sum),
	}
	result.Bucket = make([]*dto.Bucket, len(h.CustomValues))
	var (
		cumulativeCount float64
		bucketIter      = h.PositiveBucketIterator()
		bucketAvailable = bucketIter.Next()
	)
	for i, le := range h.CustomValues {
		for bucketAvailable && int(bucketIter.At().Index) < i {
			bucketAvailable = bucketIter.Next()
		}
		if bucketAvailable && int(bucketIter.At().Index) == i {
			cumulativeCount += bucketIter.At().Count
		}
		result.Bucket[i] = &dto.Bucket{
			UpperBound:           proto.Float64(le),
			CumulativeCountFloat: proto.Float64(cumulativeCount),
		}
	}
	// Note that we do not add the +Inf bucket explicitly. In the protobuf
	// exposition format, it is optional. For other exposition formats, the
	// code converting the protobuf created here into the actual exposition
	// payload will add the +Inf bucket.
	return result
}
