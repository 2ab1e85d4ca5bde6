//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpuscope/gpuscope/gpu/sim"
	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// TestBrowserLiveRanges opens the pages a person opens first, with a
// range that ends now, in headless Chromium on a fresh demo at its own
// speed and the default 15 s scrape, once two scrapes are stored: the
// leak GPU's page over 5m, 1h and 6h, its workload's page and /graph
// draw points in their last two steps, and every point is
// /api/v1/query_range's for the page's own range and step. A newcomer's
// first look drew "no data" on every such graph while the same range
// with to= in the past drew them (the pages laid the engine's
// millisecond timestamps on steps counted from a start with
// nanoseconds).
func TestBrowserLiveRanges(t *testing.T) {
	t.Parallel()
	pkgtest.Require(t, false, chromiumPath)
	demo := demoAtScale(30)
	leak := slices.IndexFunc(demo.Sim.GPUs, func(g sim.GPU) bool { return g.Scenario == sim.ScenarioLeak })
	require.GreaterOrEqual(t, leak, 0, "the demo has a leak scenario")
	g, err := yaml.Marshal(map[string]any{"gpu": demo})
	require.NoError(t, err)
	p := serve(t, "", "--config.file="+writeConfig(t, t.TempDir(), "rules:\n  builtin:\n    time_scale: 30\n"+string(g)))
	b := startBrowser(t)
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
	defer cancel()
	tab := b.tab(t, ctx, true)

	fb := fmt.Sprintf(`DCGM_FI_DEV_FB_USED{gpu="%d"}`, leak)
	newest := func() (model.Time, error) {
		v, err := p.instant(`timestamp(` + fb + `)`)
		if err != nil || len(v) != 1 {
			return 0, fmt.Errorf("the leak GPU's newest sample: %v (%v)", v, err)
		}
		return model.TimeFromUnixNano(int64(float64(v[0].Value) * 1e9)), nil
	}
	eventually(t, 2*time.Minute, "two scrapes of the leak GPU stored", func() error {
		v, err := p.instant(`count_over_time(` + fb + `[5m])`)
		if err != nil || len(v) != 1 || v[0].Value < 2 {
			return fmt.Errorf("%v samples (%v)", v, err)
		}
		return nil
	})

	for _, tc := range []struct{ path, title, chart, line string }{
		{fmt.Sprintf("/gpu/e2e-node/%d?range=5m", leak), fmt.Sprintf("gpuscope · GPU %d on e2e-node", leak), "framebuffer", "used"},
		{fmt.Sprintf("/gpu/e2e-node/%d?range=1h", leak), fmt.Sprintf("gpuscope · GPU %d on e2e-node", leak), "framebuffer", "used"},
		{fmt.Sprintf("/gpu/e2e-node/%d?range=6h", leak), fmt.Sprintf("gpuscope · GPU %d on e2e-node", leak), "framebuffer", "used"},
		{"/workload/" + url.PathEscape(demo.Sim.GPUs[leak].Container) + "?range=1h", "gpuscope · workload " + demo.Sim.GPUs[leak].Container, "gpu-memory", fmt.Sprintf("e2e-node GPU %d", leak)},
		{"/graph?" + url.Values{"g0.expr": {fb}, "g0.tab": {"0"}, "g0.range_input": {"1h"}}.Encode(), "gpuscope · graph", "g0", ""},
		{"/graph?" + url.Values{"g0.expr": {fb}, "g0.tab": {"0"}, "g0.range_input": {"5m"}}.Encode(), "gpuscope · graph", "g0", ""},
	} {
		t.Run(tc.path, func(t *testing.T) {
			// The page and the API read the same samples unless a scrape
			// is stored between the two: then both are asked again.
			for try := 0; ; try++ {
				before, err := newest()
				require.NoError(t, err)
				page, _ := openHistory(t, tab, p, tc.path, tc.title)
				line := tc.line
				if line == "" { // /graph names a line by its labels
					require.Len(t, page.charts[tc.chart], 1, "one series")
					for name := range page.charts[tc.chart] {
						line = name
					}
				}
				vs := page.series(t, tc.chart, line)
				require.Len(t, vs, page.points)
				require.True(t, !math.IsNaN(vs[len(vs)-1]) || !math.IsNaN(vs[len(vs)-2]),
					"a point in the last two of %d steps of %gs: %v", page.points, page.step, vs[max(0, len(vs)-10):])
				expr := fb // /graph's
				if tc.chart != "g0" {
					require.NotEmpty(t, page.queries[tc.chart], "chart %s lists its PromQL", tc.chart)
					expr = page.queries[tc.chart][0]
				}
				want := pageRange(t, p, expr, page)
				after, err := newest()
				require.NoError(t, err)
				if after != before && try < 3 {
					continue
				}
				require.Len(t, want, 1, expr)
				sameFloats(t, pointsOf(page, want[0]), vs, expr)
				return
			}
		})
	}
	require.Empty(t, b.problems(), "the pages logged errors to the browser's console")
}
