package dashboards

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// This file does to a query what Grafana's Prometheus data source does
// before sending it: interpolate the dashboard's variables and Grafana's
// interval macros. It follows Grafana's
// public/app/plugins/datasource/prometheus/datasource.ts
// (interpolateQueryExpr, prometheusRegularEscape,
// prometheusSpecialRegexEscape), rangeutil.roundInterval and
// $__rate_interval's definition, so tests and benchmarks run exactly the
// queries Grafana would.

// Variable is a dashboard template variable as Grafana reads it.
type Variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Query      any    `json:"query"`
	Multi      bool   `json:"multi"`
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
}

// Selection is a variable's current value: some options, or All (then
// Values holds every option).
type Selection struct {
	Variable Variable
	Values   []string
	All      bool
}

// TimeRange is a dashboard's time range and a panel's resolution.
type TimeRange struct {
	From, To      time.Time
	MaxDataPoints int
	// ScrapeInterval is the data source's timeInterval.
	ScrapeInterval time.Duration
}

// Interval is Grafana's $__interval and query step: range / max data
// points, rounded to a "nice" value, never below the data source's
// timeInterval.
func (r TimeRange) Interval() time.Duration {
	raw := r.To.Sub(r.From) / time.Duration(max(r.MaxDataPoints, 1))
	return max(roundInterval(raw), r.ScrapeInterval)
}

// RateInterval is Grafana's $__rate_interval:
// max($__interval + scrape interval, 4 × scrape interval).
func (r TimeRange) RateInterval() time.Duration {
	return max(r.Interval()+r.ScrapeInterval, 4*r.ScrapeInterval)
}

// roundInterval is Grafana's rangeutil.roundInterval.
func roundInterval(d time.Duration) time.Duration {
	steps := []struct{ below, to time.Duration }{
		{15 * time.Millisecond, 10 * time.Millisecond}, {35 * time.Millisecond, 20 * time.Millisecond},
		{75 * time.Millisecond, 50 * time.Millisecond}, {150 * time.Millisecond, 100 * time.Millisecond},
		{350 * time.Millisecond, 200 * time.Millisecond}, {750 * time.Millisecond, 500 * time.Millisecond},
		{1500 * time.Millisecond, time.Second}, {3500 * time.Millisecond, 2 * time.Second},
		{7500 * time.Millisecond, 5 * time.Second}, {12500 * time.Millisecond, 10 * time.Second},
		{17500 * time.Millisecond, 15 * time.Second}, {25 * time.Second, 20 * time.Second},
		{45 * time.Second, 30 * time.Second}, {90 * time.Second, time.Minute},
		{210 * time.Second, 2 * time.Minute}, {450 * time.Second, 5 * time.Minute},
		{750 * time.Second, 10 * time.Minute}, {1050 * time.Second, 15 * time.Minute},
		{1500 * time.Second, 20 * time.Minute}, {2700 * time.Second, 30 * time.Minute},
		{5400 * time.Second, time.Hour}, {9000 * time.Second, 2 * time.Hour},
		{16200 * time.Second, 3 * time.Hour}, {24300 * time.Second, 6 * time.Hour},
		{31500 * time.Second, 8 * time.Hour}, {81000 * time.Second, 12 * time.Hour},
	}
	for _, s := range steps {
		if d < s.below {
			return s.to
		}
	}
	return 24 * time.Hour
}

var (
	varRef       = regexp.MustCompile(`\$\{([a-zA-Z0-9_]+)(?::[a-z]+)?\}|\$([a-zA-Z0-9_]+)|\[\[([a-zA-Z0-9_]+)\]\]`)
	regexSpecial = regexp.MustCompile(`[$^*{}\[\]'+?.()|]`)
	labelValues  = regexp.MustCompile(`^label_values\((?:(.*),\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
)

// Interpolate replaces Grafana's macros ($__interval, $__rate_interval,
// $__range and their _s/_ms forms) and the variables in vars, in any of
// Grafana's syntaxes ($var, ${var}, [[var]]). Unknown references stay.
func Interpolate(expr string, vars map[string]Selection, r TimeRange) string {
	span := r.To.Sub(r.From)
	macros := map[string]string{
		"__interval":      model.Duration(r.Interval()).String(),
		"__interval_ms":   fmt.Sprint(r.Interval().Milliseconds()),
		"__rate_interval": model.Duration(r.RateInterval()).String(),
		"__range":         model.Duration(span).String(),
		"__range_s":       fmt.Sprint(int64(math.Round(span.Seconds()))),
		"__range_ms":      fmt.Sprint(span.Milliseconds()),
	}
	return varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		if v, ok := macros[name]; ok {
			return v
		}
		if s, ok := vars[name]; ok {
			return s.Format()
		}
		return ref
	})
}

// Format is interpolateQueryExpr of Grafana's Prometheus data source: a
// single-value variable is escaped for a string literal; a multi-value or
// All variable becomes a regex alternation of regex-escaped values (or the
// variable's custom All value).
func (s Selection) Format() string {
	if s.All && s.Variable.AllValue != "" {
		return s.Variable.AllValue
	}
	if len(s.Values) == 0 {
		return ""
	}
	if !s.Variable.Multi && !s.Variable.IncludeAll {
		return strings.NewReplacer(`\`, `\\`, `'`, `\\'`).Replace(s.Values[0])
	}
	escaped := make([]string, len(s.Values))
	for i, x := range s.Values {
		x = strings.ReplaceAll(x, `\`, `\\\\`)
		escaped[i] = regexSpecial.ReplaceAllString(x, `\\$0`)
	}
	if len(escaped) == 1 {
		return escaped[0]
	}
	return "(" + strings.Join(escaped, "|") + ")"
}

// LabelValuesQuery splits a `label_values([selector, ]label)` variable
// query into the selector (possibly empty) and the label.
func LabelValuesQuery(q string) (selector, label string, err error) {
	m := labelValues.FindStringSubmatch(strings.TrimSpace(q))
	if m == nil {
		return "", "", fmt.Errorf("unsupported variable query %q (want label_values(...))", q)
	}
	return m[1], m[2], nil
}
