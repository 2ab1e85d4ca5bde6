package web

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
)

// /graph answers Prometheus's links: its expression browser's URL
// parameters (g0.expr, g0.tab, g0.range_input, g0.end_input, …; g1.* for
// a second panel), which alerts' generatorURL and every Prometheus user's
// bookmarks carry. The graph is the range query /api/v1/query_range runs
// and the table the instant query of /api/v1/query, through the same
// engine, storage and timeout, and an error is worded as the API words
// it. The step is what Prometheus's own page chooses (its "auto, medium"
// resolution: a point per 250th of the range, at least a second) unless
// the URL sets one.

// graphPanel is one panel of /graph.
type graphPanel struct {
	Index int
	Expr  string
	// Tab is graph or table (Prometheus's old 0 and 1 are read as those).
	Tab        string
	RangeInput string
	EndInput   string // "" is now
	Range      time.Duration
	End        time.Time
	Step       time.Duration
	// ErrorType and Error are the API's errorType and error for the same
	// request; the page shows them as Prometheus's does.
	ErrorType, Error string
	Warnings         []string
	// Chart is the graph tab's drawing.
	Chart *chart
	// Series counts the graph's series; Drawn those with a line.
	Series int
	// Rows are the table tab's, ResultType the instant query's.
	Rows       []tableRow
	ResultType string
	Truncated  int
	// GraphHref and TableHref switch the panel's tab.
	GraphHref, TableHref string
}

type tableRow struct {
	Labels string
	// Value is a vector's or scalar's value, as the API writes it;
	// Values a range vector's, "value @timestamp".
	Value  string
	Values []string
}

// graphTableMax is how many rows a table shows: Prometheus's page shows
// 10,000 series of a result at most too.
const graphTableMax = 10000

// graphValuesMax is the most series whose exact values a graph's legend
// carries (data-values): past it the page would grow by a kilobyte and a
// half per series.
const graphValuesMax = 50

type graphPage struct {
	Base   string
	Panels []*graphPanel
	Status int
}

func (h *Handler) graphPage(c echo.Context) error {
	if h.opts.API == nil {
		return h.historyNotice(c, http.StatusNotFound, "No history on this node", errNoHistory.Error())
	}
	if !h.ready.Load() {
		return h.historyNotice(c, http.StatusServiceUnavailable, "Starting", "the TSDB is opening (WAL replay): the query page answers once it is ready")
	}
	o := h.overviewOptions()
	now := o.Now()
	q := c.QueryParams()
	p := &graphPage{Base: baseHref(c.Request().URL.EscapedPath()), Status: http.StatusOK}
	p.Panels = parseGraphPanels(q, now)
	for _, gp := range p.Panels {
		gp.GraphHref = "graph?" + withParam(q, fmt.Sprintf("g%d.tab", gp.Index), "graph").Encode()
		gp.TableHref = "graph?" + withParam(q, fmt.Sprintf("g%d.tab", gp.Index), "table").Encode()
		if gp.Error == "" && gp.Expr != "" {
			h.runPanel(c.Request().Context(), gp)
		}
		if code := errorStatus(gp.ErrorType); code > p.Status {
			p.Status = code
		}
	}
	if len(q) == 0 {
		p.Panels[0].GraphHref, p.Panels[0].TableHref = "graph?g0.tab=graph", "graph?g0.tab=table"
	}
	for _, gp := range p.Panels {
		if gp.Chart == nil {
			continue
		}
		d := newDrawing(newAxis(gp.End.Add(-gp.Range), gp.End, gp.Step))
		gp.Chart.noValues = len(gp.Chart.Lines) > graphValuesMax
		if err := d.draw([]*chart{gp.Chart}, nil); err != nil {
			return err
		}
	}
	return render(c, p.Status, "graph", p)
}

