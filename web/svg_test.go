package web

import (
	"context"
	"math"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/template"
	"github.com/stretchr/testify/require"
)

func TestLinePath(t *testing.T) {
	nan := math.NaN()
	// 5 points over the plot (64 to 992): x at 64, 296, 528, 760, 992;
	// y is the value itself.
	ax := axis{start: time.Unix(0, 0), step: time.Minute, n: 5}
	y := func(v float64) float64 { return v }
	for _, tc := range []struct {
		name string
		vs   []float64
		want string
	}{
		{"none", []float64{nan, nan, nan, nan, nan}, ""},
		{"flat", []float64{10, 10, 10, 10, 10}, "M64 10h928"},
		{"equal steps are one line", []float64{10, 20, 30, 40, 40}, "M64 10l696 30h232"},
		{"down", []float64{40, 30, 30, 30, 30}, "M64 40l232-10h696"},
		{"a gap starts anew", []float64{10, 10, nan, 20, 30}, "M64 10h232M760 20l232 10"},
		{"a lone point is a short stroke", []float64{nan, 5, nan, nan, nan}, "M296 5h1"},
		{"Inf is a gap", []float64{1, math.Inf(1), 1, 1, 1}, "M64 1h1M528 1h464"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, linePath(tc.vs, ax, y))
		})
	}
}

func TestYTicks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lo, hi     float64
		u          unit
		ymin, ymax float64
		ticks      []float64
	}{
		{"percent", 3, 85, unitPercent, 0, 100, []float64{0, 25, 50, 75, 100}},
		{"percent over 100", 0, 130, unitPercent, 0, 150, []float64{0, 50, 100, 150}},
		{"GiB in steps of GiB", 20 << 30, 79.6 * (1 << 30), unitBytes, 0, 80 << 30, []float64{0, 20 << 30, 40 << 30, 60 << 30, 80 << 30}},
		{"MiB", 0, 300 << 20, unitBytes, 0, 300 << 20, []float64{0, 100 << 20, 200 << 20, 300 << 20}},
		{"watts", 88, 612.5, unitWatts, 0, 800, []float64{0, 200, 400, 600, 800}},
		{"negative", -3, 7, unitNone, -5, 7.5, []float64{-5, -2.5, 0, 2.5, 5, 7.5}},
		{"all zero", 0, 0, unitNone, 0, 1, []float64{0, 0.25, 0.5, 0.75, 1}},
		{"cores", 0.49, 0.5, unitCores, 0, 0.6, []float64{0, 0.2, 0.4, 0.6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ymin, ymax, ticks := yTicks(tc.lo, tc.hi, tc.u)
			require.InDelta(t, tc.ymin, ymin, 1e-6)
			require.InDelta(t, tc.ymax, ymax, 1e-6)
			require.InDeltaSlice(t, tc.ticks, ticks, 1e-6)
			require.LessOrEqual(t, ymin, tc.lo)
			require.GreaterOrEqual(t, ymax, tc.hi)
		})
	}
}

func TestTimeTicks(t *testing.T) {
	for _, tc := range []struct {
		rng    time.Duration
		every  time.Duration
		layout string
	}{
		{3 * time.Minute, 30 * time.Second, "15:04:05"},
		{time.Hour, 10 * time.Minute, "15:04"},
		{24 * time.Hour, 3 * time.Hour, "15:04"},
		{7 * 24 * time.Hour, 24 * time.Hour, "Jan 2"},
		{30 * 24 * time.Hour, 7 * 24 * time.Hour, "Jan 2"},
		{36 * time.Hour, 6 * time.Hour, "Jan 2 15:04"},
	} {
		every, layout := timeTicks(tc.rng)
		require.Equal(t, tc.every, every, tc.rng)
		require.Equal(t, tc.layout, layout, tc.rng)
		require.LessOrEqual(t, int(tc.rng/every), 8)
	}
}

