//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"golang.org/x/net/html"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu/sim"
	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// chromiumPath is Debian's headless-capable Chromium (package chromium,
// installed by .ci/run).
const chromiumPath = "chromium"

// browserTimeScale runs the demo's eight GPUs four times faster than
// `serve --demo` (120× instead of 30×), rules included, so that the leak
// GPU's GPUMemoryLeakSuspected is pending about 50 s after start instead
// of 4-5 minutes; the page, the scenarios and the rules are the demo's.
const browserTimeScale = 120

// updateScreenshotEnv names the variable that makes TestBrowserOverview
// write its screenshot to docs/overview.png, the one the README shows.
const updateScreenshotEnv = "GPUSCOPE_UPDATE_SCREENSHOT"

// gpuBy groups by the labels that name one GPU card.
const gpuBy = "instance, gpu, UUID"

// overviewFieldQueries is, per data-field of a GPU card, the PromQL whose
// result at the page's data-eval-time its data-value must be: %[1]s is
// the card's series selector (instance, gpu, UUID). Numbers are compared
// as numbers; the model and the bottleneck class as label values. Written
// here from the metrics' meaning, not copied from the page's code: a MIG
// GPU has no DCGM_FI_DEV_GPU_UTIL, so its utilisation is its instances'
// mean activity, and its framebuffer the sum of its instances'; DCGM
// reports the framebuffer in MiB, the page in bytes; the total is
// DCGM_FI_DEV_FB_TOTAL or, where that is not exported, used + free +
// reserved.
var overviewFieldQueries = []struct {
	field, query string
	// label, when set, names a series by its labels: the data-value is
	// then the names of the result's series, sorted and joined with a
	// comma, instead of a number.
	label func(model.Metric) string
}{
	{field: "model", query: `group by (` + gpuBy + `, modelName) ({__name__=~"DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_FB_USED", %[1]s})`, label: func(m model.Metric) string { return string(m["modelName"]) }},
	{field: "utilization", query: `max by (` + gpuBy + `) (DCGM_FI_DEV_GPU_UTIL{%[1]s})
		or avg by (` + gpuBy + `) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{%[1]s, GPU_I_ID!=""}) * 100`},
	{field: "memory-used", query: `sum by (` + gpuBy + `) (DCGM_FI_DEV_FB_USED{%[1]s}) * 2^20`},
	{field: "memory-total", query: `sum by (` + gpuBy + `) (DCGM_FI_DEV_FB_TOTAL{%[1]s}) * 2^20
		or (
		    sum by (` + gpuBy + `) (DCGM_FI_DEV_FB_USED{%[1]s})
		  + sum by (` + gpuBy + `) (DCGM_FI_DEV_FB_FREE{%[1]s})
		  + (sum by (` + gpuBy + `) (DCGM_FI_DEV_FB_RESERVED{%[1]s}) or sum by (` + gpuBy + `) (DCGM_FI_DEV_FB_USED{%[1]s}) * 0)
		) * 2^20`},
	{field: "temperature", query: `max by (` + gpuBy + `) (DCGM_FI_DEV_GPU_TEMP{%[1]s})`},
	{field: "power", query: `max by (` + gpuBy + `) (DCGM_FI_DEV_POWER_USAGE{%[1]s})`},
	// The number of clock-event reasons active now (the text names them).
	{field: "throttle", query: `count by (` + gpuBy + `) (max by (` + gpuBy + `, reason) (gpuscope_gpu_clock_event_active{%[1]s}) == 1)
		or group by (` + gpuBy + `) (DCGM_FI_DEV_GPU_TEMP{%[1]s}) * 0`},
	{field: "last-xid", query: `max by (` + gpuBy + `) (DCGM_FI_DEV_XID_ERRORS{%[1]s})`},
	// A MIG GPU's classes are per GPU instance ("GI 1 compute-bound").
	{field: "bottleneck", query: `max by (` + gpuBy + `, GPU_I_ID, class) (gpu:bottleneck:class{%[1]s})`, label: func(m model.Metric) string {
		if gi := m["GPU_I_ID"]; gi != "" {
			return "GI " + string(gi) + " " + string(m["class"])
		}
		return string(m["class"])
	}},
}

