package web

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/scrape"
)

// OverviewOptions configure the overview page at /.
type OverviewOptions struct {
	// ScrapeInterval is the page's refresh period and, while the TSDB is
	// still empty, the wait it announces; default 15s.
	ScrapeInterval func() time.Duration
	// QueryTimeout bounds each of the page's queries; a card whose query
	// runs longer says "query timed out". Default 10s.
	QueryTimeout time.Duration
	// Health runs the checks of the Health block; nil: no block.
	Health func(ctx context.Context) []HealthCheck
	// GrafanaURL returns the configured Grafana (web.grafana_url); the
	// page links each dashboard to <GrafanaURL>/d/<uid>. Nil or "": none.
	GrafanaURL func() string
	// Local is, for `gpuscope agent` (no TSDB, no API), the GPU
	// collector's gatherer: the page shows its current values, with
	// instance set to Node.
	Local prometheus.Gatherer
	Node  string
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// HealthCheck is one line of the Health block: what `gpuscope doctor`
// reports (web does not import doctor; the caller converts).
type HealthCheck struct {
	Name    string
	Status  string // ok, warn or fail
	Summary string
	Hint    string
}

//go:embed overview/overview.html overview/overview.css
var overviewFS embed.FS

var overviewTemplate = template.Must(template.New("overview.html").Funcs(template.FuncMap{
	"num":      formatNum,
	"bytes":    humanBytes,
	"pct":      func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + " %" },
	"duration": humanDuration,
	"css":      func() template.CSS { return overviewCSS },
	"join":     strings.Join,
	"ratio":    func(a, b float64) string { return strconv.FormatFloat(a/b, 'f', 3, 64) },
	"unit":     unitText,
	"fieldArgs": func(name string, f field, unit string) fieldArgs {
		return fieldArgs{Name: name, F: f, Unit: unit}
	},
	"evalSeconds": func(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 },
}).ParseFS(overviewFS, "overview/overview.html"))

var overviewCSS = func() template.CSS {
	b, err := overviewFS.ReadFile("overview/overview.css")
	if err != nil {
		panic(err)
	}
	return template.CSS(b)
}()

// overviewParallel is how many of the page's queries run at once.
const overviewParallel = 4

// sparkPoints is the number of one-minute steps in a sparkline.
const sparkPoints = 60

// overviewPage is what the template renders.
type overviewPage struct {
	EvalTime     time.Time
	Refresh      int
	Ready        bool
	API          bool
	Agent        bool
	Node         string // ?node= filter
	UnknownNode  bool
	KnownNodes   []string
	Collecting   bool
	CollectingIn int
	Error        string
	Nodes        []*nodeView
	Alerts       []alertView
	Down         []targetView
	Health       []HealthCheck
	HealthShown  bool
	Dashboards   []dashboardLink
	Lines        []StatusLine
	Queries      []fieldDoc
}

type nodeView struct {
	Instance string
	Cards    []*gpuCard
}

// field is one value of a card: set, or the reason it is missing.
type field struct {
	Set bool
	V   float64
	Err string
}

type gpuCard struct {
	Instance, GPU, UUID, Model string
	Util, MemUsed, MemTotal    field
	Temp, Power                field
	Throttle                   []string
	ThrottleErr                string
	XID                        field
	XIDMsg                     string
	Classes                    []string
	ClassErr                   string
	Workloads                  []workloadView
	WorkloadErr                string
	Spark                      *sparkline
}

type workloadView struct {
	Name          string
	Mem, SM       float64
	HasMem, HasSM bool
}

type sparkline struct{ Util, Mem string }

type alertView struct {
	Name, State, Summary, Workload, Instance string
	For                                      time.Duration
}

type targetView struct {
	Job, Instance, URL, Error string
	Ago                       time.Duration
	Scraped                   bool
}

type dashboardLink struct{ UID, Title, Grafana string }

