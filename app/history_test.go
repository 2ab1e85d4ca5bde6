package app_test

import (
	"fmt"
	"html"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// TestLiveRangesOfAFreshDemo: on a fresh demo at its own speed and the
// default 15 s scrape, once two scrapes are stored, the pages a newcomer
// opens first with a range that ends now (a GPU's page over 5m, 1h and 6h,
// /graph over 5m, 1h and 6h) draw a point in their last two steps, and
// every point is /api/v1/query_range's for the page's own PromQL, range
// and step; the same with to= in the past. On f946e43 every such graph
// said "no data": the pages laid the engine's millisecond timestamps on
// steps counted from a start with nanoseconds (issue 38).
// e2e/live_browser_test.go asks the same of the pages as Chromium draws
// them.
func TestLiveRangesOfAFreshDemo(t *testing.T) {
	t.Parallel()
	p := serve(t, "", demo)
	const fb = `DCGM_FI_DEV_FB_USED{gpu="0"}`
	newest := func() (model.Time, error) {
		v, err := p.instant(`timestamp(` + fb + `)`)
		if err != nil || len(v) != 1 {
			return 0, fmt.Errorf("GPU 0's newest sample: %v (%v)", v, err)
		}
		return model.TimeFromUnixNano(int64(float64(v[0].Value) * 1e9)), nil
	}
	eventually(t, 2*time.Minute, "two scrapes of GPU 0 stored", func() error {
		v, err := p.instant(`count_over_time(` + fb + `[5m])`)
		if err != nil || len(v) != 1 || v[0].Value < 2 {
			return fmt.Errorf("%v samples (%v)", v, err)
		}
		return nil
	})
	at, err := newest()
	require.NoError(t, err)
	// A fixed end in the past, with a fraction of a second: the newest
	// sample's own time, less half a millisecond.
	past := strconv.FormatFloat(float64(at)/1000-0.0005, 'f', -1, 64)

	graph := func(rng string) string {
		return "/graph?" + url.Values{"g0.expr": {fb}, "g0.tab": {"0"}, "g0.range_input": {rng}}.Encode()
	}
	for _, path := range []string{
		"/gpu/e2e-node/0?range=5m", "/gpu/e2e-node/0?range=1h", "/gpu/e2e-node/0?range=6h", "/gpu/e2e-node/0",
		graph("5m"), graph("1h"), graph("6h"),
		"/gpu/e2e-node/0?range=1h&to=" + past,
	} {
		t.Run(path, func(t *testing.T) {
			// The page and the API read the same samples unless a scrape
			// is stored between the two: then both are asked again.
			for try := 0; ; try++ {
				before, err := newest()
				require.NoError(t, err)
				code, body := p.get(path)
				require.Equal(t, 200, code, body)
				chart, line := "framebuffer", "used"
				if strings.HasPrefix(path, "/graph") {
					chart, line = "g0", ""
				}
				a := pageAxisOf(t, body)
				fig := figureOf(t, body, chart)
				require.NotContains(t, fig, ">no data<")
				vs := lineValues(t, fig, line)
				require.Len(t, vs, a.points)
				require.True(t, !math.IsNaN(vs[len(vs)-1]) || !math.IsNaN(vs[len(vs)-2]),
					"a point in the last two of %d steps of %gs: %v", a.points, a.step, vs[max(0, len(vs)-10):])
				expr := fb
				if chart != "g0" {
					m := regexp.MustCompile(`data-query>([^<]*)</a>`).FindStringSubmatch(fig)
					require.NotNil(t, m, "chart %s lists its PromQL", chart)
					expr = html.UnescapeString(m[1])
				}
				want, _, _, err := p.api().QueryRange(t.Context(), expr, a.rangeOf())
				require.NoError(t, err)
				after, err := newest()
				require.NoError(t, err)
				if after != before && try < 3 {
					continue
				}
				m, ok := want.(model.Matrix)
				require.True(t, ok && len(m) == 1, "%s: one series, got %v", expr, want)
				sameSteps(t, a.pointsOf(m[0]), vs, expr)
				return
			}
		})
	}
}

// liveAxis is a page's time axis, as its data- attributes give it.
type liveAxis struct {
	start, end, step float64 // Unix seconds
	points           int
}

var (
	historyMainRe = regexp.MustCompile(`<main id="history" data-start="([^"]+)" data-end="([^"]+)" data-step="([^"]+)" data-points="(\d+)">`)
	graphPanelRe  = regexp.MustCompile(`<fieldset class="panel" id="panel-0" [^>]*data-end="([^"]+)" data-range="([^"]+)" data-step="([^"]+)">`)
)

func pageAxisOf(t *testing.T, body string) liveAxis {
	t.Helper()
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err)
		return v
	}
	if m := historyMainRe.FindStringSubmatch(body); m != nil {
		n, err := strconv.Atoi(m[4])
		require.NoError(t, err)
		return liveAxis{start: num(m[1]), end: num(m[2]), step: num(m[3]), points: n}
	}
	m := graphPanelRe.FindStringSubmatch(body)
	require.NotNil(t, m, "a history page's <main> or /graph's first panel in\n%s", body)
	end, rng, step := num(m[1]), num(m[2]), num(m[3])
	return liveAxis{start: end - rng, end: end, step: step, points: int(math.Floor(rng/step)) + 1}
}