// overviewFields are the data-field names every GPU card has.
var overviewFields = []string{"model", "utilization", "memory-used", "memory-total", "temperature", "power", "throttle", "last-xid", "bottleneck"}

// TestBrowserOverview opens the overview page of the demo's eight
// simulated GPUs in a real browser (Debian's headless Chromium, driven
// over the DevTools protocol): every GPU has a card whose values are what
// /api/v1/query returns for the same series at the time the page was
// rendered, the leak GPU's GPUMemoryLeakSuspected is listed under the
// alerts, the page logs no error to the console, a 1280×900 screenshot is
// neither blank nor an error page, and with JavaScript off the cards are
// still there. With GPUSCOPE_UPDATE_SCREENSHOT=1 the screenshot replaces
// docs/overview.png.
func TestBrowserOverview(t *testing.T) {
	t.Parallel()
	pkgtest.Require(t, false, chromiumPath)
	demo := demoAtScale(browserTimeScale)
	leakGPU := slices.IndexFunc(demo.Sim.GPUs, func(g sim.GPU) bool { return g.Scenario == sim.ScenarioLeak })
	require.GreaterOrEqual(t, leakGPU, 0, "the demo has a leak scenario")

	p := serve(t, "", "--config.file="+writeConfig(t, t.TempDir(), browserConfig(t, demo)))
	b := startBrowser(t)

	// Alone the test takes under a minute; beside the image tests' Docker
	// builds on two cores, Chromium alone has needed more than four.
	ctx, cancel := context.WithTimeout(b.ctx, 8*time.Minute)
	defer cancel()
	tab := b.tab(t, ctx, true)
	resp, err := chromedp.Run(tab, chromedp.NavigateResponse(p.URL+"/"))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status, "GET / in the browser")

	// The cards come with the first scrape; the leak's alert after about
	// 90 simulated minutes. The page reloads itself every scrape interval,
	// so each look is one snapshot of the DOM as the browser built it.
	var page overviewPage
	eventually(t, 120*time.Second, "the overview shows eight GPU cards and the leak GPU's alert", func() error {
		var err error
		if page, err = snapshot(tab, p.URL); err != nil {
			return err
		}
		if len(page.Cards) != demo.Sim.Count {
			return fmt.Errorf("%d GPU cards, want %d", len(page.Cards), demo.Sim.Count)
		}
		if _, ok := page.alert("GPUMemoryLeakSuspected"); !ok {
			return fmt.Errorf("no GPUMemoryLeakSuspected in #alerts (alerts: %v)", page.Alerts)
		}
		return nil
	})
	a, _ := page.alert("GPUMemoryLeakSuspected")
	require.Contains(t, []string{"pending", "firing"}, a.State)
	require.Contains(t, a.Text, "GPU "+strconv.Itoa(leakGPU)+" ", "the alert names the leak GPU")

	// Every card shows what the API returns for its series at the page's
	// evaluation time. A scrape that lands between the page's queries and
	// the test's can change a value, so a later snapshot may be needed.
	var mismatches []string
	for try := 0; try < 3; try++ {
		if try > 0 {
			eventually(t, 10*time.Second, "a snapshot between two reloads", func() error {
				page, err = snapshot(tab, p.URL)
				return err
			})
		}
		mismatches = compareCards(t, p, page, demo.Sim.Count)
		if len(mismatches) == 0 {
			break
		}
		t.Logf("snapshot %d: the page and the API differ:\n%s", try+1, strings.Join(mismatches, "\n"))
	}
	require.Empty(t, mismatches, "the cards show what /api/v1/query returns at the page's data-eval-time")

	// The screenshot: the viewport the browser was given, neither blank
	// nor an error page. A reload may be under way: a few tries, and the
	// DOM read again right after the one that passed.
	var (
		shot []byte
		st   screenshotInfo
	)
	eventually(t, 60*time.Second, "a 1280×900 screenshot of the page, neither blank nor flat", func() error {
		var err error
		if shot, err = captureViewport(tab); err != nil {
			return err
		}
		if st, err = screenshotStats(shot); err != nil {
			return err
		}
		switch {
		case st.Size != image.Pt(1280, 900):
			return fmt.Errorf("the screenshot is %v, not the 1280×900 viewport", st.Size)
		case st.Colours < 64:
			return fmt.Errorf("%d colours: a blank or flat page", st.Colours)
		case st.Foreground < 0.05:
			return fmt.Errorf("%.1f%% of the pixels are not the background: a blank page", 100*st.Foreground)
		}
		page, err = snapshot(tab, p.URL)
		return err
	})
	checkNotErrorPage(t, page)
	out := filepath.Join(t.TempDir(), "overview.png")
	if os.Getenv(updateScreenshotEnv) == "1" {
		out = filepath.Join(pkgtest.RepoRoot(t), "docs", "overview.png")
		require.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755))
	}
	require.NoError(t, os.WriteFile(out, shot, 0o644))
	t.Logf("screenshot: %s (%d bytes, %d colours, %.0f%% foreground)", out, len(shot), st.Colours, 100*st.Foreground)

	// Without JavaScript the page is the same server-rendered HTML.
	noJS := b.tab(t, ctx, false)
	require.NoError(t, chromedp.Do(noJS, chromedp.Navigate(p.URL+"/")))
	var plain overviewPage
	// Without JavaScript the page reloads itself every 15 s (its meta
	// refresh), and a reload between two DOM calls loses their node ids:
	// a minute gives a loaded machine several reloads' worth of tries.
	eventually(t, time.Minute, "the overview without JavaScript shows the GPU cards", func() error {
		var err error
		if plain, err = snapshot(noJS, p.URL); err != nil {
			return err
		}
		if len(plain.Cards) != demo.Sim.Count {
			return fmt.Errorf("%d GPU cards without JavaScript, want %d", len(plain.Cards), demo.Sim.Count)
		}
		return cardsLaidOut(noJS, demo.Sim.Count)
	})
	checkNotErrorPage(t, plain)
	for _, c := range plain.Cards {
		for _, f := range overviewFields {
			require.Contains(t, c.Fields, f, "GPU %s's card without JavaScript", c.GPU)
		}
		require.True(t, c.Sparkline, "GPU %s's card without JavaScript has its inline SVG sparkline", c.GPU)
	}

	require.Empty(t, b.problems(), "the page logged errors to the browser's console")
	require.Equal(t, "1", page.Refresh, "<meta http-equiv=refresh> reloads the page every scrape interval (1s here)")
}