// fieldDoc tells a reader (and the browser test) which query each
// data-field's data-value comes from.
type fieldDoc struct{ Field, Query string }

func (h *Handler) overviewOptions() OverviewOptions {
	o := h.opts.Overview
	if o.ScrapeInterval == nil {
		o.ScrapeInterval = func() time.Duration { return 15 * time.Second }
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

func (h *Handler) overview(c echo.Context) error {
	o := h.overviewOptions()
	ctx := c.Request().Context()
	now := o.Now()
	p := &overviewPage{
		EvalTime: now,
		Refresh:  max(1, int(math.Round(o.ScrapeInterval().Seconds()))),
		Ready:    h.ready.Load(),
		API:      h.opts.API != nil,
		Agent:    h.opts.API == nil,
		Node:     c.QueryParam("node"),
	}
	if h.opts.Status != nil {
		p.Lines = h.opts.Status()
	}
	if h.dashboards != nil {
		var grafana string
		if o.GrafanaURL != nil {
			grafana = strings.TrimSuffix(o.GrafanaURL(), "/")
		}
		for _, d := range h.dashboards.List() {
			l := dashboardLink{UID: d.UID, Title: d.Title}
			if grafana != "" {
				l.Grafana = grafana + "/d/" + url.PathEscape(d.UID)
			}
			p.Dashboards = append(p.Dashboards, l)
		}
	}
	if o.Health != nil { // bounded as a query is: the checks dial nodes
		hctx, cancel := context.WithTimeout(ctx, o.QueryTimeout)
		p.HealthShown = true
		p.Health = o.Health(hctx)
		cancel()
	}

	var (
		src    *engineSource
		series func(context.Context, string) (map[string][]point, error)
	)
	switch {
	case h.opts.API != nil && p.Ready:
		es := engineSource{engine: h.opts.API.QueryEngine, queryable: h.opts.API.Queryable, ts: now, timeout: o.QueryTimeout}
		src, series = &es, es.series
	case h.opts.API == nil && o.Local != nil:
		// One gathering of the GPU collector, stamped with the page's
		// evaluation time so that the lookback finds it; no history, so
		// no sparklines.
		q, err := gather(o.Local, now, labels.FromStrings("instance", o.Node))
		if err != nil {
			p.Error = err.Error()
		}
		src = &engineSource{engine: h.localEngine, queryable: q, ts: now, timeout: o.QueryTimeout}
	}
	status := http.StatusOK
	if src != nil {
		p.Queries = []fieldDoc{
			{"utilization", qUtil.promQL()}, {"memory-used", qMemUsed.promQL()}, {"memory-total", qMemTotal.promQL()},
			{"temperature", qTemp.promQL()}, {"power", qPower.promQL()}, {"throttle", qThrottle.promQL()},
			{"last-xid", qXID.promQL()}, {"bottleneck", qClass.promQL()},
		}
		if h.collect(ctx, p, o, src, series) {
			status = http.StatusNotFound
		}
	}
	if h.opts.API != nil && p.Ready {
		p.Alerts = alerts(h.opts.API.RuleManager, p.Node, now)
		p.Down = downTargets(h.opts.API.ScrapeManager, p.Node, now)
	}

	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(status)
	if err := overviewTemplate.Execute(c.Response(), p); err != nil {
		return fmt.Errorf("render overview page: %w", err)
	}
	return nil
}

// collect runs the page's queries and fills in the nodes and cards. It
// reports whether ?node= names no known node.
func (h *Handler) collect(ctx context.Context, p *overviewPage, o OverviewOptions, src *engineSource,
	series func(context.Context, string) (map[string][]point, error),
) (unknownNode bool) {
	known := map[string]bool{}
	if p.Agent {
		known[o.Node] = true
	} else {
		nodes, err := src.instant(ctx, qNodes, nil)
		if err != nil {
			p.Error = "nodes: " + err.Error()
			return false
		}
		for _, s := range nodes {
			known[s.labels.Get("instance")] = true
		}
	}
	cards, err := src.instant(ctx, qCards, nil)
	if err != nil {
		p.Error = "GPUs: " + err.Error()
		return false
	}
	for _, s := range cards {
		known[s.labels.Get("instance")] = true
	}
	for n := range known {
		p.KnownNodes = append(p.KnownNodes, n)
	}
	sort.Strings(p.KnownNodes)
	if len(known) == 0 && !p.Agent {
		p.Collecting = true
		p.CollectingIn = h.firstDataIn(o)
		return false
	}
	var extra []*labels.Matcher
	if p.Node != "" {
		if !known[p.Node] {
			p.UnknownNode = true
			return true
		}
		extra = []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "instance", p.Node)}
	}

	byNode := map[string]*nodeView{}
	byKey := map[string]*gpuCard{}
	for _, n := range p.KnownNodes {
		if p.Node != "" && n != p.Node {
			continue
		}
		nv := &nodeView{Instance: n}
		byNode[n] = nv
		p.Nodes = append(p.Nodes, nv)
	}
	for _, s := range cards {
		nv := byNode[s.labels.Get("instance")]
		if nv == nil {
			continue
		}
		k := cardKey(s.labels)
		if c, ok := byKey[k]; ok {
			if c.Model == "" {
				c.Model = s.labels.Get("modelName")
			}
			continue
		}
		c := &gpuCard{Instance: s.labels.Get("instance"), GPU: s.labels.Get("gpu"), UUID: s.labels.Get("UUID"), Model: s.labels.Get("modelName")}
		byKey[k] = c
		nv.Cards = append(nv.Cards, c)
	}
	for _, nv := range p.Nodes {
		sort.Slice(nv.Cards, func(i, j int) bool { return gpuLess(nv.Cards[i], nv.Cards[j]) })
	}

	// The queries run side by side, all at the page's evaluation time.
	type result struct {
		s   []sample
		err error
	}
	queries := []fieldQuery{qUtil, qMemUsed, qMemTotal, qTemp, qPower, qThrottle, qXID, qClass, qWLMem, qWLSM}
	results := make([]result, len(queries))
	var (
		wg               sync.WaitGroup
		sparkUtil, spMem map[string][]point
		sparkErr, memErr error
	)
	// At most overviewParallel at once: the engine's --query.max-concurrency
	// slots are shared with Grafana and the rules.
	sem := make(chan struct{}, overviewParallel)
	run := func(f func()) {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f()
		})
	}
	for i, q := range queries {
		run(func() { results[i].s, results[i].err = src.instant(ctx, q, extra) })
	}
	if series != nil {
		run(func() { sparkUtil, sparkErr = series(ctx, qUtil.promQL(extra...)) })
		run(func() { spMem, memErr = series(ctx, memPercent(extra)) })
	}
	wg.Wait()

	setField := func(r result, get func(*gpuCard) *field) {
		for _, c := range byKey {
			if r.err != nil {
				get(c).Err = r.err.Error()
			}
		}
		for _, s := range r.s {
			if c := byKey[cardKey(s.labels)]; c != nil {
				*get(c) = field{Set: true, V: s.v}
			}
		}
	}
	setField(results[0], func(c *gpuCard) *field { return &c.Util })
	setField(results[1], func(c *gpuCard) *field { return &c.MemUsed })
	setField(results[2], func(c *gpuCard) *field { return &c.MemTotal })
	setField(results[3], func(c *gpuCard) *field { return &c.Temp })
	setField(results[4], func(c *gpuCard) *field { return &c.Power })
	setField(results[6], func(c *gpuCard) *field { return &c.XID })

	for _, c := range byKey {
		if err := results[5].err; err != nil {
			c.ThrottleErr = err.Error()
		}
		if err := results[7].err; err != nil {
			c.ClassErr = err.Error()
		}
		if err := results[8].err; err != nil {
			c.WorkloadErr = err.Error()
		}
	}
	for _, s := range results[5].s {
		if c := byKey[cardKey(s.labels)]; c != nil {
			c.Throttle = append(c.Throttle, s.labels.Get("reason"))
		}
	}
	for _, s := range results[6].s { // the highest code's message
		if c := byKey[cardKey(s.labels)]; c != nil && c.XID.V == s.v {
			c.XIDMsg = s.labels.Get("err_msg")
		}
	}
	for _, s := range results[7].s {
		if c := byKey[cardKey(s.labels)]; c != nil {
			cl := s.labels.Get("class")
			if gi := s.labels.Get("GPU_I_ID"); gi != "" {
				cl = "GI " + gi + " " + cl
			}
			c.Classes = append(c.Classes, cl)
		}
	}
	wl := map[string]int{} // index in its card's Workloads
	for i, r := range results[8:10] {
		for _, s := range r.s {
			c := byKey[cardKey(s.labels)]
			if c == nil {
				continue
			}
			k := cardKey(s.labels) + "\xff" + s.labels.Get("workload")
			j, ok := wl[k]
			if !ok {
				j = len(c.Workloads)
				c.Workloads = append(c.Workloads, workloadView{Name: s.labels.Get("workload")})
				wl[k] = j
			}
			if i == 0 {
				c.Workloads[j].Mem, c.Workloads[j].HasMem = s.v, true
			} else {
				c.Workloads[j].SM, c.Workloads[j].HasSM = s.v, true
			}
		}
	}
	for _, c := range byKey {
		slices.Sort(c.Throttle)
		slices.Sort(c.Classes)
		sort.Slice(c.Workloads, func(i, j int) bool { return c.Workloads[i].Mem > c.Workloads[j].Mem })
		if series != nil && sparkErr == nil && memErr == nil {
			k := cardKey(labels.FromStrings("instance", c.Instance, "gpu", c.GPU, "UUID", c.UUID))
			if sp := (sparkline{Util: sparkPath(sparkUtil[k], p.EvalTime), Mem: sparkPath(spMem[k], p.EvalTime)}); sp.Util != "" || sp.Mem != "" {
				c.Spark = &sp
			}
		}
	}
	return false
}

