package web

import (
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"
)

// Graphs are drawn by the server as inline SVG, as the overview's
// sparklines are: they show with JavaScript off, need no asset built
// with npm, and what a test reads from the DOM is what the server
// computed. Values are read off by hovering a step (an SVG <title> per
// step lists the lines' values there), from the axes, and from the
// legend (last, min, max); each series' exact values are in its
// legend entry's data-values for scripts and tests.

// The drawing's coordinates: a 1000×200 viewBox, the plot inside the
// axes' labels.
const (
	plotL, plotR  = 64, 992
	plotT, plotB  = 8, 176
	hoverMax      = 8   // lines listed in a step's hover text
	pathMaxSeries = 600 // lines drawn; more are listed only
	eventRowH     = 28
)

// palette is Grafana's classic series palette, as CSS classes s0…s9.
const paletteSize = 10

// axis maps a range's steps to x. It holds the range as the engine
// evaluates it (promql's timeMilliseconds): at whole milliseconds from
// the start's millisecond, so that the step of every point the engine
// returns is found. A live range starts at now − range with
// nanoseconds; compared at that precision no point fell on a step, and
// a page ending now drew nothing.
type axis struct {
	start time.Time
	step  time.Duration
	n     int // points
}

func newAxis(start, end time.Time, step time.Duration) axis {
	a := axis{start: time.UnixMilli(start.UnixMilli()), step: step.Truncate(time.Millisecond)}
	if a.step <= 0 {
		return axis{start: a.start, step: time.Millisecond, n: 1}
	}
	a.n = int(time.UnixMilli(end.UnixMilli()).Sub(a.start)/a.step) + 1
	return a
}

func (a axis) x(i int) float64 {
	if a.n <= 1 {
		return (plotL + plotR) / 2
	}
	return plotL + float64(i)*float64(plotR-plotL)/float64(a.n-1)
}

// at is the time of step i.
func (a axis) at(i int) time.Time { return a.start.Add(time.Duration(i) * a.step) }

// index is the step of a point's timestamp, or -1 when it is none.
func (a axis) index(ms int64) int {
	d := time.UnixMilli(ms).Sub(a.start)
	if d < 0 || d%a.step != 0 {
		return -1
	}
	if i := int(d / a.step); i < a.n {
		return i
	}
	return -1
}

// chart is one graph of a page: its lines' values at each step, and
// what the template shows around the drawing.
type chart struct {
	ID, Title, Note string
	Unit            unit
	// Queries are the PromQL behind the lines, each linked to /graph.
	Queries []chartQuery
	Lines   []*chartLine
	Err     string
	// SVG is the drawing; Legend the lines as the template lists them.
	SVG    template.HTML
	Legend []legendEntry
	// Stat is a figure over the whole range (a GPU's energy).
	Stat string
	// More counts the lines past pathMaxSeries: neither drawn nor in
	// the legend.
	More int
	// noValues leaves the legend's data-values out (a /graph of many
	// series).
	noValues bool
}

type chartQuery struct{ Expr, Href string }

// chartLine is one line of a chart.
type chartLine struct {
	Name, Link string
	// Ref draws the line dashed: a total or a limit the others are read
	// against.
	Ref    bool
	Values []float64 // per step; NaN where the series has no point
}

// legendEntry is a line of a chart's legend: its colour class, name,
// link, and last, min and max over the range.
type legendEntry struct {
	Name, Link, Class string
	Ref               bool
	Last, Min, Max    string
	HasData           bool
	// Values are the exact values at each step, space-separated, NaN
	// where there is none: for scripts and tests, not for reading.
	Values string

	last, min, max int // humanizer indices
}

// drawing turns charts into SVG. Values are written with Prometheus's
// humanize functions, all in one call per page: the SVG is first written
// with placeholders (\x00index\x00), which expand fills in.
type drawing struct {
	ax axis
	h  humanizer
	// hoverFormat is how a step's time is written in its hover text.
	hoverFormat string
}

func newDrawing(ax axis) *drawing {
	f := "01-02 15:04"
	if ax.step < time.Minute {
		f = "01-02 15:04:05"
	}
	return &drawing{ax: ax, hoverFormat: f}
}

// ph is a placeholder for v in u.
func (d *drawing) ph(v float64, u unit) string {
	return "\x00" + strconv.Itoa(d.h.addIn(v, u)) + "\x00" + template.HTMLEscapeString(u.suffix)
}