// demoAtScale is `serve --demo`'s GPU config at another speed, without
// the input-bound container's CPU burner: the page shows its GPU all the
// same, and the burner's cgroup (/gpuscope-demo/input-bound) is one that
// the demo tests running beside this one create and remove themselves.
func demoAtScale(scale float64) config.GPU {
	var c config.GPU
	c.Config, c.Sim = sim.DemoConfig()
	c.Sim.TimeScale = scale
	c.Sim.CPUBurn = false
	return c
}

// browserConfig is `serve --demo` as a config file: the demo's GPUs, its
// rules at the GPUs' speed, scraped and evaluated every second.
func browserConfig(t *testing.T, demo config.GPU) string {
	t.Helper()
	g, err := yaml.Marshal(map[string]any{"gpu": demo})
	require.NoError(t, err)
	return fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rules:
  builtin:
    time_scale: %g
%s`, demo.Sim.TimeScale, g)
}

// compareCards checks the page's cards against the API at the page's
// evaluation time and returns what differs.
func compareCards(t *testing.T, p *process, page overviewPage, count int) []string {
	t.Helper()
	require.False(t, page.EvalTime.IsZero(), "<body data-eval-time> is set")
	var bad []string
	gpus := map[string]bool{}
	for _, c := range page.Cards {
		require.Equal(t, "e2e-node", c.Instance, "card of GPU %s", c.GPU)
		require.NotEmpty(t, c.UUID, "card of GPU %s", c.GPU)
		gpus[c.GPU] = true
		for _, f := range overviewFields {
			require.Contains(t, c.Fields, f, "GPU %s's card", c.GPU)
		}
		require.True(t, c.Sparkline, "GPU %s's card has a sparkline", c.GPU)
		sel := fmt.Sprintf("instance=%q, gpu=%q, UUID=%q", c.Instance, c.GPU, c.UUID)
		for _, fq := range overviewFieldQueries {
			got, q := c.Fields[fq.field], fmt.Sprintf(fq.query, sel)
			res, err := p.queryAt(q, page.EvalTime)
			require.NoError(t, err)
			var want string
			switch {
			case fq.label != nil:
				var vals []string
				for _, s := range res {
					vals = append(vals, fq.label(s.Metric))
				}
				slices.Sort(vals)
				want = strings.Join(vals, ",")
			case len(res) != 1:
				bad = append(bad, fmt.Sprintf("GPU %s %s: the API has %d series for %s", c.GPU, fq.field, len(res), q))
				continue
			}
			switch {
			case !got.HasValue:
				bad = append(bad, fmt.Sprintf("GPU %s %s: no data-value (text %q), the API says %q", c.GPU, fq.field, got.Text, want+fmt.Sprint(res)))
			case fq.label != nil:
				if got.Value != want {
					bad = append(bad, fmt.Sprintf("GPU %s %s: page %q, API %q", c.GPU, fq.field, got.Value, want))
				}
			default:
				v, err := strconv.ParseFloat(got.Value, 64)
				if err != nil || !sameValue(v, float64(res[0].Value)) {
					bad = append(bad, fmt.Sprintf("GPU %s %s: page %q, API %s", c.GPU, fq.field, got.Value, res[0].Value))
				}
			}
		}
		bad = append(bad, compareWorkloads(t, p, page.EvalTime, c, sel)...)
	}
	for i := range count {
		if !gpus[strconv.Itoa(i)] {
			bad = append(bad, fmt.Sprintf("no card for GPU %d", i))
		}
	}
	return bad
}

// compareWorkloads checks a card's workloads and their GPU memory and
// SM share against the API.
func compareWorkloads(t *testing.T, p *process, ts time.Time, c overviewCard, sel string) []string {
	t.Helper()
	mem, err := p.queryAt(fmt.Sprintf(`sum by (workload) (gpuscope_gpu_container_memory_used_bytes{%s})`, sel), ts)
	require.NoError(t, err)
	sm, err := p.queryAt(fmt.Sprintf(`sum by (workload) (gpuscope_gpu_container_sm_utilization_percent{%s})`, sel), ts)
	require.NoError(t, err)
	want := map[string]map[string]float64{}
	for field, v := range map[string]model.Vector{"workload-memory": mem, "workload-sm": sm} {
		for _, s := range v {
			w := string(s.Metric["workload"])
			if want[w] == nil {
				want[w] = map[string]float64{}
			}
			want[w][field] = float64(s.Value)
		}
	}
	var bad []string
	got := map[string]bool{}
	for _, w := range c.Workloads {
		got[w.Name] = true
		if want[w.Name] == nil {
			bad = append(bad, fmt.Sprintf("GPU %s: workload %q on the page, not in the API", c.GPU, w.Name))
			continue
		}
		for field, v := range want[w.Name] {
			f, ok := w.Fields[field]
			pv, err := strconv.ParseFloat(f.Value, 64)
			if !ok || !f.HasValue || err != nil || !sameValue(pv, v) {
				bad = append(bad, fmt.Sprintf("GPU %s workload %q %s: page %q, API %g", c.GPU, w.Name, field, f.Value, v))
			}
		}
	}
	for w := range want {
		if !got[w] {
			bad = append(bad, fmt.Sprintf("GPU %s: workload %q in the API, not on the page", c.GPU, w))
		}
	}
	return bad
}

// sameValue is equality up to the last digit a decimal rendering may
// round.
func sameValue(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b || math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

// errorPage are texts of error pages: the server's (echo's JSON 404,
// a 500) and the browser's own ("This site can’t be reached" with a net
// error code).
var errorPage = []*regexp.Regexp{
	regexp.MustCompile(`"message":\s*"`),
	regexp.MustCompile(`(?i)internal server error|404 page not found|bad gateway|service unavailable`),
	regexp.MustCompile(`This site can.t be reached|This page isn.t working`),
	regexp.MustCompile(`\bERR_[A-Z_]{4,}\b`),
}