// memPercent is the framebuffer in use, in percent, for the sparkline.
func memPercent(extra []*labels.Matcher) string {
	return qMemUsed.promQL(extra...) + " / (" + qMemTotal.promQL(extra...) + ") * 100"
}

// firstDataIn estimates the seconds until the first scrape lands.
func (h *Handler) firstDataIn(o OverviewOptions) int {
	iv := o.ScrapeInterval()
	left := iv - o.Now().Sub(h.started)%iv
	return max(1, int(math.Ceil(left.Seconds())))
}

func gpuLess(a, b *gpuCard) bool {
	ai, aerr := strconv.Atoi(a.GPU)
	bi, berr := strconv.Atoi(b.GPU)
	if aerr == nil && berr == nil && ai != bi {
		return ai < bi
	}
	if a.GPU != b.GPU {
		return a.GPU < b.GPU
	}
	return a.UUID < b.UUID
}

// sparkPath draws percentages (0 to 100) over the hour before end as an
// SVG path in a 59×20 box, one unit a minute. Steps are relative, and a
// run of equal steps is one line (exactly what the points draw), to keep
// the page small: 128 cards of two lines each.
func sparkPath(ps []point, end time.Time) string {
	var (
		b     strings.Builder
		start = end.Add(-(sparkPoints - 1) * time.Minute).UnixMilli()
		lastX = int64(-2)
		lastY int
		runN  int // equal steps not yet written
		runDY int
		runs  int // points in the current segment
	)
	flush := func() {
		switch {
		case runN == 0:
		case runDY == 0:
			b.WriteString("h" + strconv.Itoa(runN))
		case runDY > 0:
			b.WriteString("l" + strconv.Itoa(runN) + " " + strconv.Itoa(runN*runDY))
		default:
			b.WriteString("l" + strconv.Itoa(runN) + strconv.Itoa(runN*runDY))
		}
		runN = 0
	}
	for _, p := range ps {
		if math.IsNaN(p.v) {
			continue
		}
		x := (p.t - start) / 60000
		y := 20 - int(math.Round(math.Max(0, math.Min(100, p.v))/5))
		if x == lastX+1 {
			if dy := y - lastY; runN > 0 && dy != runDY {
				flush()
			}
			runDY = y - lastY
			runN++
			runs++
		} else { // the first point, or after a gap
			flush()
			if runs == 1 {
				b.WriteString("h.5") // a lone point still shows
			}
			b.WriteString("M" + strconv.FormatInt(x, 10) + " " + strconv.Itoa(y))
			runs = 1
		}
		lastX, lastY = x, y
	}
	flush()
	if runs == 1 {
		b.WriteString("h.5")
	}
	return b.String()
}