// expand runs the humanizer and fills in the placeholders of s.
func (d *drawing) expand(s string) string {
	if !strings.Contains(s, "\x00") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.IndexByte(s, 0)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := strings.IndexByte(s[i+1:], 0)
		n, _ := strconv.Atoi(s[i+1 : i+1+j])
		b.WriteString(s[:i])
		b.WriteString(d.h.out[n])
		s = s[i+1+j+1:]
	}
}

// draw writes each chart's SVG and legend. Charts are drawn together so
// that their values are humanized in one expansion.
func (d *drawing) draw(charts []*chart, events *eventsView) error {
	svgs := make([]string, len(charts))
	for i, c := range charts {
		if c.Err != "" {
			continue
		}
		svgs[i] = d.chartSVG(c)
	}
	var eventsSVG string
	if events != nil && len(events.Rows) > 0 {
		eventsSVG = d.eventsSVG(events)
	}
	if err := d.h.run(); err != nil {
		return err
	}
	for i, c := range charts {
		if c.Err != "" {
			continue
		}
		c.SVG = template.HTML(d.expand(svgs[i])) //nolint:gosec // built from escaped text and numbers
		for j := range c.Legend {
			l := &c.Legend[j]
			if l.HasData {
				l.Last, l.Min, l.Max = d.h.get(l.last, c.Unit), d.h.get(l.min, c.Unit), d.h.get(l.max, c.Unit)
			}
		}
	}
	if events != nil {
		events.SVG = template.HTML(d.expand(eventsSVG)) //nolint:gosec // as above
	}
	return nil
}

// chartSVG writes one chart and fills in its legend's indices.
func (d *drawing) chartSVG(c *chart) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range c.Lines {
		for _, v := range l.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 1) { // no data
		lo, hi = 0, 1
	}
	ymin, ymax, ticks := yTicks(lo, hi, c.Unit)
	y := func(v float64) float64 { return plotB - (v-ymin)/(ymax-ymin)*(plotB-plotT) }

	var b strings.Builder
	b.WriteString(`<svg class="graph" viewBox="0 0 1000 200" role="img"><g class="grid">`)
	for _, t := range ticks {
		yy := fmtCoord(y(t))
		b.WriteString(`<line x1="64" x2="992" y1="` + yy + `" y2="` + yy + `"/><text x="58" y="` + fmtCoord(y(t)+4) + `">` + d.ph(t, c.Unit) + `</text>`)
	}
	d.xAxis(&b)
	b.WriteString(`</g>`)

	shown := c.Lines
	if len(shown) > pathMaxSeries {
		shown, c.More = shown[:pathMaxSeries], len(shown)-pathMaxSeries
	}
	c.Legend = make([]legendEntry, len(shown))
	for i, l := range shown {
		class := "s" + strconv.Itoa(i%paletteSize)
		e := legendEntry{Name: l.Name, Link: l.Link, Class: class, Ref: l.Ref}
		if !c.noValues {
			e.Values = valuesAttr(l.Values)
		}
		if mn, mx, last, ok := stats(l.Values); ok {
			e.HasData = true
			e.min, e.max, e.last = d.h.addIn(mn, c.Unit), d.h.addIn(mx, c.Unit), d.h.addIn(last, c.Unit)
		}
		c.Legend[i] = e
		p := linePath(l.Values, d.ax, y)
		if p == "" {
			continue
		}
		b.WriteString(`<path class="` + class)
		if l.Ref {
			b.WriteString(` ref`)
		}
		b.WriteString(`" d="` + p + `"><title>` + template.HTMLEscapeString(l.Name) + `</title></path>`)
	}
	d.hover(&b, c)
	b.WriteString(`</svg>`)
	return b.String()
}

// stats are the lowest, highest and last value of vs; ok is false when
// it has none.
func stats(vs []float64) (mn, mx, last float64, ok bool) {
	mn, mx = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if math.IsNaN(v) {
			continue
		}
		mn, mx, last, ok = math.Min(mn, v), math.Max(mx, v), v, true
	}
	return mn, mx, last, ok
}