// checkNotErrorPage fails when the tab shows an error page rather than
// the overview.
func checkNotErrorPage(t *testing.T, page overviewPage) {
	t.Helper()
	require.True(t, strings.HasPrefix(page.Title, "gpuscope"), "the overview's title, not an error page's: %q", page.Title)
	for _, re := range errorPage {
		require.False(t, re.MatchString(page.Title+"\n"+page.Text), "the page reads like an error page (%s):\n%s", re, page.Text)
	}
}

// screenshotInfo is what a screenshot's pixels say about the page.
type screenshotInfo struct {
	Size image.Point
	// Colours is the number of distinct colours.
	Colours int
	// Foreground is the fraction of pixels that differ from the most
	// common colour (the background).
	Foreground float64
}

func screenshotStats(b []byte) (screenshotInfo, error) {
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return screenshotInfo{}, fmt.Errorf("decode screenshot: %w", err)
	}
	r := img.Bounds()
	counts := map[[4]uint32]int{}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, ca := img.At(x, y).RGBA()
			counts[[4]uint32{cr, cg, cb, ca}]++
		}
	}
	most := 0
	for _, n := range counts {
		most = max(most, n)
	}
	total := r.Dx() * r.Dy()
	info := screenshotInfo{Size: r.Size(), Colours: len(counts)}
	if total > 0 {
		info.Foreground = float64(total-most) / float64(total)
	}
	return info, nil
}

