//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/chromedp"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/util/strutil"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu/sim"
	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// TestBrowserHistory opens the history pages of the demo's GPUs at 120×
// in headless Chromium, the input-bound container burning CPU in a
// cgroup of its own: the leak GPU's page over its simulated hours draws a
// rising framebuffer whose points are /api/v1/query_range's for the same
// range and step; the input-bound workload's page has its CPU at its
// limit and its GPU share low; /graph renders Prometheus's links (the
// generatorURL of the leak's alert among them) as graph and table; a bad
// expression shows the API's error. Each page's 1280×900 screenshot is
// neither blank nor an error page, the graphs show with JavaScript off,
// and no page logs an error to the console. With
// GPUSCOPE_UPDATE_SCREENSHOT=1 the leak GPU's page replaces
// docs/gpu-page.png.
func TestBrowserHistory(t *testing.T) {
	t.Parallel()
	pkgtest.Require(t, false, chromiumPath)
	if os.Geteuid() != 0 {
		t.Skip("the input-bound scenario burns CPU in a cgroup of its own: needs root")
	}
	var demo config.GPU
	demo.Config, demo.Sim = sim.DemoConfig()
	demo.Sim.TimeScale = browserTimeScale
	leak := slices.IndexFunc(demo.Sim.GPUs, func(g sim.GPU) bool { return g.Scenario == sim.ScenarioLeak })
	input := slices.IndexFunc(demo.Sim.GPUs, func(g sim.GPU) bool { return g.Scenario == sim.ScenarioInputBound })
	require.True(t, leak >= 0 && input >= 0, "the demo has a leak and an input-bound scenario")
	// A cgroup of this test's own: other demo tests create and remove
	// /gpuscope-demo/input-bound beside it.
	container := fmt.Sprintf("/gpuscope-e2e-history-%d", rand.IntN(1e6))
	demo.Sim.GPUs[input].Container = container
	p := serve(t, "", "--config.file="+writeConfig(t, t.TempDir(), browserConfig(t, demo)))
	favourContainerCPU(t, container)
	b := startBrowser(t)
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Minute)
	defer cancel()

	// At 120× a stair (30 simulated minutes) is 15 s: wait for 100 s of
	// samples (over three simulated hours, six stairs), and for the
	// container to use its half core.
	eventually(t, 4*time.Minute, "100 s of the leak GPU's samples, and the input-bound container at its CPU limit", func() error {
		v, err := p.instant(fmt.Sprintf(`count_over_time(DCGM_FI_DEV_FB_USED{gpu="%d"}[2m])`, leak))
		if err != nil || len(v) != 1 || v[0].Value < 100 {
			return fmt.Errorf("%v samples of the leak GPU's framebuffer (%v)", v, err)
		}
		v, err = p.instant(`sum(rate(container_cpu_usage_seconds_total{id="` + container + `"}[20s]))`)
		if err != nil || len(v) != 1 || v[0].Value < 0.4 {
			return fmt.Errorf("the input-bound container uses %v cores (%v)", v, err)
		}
		return nil
	})
	// A range that ends in the past: the pages and the API then read the
	// same samples, whatever is scraped meanwhile.
	to := time.Now().Add(-3 * time.Second).Truncate(time.Second)
	rng := url.Values{"range": {"2m"}, "to": {strconv.FormatInt(to.Unix(), 10)}}.Encode()
	tab := b.tab(t, ctx, true)
	noJS := b.tab(t, ctx, false)

	// The leak GPU's page.
	gpuPath := fmt.Sprintf("/gpu/e2e-node/%d?%s", leak, rng)
	page, shot := openHistory(t, tab, p, gpuPath, fmt.Sprintf("gpuscope · GPU %d on e2e-node", leak))
	require.Equal(t, 1.0, page.step, "a 2-minute range at a 1 s scrape: a point a second")
	used := page.series(t, "framebuffer", "used")
	want := pageRange(t, p, fmt.Sprintf(`DCGM_FI_DEV_FB_USED{instance="e2e-node", gpu="%d"} * 2^20`, leak), page)
	require.Len(t, want, 1)
	sameFloats(t, pointsOf(page, want[0]), used, "the framebuffer's points are /api/v1/query_range's")
	stairs := 0
	for i := 1; i < len(used); i++ {
		if math.IsNaN(used[i]) || math.IsNaN(used[i-1]) {
			continue
		}
		d := used[i] - used[i-1]
		require.Greater(t, d, -16.0*(1<<20), "point %d: the staircase does not fall (beyond the sim's 1 MiB noise)", i)
		if d > 1900*(1<<20) {
			stairs++
		}
	}
	require.GreaterOrEqual(t, stairs, 3, "a rising staircase of 2 GiB stairs: %v", used)
	require.Contains(t, page.workloads, "/gpuscope-demo/leaky", "the workload that held it")
	saveScreenshot(t, shot, "gpu-page.png")
	requireGraphsWithoutJS(t, noJS, p, gpuPath, 6)

	// The input-bound workload's page: its CPU at its limit, its GPU low.
	wlPath := "/workload/" + url.PathEscape(container) + "?" + rng
	page, _ = openHistory(t, tab, p, wlPath, "gpuscope · workload "+container)
	cpuUsed, cpuLimit := page.series(t, "cpu", "used"), page.series(t, "cpu", "limit")
	last := func(vs []float64) float64 {
		for i := len(vs) - 1; i >= 0; i-- {
			if !math.IsNaN(vs[i]) {
				return vs[i]
			}
		}
		return math.NaN()
	}
	require.InDelta(t, 0.5, last(cpuLimit), 1e-9, "the burner's half-core quota")
	// The median point, not the last: on a loaded machine one step of the
	// burner can fall short of its quota (0.39 of 0.5 seen once).
	var drawn []float64
	for _, v := range cpuUsed {
		if !math.IsNaN(v) {
			drawn = append(drawn, v)
		}
	}
	require.NotEmpty(t, drawn, "the CPU line has points")
	slices.Sort(drawn)
	require.Greater(t, drawn[len(drawn)/2], 0.8*last(cpuLimit), "the CPU at its limit: %v", cpuUsed)
	sm := page.series(t, "gpu-sm", fmt.Sprintf("e2e-node GPU %d", input))
	for i, v := range sm {
		require.True(t, math.IsNaN(v) || v <= 45, "point %d: the input-bound GPU's SM share is low, not %g", i, v)
	}
	require.Greater(t, last(sm), 0.0)
	requireGraphsWithoutJS(t, noJS, p, wlPath, 4)

	// /graph: the leak alert's generatorURL, as Prometheus's rule manager
	// builds it, opens the expression as a table.
	expr := alertExpr(t, p, "GPUMemoryLeakSuspected")
	page, _ = openHistory(t, tab, p, strutil.TableLinkForExpression(expr), "gpuscope · graph")
	require.Equal(t, "table", page.tab)
	require.Equal(t, "vector", page.resultType, "the table of the alert's expression")
	require.Empty(t, page.err)

	// Graph and table of a plain expression, as the API has them.
	end := to.UTC().Format("2006-01-02 15:04:05")
	page, _ = openHistory(t, tab, p, "/graph?"+url.Values{"g0.expr": {"DCGM_FI_DEV_FB_USED"}, "g0.tab": {"0"}, "g0.range_input": {"2m"}, "g0.end_input": {end}}.Encode(), "gpuscope · graph")
	series := pageRange(t, p, "DCGM_FI_DEV_FB_USED", page)
	require.Len(t, page.charts["g0"], len(series), "a line per series of the range query")
	for _, s := range series {
		sameFloats(t, pointsOf(page, s), page.series(t, "g0", s.Metric.String()), s.Metric.String())
	}
	page, _ = openHistory(t, tab, p, "/graph?"+url.Values{"g0.expr": {"DCGM_FI_DEV_GPU_TEMP"}, "g0.tab": {"1"}, "g0.end_input": {end}}.Encode(), "gpuscope · graph")
	temps, err := p.queryAt("DCGM_FI_DEV_GPU_TEMP", to)
	require.NoError(t, err)
	require.Len(t, page.rows, len(temps))
	for _, s := range temps {
		require.Equal(t, strconv.FormatFloat(float64(s.Value), 'f', -1, 64), page.rows[s.Metric.String()], s.Metric.String())
	}

	// A bad expression: the API's words, not a blank page.
	bad := "rate(DCGM_FI_DEV_GPU_UTIL[5m]"
	page, _ = openHistory(t, tab, p, "/graph?"+url.Values{"g0.expr": {bad}, "g0.tab": {"1"}}.Encode(), "gpuscope · graph")
	code, body := p.get("/api/v1/query?query=" + url.QueryEscape(bad))
	require.Equal(t, 400, code)
	var apiErr struct{ ErrorType, Error string }
	require.NoError(t, json.Unmarshal([]byte(body), &apiErr))
	require.Equal(t, "bad_data", apiErr.ErrorType)
	require.Equal(t, "Error executing query: "+apiErr.Error, page.err)

	// The browser logs the bad expression's 400, as the API answers it;
	// nothing else.
	var others []string
	for _, msg := range b.problems() {
		if !strings.Contains(msg, "status of 400") || !strings.Contains(msg, url.QueryEscape(bad)) {
			others = append(others, msg)
		}
	}
	require.Empty(t, others, "the pages logged errors to the browser's console")
}

