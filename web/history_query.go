package web

import (
	"cmp"
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
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
)

// plan writes a page's PromQL for its range and step.
type plan struct {
	step, minStep time.Duration
	// recorded is the interval of the rule that records a series now, 0
	// when none does (its group disabled, or another rule file).
	recorded func(name string) time.Duration
	// match are the page's matchers: instance="n", gpu="0".
	match string
}

// recordedSteps is how many of a recording rule's intervals a step must
// span for the page to read the recording: five minute-samples make a
// five-minute point, where the raw series would give twenty.
const recordedSteps = 5

// sel is raw's value at each step, with the page's matchers and extra:
// the sample at the step where a step spans no more than a scrape;
// otherwise over (avg or max) of the step's samples, so that a spike or a
// step of the staircase between two points is not lost, read from rec
// (raw's recording at a minute, same labels) where the step spans
// recordedSteps of its rule's intervals and the rule runs: a 30-day page
// then reads a quarter of the samples.
func (p plan) sel(raw, rec, over, extra string) string {
	switch {
	case rec != "" && p.useRecorded(rec):
		return over + "_over_time(" + p.selector(rec, extra) + "[" + promDuration(p.step) + "])"
	case p.step <= p.minStep:
		return p.selector(raw, extra)
	}
	return over + "_over_time(" + p.selector(raw, extra) + "[" + promDuration(p.step) + "])"
}

// selector is a metric name, or a selector in braces, with the page's
// matchers and extra.
func (p plan) selector(name, extra string) string {
	if strings.HasPrefix(name, "{") {
		return "{" + strings.TrimSuffix(name[1:], "}") + ", " + p.matchers(extra) + "}"
	}
	return name + "{" + p.matchers(extra) + "}"
}

func (p plan) useRecorded(rec string) bool {
	iv := p.recorded(rec)
	return iv > 0 && p.step >= recordedSteps*iv
}

// rate is a counter's per-second rate at each step, over Grafana's
// $__rate_interval (the step plus a scrape, at least four scrapes), or
// its recording rec averaged over the step.
func (p plan) rate(raw, rec, extra string) string {
	if rec != "" && p.useRecorded(rec) {
		return "avg_over_time(" + p.selector(rec, extra) + "[" + promDuration(p.step) + "])"
	}
	w := max(p.step+p.minStep, 4*p.minStep)
	return "rate(" + p.selector(raw, extra) + "[" + promDuration(w) + "])"
}

func (p plan) matchers(extra string) string {
	switch {
	case extra == "":
		return p.match
	case p.match == "":
		return extra
	}
	return p.match + ", " + extra
}

func promDuration(d time.Duration) string { return model.Duration(d).String() }

// matcherText writes matchers as PromQL.
func matcherText(ms ...*labels.Matcher) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.String()
	}
	return strings.Join(parts, ", ")
}

// recordedIntervals are the series recorded by the rules running now and
// their groups' intervals.
func recordedIntervals(m *rules.Manager) func(string) time.Duration {
	out := map[string]time.Duration{}
	if m != nil {
		for _, g := range m.RuleGroups() {
			for _, r := range g.Rules() {
				if rr, ok := r.(*rules.RecordingRule); ok {
					if _, seen := out[rr.Name()]; !seen {
						out[rr.Name()] = g.Interval()
					}
				}
			}
		}
	}
	return func(name string) time.Duration { return out[name] }
}

// chartSpec is a graph of a page before its queries run.
type chartSpec struct {
	id, title, note string
	unit            unit
	lines           []lineSpec
}

// lineSpec is a query of a graph: each series it returns is a line.
type lineSpec struct {
	name string
	ref  bool
	expr func(p plan) string
	// legend names a series of the result and may link it; nil: name,
	// then the MIG instance.
	legend func(name string, ls labels.Labels) (text, link string)
}

// eventSpec is a row kind of the events timeline.
type eventSpec struct {
	kind string
	expr func(p plan) string
	// label names a series' row; series with one label share the row
	// (an alert pending, then firing).
	label func(ls labels.Labels) string
	// state is a band's class (pending, firing, active); nil for marks.
	state func(ls labels.Labels) string
}

// rangeSeries is one series of a range query's answer.
type rangeSeries struct {
	labels labels.Labels
	points []point
}

// matrix runs expr over [start, end] at step. Its error reads as the
// API's.
func (s engineSource) matrix(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]rangeSeries, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	qry, err := s.engine.NewRangeQuery(ctx, s.queryable, nil, expr, start, end, step)
	if err != nil {
		return nil, fmt.Errorf("parse query: %w", err)
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		return nil, queryErr(res.Err)
	}
	m, err := res.Matrix()
	if err != nil {
		return nil, err
	}
	out := make([]rangeSeries, len(m))
	for i, s := range m {
		ps := make([]point, len(s.Floats))
		for j, f := range s.Floats {
			ps[j] = point{t: f.T, v: f.F}
		}
		out[i] = rangeSeries{labels: s.Metric, points: ps}
	}
	return out, nil
}

// historyPage is one render of a page over a range.
type historyPage struct {
	ctx  context.Context
	src  engineSource
	tr   timeRange
	plan plan
	ax   axis
}

// values lays a series' points on the axis's steps, NaN where none.
func (hp *historyPage) values(ps []point) []float64 {
	vs := make([]float64, hp.ax.n)
	for i := range vs {
		vs[i] = math.NaN()
	}
	for _, p := range ps {
		if i := hp.ax.index(p.t); i >= 0 {
			vs[i] = p.v
		}
	}
	return vs
}