// browser is a headless Chromium with a private profile, stopped at the
// end of the test.
type browser struct {
	ctx context.Context

	mu     sync.Mutex
	errs   []string // what the pages logged as errors
	logged pkgtest.SyncBuffer
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	b := &browser{}
	profile := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
		chromedp.CombinedOutput(&b.logged),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root with its sandbox.
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx,
		chromedp.WithErrorf(func(format string, args ...any) { fmt.Fprintf(&b.logged, "chromedp: "+format+"\n", args...) }))
	b.ctx = ctx
	t.Cleanup(func() {
		stop, cancelStop := context.WithTimeout(ctx, 10*time.Second)
		defer cancelStop()
		if err := chromedp.Cancel(stop); err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("close chromium: %v", err)
		}
		cancel()
		cancelAlloc()
		if t.Failed() {
			t.Logf("chromium output:\n%s", b.logged.String())
		}
	})
	// Start it now: a browser that cannot start fails here, not in the
	// first page's wait.
	require.NoError(t, chromedp.Do(ctx), "start %s", chromiumPath)
	return b
}

// tab opens a tab whose console errors, uncaught exceptions and error
// log entries are recorded; js false turns the page's scripts off.
func (b *browser) tab(t *testing.T, parent context.Context, js bool) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(parent, chromedp.WithListener(b.record))
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)))
	if !js {
		_, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		require.NoError(t, err)
	}
	return ctx
}