// historyDoc is what a history page or /graph shows, read from its
// markup hooks.
type historyDoc struct {
	title, text string
	start, step float64
	points      int
	charts      map[string]map[string][]float64 // chart id → legend name → data-values
	queries     map[string][]string             // chart id → its PromQL, a line spec each
	workloads   []string
	tab         string
	resultType  string
	rows        map[string]string // a table's labels → value
	err         string
	graphSVGs   int
}

func (d historyDoc) series(t *testing.T, chart, name string) []float64 {
	t.Helper()
	c, ok := d.charts[chart]
	require.True(t, ok, "chart %s (charts: %v)", chart, slices.Collect(mapsKeys(d.charts)))
	vs, ok := c[name]
	require.True(t, ok, "line %q of chart %s (lines: %v)", name, chart, slices.Collect(mapsKeys(c)))
	return vs
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// openHistory navigates tab to path, reads the page as the browser built
// it and checks a 1280×900 screenshot of it: its title, not blank, not
// an error page.
func openHistory(t *testing.T, tab context.Context, p *process, path, title string) (historyDoc, []byte) {
	t.Helper()
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(p.URL+path)))
	var (
		d    historyDoc
		shot []byte
	)
	eventually(t, 60*time.Second, "a screenshot of "+path+", neither blank nor flat", func() error {
		doc, err := chromedp.Call(tab, dom.GetDocument, dom.GetDocumentParams{Depth: new(int64(0))})
		if err != nil {
			return err
		}
		res, err := chromedp.Call(tab, dom.GetOuterHTML, dom.GetOuterHTMLParams{NodeID: doc.Root.NodeID})
		if err != nil {
			return err
		}
		if d, err = parseHistory(res.OuterHTML); err != nil {
			return err
		}
		if d.title != title && !strings.HasPrefix(d.title, title+" · ") {
			return fmt.Errorf("title %q, want %q", d.title, title)
		}
		if shot, err = captureViewport(tab); err != nil {
			return err
		}
		st, err := screenshotStats(shot)
		switch {
		case err != nil:
			return err
		case st.Size != image.Pt(1280, 900):
			return fmt.Errorf("the screenshot is %v, not the 1280×900 viewport", st.Size)
		case st.Colours < 64:
			return fmt.Errorf("%d colours: a blank or flat page", st.Colours)
		case st.Foreground < 0.05:
			return fmt.Errorf("%.1f%% of the pixels are not the background: a blank page", 100*st.Foreground)
		}
		return nil
	})
	checkNotErrorPage(t, overviewPage{Title: d.title, Text: d.text})
	return d, shot
}