// alerts lists the firing and pending alerts, those naming node only when
// one is asked for: firing first, then the longest active.
func alerts(m *rules.Manager, node string, now time.Time) []alertView {
	if m == nil {
		return nil
	}
	var out []alertView
	for _, r := range m.AlertingRules() {
		for _, a := range r.ActiveAlerts() {
			if node != "" && a.Labels.Get("instance") != node {
				continue
			}
			out = append(out, alertView{
				Name:     a.Labels.Get(labels.AlertName),
				State:    a.State.String(),
				Summary:  a.Annotations.Get("summary"),
				Workload: a.Labels.Get("workload"),
				Instance: a.Labels.Get("instance"),
				For:      now.Sub(a.ActiveAt),
			})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].State != out[j].State {
			return out[i].State == rules.StateFiring.String()
		}
		if out[i].For != out[j].For {
			return out[i].For > out[j].For
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// downTargets lists the targets whose last scrape failed, with its error.
func downTargets(m *scrape.Manager, node string, now time.Time) []targetView {
	if m == nil {
		return nil
	}
	var out []targetView
	b := labels.NewBuilder(labels.EmptyLabels())
	for pool, ts := range m.TargetsActive() {
		for _, t := range ts {
			if t.Health() != scrape.HealthBad {
				continue
			}
			ls := t.Labels(b)
			if node != "" && ls.Get("instance") != node {
				continue
			}
			tv := targetView{Job: pool, Instance: ls.Get("instance"), URL: t.URL().String()}
			if err := t.LastError(); err != nil {
				tv.Error = err.Error()
			}
			if last := t.LastScrape(); !last.IsZero() {
				tv.Scraped, tv.Ago = true, now.Sub(last)
			}
			out = append(out, tv)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Job != out[j].Job {
			return out[i].Job < out[j].Job
		}
		return out[i].Instance < out[j].Instance
	})
	return out
}

// fieldArgs are the arguments of the template "field".
type fieldArgs struct {
	Name, Unit string
	F          field
}

// unitText is a card value as a person reads it.
func unitText(v float64, unit string) string {
	switch unit {
	case "pct":
		return strconv.FormatFloat(v, 'f', 0, 64) + " %"
	case "bytes":
		return humanBytes(v)
	case "celsius":
		return strconv.FormatFloat(v, 'f', 0, 64) + " °C"
	case "watts":
		return strconv.FormatFloat(v, 'f', 0, 64) + " W"
	}
	return formatNum(v)
}

// formatNum writes a value as the HTTP API does.
func formatNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func humanBytes(v float64) string {
	const unit = 1024
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for math.Abs(v) >= unit && i < len(units)-1 {
		v /= unit
		i++
	}
	if i == 0 {
		return strconv.FormatFloat(v, 'f', 0, 64) + " B"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}

func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return model.Duration(d.Round(time.Second)).String()
}