// captureViewport takes a screenshot of the tab's viewport. The tab is
// brought to the front first: headless Chromium commits no frame for a
// tab in the background, and a capture of one never answers
// (puppeteer#12712, go-rod#1211). An attempt that still gets no frame
// gives up after 30 s, so that the caller's wait can try again instead of
// spending its whole time in one call.
func captureViewport(tab context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Call(ctx, page.BringToFront, cdp.Empty{}); err != nil {
		return nil, fmt.Errorf("bring the tab to the front: %w", err)
	}
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		return nil, fmt.Errorf("capture a screenshot: %w", err)
	}
	return shot, nil
}

// record runs in the tab's event loop: it must return fast.
func (b *browser) record(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg = "uncaught exception: " + d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg += ": " + d.Exception.Description
		}
		msg += fmt.Sprintf(" (%s:%d)", d.URL, d.LineNumber+1)
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		var args []string
		for _, a := range ev.Args {
			if a.Value != nil {
				args = append(args, string(a.Value))
			} else {
				args = append(args, a.Description)
			}
		}
		msg = "console." + string(ev.Type) + ": " + strings.Join(args, " ")
	case *cdplog.EventEntryAdded:
		if ev.Entry.Level != cdplog.EntryLevelError {
			return
		}
		msg = fmt.Sprintf("log %s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
	default:
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, msg)
}

func (b *browser) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.errs)
}

// snapshot reads the tab's document as the browser built it, in one
// DevTools call (the page reloads itself), and parses the overview's
// markup. It fails while the tab shows another URL than base's page,
// such as the browser's own error page.
func snapshot(ctx context.Context, base string) (overviewPage, error) {
	doc, err := chromedp.Call(ctx, dom.GetDocument, dom.GetDocumentParams{Depth: new(int64(0))})
	if err != nil {
		return overviewPage{}, fmt.Errorf("get document: %w", err)
	}
	if !strings.HasPrefix(doc.Root.DocumentURL, base+"/") {
		return overviewPage{}, fmt.Errorf("the tab shows %s, not %s/", doc.Root.DocumentURL, base)
	}
	res, err := chromedp.Call(ctx, dom.GetOuterHTML, dom.GetOuterHTMLParams{NodeID: doc.Root.NodeID})
	if err != nil {
		return overviewPage{}, fmt.Errorf("get outer HTML: %w", err)
	}
	return parseOverview(res.OuterHTML)
}

// cardsLaidOut checks that every GPU card has a box on the page (it is
// rendered, not only in the DOM); DOM calls need no page script.
func cardsLaidOut(ctx context.Context, want int) error {
	doc, err := chromedp.Call(ctx, dom.GetDocument, dom.GetDocumentParams{Depth: new(int64(0))})
	if err != nil {
		return fmt.Errorf("get document: %w", err)
	}
	found, err := chromedp.Call(ctx, dom.QuerySelectorAll, dom.QuerySelectorAllParams{NodeID: doc.Root.NodeID, Selector: "section.gpu-card"})
	if err != nil {
		return fmt.Errorf("query cards: %w", err)
	}
	if len(found.NodeIDs) != want {
		return fmt.Errorf("%d cards laid out, want %d", len(found.NodeIDs), want)
	}
	for _, id := range found.NodeIDs {
		box, err := chromedp.Call(ctx, dom.GetBoxModel, dom.GetBoxModelParams{NodeID: id})
		if err != nil {
			return fmt.Errorf("box of card %d: %w", id, err)
		}
		if box.Model.Width <= 0 || box.Model.Height <= 0 {
			return fmt.Errorf("card %d is %d×%d px", id, box.Model.Width, box.Model.Height)
		}
	}
	return nil
}

// overviewPage is what the overview page shows, read from its markup hooks.
type overviewPage struct {
	Title string
	// Text is the body's text.
	Text string
	// EvalTime is <body data-eval-time>: when the page's queries ran.
	EvalTime time.Time
	// Refresh is the content of <meta http-equiv="refresh">.
	Refresh string
	Cards   []overviewCard
	Alerts  []overviewAlert
}

type overviewCard struct {
	Instance, GPU, UUID string
	Fields              map[string]overviewField
	Workloads           []overviewWorkload
	// Sparkline is whether the card has an <svg class="sparkline">.
	Sparkline bool
}