// hover writes a strip per step whose <title> lists the lines' values
// there: what a person reads by pointing at the graph. Over hoverMax
// lines the strip names none; the legend and /graph's table have them.
func (d *drawing) hover(b *strings.Builder, c *chart) {
	if len(c.Lines) == 0 || len(c.Lines) > hoverMax {
		return
	}
	// A strip a step wide around each point; the width is the group's
	// (CSS --w), not each strip's: a 24-hour page has 2,300 of them.
	w := float64(plotR-plotL) / float64(max(d.ax.n-1, 1))
	b.WriteString(`<g class="hv" style="--w:` + fmtCoord(w) + `px">`)
	for i := 0; i < d.ax.n; i++ {
		var t strings.Builder
		for _, l := range c.Lines {
			if v := l.Values[i]; !math.IsNaN(v) {
				t.WriteString("\n" + template.HTMLEscapeString(l.Name) + ": " + d.ph(v, c.Unit))
			}
		}
		if t.Len() == 0 {
			continue
		}
		b.WriteString(`<rect x="` + strconv.Itoa(int(math.Round(d.ax.x(i)-w/2))) + `"><title>` +
			d.ax.at(i).UTC().Format(d.hoverFormat) + t.String() + `</title></rect>`)
	}
	b.WriteString(`</g>`)
}

// xAxis writes the time ticks, at whole intervals in UTC.
func (d *drawing) xAxis(b *strings.Builder) {
	end := d.ax.at(d.ax.n - 1)
	every, layout := timeTicks(end.Sub(d.ax.start))
	t := d.ax.start.UTC().Truncate(every)
	if every >= 24*time.Hour { // Truncate counts from year 1, not midnight
		t = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	}
	for ; !t.After(end); t = t.Add(every) {
		if t.Before(d.ax.start) {
			continue
		}
		x := float64(plotL)
		if span := end.Sub(d.ax.start); span > 0 {
			x += float64(t.Sub(d.ax.start)) / float64(span) * (plotR - plotL)
		}
		xs := fmtCoord(x)
		b.WriteString(`<line class="t" x1="` + xs + `" x2="` + xs + `" y1="8" y2="176"/><text class="x" x="` + xs + `" y="194">` + t.Format(layout) + `</text>`)
	}
}

// tickIntervals are the x axis's tick spacings.
var tickIntervals = []time.Duration{
	time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 28 * 24 * time.Hour,
}

// timeTicks is the tick spacing for a range, at most 8 ticks, and how a
// tick's time is written.
func timeTicks(rng time.Duration) (time.Duration, string) {
	every := tickIntervals[len(tickIntervals)-1]
	for _, iv := range tickIntervals {
		if rng/iv <= 8 {
			every = iv
			break
		}
	}
	switch {
	case every >= 24*time.Hour:
		return every, "Jan 2"
	case rng > 24*time.Hour:
		return every, "Jan 2 15:04"
	case every < time.Minute:
		return every, "15:04:05"
	}
	return every, "15:04"
}

// yTicks chooses the y axis: from 0 (or the lowest value, if negative)
// to a round value at or above the highest, with 4 or 5 ticks at round
// values in u (powers of 1024 for bytes).
func yTicks(lo, hi float64, u unit) (ymin, ymax float64, ticks []float64) {
	if u.fixed100 && hi <= 100 && lo >= 0 {
		return 0, 100, []float64{0, 25, 50, 75, 100}
	}
	ymin = math.Min(lo, 0)
	if hi <= ymin {
		hi = ymin + 1
	}
	base := 1000.0
	if u.binary {
		base = 1024
	}
	scale := 1.0
	for (hi-ymin)/scale >= base {
		scale *= base
	}
	span := (hi - ymin) / scale
	step := niceNum(span / 4)
	ymin = math.Floor(ymin/scale/step) * step * scale
	ymax = math.Ceil(hi/scale/step) * step * scale
	if ymax <= ymin {
		ymax = ymin + step*scale
	}
	for v := ymin; v <= ymax+step*scale/2; v += step * scale {
		ticks = append(ticks, math.Round(v/scale/step)*step*scale)
	}
	return ymin, ymax, ticks
}

