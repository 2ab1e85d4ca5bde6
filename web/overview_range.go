package web

import (
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// sparkRange is where a card's sparkline is drawn: n steps of step up to
// the range's end, about sparkPoints of them (a minute each over the
// default hour).
type sparkRange struct {
	start time.Time
	step  time.Duration
	n     int
}

func newSparkRange(tr timeRange, minStep time.Duration) sparkRange {
	step := chooseStep(tr.Range(), minStep, sparkPoints)
	n := max(int(tr.Range()/step), 1)
	return sparkRange{start: tr.End.Add(-time.Duration(n-1) * step), step: step, n: n}
}

func (sr sparkRange) end() time.Time { return sr.start.Add(time.Duration(sr.n-1) * sr.step) }

// overviewRange reads the page's time range (serve only: the agent keeps
// no history) and sets the cards' evaluation time to its end. ok is
// false when a bad range has been answered with 400.
func (h *Handler) overviewRange(c echo.Context, p *overviewPage, o OverviewOptions, now time.Time) (ok bool, err error) {
	iv := o.ScrapeInterval()
	if h.opts.API == nil {
		p.spark = newSparkRange(timeRange{Start: now.Add(-defaultRange), End: now}, iv)
		return true, nil
	}
	tr, err := parseRange(c.QueryParams(), now, iv)
	if err != nil {
		return false, badRange(c, err)
	}
	p.Range, p.EvalTime = tr, tr.End
	if !tr.Live { // a range in the past does not change
		p.Refresh = 0
	}
	p.spark = newSparkRange(tr, iv)
	var keep url.Values
	if p.Node != "" {
		keep = url.Values{"node": {p.Node}}
	}
	p.Bar = tr.bar("./", keep, "sparklines: "+stepText(p.spark.step)+"; cards at the range's end", now)
	return true, nil
}

// SparkW is the width of the sparklines' box: a unit a step.
func (p *overviewPage) SparkW() int { return max(p.spark.n-1, 1) }

// SparkText says what the sparklines show.
func (p *overviewPage) SparkText() string {
	return "the last " + promDuration(p.Range.Range()) + " of"
}

// SparkStep says how often a sparkline has a point.
func (p *overviewPage) SparkStep() string { return promDuration(p.spark.step) }

// NodeHref is the overview of one node, in the page's range.
func (p *overviewPage) NodeHref(node string) string {
	return p.Range.link("", url.Values{"node": {node}})
}

// GPUHref is a card's GPU page, in the page's range.
func (p *overviewPage) GPUHref(g *gpuCard) string {
	return p.Range.link("gpu/"+url.PathEscape(g.Instance)+"/"+url.PathEscape(g.GPU), nil)
}

// WorkloadHref is a workload's page, in the page's range.
func (p *overviewPage) WorkloadHref(name string) string {
	return p.Range.link(workloadPath(name), nil)
}

// renderRangeBar is the history pages' range selector, for the
// overview's template.
func renderRangeBar(b *rangeBar) (template.HTML, error) {
	var out strings.Builder
	if err := historyTemplates.ExecuteTemplate(&out, "rangebar", b); err != nil {
		return "", err
	}
	return template.HTML(out.String()), nil //nolint:gosec // html/template's output
}

// AllNodesHref is the overview of every node, in the page's range.
func (p *overviewPage) AllNodesHref() string { return p.Range.link("./", nil) }
