package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/dashboards"
)

func TestTargets(t *testing.T) {
	const js = `{"uid": "u", "panels": [
	  {"title": "a", "targets": [{"expr": "up"}, {"expr": "hidden", "hide": true}, {"expr": ""}]},
	  {"title": "row", "type": "row", "collapsed": true, "panels": [
	    {"title": "b", "interval": "5m", "maxDataPoints": 100, "targets": [{"expr": "x", "instant": true}]},
	    {"title": "c", "targets": [{"expr": "y", "interval": ">2m"}]}
	  ]},
	  {"title": "open row", "type": "row", "collapsed": false, "panels": []},
	  {"title": "d", "targets": [{"expr": "z"}]}
	]}`
	var b board
	require.NoError(t, json.Unmarshal([]byte(js), &b))
	// As Grafana opens it: a collapsed row's panels wait until it is opened.
	got, err := b.targets(Options{MaxDataPoints: 1000})
	require.NoError(t, err)
	require.Equal(t, []target{
		{panel: "a", expr: "up", maxDataPoints: 1000},
		{panel: "d", expr: "z", maxDataPoints: 1000},
	}, got)
	got, err = b.targets(Options{MaxDataPoints: 1000, OpenRows: true})
	require.NoError(t, err)
	require.Equal(t, []target{
		{panel: "a", expr: "up", maxDataPoints: 1000},
		{panel: "b", expr: "x", instant: true, minInterval: 5 * time.Minute, maxDataPoints: 100},
		{panel: "c", expr: "y", minStep: 2 * time.Minute, maxDataPoints: 1000},
		{panel: "d", expr: "z", maxDataPoints: 1000},
	}, got)

	b.Panels[0].Interval = "soon"
	_, err = b.targets(Options{MaxDataPoints: 1000})
	require.ErrorContains(t, err, `panel "a": interval "soon"`)
}

func TestRequest(t *testing.T) {
	to := time.Date(2026, 12, 2, 10, 0, 31, 0, time.UTC)
	day := dashboards.TimeRange{From: to.Add(-24 * time.Hour), To: to, MaxDataPoints: 1000, ScrapeInterval: 15 * time.Second}
	vars := map[string]dashboards.Selection{"node": {Variable: dashboards.Variable{Name: "node", Multi: true, IncludeAll: true}, Values: []string{"n-1", "n.2"}, All: true}}
	for _, tc := range []struct {
		name     string
		target   target
		expr     string
		step     time.Duration
		from, to time.Time
	}{
		{
			name:   "24 h at 1000 points: a 1 m step, range aligned to it",
			target: target{expr: `rate(x{instance=~"$node"}[$__rate_interval]) * $__interval_ms`, maxDataPoints: 1000},
			expr:   `rate(x{instance=~"(n-1|n\\.2)"}[1m15s]) * 60000`,
			step:   time.Minute, from: day.From.Truncate(time.Minute), to: to.Truncate(time.Minute),
		},
		{
			name:   "a panel's min interval raises the step and $__interval, not $__rate_interval's scrape interval",
			target: target{expr: `avg_over_time(x[$__interval]) + y[${__rate_interval}]`, minInterval: 5 * time.Minute, maxDataPoints: 1000},
			expr:   `avg_over_time(x[5m]) + y[5m15s]`,
			step:   5 * time.Minute, from: day.From.Truncate(5 * time.Minute), to: to.Truncate(5 * time.Minute),
		},
		{
			name:   "a query's min step is its scrape interval for $__rate_interval",
			target: target{expr: `rate(x[$__rate_interval])`, minStep: 2 * time.Minute, maxDataPoints: 1000},
			expr:   `rate(x[8m])`,
			step:   2 * time.Minute, from: day.From.Truncate(2 * time.Minute), to: to.Truncate(2 * time.Minute),
		},
		{
			name:   "fewer points: a coarser step",
			target: target{expr: `x`, maxDataPoints: 100},
			expr:   `x`,
			step:   15 * time.Minute, from: day.From.Truncate(15 * time.Minute), to: to.Truncate(15 * time.Minute),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expr, rng := tc.target.request(vars, day)
			require.Equal(t, tc.expr, expr)
			require.Equal(t, tc.step, rng.Step)
			require.True(t, tc.from.Equal(rng.Start), "start %s, want %s", rng.Start, tc.from)
			require.True(t, tc.to.Equal(rng.End), "end %s, want %s", rng.End, tc.to)
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Options{URL: "http://127.0.0.1:9090", Range: time.Hour, Every: time.Minute, ScrapeInterval: 15 * time.Second, MaxDataPoints: 1000, Concurrency: 6, Timeout: time.Minute}
	require.NoError(t, ok.validate())
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"url without scheme", func(o *Options) { o.URL = "127.0.0.1:9090" }, "-url"},
		{"no range", func(o *Options) { o.Range = 0 }, "-range"},
		{"negative for", func(o *Options) { o.For = -time.Second }, "-for"},
		{"negative rounds", func(o *Options) { o.Rounds = -1 }, "-rounds"},
		{"no concurrency", func(o *Options) { o.Concurrency = 0 }, "-concurrency"},
		{"no points", func(o *Options) { o.MaxDataPoints = 0 }, "-max-data-points"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			require.ErrorContains(t, o.validate(), tc.want)
		})
	}
}