// overviewWorkload is a <li class="gpu-workload"> of a card, with its
// data-fields (workload-memory, workload-sm).
type overviewWorkload struct {
	Name   string
	Fields map[string]overviewField
}

type overviewField struct {
	Value    string
	HasValue bool
	Text     string
}

type overviewAlert struct {
	Name, State, Text string
}

func (p overviewPage) alert(name string) (overviewAlert, bool) {
	for _, a := range p.Alerts {
		if a.Name == name {
			return a, true
		}
	}
	return overviewAlert{}, false
}

// parseOverview reads the overview's markup hooks (the contract between
// web/overview and this test).
func parseOverview(doc string) (overviewPage, error) {
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil {
		return overviewPage{}, fmt.Errorf("parse page: %w", err)
	}
	var (
		page    overviewPage
		evalErr error
	)
	// card is the index of the card n is in, or -1; workload the index of
	// the card's workload.
	var walk func(n *html.Node, card, workload int, inAlerts bool)
	walk = func(n *html.Node, card, workload int, inAlerts bool) {
		if n.Type == html.ElementNode {
			switch {
			case n.Data == "title" && n.Parent != nil && n.Parent.Data == "head":
				page.Title = strings.TrimSpace(textOf(n))
			case n.Data == "meta" && strings.EqualFold(attr(n, "http-equiv"), "refresh"):
				page.Refresh = attr(n, "content")
			case n.Data == "body":
				page.Text = textOf(n)
				if s, ok := attrOK(n, "data-eval-time"); ok {
					f, err := strconv.ParseFloat(s, 64)
					if err != nil || f <= 0 {
						evalErr = fmt.Errorf("<body data-eval-time=%q> is not unix seconds", s)
					} else {
						page.EvalTime = time.UnixMilli(int64(math.Round(f * 1000)))
					}
				}
			case n.Data == "section" && hasClass(n, "gpu-card"):
				page.Cards = append(page.Cards, overviewCard{
					Instance: attr(n, "data-instance"), GPU: attr(n, "data-gpu"), UUID: attr(n, "data-uuid"),
					Fields: map[string]overviewField{},
				})
				card, workload = len(page.Cards)-1, -1
			case n.Data == "section" && attr(n, "id") == "alerts":
				inAlerts = true
			}
			if card >= 0 {
				c := &page.Cards[card]
				if n.Data == "li" && hasClass(n, "gpu-workload") {
					c.Workloads = append(c.Workloads, overviewWorkload{Name: attr(n, "data-workload"), Fields: map[string]overviewField{}})
					workload = len(c.Workloads) - 1
				}
				if n.Data == "svg" && hasClass(n, "sparkline") {
					c.Sparkline = true
				}
				if f, ok := attrOK(n, "data-field"); ok {
					v, has := attrOK(n, "data-value")
					fields := c.Fields
					if workload >= 0 {
						fields = c.Workloads[workload].Fields
					}
					fields[f] = overviewField{Value: v, HasValue: has, Text: strings.Join(strings.Fields(textOf(n)), " ")}
				}
			}
			if inAlerts && n.Data == "li" && hasClass(n, "alert") {
				page.Alerts = append(page.Alerts, overviewAlert{
					Name: attr(n, "data-alertname"), State: attr(n, "data-state"),
					Text: strings.Join(strings.Fields(textOf(n)), " "),
				})
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, card, workload, inAlerts)
		}
	}
	walk(root, -1, -1, false)
	return page, evalErr
}