// errorStatus is the API's HTTP status for an errorType (web/api/v1
// getDefaultErrorCode): the page answers as the API would have.
func errorStatus(typ string) int {
	switch typ {
	case "":
		return http.StatusOK
	case "bad_data":
		return http.StatusBadRequest
	case "execution", "cost_limit":
		return http.StatusUnprocessableEntity
	case "canceled":
		return 499 // the client went away, as Prometheus
	case "timeout":
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func withParam(q url.Values, k, v string) url.Values {
	out := url.Values{}
	for key, vs := range q {
		out[key] = vs
	}
	out.Set(k, v)
	return out
}

// parseGraphPanels reads g0.*, g1.*, … until a panel has no expr, as
// Prometheus's page does; none is one empty panel.
func parseGraphPanels(q url.Values, now time.Time) []*graphPanel {
	var out []*graphPanel
	for i := 0; i == 0 || q.Has(fmt.Sprintf("g%d.expr", i)); i++ {
		out = append(out, parseGraphPanel(q, i, now))
	}
	return out
}

func parseGraphPanel(q url.Values, i int, now time.Time) *graphPanel {
	param := func(name string) string { return q.Get(fmt.Sprintf("g%d.%s", i, name)) }
	gp := &graphPanel{Index: i, Expr: param("expr"), Tab: "table", RangeInput: "1h", End: now, Range: time.Hour}
	bad := func(name string, err error) *graphPanel {
		gp.ErrorType, gp.Error = "bad_data", fmt.Sprintf("invalid parameter %q: %v", fmt.Sprintf("g%d.%s", i, name), err)
		return gp
	}
	switch t := param("tab"); t {
	case "", "1", "table":
	case "0", "graph":
		gp.Tab = "graph"
	default:
		return bad("tab", fmt.Errorf("%q is neither graph (0) nor table (1)", t))
	}
	if v := param("range_input"); v != "" {
		d, err := model.ParseDuration(v)
		if err != nil || d <= 0 {
			return bad("range_input", fmt.Errorf("cannot parse %q to a valid duration", v))
		}
		gp.RangeInput, gp.Range = v, time.Duration(d)
	}
	for _, name := range []string{"end_input", "moment_input"} {
		if v := param(name); v != "" {
			t, err := parsePageTime(name, v)
			if err != nil {
				return bad(name, fmt.Errorf("cannot parse %q to a valid timestamp (2006-01-02 15:04:05 in UTC, RFC 3339 or Unix seconds)", v))
			}
			gp.EndInput, gp.End = v, t
		}
	}
	// Prometheus's resolution: auto (by density), fixed or custom steps,
	// or the old step_input in seconds.
	density := 250.0
	switch param("res_type") {
	case "fixed", "custom":
		s, err := strconv.ParseFloat(param("res_step"), 64)
		if err != nil || !(s > 0) || math.IsInf(s, 0) {
			return bad("res_step", fmt.Errorf("cannot parse %q to a positive step in seconds", param("res_step")))
		}
		gp.Step = time.Duration(s * float64(time.Second))
	case "", "auto":
		switch param("res_density") {
		case "low":
			density = 100
		case "high":
			density = 750
		}
		if s, err := strconv.Atoi(param("step_input")); err == nil && s > 0 && param("res_type") == "" {
			gp.Step = time.Duration(s) * time.Second
		}
	default:
		return bad("res_type", fmt.Errorf("%q is not auto, fixed or custom", param("res_type")))
	}
	if gp.Step == 0 {
		gp.Step = max(time.Duration(math.Floor(gp.Range.Seconds()/density))*time.Second, time.Second)
	}
	if gp.Range/gp.Step > 11000 {
		// The API's own words (web/api/v1 queryRange).
		gp.ErrorType, gp.Error = "bad_data", "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"
	}
	return gp
}

// graphParams are Prometheus's parameters for a panel of expr.
func graphParams(expr string, rng time.Duration, end time.Time, tab string) url.Values {
	return url.Values{
		"g0.expr":        {expr},
		"g0.tab":         {tab},
		"g0.range_input": {promDuration(rng)},
		"g0.end_input":   {end.UTC().Format("2006-01-02 15:04:05")},
	}
}

// runPanel runs the panel's query as the API runs it: the graph tab
// query_range's, the table tab query's at the panel's end.
func (h *Handler) runPanel(ctx context.Context, gp *graphPanel) {
	api := h.opts.API
	if api.QueryTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, api.QueryTimeout)
		defer cancel()
	}
	var (
		qry promql.Query
		err error
	)
	if gp.Tab == "graph" {
		qry, err = api.QueryEngine.NewRangeQuery(ctx, api.Queryable, nil, gp.Expr, gp.End.Add(-gp.Range), gp.End, gp.Step)
	} else {
		qry, err = api.QueryEngine.NewInstantQuery(ctx, api.Queryable, nil, gp.Expr, gp.End)
	}
	if err != nil {
		gp.ErrorType, gp.Error = constructionError(err)
		return
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		gp.ErrorType, gp.Error = execError(res.Err), res.Err.Error()
		return
	}
	warnings, infos := res.Warnings.AsStrings(gp.Expr, 10, 10)
	gp.Warnings = append(warnings, infos...)
	if gp.Tab == "graph" {
		gp.graph(res.Value)
		return
	}
	gp.table(res.Value)
}

