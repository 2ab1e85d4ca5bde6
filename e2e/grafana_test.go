package e2e

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// This file does what Grafana's Prometheus data source does to a panel's
// query before it sends it: resolve query variables through the API and
// interpolate variables and Grafana's interval macros. It follows
// public/app/plugins/datasource/prometheus (datasource.ts
// interpolateQueryExpr, prometheusRegularEscape, prometheusSpecialRegexEscape)
// and pkg/promlib/models (interval, $__rate_interval).

// grafanaVariable is a dashboard template variable as Grafana reads it.
type grafanaVariable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Query      any    `json:"query"`
	Multi      bool   `json:"multi"`
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
}

// selection is a variable's current value: some options, or All.
type selection struct {
	v      grafanaVariable
	values []string
	all    bool
}

var labelValuesRe = regexp.MustCompile(`^label_values\((?:(.*),\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// resolve runs a query variable's label_values(...) against the API as
// Grafana does (/api/v1/label/<name>/values with match[]), after
// interpolating the variables it depends on.
func (p *process) resolve(ctx context.Context, v grafanaVariable, earlier map[string]selection, r timeRange) ([]string, error) {
	q, _ := v.Query.(string)
	m := labelValuesRe.FindStringSubmatch(strings.TrimSpace(q))
	if m == nil {
		return nil, fmt.Errorf("variable %s: unsupported query %q", v.Name, q)
	}
	var matches []string
	if m[1] != "" {
		matches = []string{interpolate(m[1], earlier, r)}
	}
	vals, _, _, err := p.api().LabelValues(ctx, m[2], matches, r.from, r.to)
	if err != nil {
		return nil, fmt.Errorf("variable %s: %w", v.Name, err)
	}
	out := make([]string, 0, len(vals))
	for _, x := range vals {
		out = append(out, string(x))
	}
	return out, nil
}

// timeRange is a dashboard's time range and the panel's resolution.
type timeRange struct {
	from, to      time.Time
	maxDataPoints int
	// scrapeInterval is the data source's timeInterval.
	scrapeInterval time.Duration
}

// interval is Grafana's $__interval: range / max data points, never below
// the data source's timeInterval, rounded to a "nice" value.
func (r timeRange) interval() time.Duration {
	raw := r.to.Sub(r.from) / time.Duration(r.maxDataPoints)
	return max(roundInterval(raw), r.scrapeInterval)
}

// rateInterval is Grafana's $__rate_interval:
// max($__interval + scrape interval, 4 × scrape interval).
func (r timeRange) rateInterval() time.Duration {
	return max(r.interval()+r.scrapeInterval, 4*r.scrapeInterval)
}

// roundInterval is Grafana's rangeutil.roundInterval (nice steps).
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

// promDuration renders a duration as Grafana does in PromQL ("4s", "2m").
func promDuration(d time.Duration) string { return model.Duration(d).String() }

var varRef = regexp.MustCompile(`\$\{([a-zA-Z0-9_]+)(?::[a-z]+)?\}|\$([a-zA-Z0-9_]+)|\[\[([a-zA-Z0-9_]+)\]\]`)

// interpolate replaces Grafana's macros and the dashboard's variables.
func interpolate(expr string, vars map[string]selection, r timeRange) string {
	rangeDur := r.to.Sub(r.from)
	macros := map[string]string{
		"__interval":      promDuration(r.interval()),
		"__interval_ms":   fmt.Sprint(r.interval().Milliseconds()),
		"__rate_interval": promDuration(r.rateInterval()),
		"__range":         promDuration(rangeDur),
		"__range_s":       fmt.Sprint(int64(math.Round(rangeDur.Seconds()))),
		"__range_ms":      fmt.Sprint(rangeDur.Milliseconds()),
	}
	return varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		if v, ok := macros[name]; ok {
			return v
		}
		if s, ok := vars[name]; ok {
			return s.format()
		}
		return ref
	})
}

// format is interpolateQueryExpr of Grafana's Prometheus data source.
func (s selection) format() string {
	if s.all && s.v.AllValue != "" {
		return s.v.AllValue
	}
	if !s.v.Multi && !s.v.IncludeAll {
		return regularEscape(s.values[0])
	}
	escaped := make([]string, len(s.values))
	for i, x := range s.values {
		escaped[i] = specialRegexEscape(x)
	}
	if len(escaped) == 1 {
		return escaped[0]
	}
	return "(" + strings.Join(escaped, "|") + ")"
}

func regularEscape(v string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\\'`).Replace(v)
}

var regexSpecial = regexp.MustCompile(`[$^*{}\[\]'+?.()|]`)

func specialRegexEscape(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\\\`)
	return regexSpecial.ReplaceAllString(v, `\\$0`)
}