func attrOK(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func attr(n *html.Node, key string) string {
	v, _ := attrOK(n, key)
	return v
}

func hasClass(n *html.Node, class string) bool {
	return slices.Contains(strings.Fields(attr(n, "class")), class)
}

// textOf is the text below n, scripts and styles left out.
func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
			b.WriteByte(' ')
		}
		if n.Type == html.ElementNode && (n.Data == "script" || n.Data == "style") {
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// TestBrowserChecksCanFail: the browser test's own readers say no to what
// they must refuse (a blank screenshot, an error page, an evaluation time
// that is not a number) and read the overview's hooks as meant: the
// head's title, a workload's fields apart from its card's, a field with
// no data-value, escaped label values.
func TestBrowserChecksCanFail(t *testing.T) {
	t.Parallel()
	blank := image.NewRGBA(image.Rect(0, 0, 1280, 900))
	for i := range blank.Pix {
		blank.Pix[i] = 0xff
	}
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, blank))
	st, err := screenshotStats(buf.Bytes())
	require.NoError(t, err)
	require.Equal(t, screenshotInfo{Size: image.Pt(1280, 900), Colours: 1, Foreground: 0}, st)
	_, err = screenshotStats([]byte("<html>not a PNG</html>"))
	require.ErrorContains(t, err, "decode screenshot")

	for _, tc := range []struct {
		name, doc string
		err       string
		check     func(t *testing.T, p overviewPage)
	}{
		{
			name: "the overview",
			doc: `<!doctype html><html><head><meta http-equiv="refresh" content="15"><title>gpuscope</title></head>
<body data-eval-time="1764630000.123"><section id="alerts"><ul><li class="alert firing" data-alertname="GPUMemoryLeakSuspected" data-state="pending">GPU 2 on n may be leaking memory</li></ul></section>
<section class="gpu-card" data-instance="n" data-gpu="2" data-uuid="GPU-2"><h3>GPU 2 <span data-field="model" data-value="H100">H100</span></h3>
<span data-field="utilization" data-value="87.5">87 %</span><span data-field="last-xid">–</span>
<ul><li class="gpu-workload" data-workload="&lt;b&gt;job"><span data-field="workload-memory" data-value="1024">1 KiB</span></li></ul>
<svg class="sparkline"><title>last hour</title><polyline points=""/></svg></section></body></html>`,
			check: func(t *testing.T, p overviewPage) {
				require.Equal(t, "gpuscope", p.Title, "the head's title, not the sparkline's")
				require.Equal(t, "15", p.Refresh)
				require.Equal(t, time.UnixMilli(1764630000123), p.EvalTime)
				require.Equal(t, []overviewAlert{{Name: "GPUMemoryLeakSuspected", State: "pending", Text: "GPU 2 on n may be leaking memory"}}, p.Alerts)
				require.Len(t, p.Cards, 1)
				c := p.Cards[0]
				require.Equal(t, overviewField{Value: "87.5", HasValue: true, Text: "87 %"}, c.Fields["utilization"])
				require.Equal(t, overviewField{Text: "–"}, c.Fields["last-xid"])
				require.NotContains(t, c.Fields, "workload-memory", "a workload's fields are the workload's")
				require.Equal(t, []overviewWorkload{{Name: "<b>job", Fields: map[string]overviewField{"workload-memory": {Value: "1024", HasValue: true, Text: "1 KiB"}}}}, c.Workloads)
				require.True(t, c.Sparkline)
				checkNotErrorPage(t, p)
			},
		},
		{
			name: "echo's 404",
			doc:  `{"message":"Not Found"}`,
			check: func(t *testing.T, p overviewPage) {
				require.Empty(t, p.Cards)
				require.Empty(t, p.Title)
			},
		},
		{
			name: "Chromium's error page",
			doc:  `<html><head><title>gpuscope</title></head><body>This site can’t be reached ERR_CONNECTION_REFUSED</body></html>`,
			check: func(t *testing.T, p overviewPage) {
				for _, re := range errorPage {
					if re.MatchString(p.Text) {
						return
					}
				}
				t.Fatalf("no error-page pattern matches %q", p.Text)
			},
		},
		{
			name: "an evaluation time that is not a number",
			doc:  `<html><body data-eval-time="yesterday"></body></html>`,
			err:  `<body data-eval-time="yesterday"> is not unix seconds`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := parseOverview(tc.doc)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			tc.check(t, p)
		})
	}
}