func (a liveAxis) rangeOf() promv1.Range {
	return promv1.Range{
		Start: time.UnixMilli(int64(math.Round(a.start * 1000))),
		End:   time.UnixMilli(int64(math.Round(a.end * 1000))),
		Step:  time.Duration(math.Round(a.step*1000)) * time.Millisecond,
	}
}

// pointsOf lays a series' samples on the axis' steps, NaN where it has
// none, as the page's data-values list them.
func (a liveAxis) pointsOf(s *model.SampleStream) []float64 {
	out := make([]float64, a.points)
	for i := range out {
		out[i] = math.NaN()
	}
	startMs := int64(math.Round(a.start * 1000))
	stepMs := int64(math.Round(a.step * 1000))
	for _, sp := range s.Values {
		if i := (int64(sp.Timestamp) - startMs) / stepMs; i >= 0 && int(i) < a.points {
			out[i] = float64(sp.Value)
		}
	}
	return out
}

// figureOf is a chart's <figure> element.
func figureOf(t *testing.T, body, chart string) string {
	t.Helper()
	i := strings.Index(body, `<figure class="chart" id="`+chart+`"`)
	require.NotEqual(t, -1, i, "chart %s in\n%s", chart, body)
	f := body[i:]
	return f[:strings.Index(f, "</figure>")]
}

// lineValues are the data-values of a chart's line named name in its
// legend; "" for its only line.
func lineValues(t *testing.T, fig, name string) []float64 {
	t.Helper()
	re := `<li class="series [^"]*" data-series="([^"]*)" data-values="([^"]*)"`
	all := regexp.MustCompile(re).FindAllStringSubmatch(fig, -1)
	var m []string
	for _, s := range all {
		if name == "" || html.UnescapeString(s[1]) == name {
			m = s
			break
		}
	}
	require.NotNil(t, m, "line %q in\n%s", name, fig)
	if name == "" {
		require.Len(t, all, 1, "one line")
	}
	var vs []float64
	for _, f := range strings.Fields(m[2]) {
		v, err := strconv.ParseFloat(f, 64)
		require.NoError(t, err)
		vs = append(vs, v)
	}
	return vs
}

// sameSteps requires got to hold want's values, NaN where want has none.
func sameSteps(t *testing.T, want, got []float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		if math.IsNaN(want[i]) || math.IsNaN(got[i]) {
			require.True(t, math.IsNaN(want[i]) && math.IsNaN(got[i]), "%s: step %d: the API has %g, the page %g", what, i, want[i], got[i])
			continue
		}
		require.InEpsilon(t, want[i], got[i], 1e-9, "%s: step %d", what, i)
	}
}
