package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

// gatheredFormat is the exposition an appliance's scrape of an agent
// negotiates with promhttp (Prometheus's default scrape_protocols offer no
// protobuf, and it accepts UTF-8 names): the page parses what it would.
var gatheredFormat = expfmt.NewFormat(expfmt.TypeTextPlain).WithEscapingScheme(model.NoEscaping)

// gathered is a storage.Queryable over one Gather of a gatherer: one
// sample per series, at the gather time unless the exposition carries a
// timestamp (honor_timestamps, as the appliance's node jobs scrape). It
// lets `gpuscope agent`, which has no TSDB, answer its page with the same
// PromQL engine and queries as serve. It lives in web, not storage: it is
// shaped by the page (the instance label, one snapshot a render), and the
// page is its one user.
type gathered struct {
	series []gatheredSeries // sorted by labels
	byName map[string][]gatheredSeries
}

type gatheredSeries struct {
	labels labels.Labels
	t      int64
	f      float64
}

// gather gathers g once, encodes the families as promhttp does for the
// appliance's scrape and parses them with Prometheus's text parser, as
// the scrape loop does: classic histograms and summaries become their
// _bucket, _sum and _count series, and names and label values are
// unescaped exactly as when scraped. target are the labels the scrape adds
// (instance); a sample's own label of that name becomes exported_<name>,
// as with honor_labels: false. A gather that fails with nothing gathered
// is an error; a partial one is used, as promhttp serves it.
func gather(g prometheus.Gatherer, at time.Time, target labels.Labels) (*gathered, error) {
	q := &gathered{byName: map[string][]gatheredSeries{}}
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return q, fmt.Errorf("gather the collector's metrics: %w", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, gatheredFormat)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return q, fmt.Errorf("encode %s: %w", mf.GetName(), err)
		}
	}
	p, err := textparse.New(buf.Bytes(), string(gatheredFormat), nil, textparse.ParserOptions{})
	if err != nil {
		return q, fmt.Errorf("parse the collector's metrics: %w", err)
	}
	var (
		series []gatheredSeries
		lset   labels.Labels
		b      = labels.NewBuilder(labels.EmptyLabels())
	)
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return q, fmt.Errorf("parse the collector's metrics: %w", err)
		}
		if e != textparse.EntrySeries { // the text format has no native histograms
			continue
		}
		_, ts, v := p.Series()
		p.Labels(&lset)
		b.Reset(lset)
		target.Range(func(l labels.Label) {
			if ex := lset.Get(l.Name); ex != "" {
				b.Set(model.ExportedLabelPrefix+l.Name, ex)
			}
			b.Set(l.Name, l.Value)
		})
		s := gatheredSeries{labels: b.Labels(), t: at.UnixMilli(), f: v}
		if ts != nil {
			s.t = *ts
		}
		series = append(series, s)
	}
	slices.SortStableFunc(series, func(a, b gatheredSeries) int { return labels.Compare(a.labels, b.labels) })
	// A registry gathers no series twice; should one still appear, the
	// first is kept, as the TSDB keeps the first of two samples at a time.
	q.series = slices.CompactFunc(series, func(a, b gatheredSeries) bool { return labels.Equal(a.labels, b.labels) })
	for _, s := range q.series {
		n := s.labels.Get(labels.MetricName)
		q.byName[n] = append(q.byName[n], s)
	}
	return q, nil
}

var _ storage.Queryable = (*gathered)(nil)

// Querier implements storage.Queryable.
func (q *gathered) Querier(mint, maxt int64) (storage.Querier, error) {
	return gatheredQuerier{q: q, mint: mint, maxt: maxt}, nil
}

type gatheredQuerier struct {
	q          *gathered
	mint, maxt int64
}

// Select returns the series that match ms and have their sample in
// [mint, maxt], sorted whether or not that is asked for.
func (q gatheredQuerier) Select(_ context.Context, _ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	var set seriesList
	for _, s := range q.match(ms) {
		set.list = append(set.list, promql.NewStorageSeries(promql.Series{Metric: s.labels, Floats: []promql.FPoint{{T: s.t, F: s.f}}}))
	}
	return &set
}

func (q gatheredQuerier) match(ms []*labels.Matcher) []gatheredSeries {
	candidates := q.q.series
	for _, m := range ms { // the page's selectors name their metric
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			candidates = q.q.byName[m.Value]
		}
	}
	var out []gatheredSeries
next:
	for _, s := range candidates {
		if s.t < q.mint || s.t > q.maxt {
			continue
		}
		for _, m := range ms {
			if !m.Matches(s.labels.Get(m.Name)) {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

// LabelValues implements storage.Querier.
func (q gatheredQuerier) LabelValues(_ context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var vs []string
	for _, s := range q.match(ms) {
		if v := s.labels.Get(name); v != "" {
			vs = append(vs, v)
		}
	}
	return limit(compactSorted(vs), hints), nil, nil
}

// LabelNames implements storage.Querier.
func (q gatheredQuerier) LabelNames(_ context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var ns []string
	for _, s := range q.match(ms) {
		s.labels.Range(func(l labels.Label) { ns = append(ns, l.Name) })
	}
	return limit(compactSorted(ns), hints), nil, nil
}

func (gatheredQuerier) Close() error { return nil }

func compactSorted(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

func limit(s []string, hints *storage.LabelHints) []string {
	if hints != nil && hints.Limit > 0 && len(s) > hints.Limit {
		return s[:hints.Limit]
	}
	return s
}

// seriesList is a storage.SeriesSet over a slice.
type seriesList struct {
	list []storage.Series
	cur  storage.Series
}

func (s *seriesList) Next() bool {
	if len(s.list) == 0 {
		return false
	}
	s.cur, s.list = s.list[0], s.list[1:]
	return true
}

func (s *seriesList) At() storage.Series              { return s.cur }
func (*seriesList) Err() error                        { return nil }
func (*seriesList) Warnings() annotations.Annotations { return nil }