// run runs the charts' and the events' range queries side by side, at
// most overviewParallel at once as the overview's (the engine's slots
// are shared with Grafana and the rules).
func (hp *historyPage) run(specs []chartSpec, events []eventSpec) ([]*chart, *eventsView) {
	type job struct {
		expr string
		res  []rangeSeries
		err  error
	}
	jobs := make([][]*job, len(specs))
	evJobs := make([]*job, len(events))
	var all []*job
	for i, c := range specs {
		for _, l := range c.lines {
			j := &job{expr: l.expr(hp.plan)}
			jobs[i] = append(jobs[i], j)
			all = append(all, j)
		}
	}
	for i, e := range events {
		evJobs[i] = &job{expr: e.expr(hp.plan)}
		all = append(all, evJobs[i])
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, overviewParallel)
	for _, j := range all {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			j.res, j.err = hp.src.matrix(hp.ctx, j.expr, hp.tr.Start, hp.tr.End, hp.tr.Step)
		})
	}
	wg.Wait()

	charts := make([]*chart, len(specs))
	for i, spec := range specs {
		c := &chart{ID: spec.id, Title: spec.title, Note: spec.note, Unit: spec.unit}
		for k, l := range spec.lines {
			j := jobs[i][k]
			c.Queries = append(c.Queries, chartQuery{Expr: j.expr, Href: hp.tr.graphLink(j.expr)})
			if j.err != nil {
				c.Err = j.err.Error()
				continue
			}
			var lines []*chartLine
			for _, s := range j.res {
				name, link := l.name, ""
				if l.legend != nil {
					name, link = l.legend(l.name, s.labels)
				} else if gi := s.labels.Get("GPU_I_ID"); gi != "" {
					name += " GI " + gi
				}
				lines = append(lines, &chartLine{Name: name, Link: link, Ref: l.ref, Values: hp.values(s.points)})
			}
			slices.SortStableFunc(lines, func(a, b *chartLine) int { return cmp.Compare(a.Name, b.Name) })
			c.Lines = append(c.Lines, lines...)
		}
		charts[i] = c
	}

	ev := &eventsView{}
	for i, spec := range events {
		j := evJobs[i]
		if j.err != nil {
			ev.Err = spec.kind + ": " + j.err.Error()
			continue
		}
		rows := map[string]*eventRow{}
		var order []*eventRow
		for _, s := range j.res {
			label := spec.label(s.labels)
			row := rows[label]
			if row == nil {
				row = &eventRow{Label: label, Kind: spec.kind}
				rows[label] = row
				order = append(order, row)
			}
			vs := hp.values(s.points)
			if spec.state == nil {
				row.Marks = append(row.Marks, rises(vs)...)
			} else {
				row.Spans = append(row.Spans, spans(vs, spec.state(s.labels))...)
			}
		}
		for _, row := range order {
			if len(row.Spans) > 0 || len(row.Marks) > 0 {
				ev.Rows = append(ev.Rows, row)
			}
		}
	}
	slices.SortStableFunc(ev.Rows, func(a, b *eventRow) int {
		return cmp.Or(cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)), cmp.Compare(a.Label, b.Label))
	})
	return charts, ev
}

func kindOrder(k string) int {
	return slices.Index([]string{"alert", "xid", "oom", "clock"}, k)
}

// spans are the runs of steps at which a series is above 0.
func spans(vs []float64, state string) []eventSpan {
	var out []eventSpan
	from := -1
	for i, v := range append(vs, math.NaN()) {
		on := !math.IsNaN(v) && v > 0
		switch {
		case on && from < 0:
			from = i
		case !on && from >= 0:
			out = append(out, eventSpan{From: from, To: i - 1, State: state})
			from = -1
		}
	}
	return out
}

// rises are the steps at which a counter rose: by the difference, by its
// value where it reappears after a gap or a reset (a restart counts from
// 0). Its value at the first step is not a rise: it was reached before.
func rises(vs []float64) []eventMark {
	var out []eventMark
	prev := math.NaN()
	for i, v := range vs {
		switch {
		case math.IsNaN(v):
		case i == 0:
		case math.IsNaN(prev) || v < prev:
			if v > 0 {
				out = append(out, eventMark{At: i, N: v})
			}
		case v > prev:
			out = append(out, eventMark{At: i, N: v - prev})
		}
		prev = v
	}
	return out
}

// series lists the label sets of the series matching ms over the page's
// range, from the index: the page's GPUs, a workload's cgroups, what
// exists for a 404. No sample is read.
func (hp *historyPage) series(ms ...*labels.Matcher) ([]labels.Labels, error) {
	start, end := hp.tr.Start.UnixMilli(), hp.tr.End.UnixMilli()
	q, err := hp.src.queryable.Querier(start, end)
	if err != nil {
		return nil, fmt.Errorf("open querier: %w", err)
	}
	defer q.Close()
	ss := q.Select(hp.ctx, false, &storage.SelectHints{Start: start, End: end, Func: "series"}, ms...)
	var out []labels.Labels
	for ss.Next() {
		out = append(out, ss.At().Labels())
	}
	return out, ss.Err()
}

// instant runs expr at the range's end.
func (hp *historyPage) instant(expr string) (promql.Vector, error) {
	ctx, cancel := context.WithTimeout(hp.ctx, hp.src.timeout)
	defer cancel()
	q, err := hp.src.engine.NewInstantQuery(ctx, hp.src.queryable, nil, expr, hp.tr.End)
	if err != nil {
		return nil, fmt.Errorf("parse query: %w", err)
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, queryErr(res.Err)
	}
	v, err := res.Vector()
	return slices.Clone(v), err
}

// graphLink is /graph showing expr over the range, as Prometheus's URL
// parameters write it.
func (tr timeRange) graphLink(expr string) string {
	v := graphParams(expr, tr.Range(), tr.End, "graph")
	if tr.Live {
		v.Del("g0.end_input")
	}
	return "graph?" + v.Encode()
}