// niceNum is 1, 2, 2.5 or 5 times a power of ten, at or above x.
func niceNum(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= x*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// linePath draws values as an SVG path in whole viewBox units: M at each
// start after a gap, then relative steps; a run of flat steps is one h,
// and a run of equal steps one l. A lone point is a short stroke.
func linePath(vs []float64, ax axis, y func(float64) float64) string {
	var (
		b         strings.Builder
		px, py    int // the last point drawn
		flat      int // the pending run of flat steps: its length
		rdx, rdy  int // the pending run of equal steps ...
		rn        int // ... and how many
		inSeg     bool
		segPoints int
	)
	flush := func() {
		switch {
		case flat > 0:
			b.WriteString("h" + strconv.Itoa(flat))
			flat = 0
		case rn > 0:
			b.WriteString("l" + strconv.Itoa(rdx*rn))
			if rdy >= 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.Itoa(rdy * rn))
			rn = 0
		}
	}
	endSeg := func() {
		flush()
		if inSeg && segPoints == 1 {
			b.WriteString("h1")
		}
		inSeg = false
	}
	for i, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			endSeg()
			continue
		}
		x, yy := int(math.Round(ax.x(i))), int(math.Round(y(v)))
		if !inSeg {
			b.WriteString("M" + strconv.Itoa(x) + " " + strconv.Itoa(yy))
			px, py, inSeg, segPoints = x, yy, true, 1
			continue
		}
		dx, dy := x-px, yy-py
		switch {
		case dy == 0 && rn == 0:
			flat += dx
		case dy != 0 && flat == 0 && (rn == 0 || dx == rdx && dy == rdy):
			rdx, rdy = dx, dy
			rn++
		default:
			flush()
			if dy == 0 {
				flat = dx
			} else {
				rdx, rdy, rn = dx, dy, 1
			}
		}
		px, py = x, yy
		segPoints++
	}
	endSeg()
	return b.String()
}

// fmtCoord writes a coordinate with at most one decimal.
func fmtCoord(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// valuesAttr writes values as the API does, space-separated.
func valuesAttr(vs []float64) string {
	b := make([]byte, 0, len(vs)*8)
	for i, v := range vs {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendFloat(b, v, 'f', -1, 64)
	}
	return string(b)
}

// eventsView is the events timeline under a page's graphs: alerts and
// clock events as bands, XIDs and OOM kills as marks, one row each, on
// the graphs' time axis.
type eventsView struct {
	Rows []*eventRow
	SVG  template.HTML
	Err  string
}

type eventRow struct {
	Label string
	Kind  string // alert, clock, xid, oom
	// Spans are the bands: steps [From, To] in State (pending, firing,
	// active).
	Spans []eventSpan
	// Marks are the steps where a count rose, and by how much.
	Marks []eventMark
}

type eventSpan struct {
	From, To int
	State    string
}

type eventMark struct {
	At int
	N  float64
}

// eventsSVG writes the timeline: a row per alert, clock event, XID
// code or OOM-killed cgroup, its name above its bands or marks.
func (d *drawing) eventsSVG(ev *eventsView) string {
	h := len(ev.Rows)*eventRowH + 24
	var b strings.Builder
	b.WriteString(`<svg class="events" viewBox="0 0 1000 ` + strconv.Itoa(h) + `" role="img"><g class="grid">`)
	half := float64(plotR-plotL) / float64(max(d.ax.n-1, 1)) / 2
	for r, row := range ev.Rows {
		y := r * eventRowH
		by := strconv.Itoa(y + 14)
		b.WriteString(`<text class="row" x="64" y="` + strconv.Itoa(y+11) + `">` + template.HTMLEscapeString(row.Label) + `</text>`)
		for _, s := range row.Spans {
			x0 := math.Max(d.ax.x(s.From)-half, plotL)
			x1 := math.Min(d.ax.x(s.To)+half, plotR)
			b.WriteString(`<rect class="` + template.HTMLEscapeString(s.State) + `" x="` + fmtCoord(x0) + `" y="` + by + `" width="` + fmtCoord(math.Max(x1-x0, 1)) + `" height="10"><title>` +
				template.HTMLEscapeString(row.Label) + " " + template.HTMLEscapeString(s.State) + ", " + d.ax.at(s.From).UTC().Format(d.hoverFormat) + " to " + d.ax.at(s.To).UTC().Format(d.hoverFormat) + `</title></rect>`)
		}
		for _, m := range row.Marks {
			b.WriteString(`<path class="mark" d="M` + fmtCoord(d.ax.x(m.At)) + ` ` + by + `l-5 10h10z"><title>` + template.HTMLEscapeString(row.Label) + " +" +
				strconv.FormatFloat(m.N, 'f', -1, 64) + " by " + d.ax.at(m.At).UTC().Format(d.hoverFormat) + `</title></path>`)
		}
	}
	// The time axis, the graphs' below.
	var ax strings.Builder
	d.xAxis(&ax)
	b.WriteString(strings.NewReplacer(`y1="8" y2="176"`, `y1="0" y2="`+strconv.Itoa(h-20)+`"`, `y="194"`, `y="`+strconv.Itoa(h-6)+`"`).Replace(ax.String()))
	b.WriteString(`</g></svg>`)
	return b.String()
}
