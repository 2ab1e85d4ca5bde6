package accounting

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
)

// evaluator runs the report's instant queries, keeping the first error
// so that the report reads as a list of queries.
type evaluator struct {
	r   *Reporter
	ctx context.Context
	at  time.Time // the range's end
	rng string    // the whole range, as a PromQL range: [7d]
	// only, when set, is added to every selector of a per-workload
	// series (see workloadSeries): the report of one workload.
	only *labels.Matcher
	err  error
}

// workloadSeries says whether a metric carries the workload labels: the
// recorded per-workload series and cAdvisor's and the GPU collector's
// per-cgroup series. The others (a GPU's memory total, the roll-up's
// heartbeat, ALERTS, which the report joins by cgroup) are not filtered.
func workloadSeries(name string) bool {
	for _, p := range []string{"gpu_workload:", "workload:", "container_", "gpuscope_gpu_container_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// restrict adds e.only to the selectors of qs that select per-workload
// series.
func (e *evaluator) restrict(qs string) (string, error) {
	expr, err := filterParser.ParseExpr(qs)
	if err != nil {
		return "", err
	}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && workloadSeries(vs.Name) {
			vs.LabelMatchers = append(vs.LabelMatchers, e.only)
		}
		return nil
	})
	return expr.String(), nil
}

// filterParser parses the report's own queries to restrict them.
var filterParser = parser.NewParser(parser.Options{})

// segment is a part of the report's range, (end-length, end]: read from
// the minute and cAdvisor series, or from the hourly roll-up's samples
// at first..end, each of which covers the hour before it.
type segment struct {
	first, end time.Time
	length     time.Duration
	hourly     bool
}

// segments splits (start, end] into the hours the gpuscope.accounting.hourly
// group summed, found from its heartbeat, and the rest. Runs of
// consecutive hours become one segment, so a week with the group
// running all along is three: the minutes before the first whole hour,
// the hours, the minutes after the last.
func (e *evaluator) segments(start, end time.Time, hour time.Duration) []segment {
	whole := []segment{{end: end, length: end.Sub(start)}}
	if hour <= 0 || end.Sub(start) <= hour {
		return whole
	}
	hours := e.matrix(rollupHours+"["+model.Duration(end.Sub(start)-hour).String()+"]", end)
	if e.err != nil || len(hours) != 1 { // none, or more than one group writing it
		return whole
	}
	var segs []segment
	covered := start // (start, covered] is split already
	for _, p := range hours[0].Floats {
		t := time.UnixMilli(p.T).UTC()
		from := t.Add(-hour)
		if from.Before(covered) { // overlaps an hour taken (the interval changed): minutes instead
			continue
		}
		if n := len(segs); n > 0 && segs[n-1].hourly && segs[n-1].end.Equal(from) {
			segs[n-1].end, segs[n-1].length = t, segs[n-1].length+hour
		} else {
			if from.After(covered) {
				segs = append(segs, segment{end: from, length: from.Sub(covered)})
			}
			segs = append(segs, segment{first: t, end: t, length: hour, hourly: true})
		}
		covered = t
	}
	if end.After(covered) {
		segs = append(segs, segment{end: end, length: end.Sub(covered)})
	}
	return segs
}

// stat turns a query with a %s for its range into a function of the
// range.
func stat(format string) func(rng string) string {
	return func(rng string) string { return strings.ReplaceAll(format, "%s", rng) }
}

func sum(a, b float64) float64 { return a + b }

