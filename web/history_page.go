package web

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// The history pages: /gpu/<node>/<gpu>, /workload/<name> and /graph.
// They read the range's graphs with the PromQL engine and storage the
// API's query_range uses, and are rendered by the server (html/template
// escapes every label value) with no script.

//go:embed history/*.html history/history.css
var historyFS embed.FS

var historyTemplates = template.Must(template.New("history").Funcs(template.FuncMap{
	"css":      func() template.CSS { return historyCSS },
	"num":      formatNum,
	"bytes":    humanBytes,
	"duration": humanDuration,
	"utc":      formatUTC,
	"secs":     func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) },
	"percent":  func(ratio float64) float64 { return ratio * 100 },
	"plus1":    func(i int) int { return i + 1 },
	"seconds":  unixSeconds,
}).ParseFS(historyFS, "history/*.html"))

var historyCSS = func() template.CSS {
	b, err := historyFS.ReadFile("history/history.css")
	if err != nil {
		panic(err)
	}
	return template.CSS(b) //nolint:gosec // our own stylesheet
}()

// render writes the named template of historyTemplates with status.
func render(c echo.Context, status int, name string, data any) error {
	// Rendered into a buffer first: a template error is then a 500, not
	// half a page.
	var b bytes.Buffer
	if err := historyTemplates.ExecuteTemplate(&b, name, data); err != nil {
		return fmt.Errorf("render %s page: %w", name, err)
	}
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(status)
	_, err := c.Response().Write(b.Bytes())
	return err
}

// noticePage is a page that only says something: no history on the
// agent, not ready yet, a bad range, nothing of that name.
type noticePage struct {
	Base, Title, Text string
	Status, Refresh   int
	// Known lists what exists instead, linked.
	Known     []knownLink
	KnownText string
	Bar       *rangeBar
}

type knownLink struct {
	Text, Href string
	Group      string // a heading: the node of a GPU
}

func (h *Handler) historyNotice(c echo.Context, status int, title, text string) error {
	return render(c, status, "notice", &noticePage{
		Base: baseHref(c.Request().URL.EscapedPath()), Title: title, Text: text, Status: status,
	})
}

// mountHistory adds the history pages' routes.
func (h *Handler) mountHistory() {
	h.echo.GET("/gpu/*", h.gpuPage)
	h.echo.GET("/workload/*", h.workloadPage)
	h.echo.GET("/graph", h.graphPage)
}

// pathParam is a path parameter as the page's links escape it
// (url.PathEscape): echo routes on the escaped path when there is one.
func pathParam(c echo.Context, name string) string {
	v := c.Param(name)
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}

// prelude starts a history page: the agent has none, the TSDB must be
// open, and the range must parse. ok is false when the page has been
// answered already.
func (h *Handler) prelude(c echo.Context) (hp *historyPage, ok bool, err error) {
	if h.opts.API == nil {
		return nil, false, h.historyNotice(c, http.StatusNotFound, "No history on this node", errNoHistory.Error())
	}
	if !h.ready.Load() {
		return nil, false, h.historyNotice(c, http.StatusServiceUnavailable, "Starting", "the TSDB is opening (WAL replay): this page answers once it is ready")
	}
	o := h.overviewOptions()
	minStep := o.ScrapeInterval()
	tr, err := parseRange(c.QueryParams(), o.Now(), minStep)
	if err != nil {
		return nil, false, badRange(c, err)
	}
	return &historyPage{
		ctx:  c.Request().Context(),
		src:  engineSource{engine: h.opts.API.QueryEngine, queryable: h.opts.API.Queryable, ts: tr.End, timeout: o.QueryTimeout},
		tr:   tr,
		plan: plan{step: tr.Step, minStep: minStep, recorded: recordedIntervals(h.opts.API.RuleManager)},
		ax:   newAxis(tr.Start, tr.End, tr.Step),
	}, true, nil
}

// badRange answers 400: what is wrong with the range, and what is
// accepted.
func badRange(c echo.Context, err error) error {
	return render(c, http.StatusBadRequest, "notice", &noticePage{
		Base: baseHref(c.Request().URL.EscapedPath()), Status: http.StatusBadRequest, Title: "Bad time range",
		Text: err.Error() + ". Presets: range=" + strings.Join(rangePresets, ", range=") + "; or from= and to= (Unix seconds, RFC 3339, or 2006-01-02 15:04 in UTC).",
	})
}

// refresh is how often a page that ends now reloads itself: every step,
// at least every scrape and at most every 5 minutes; 0 for a page
// ending in the past.
func (h *Handler) refresh(tr timeRange) int {
	if !tr.Live {
		return 0
	}
	d := min(max(tr.Step, h.overviewOptions().ScrapeInterval()), 5*time.Minute)
	return max(1, int(d.Seconds()))
}
