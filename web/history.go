package web

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// The pages that look back (the overview's sparklines, /gpu/…,
// /workload/…) share one time range, read from the URL so that a page
// can be linked and bookmarked: range=<duration> (the presets, or any
// Prometheus duration) ending now or at to=, or from= and to=.

// rangePresets are the ranges the pages offer as links.
var rangePresets = []string{"1h", "6h", "24h", "7d", "30d"}

const (
	// defaultRange is a page's range without range= or from=: the
	// overview's sparklines have always shown the last hour.
	defaultRange = time.Hour
	// maxRange bounds a page's range: past it the steps grow beyond a
	// day and the graphs say little.
	maxRange = 400 * 24 * time.Hour
	// graphPoints is about how many points a page's graph draws: a
	// point every 3 px of a 900 px plot. 24 h is then a point every 5
	// minutes, 30 days one every 3 hours.
	graphPoints = 300
	// sparkPoints is about how many points a card's sparkline draws:
	// one a minute over the default hour.
	sparkPoints = 60
)

// niceSteps are the steps a page's range is drawn at: multiples of the
// scrape and rule intervals, so that each step reads the same number of
// samples, and times a person reads off an axis.
var niceSteps = []time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour,
}

// chooseStep is the step at which a range is drawn in about points
// points: the smallest nice step that draws at most that many, and never
// finer than minStep (the scrape interval: finer steps repeat samples).
func chooseStep(rng, minStep time.Duration, points int) time.Duration {
	want := max(rng/time.Duration(points), minStep)
	for _, s := range niceSteps {
		if s >= want {
			return s
		}
	}
	return want.Round(time.Second)
}

// timeRange is a page's time range.
type timeRange struct {
	Start, End time.Time
	// Step is the graphs' step; the sparklines choose their own.
	Step time.Duration
	// Preset is the range= value, "" for from/to.
	Preset string
	// Live is true when the range ends now (no to=).
	Live bool
	// from and to are the URL's values as given, kept for links.
	from, to string
}

// rangeError is a bad range parameter: the page answers 400 with it.
type rangeError struct{ msg string }

func (e rangeError) Error() string { return e.msg }

// parseRange reads a page's range from its URL: range=<duration> (1h,
// 6h, 24h, 7d, 30d or any Prometheus duration) ending now or at to=, or
// from= and to=; by default the last hour. minStep is the scrape
// interval.
func parseRange(q url.Values, now time.Time, minStep time.Duration) (timeRange, error) {
	tr := timeRange{End: now, Live: true, from: q.Get("from"), to: q.Get("to")}
	if tr.to != "" {
		t, err := parsePageTime("to", tr.to)
		if err != nil {
			return tr, err
		}
		tr.End, tr.Live = t, false
	}
	rng := defaultRange
	switch preset := q.Get("range"); {
	case preset != "" && tr.from != "":
		return tr, rangeError{fmt.Sprintf("give either range=%s or from=%s, not both: range ends at to (or now), from starts there", preset, tr.from)}
	case preset != "":
		d, err := model.ParseDuration(preset)
		if err != nil || d <= 0 {
			return tr, rangeError{fmt.Sprintf("invalid range %q: give a duration such as 1h, 6h, 24h, 7d or 30d", preset)}
		}
		rng, tr.Preset = time.Duration(d), preset
	case tr.from != "":
		t, err := parsePageTime("from", tr.from)
		if err != nil {
			return tr, err
		}
		if !t.Before(tr.End) {
			return tr, rangeError{fmt.Sprintf("from (%s) must be before to (%s)", formatUTC(t), formatUTC(tr.End))}
		}
		rng = tr.End.Sub(t)
	default:
		tr.Preset = model.Duration(defaultRange).String()
	}
	if rng > maxRange {
		return tr, rangeError{fmt.Sprintf("a range of %s is longer than the %s a page draws", model.Duration(rng), model.Duration(maxRange))}
	}
	if rng < time.Second {
		return tr, rangeError{fmt.Sprintf("a range of %s is shorter than a second", rng)}
	}
	tr.Start = tr.End.Add(-rng)
	tr.Step = chooseStep(rng, minStep, graphPoints)
	return tr, nil
}

// pageTimeLayouts are the forms of from= and to= besides Unix seconds
// and RFC 3339, all in UTC: what an <input type="datetime-local"> sends,
// and the "2006-01-02 15:04:05" of Prometheus's end_input.
var pageTimeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"}