// over runs a statistic over the segments: minute is the query over the
// minute and cAdvisor series, hourly the same over the roll-up's series,
// and merge combines a series' values from the segments (sum, max, min).
func (e *evaluator) over(segs []segment, merge func(a, b float64) float64, minute, hourly func(rng string) string) []promql.Sample {
	if e.err != nil {
		return nil
	}
	if len(segs) == 1 && !segs[0].hourly {
		return e.vectorAt(minute("["+model.Duration(segs[0].length).String()+"]"), segs[0].end)
	}
	// The segments' queries are independent: run together, a report's
	// wall time is under its CPU time where there are cores to spare.
	vs := make([]promql.Vector, len(segs))
	errs := make([]error, len(segs))
	var wg sync.WaitGroup
	for i, sg := range segs {
		// An hourly segment's samples are at first..end: the range reaches
		// a millisecond before the first, so not the one an hour before it.
		qs := minute("[" + model.Duration(sg.length).String() + "]")
		if sg.hourly {
			qs = hourly("[" + model.Duration(sg.end.Sub(sg.first)+time.Millisecond).String() + "]")
		}
		wg.Go(func() { vs[i], errs[i] = e.query(qs, sg.end) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			e.err = err
			return nil
		}
	}
	var out []promql.Sample
	index := map[string]int{}
	for _, v := range vs {
		for _, s := range v {
			if math.IsNaN(s.F) {
				continue
			}
			key := s.Metric.String()
			if i, ok := index[key]; ok {
				out[i].F = merge(out[i].F, s.F)
				continue
			}
			index[key] = len(out)
			out = append(out, promql.Sample{Metric: s.Metric, F: s.F})
		}
	}
	return out
}

// sumByRun adds up a run's series (its GPUs, its cpu labels).
func sumByRun(samples []promql.Sample) []promql.Sample {
	var out []promql.Sample
	index := map[runKey]int{}
	for _, s := range samples {
		k := keyOf(s.Metric)
		if i, ok := index[k]; ok {
			out[i].F += s.F
			continue
		}
		index[k] = len(out)
		out = append(out, promql.Sample{Metric: labels.FromStrings("instance", k.instance, "id", k.id), F: s.F})
	}
	return out
}

// eachRun calls f with the value of every run among samples.
func eachRun(runs map[runKey]*Run, samples []promql.Sample, f func(*Run, float64)) {
	for _, s := range samples {
		if run, ok := runs[keyOf(s.Metric)]; ok && !math.IsNaN(s.F) {
			f(run, s.F)
		}
	}
}

func (e *evaluator) vector(qs string) promql.Vector { return e.vectorAt(qs, e.at) }

func (e *evaluator) vectorAt(qs string, at time.Time) promql.Vector {
	if e.err != nil {
		return nil
	}
	v, err := e.query(qs, at)
	if err != nil {
		e.err = err
	}
	return v
}

// query runs qs at at. Safe for concurrent use.
func (e *evaluator) query(qs string, at time.Time) (v promql.Vector, err error) {
	err = e.exec(qs, at, func(res *promql.Result) (err error) {
		v, err = res.Vector()
		return err
	})
	return v, err
}

// matrix runs a range selector; its points are copied out, as the query
// gives them back to the engine's pool when closed.
func (e *evaluator) matrix(qs string, at time.Time) (m promql.Matrix) {
	if e.err != nil {
		return nil
	}
	e.err = e.exec(qs, at, func(res *promql.Result) error {
		got, err := res.Matrix()
		for _, s := range got {
			m = append(m, promql.Series{Metric: s.Metric, Floats: slices.Clone(s.Floats)})
		}
		return err
	})
	return m
}

// exec runs qs at at and reads its result with read before the query is
// closed.
func (e *evaluator) exec(qs string, at time.Time, read func(*promql.Result) error) error {
	if e.only != nil {
		var err error
		if qs, err = e.restrict(qs); err != nil {
			return fmt.Errorf("restrict %s to a workload: %w", qs, err)
		}
	}
	q, err := e.r.o.Engine.NewInstantQuery(e.ctx, e.r.o.Queryable, nil, qs, at)
	if err != nil {
		return fmt.Errorf("prepare %s: %w", qs, err)
	}
	defer q.Close()
	res := q.Exec(e.ctx)
	if err := e.ctx.Err(); err != nil {
		return fmt.Errorf("workload report: %w", err)
	}
	if res.Err != nil {
		return fmt.Errorf("run %s: %w", qs, res.Err)
	}
	if err := read(res); err != nil {
		return fmt.Errorf("run %s: %w", qs, err)
	}
	return nil
}

// each calls f with the value of every run the query returns.
func (e *evaluator) each(qs string, runs map[runKey]*Run, f func(*Run, float64)) {
	eachRun(runs, e.vector(qs), f)
}