func TestRisesAndSpans(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name string
		vs   []float64
		want []eventMark
	}{
		{"reached before the range", []float64{3, 3, 3}, nil},
		{"rises", []float64{0, 0, 2, 2, 5}, []eventMark{{At: 2, N: 2}, {At: 4, N: 3}}},
		{"appears", []float64{nan, nan, 1, 1}, []eventMark{{At: 2, N: 1}}},
		{"a restart counts from 0", []float64{4, 4, 1, 1}, []eventMark{{At: 2, N: 1}}},
		{"back after a gap", []float64{4, nan, 5}, []eventMark{{At: 2, N: 5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, rises(tc.vs))
		})
	}
	require.Equal(t, []eventSpan{{From: 1, To: 2, State: "firing"}, {From: 4, To: 4, State: "firing"}},
		spans([]float64{0, 1, 1, nan, 1}, "firing"))
	require.Nil(t, spans([]float64{0, nan, 0}, "firing"))
}

// TestHumanizerIsPrometheus: the pages write values with Prometheus's
// own humanize and humanize1024, as an alert template would.
func TestHumanizerIsPrometheus(t *testing.T) {
	vals := []float64{0, 1, 85.25, 612.5, 1234.5, 0.0015, 1.98e9, 3.6e6, -42}
	var h humanizer
	for _, v := range vals {
		h.addIn(v, unitNone)
		h.addIn(v, unitBytes)
	}
	require.NoError(t, h.run())
	for i, v := range vals {
		for j, fn := range []string{"humanize", "humanize1024"} {
			e := template.NewTemplateExpander(context.Background(), "{{ "+fn+" . }}", "t", v, 0, nil, &url.URL{}, nil)
			want, err := e.Expand()
			require.NoError(t, err)
			require.Equal(t, want, h.out[2*i+j], "%s %g", fn, v)
		}
	}
	require.Equal(t, "1.98GHz", humanizeOne(1.98e9, unitHertz))
	require.Equal(t, "80GiB", humanizeOne(80<<30, unitBytes))
	require.Equal(t, "NaN", humanizeOne(math.NaN(), unitBytes))
}

func TestBaseHref(t *testing.T) {
	for path, want := range map[string]string{
		"/":                             "./",
		"/graph":                        "./",
		"/gpu/n1/0":                     "../../",
		"/workload/leaky":               "../",
		"/workload/%2Fgpuscope%2Finput": "../",
		"/workload//gpuscope/input":     "../../../",
	} {
		require.Equal(t, want, baseHref(path), path)
	}
}

// TestDrawingEscapes: names in the SVG (hover text, a path's title, an
// event's label) are text.
func TestDrawingEscapes(t *testing.T) {
	ax := axis{start: time.Unix(0, 0), step: time.Minute, n: 3}
	c := &chart{ID: "c", Unit: unitBytes, Lines: []*chartLine{{Name: `<img src=x onerror=alert(1)>`, Values: []float64{1, 2, 3}}}}
	ev := &eventsView{Rows: []*eventRow{{Label: `<script>x</script>`, Kind: "alert", Spans: []eventSpan{{From: 0, To: 1, State: "firing"}}, Marks: []eventMark{{At: 2, N: 1}}}}}
	require.NoError(t, newDrawing(ax).draw([]*chart{c}, ev))
	for _, s := range []string{string(c.SVG), string(ev.SVG)} {
		require.NotContains(t, s, "<img")
		require.NotContains(t, s, "<script")
		require.NotContains(t, s, "\x00", "every placeholder filled in")
	}
	require.Contains(t, string(c.SVG), "&lt;img src=x onerror=alert(1)&gt;: 3B")
	require.Contains(t, string(ev.SVG), "&lt;script&gt;x&lt;/script&gt; firing")
	require.True(t, strings.HasPrefix(string(c.SVG), `<svg class="graph"`))
}

// TestDrawingManyLines: past pathMaxSeries lines a graph draws and lists
// the first and counts the rest.
func TestDrawingManyLines(t *testing.T) {
	ax := axis{start: time.Unix(0, 0), step: time.Minute, n: 2}
	c := &chart{ID: "c", Unit: unitNone}
	for i := range pathMaxSeries + 5 {
		c.Lines = append(c.Lines, &chartLine{Name: "s" + strconv.Itoa(i), Values: []float64{float64(i), 1}})
	}
	require.NoError(t, newDrawing(ax).draw([]*chart{c}, nil))
	require.Len(t, c.Legend, pathMaxSeries)
	require.Equal(t, 5, c.More)
	require.Equal(t, pathMaxSeries, strings.Count(string(c.SVG), "<path "))
	require.NotContains(t, string(c.SVG), `<g class="hv"`, "no hover text over hoverMax lines")
}