// saveScreenshot keeps a page's screenshot: in the test's directory, or
// in docs/ with GPUSCOPE_UPDATE_SCREENSHOT=1.
func saveScreenshot(t *testing.T, shot []byte, name string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	if os.Getenv(updateScreenshotEnv) == "1" {
		out = filepath.Join(pkgtest.RepoRoot(t), "docs", name)
	}
	require.NoError(t, os.WriteFile(out, shot, 0o644))
	t.Logf("screenshot: %s (%d bytes)", out, len(shot))
}

// requireGraphsWithoutJS opens path with scripts off: the server's SVG
// graphs are there and laid out.
func requireGraphsWithoutJS(t *testing.T, tab context.Context, p *process, path string, atLeast int) {
	t.Helper()
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(p.URL+path)))
	eventually(t, 30*time.Second, path+" without JavaScript shows its graphs", func() error {
		doc, err := chromedp.Call(tab, dom.GetDocument, dom.GetDocumentParams{Depth: new(int64(0))})
		if err != nil {
			return err
		}
		found, err := chromedp.Call(tab, dom.QuerySelectorAll, dom.QuerySelectorAllParams{NodeID: doc.Root.NodeID, Selector: "svg.graph"})
		if err != nil {
			return err
		}
		if len(found.NodeIDs) < atLeast {
			return fmt.Errorf("%d graphs, want at least %d", len(found.NodeIDs), atLeast)
		}
		for _, id := range found.NodeIDs {
			box, err := chromedp.Call(tab, dom.GetBoxModel, dom.GetBoxModelParams{NodeID: id})
			if err != nil {
				return fmt.Errorf("box of graph %d: %w", id, err)
			}
			if box.Model.Width < 300 || box.Model.Height < 50 {
				return fmt.Errorf("graph %d is %d×%d px", id, box.Model.Width, box.Model.Height)
			}
		}
		// The hover strips have a box (their size is the stylesheet's),
		// so that pointing at a step shows its <title>.
		strips, err := chromedp.Call(tab, dom.QuerySelectorAll, dom.QuerySelectorAllParams{NodeID: doc.Root.NodeID, Selector: "g.hv rect"})
		if err != nil {
			return err
		}
		if len(strips.NodeIDs) == 0 {
			return fmt.Errorf("no hover strip")
		}
		box, err := chromedp.Call(tab, dom.GetBoxModel, dom.GetBoxModelParams{NodeID: strips.NodeIDs[len(strips.NodeIDs)/2]})
		if err != nil {
			return fmt.Errorf("box of a hover strip: %w", err)
		}
		if box.Model.Width < 1 || box.Model.Height < 50 {
			return fmt.Errorf("a hover strip is %d×%d px", box.Model.Width, box.Model.Height)
		}
		return nil
	})
}