// parsePageTime reads a time as the query API does (Unix seconds or RFC
// 3339), or in one of pageTimeLayouts in UTC.
func parsePageTime(name, v string) (time.Time, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) && math.Abs(f) < 1e12 {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	for _, l := range pageTimeLayouts {
		if t, err := time.Parse(l, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, rangeError{fmt.Sprintf("invalid %s %q: give Unix seconds, RFC 3339 (2006-01-02T15:04:05Z) or 2006-01-02 15:04 in UTC", name, v)}
}

func formatUTC(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") + " UTC" }

// Range returns the range as a duration.
func (tr timeRange) Range() time.Duration { return tr.End.Sub(tr.Start) }

// query is the range's URL parameters, for links to other pages with
// the same range: empty for the default.
func (tr timeRange) query() url.Values {
	v := url.Values{}
	switch {
	case tr.from != "":
		v.Set("from", tr.from)
		if tr.to != "" {
			v.Set("to", tr.to)
		}
	case tr.Preset != "" && tr.Preset != model.Duration(defaultRange).String():
		v.Set("range", tr.Preset)
		if !tr.Live {
			v.Set("to", tr.to)
		}
	case !tr.Live && tr.to != "":
		v.Set("to", tr.to)
	}
	return v
}

// link is path with the range's parameters and extra added.
func (tr timeRange) link(path string, extra url.Values) string {
	v := tr.query()
	for k, vs := range extra {
		v[k] = vs
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// rangeBar is the range selector at the top of a page.
type rangeBar struct {
	// Action is the page's path, relative to the page's <base>.
	Action  string
	Presets []rangeLink
	// Earlier and Later move the range back and forth by its length;
	// Later is empty when the range ends now.
	Earlier, Later string
	// From and To are the range in the form's datetime-local format.
	From, To string
	// Keep are the page's other parameters (node), kept by the form.
	Keep []keptParam
	// Text says what is shown: the range and the step.
	Text string
}

type rangeLink struct {
	Label, Href string
	Current     bool
}

type keptParam struct{ Name, Value string }

// bar is the range selector of the page at path; keep are its other
// parameters (the overview's node).
func (tr timeRange) bar(path string, keep url.Values, what string, now time.Time) *rangeBar {
	const local = "2006-01-02T15:04"
	b := &rangeBar{Action: path, From: tr.Start.UTC().Format(local), To: tr.End.UTC().Format(local)}
	with := func(v url.Values) string {
		for k, vs := range keep {
			v[k] = vs
		}
		if len(v) == 0 {
			return path
		}
		return path + "?" + v.Encode()
	}
	for _, p := range rangePresets {
		b.Presets = append(b.Presets, rangeLink{Label: p, Href: with(url.Values{"range": {p}}), Current: tr.Live && tr.Preset == p})
	}
	rng := model.Duration(tr.Range()).String()
	unix := func(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }
	b.Earlier = with(url.Values{"range": {rng}, "to": {unix(tr.Start)}})
	if !tr.Live {
		if later := tr.End.Add(tr.Range()); later.Before(now) {
			b.Later = with(url.Values{"range": {rng}, "to": {unix(later)}})
		} else {
			b.Later = with(url.Values{"range": {rng}})
		}
	}
	for k, vs := range keep {
		for _, v := range vs {
			b.Keep = append(b.Keep, keptParam{k, v})
		}
	}
	end := "now"
	if !tr.Live {
		end = formatUTC(tr.End)
	}
	b.Text = fmt.Sprintf("%s to %s (from %s)", rng, end, formatUTC(tr.Start))
	if what != "" {
		b.Text += ", " + what
	}
	return b
}

// stepText says how a graph's points are made, for the range bar.
func stepText(step time.Duration) string {
	return "a point every " + model.Duration(step).String()
}

// baseHref is the page's <base href>: the way back to the root from the
// path the browser asked for (escaped as sent, so that a workload name's
// %2F is not a directory), so that links work behind a reverse proxy
// that serves gpuscope under a prefix.
func baseHref(escapedPath string) string {
	n := strings.Count(strings.TrimPrefix(escapedPath, "/"), "/")
	if n == 0 {
		return "./"
	}
	return strings.Repeat("../", n)
}

// errNoHistory is what a history page answers on `gpuscope agent`.
var errNoHistory = errors.New("gpuscope agent keeps no history: it has no TSDB and serves only its collectors' current values; the appliance (gpuscope serve) that scrapes this node has this page")

// unixSeconds is t as the API writes times: Unix seconds, to the
// millisecond.
func unixSeconds(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 }