// constructionError is the API's answer to a query it could not build
// (web/api/v1 queryConstructionError): bad_data, "invalid parameter
// "query": …", but a timeout or cancellation as such.
func constructionError(err error) (typ, msg string) {
	var (
		timeout  promql.ErrQueryTimeout
		canceled promql.ErrQueryCanceled
	)
	if errors.As(err, &timeout) || errors.As(err, &canceled) {
		return execError(err), err.Error()
	}
	if _, ok := errors.AsType[promql.ErrLimitAboveCeiling](err); ok {
		return "bad_data", err.Error()
	}
	return "bad_data", fmt.Sprintf("invalid parameter %q: %v", "query", err)
}

// execError is the API's errorType for a failed query (web/api/v1
// returnAPIError).
func execError(err error) string {
	var (
		canceled promql.ErrQueryCanceled
		timeout  promql.ErrQueryTimeout
		st       promql.ErrStorage
		series   promql.ErrTooManySeries
		samples  promql.ErrTooManySamplesRead
	)
	switch {
	case errors.As(err, &canceled), errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &timeout):
		return "timeout"
	case errors.As(err, &series), errors.As(err, &samples):
		return "cost_limit"
	case errors.As(err, &st):
		return "internal"
	}
	return "execution"
}

func (gp *graphPanel) graph(v parser.Value) {
	c := &chart{ID: fmt.Sprintf("g%d", gp.Index), Title: gp.Expr, Unit: unitNone}
	ax := newAxis(gp.End.Add(-gp.Range), gp.End, gp.Step)
	hp := &historyPage{ax: ax}
	m, ok := v.(promql.Matrix)
	if !ok {
		gp.ErrorType, gp.Error = "execution", fmt.Sprintf("unexpected result type %s", v.Type())
		return
	}
	gp.Series = len(m)
	for _, s := range m {
		ps := make([]point, len(s.Floats))
		for i, f := range s.Floats {
			ps[i] = point{t: f.T, v: f.F}
		}
		c.Lines = append(c.Lines, &chartLine{Name: seriesName(s.Metric), Values: hp.values(ps)})
	}
	gp.Chart = c
}

func (gp *graphPanel) table(v parser.Value) {
	gp.ResultType = string(v.Type())
	add := func(r tableRow) bool {
		if len(gp.Rows) >= graphTableMax {
			gp.Truncated++
			return false
		}
		gp.Rows = append(gp.Rows, r)
		return true
	}
	switch v := v.(type) {
	case promql.Vector:
		for _, s := range v {
			val := formatNum(s.F)
			if s.H != nil {
				val = s.H.String()
			}
			add(tableRow{Labels: seriesName(s.Metric), Value: val})
		}
	case promql.Matrix:
		for _, s := range v {
			r := tableRow{Labels: seriesName(s.Metric)}
			for _, f := range s.Floats {
				r.Values = append(r.Values, formatNum(f.F)+" @"+formatNum(float64(f.T)/1000))
			}
			for _, h := range s.Histograms {
				r.Values = append(r.Values, h.H.String()+" @"+formatNum(float64(h.T)/1000))
			}
			add(r)
		}
	case promql.Scalar:
		add(tableRow{Labels: "scalar", Value: formatNum(v.V)})
	case promql.String:
		add(tableRow{Labels: "string", Value: v.V})
	}
}

// seriesName writes a series as Prometheus's page and client_golang's
// model.Metric do: the metric name, then the other labels in braces,
// sorted; {} for none.
func seriesName(ls labels.Labels) string {
	name := ls.Get(labels.MetricName)
	rest := ls.DropMetricName()
	switch {
	case rest.IsEmpty() && name != "":
		return name
	case rest.IsEmpty():
		return "{}"
	}
	return name + rest.String()
}