// pageRange asks /api/v1/query_range over the page's range and step.
func pageRange(t *testing.T, p *process, q string, d historyDoc) model.Matrix {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := promv1.Range{Start: seconds(d.start), End: seconds(d.start + float64(d.points-1)*d.step), Step: time.Duration(d.step * float64(time.Second))}
	v, _, _, err := p.api().QueryRange(ctx, q, r)
	require.NoError(t, err, q)
	return v.(model.Matrix)
}

func seconds(f float64) time.Time { return time.UnixMilli(int64(math.Round(f * 1000))) }

// pointsOf lays a series' samples on the page's steps, NaN where none,
// as the page's data-values do.
func pointsOf(d historyDoc, s *model.SampleStream) []float64 {
	start, step := d.start, d.step
	out := make([]float64, d.points)
	for i := range out {
		out[i] = math.NaN()
	}
	for _, v := range s.Values {
		i := int(math.Round((float64(v.Timestamp)/1000 - start) / step))
		out[i] = float64(v.Value)
	}
	return out
}

// parseHistory reads the history pages' and /graph's markup hooks.
func parseHistory(doc string) (historyDoc, error) {
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil {
		return historyDoc{}, fmt.Errorf("parse page: %w", err)
	}
	d := historyDoc{charts: map[string]map[string][]float64{}, queries: map[string][]string{}, rows: map[string]string{}}
	var perr error
	num := func(s string) float64 {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && perr == nil {
			perr = fmt.Errorf("%q is not a number", s)
		}
		return f
	}
	var walk func(n *html.Node, chart string)
	walk = func(n *html.Node, chart string) {
		if n.Type == html.ElementNode {
			switch {
			case n.Data == "title" && n.Parent != nil && n.Parent.Data == "head":
				d.title = strings.TrimSpace(textOf(n))
			case n.Data == "body":
				d.text = textOf(n)
			case n.Data == "main" && attr(n, "id") == "history":
				d.start, d.step = num(attr(n, "data-start")), num(attr(n, "data-step"))
				d.points = int(num(attr(n, "data-points")))
			case n.Data == "figure" && hasClass(n, "chart"):
				chart = attr(n, "id")
				d.charts[chart] = map[string][]float64{}
			case n.Data == "li" && hasClass(n, "series") && chart != "":
				var vs []float64
				for _, f := range strings.Fields(attr(n, "data-values")) {
					vs = append(vs, num(f))
				}
				d.charts[chart][attr(n, "data-series")] = vs
			case n.Data == "a" && chart != "" && hasDataQuery(n):
				d.queries[chart] = append(d.queries[chart], textOf(n))
			case n.Data == "li" && hasClass(n, "workload"):
				d.workloads = append(d.workloads, attr(n, "data-workload"))
			case n.Data == "fieldset" && attr(n, "data-panel") == "0":
				// A graph runs from end-range to end at step.
				d.tab = attr(n, "data-tab")
				end, rng := num(attr(n, "data-end")), num(attr(n, "data-range"))
				d.step = num(attr(n, "data-step"))
				d.start, d.points = end-rng, int(rng/d.step)+1
			case n.Data == "table" && hasClass(n, "result"):
				d.resultType = attr(n, "data-result-type")
			case n.Data == "tr" && hasClass(n, "row"):
				var cells []*html.Node
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type == html.ElementNode && c.Data == "td" {
						cells = append(cells, c)
					}
				}
				if len(cells) == 2 {
					d.rows[strings.TrimSpace(textOf(cells[0]))] = attr(cells[1], "data-value")
				}
			case n.Data == "p" && attr(n, "id") == "error-0":
				d.err = strings.Join(strings.Fields(textOf(n)), " ")
			case n.Data == "svg" && hasClass(n, "graph"):
				d.graphSVGs++
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, chart)
		}
	}
	walk(root, "")
	return d, perr
}

func hasDataQuery(n *html.Node) bool { _, ok := attrOK(n, "data-query"); return ok }

// alertExpr is the expression of the built-in alerting rule name, as the
// rules API has it.
func alertExpr(t *testing.T, p *process, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rules, err := p.api().Rules(ctx, nil)
	require.NoError(t, err)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if a, ok := r.(promv1.AlertingRule); ok && a.Name == name {
				return a.Query
			}
		}
	}
	t.Fatalf("no alerting rule %s", name)
	return ""
}

// sameFloats requires equal values, NaN (no point) where want has none.
func sameFloats(t *testing.T, want, got []float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		if math.IsNaN(want[i]) {
			require.True(t, math.IsNaN(got[i]), "%s: point %d: want none, got %g", what, i, got[i])
			continue
		}
		require.Equal(t, want[i], got[i], "%s: point %d", what, i)
	}
}
