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

	"github.com/gpuscope/gpuscope/doctor"
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
	Health func(ctx context.Context) []doctor.Check
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
	// Notifications returns the Notifications block (serve's embedded
	// Alertmanager); nil: no block.
	Notifications func(ctx context.Context) *Notifications
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
	"rangeBar":    renderRangeBar,
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

// overviewPage is what the template renders.
type overviewPage struct {
	// EvalTime is when the cards' values are read: now, or the end of
	// the range asked for (to=).
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
	Health       []doctor.Check
	HealthShown  bool
	Dashboards   []dashboardLink
	Lines        []StatusLine
	Queries      []fieldDoc
	// Bar is the time range selector (serve only); the sparklines span
	// the range.
	Bar   *rangeBar
	Range timeRange
	spark sparkRange
	// Notifications is the Notifications block (overview_notifications.go).
	Notifications *notificationsView

	// cards is the cards query's answer over all nodes, for the cards and
	// the About table's GPUs line.
	cards    []sample
	cardsErr error
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
	// Processes are the GPU's processes now (a live page only).
	Processes *processesView
	Spark     *sparkline
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
	if ok, err := h.overviewRange(c, p, o, now); !ok {
		return err
	}
	if h.opts.Status != nil {
		p.Lines = h.opts.Status()
	}
	p.Dashboards = h.dashboardLinks(o)
	if o.Health != nil { // bounded as a query is: the checks dial nodes
		hctx, cancel := context.WithTimeout(ctx, o.QueryTimeout)
		p.HealthShown = true
		p.Health = o.Health(hctx)
		cancel()
	}

	status := http.StatusOK
	src, sparklines, ok := h.source(p, o, p.EvalTime)
	if ok {
		p.Queries = []fieldDoc{
			{"utilization", qUtil.promQL()}, {"memory-used", qMemUsed.promQL()}, {"memory-total", qMemTotal.promQL()},
			{"temperature", qTemp.promQL()}, {"power", qPower.promQL()}, {"throttle", qThrottle.promQL()},
			{"last-xid", qXID.promQL()}, {"bottleneck", qClass.promQL()},
		}
		if h.collect(ctx, p, o, src, sparklines) {
			status = http.StatusNotFound
		}
		if h.opts.GPUProcesses != nil && (p.Agent || p.Range.Live) {
			h.cardProcesses(ctx, p, o.QueryTimeout)
		}
	}
	if h.opts.API != nil && p.Ready {
		h.activity(ctx, p, src, now)
		h.notifications(ctx, p, o)
	}

	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(status)
	if err := overviewTemplate.Execute(c.Response(), p); err != nil {
		return fmt.Errorf("render overview page: %w", err)
	}
	return nil
}

// cardProcesses puts on each card the processes its GPU runs now, asked
// of every node shown at once.
func (h *Handler) cardProcesses(ctx context.Context, p *overviewPage, timeout time.Duration) {
	var nodes []string
	for _, nv := range p.Nodes {
		if len(nv.Cards) > 0 {
			nodes = append(nodes, nv.Instance)
		}
	}
	if len(nodes) == 0 {
		return
	}
	asked := askProcesses(ctx, h.opts.GPUProcesses, nodes, timeout)
	for _, nv := range p.Nodes {
		for _, g := range nv.Cards {
			g.Processes = processesFor(asked[nv.Instance], g.GPU)
		}
	}
}

// dashboardLinks are the built-in dashboards' downloads, and links into
// Grafana where one is configured.
func (h *Handler) dashboardLinks(o OverviewOptions) []dashboardLink {
	if h.dashboards == nil {
		return nil
	}
	var grafana string
	if o.GrafanaURL != nil {
		grafana = strings.TrimSuffix(o.GrafanaURL(), "/")
	}
	var out []dashboardLink
	for _, d := range h.dashboards.List() {
		l := dashboardLink{UID: d.UID, Title: d.Title}
		if grafana != "" {
			l.Grafana = grafana + "/d/" + url.PathEscape(d.UID)
		}
		out = append(out, l)
	}
	return out
}

// source is what answers the page's queries: the API's engine and storage
// once the TSDB is open, or the agent's engine over one gathering of its
// GPU collector, stamped with the page's evaluation time so that the
// lookback finds it. Only serve has history for sparklines; ok is false
// while nothing can answer.
func (h *Handler) source(p *overviewPage, o OverviewOptions, now time.Time) (src engineSource, sparklines, ok bool) {
	switch {
	case h.opts.API != nil && p.Ready:
		return engineSource{engine: h.opts.API.QueryEngine, queryable: h.opts.API.Queryable, ts: now, timeout: o.QueryTimeout}, true, true
	case h.opts.API == nil && o.Local != nil:
		q, err := gather(o.Local, now, labels.FromStrings("instance", o.Node))
		if err != nil {
			p.Error = err.Error()
		}
		return engineSource{engine: h.localEngine, queryable: q, ts: now, timeout: o.QueryTimeout}, false, true
	}
	return engineSource{}, false, false
}

// activity fills in the alerts and the targets down from the rule and
// scrape managers, and ends the About table with what the page found:
// GPUs, targets and alerts, on all nodes whatever ?node= asks for.
func (h *Handler) activity(ctx context.Context, p *overviewPage, src engineSource, now time.Time) {
	p.Lines = append(p.Lines, StatusLine{Name: "GPUs", Value: gpusLine(ctx, src, p.cards, p.cardsErr)})
	if m := h.opts.API.ScrapeManager; m != nil {
		var line string
		p.Down, line = downTargets(m.TargetsActive(), p.Node, now)
		p.Lines = append(p.Lines, StatusLine{Name: "Targets", Value: line})
	}
	if m := h.opts.API.RuleManager; m != nil {
		var line string
		p.Alerts, line = alerts(m.AlertingRules(), p.Node, now)
		p.Lines = append(p.Lines, StatusLine{Name: "Alerts", Value: line})
	}
}

// gpusLine is the About table's GPUs line: the GPU cards found on each
// node, or why there are none.
func gpusLine(ctx context.Context, src engineSource, cards []sample, err error) string {
	if err != nil {
		return "query failed: " + err.Error()
	}
	perNode := map[string]map[string]bool{}
	for _, s := range cards {
		n := s.labels.Get("instance")
		if perNode[n] == nil {
			perNode[n] = map[string]bool{}
		}
		perNode[n][cardKey(s.labels)] = true
	}
	if len(perNode) == 0 {
		if bs, err := src.instant(ctx, qBackend, nil); err == nil && len(bs) > 0 {
			backends := make([]string, len(bs))
			for i, s := range bs {
				backends[i] = s.labels.Get("backend")
			}
			return "none (backend " + slices.Min(backends) + ")"
		}
		return "none seen yet (first data one scrape interval after start)"
	}
	parts := make([]string, 0, len(perNode))
	for n, gpus := range perNode {
		parts = append(parts, fmt.Sprintf("%d on %s", len(gpus), n))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// collect runs the page's queries and fills in the nodes and cards, a
// method a phase. It reports whether ?node= names no known node.
func (h *Handler) collect(ctx context.Context, p *overviewPage, o OverviewOptions, src engineSource, sparklines bool) (unknownNode bool) {
	known, ok := h.nodes(ctx, p, o, src)
	if !ok {
		return false
	}
	c := &collection{p: p, src: src, byKey: map[string]*gpuCard{}}
	if p.Node != "" {
		if !known[p.Node] {
			p.UnknownNode = true
			return true
		}
		c.extra = []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "instance", p.Node)}
	}
	c.cards()
	a := c.query(ctx, sparklines)
	c.values(a)
	c.labelled(a)
	c.workloads(a)
	c.sparklines(a)
	return false
}

// nodes finds the nodes the page can show: those scraped (serve) or this
// one (agent), and any with a GPU card. The cards query's answer, over all
// nodes, is kept for the cards and the About table. It reports false when
// there is nothing more to query.
func (h *Handler) nodes(ctx context.Context, p *overviewPage, o OverviewOptions, src engineSource) (known map[string]bool, ok bool) {
	known = map[string]bool{}
	if p.Agent {
		known[o.Node] = true
	} else {
		nodes, err := src.instant(ctx, qNodes, nil)
		if err != nil {
			p.Error = "nodes: " + err.Error()
			p.cardsErr = err
			return nil, false
		}
		for _, s := range nodes {
			known[s.labels.Get("instance")] = true
		}
	}
	p.cards, p.cardsErr = src.instant(ctx, qCards, nil)
	if p.cardsErr != nil {
		p.Error = "GPUs: " + p.cardsErr.Error()
		return nil, false
	}
	for _, s := range p.cards {
		known[s.labels.Get("instance")] = true
	}
	for n := range known {
		p.KnownNodes = append(p.KnownNodes, n)
	}
	sort.Strings(p.KnownNodes)
	if len(known) == 0 && !p.Agent {
		p.Collecting = true
		p.CollectingIn = h.firstDataIn(o)
		return nil, false
	}
	return known, true
}

// collection carries one render's cards from the queries to the page.
type collection struct {
	p     *overviewPage
	src   engineSource
	extra []*labels.Matcher // ?node=
	byKey map[string]*gpuCard
}

// cards makes a card for each GPU of the nodes shown, in GPU order.
func (c *collection) cards() {
	byNode := map[string]*nodeView{}
	for _, n := range c.p.KnownNodes {
		if c.p.Node != "" && n != c.p.Node {
			continue
		}
		nv := &nodeView{Instance: n}
		byNode[n] = nv
		c.p.Nodes = append(c.p.Nodes, nv)
	}
	for _, s := range c.p.cards {
		nv := byNode[s.labels.Get("instance")]
		if nv == nil {
			continue
		}
		k := cardKey(s.labels)
		if g, ok := c.byKey[k]; ok {
			if g.Model == "" {
				g.Model = s.labels.Get("modelName")
			}
			continue
		}
		g := &gpuCard{Instance: s.labels.Get("instance"), GPU: s.labels.Get("gpu"), UUID: s.labels.Get("UUID"), Model: s.labels.Get("modelName")}
		c.byKey[k] = g
		nv.Cards = append(nv.Cards, g)
	}
	for _, nv := range c.p.Nodes {
		sort.Slice(nv.Cards, func(i, j int) bool { return gpuLess(nv.Cards[i], nv.Cards[j]) })
	}
}

// result is one query's answer.
type result struct {
	s   []sample
	err error
}

// answers are the card queries' results, all at the page's evaluation
// time, and the sparklines' hour.
type answers struct {
	util, memUsed, memTotal, temp, power result
	throttle, xid, class, wlMem, wlSM    result
	spark                                bool // both series below answered
	sparkUtil, sparkMem                  map[string][]point
}

// query runs the card queries side by side, and the sparklines' range
// queries when asked for.
func (c *collection) query(ctx context.Context, sparklines bool) *answers {
	a := &answers{}
	var wg sync.WaitGroup
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
	for _, q := range []struct {
		q fieldQuery
		r *result
	}{
		{qUtil, &a.util}, {qMemUsed, &a.memUsed}, {qMemTotal, &a.memTotal}, {qTemp, &a.temp}, {qPower, &a.power},
		{qThrottle, &a.throttle}, {qXID, &a.xid}, {qClass, &a.class}, {qWLMem, &a.wlMem}, {qWLSM, &a.wlSM},
	} {
		run(func() { q.r.s, q.r.err = c.src.instant(ctx, q.q, c.extra) })
	}
	var utilErr, memErr error
	if sparklines {
		run(func() { a.sparkUtil, utilErr = c.src.series(ctx, qUtil.promQL(c.extra...), c.p.spark) })
		run(func() { a.sparkMem, memErr = c.src.series(ctx, memPercent(c.extra), c.p.spark) })
	}
	wg.Wait()
	a.spark = sparklines && utilErr == nil && memErr == nil
	return a
}

// values sets the cards' numbers, or the error that stands for one.
func (c *collection) values(a *answers) {
	set := func(r result, get func(*gpuCard) *field) {
		for _, g := range c.byKey {
			if r.err != nil {
				get(g).Err = r.err.Error()
			}
		}
		for _, s := range r.s {
			if g := c.byKey[cardKey(s.labels)]; g != nil {
				*get(g) = field{Set: true, V: s.v}
			}
		}
	}
	set(a.util, func(g *gpuCard) *field { return &g.Util })
	set(a.memUsed, func(g *gpuCard) *field { return &g.MemUsed })
	set(a.memTotal, func(g *gpuCard) *field { return &g.MemTotal })
	set(a.temp, func(g *gpuCard) *field { return &g.Temp })
	set(a.power, func(g *gpuCard) *field { return &g.Power })
	set(a.xid, func(g *gpuCard) *field { return &g.XID })
}

// labelled sets the fields read from labels: the throttle reasons, the
// last XID's message and the bottleneck classes.
func (c *collection) labelled(a *answers) {
	for _, g := range c.byKey {
		if err := a.throttle.err; err != nil {
			g.ThrottleErr = err.Error()
		}
		if err := a.class.err; err != nil {
			g.ClassErr = err.Error()
		}
	}
	for _, s := range a.throttle.s {
		if g := c.byKey[cardKey(s.labels)]; g != nil {
			g.Throttle = append(g.Throttle, s.labels.Get("reason"))
		}
	}
	for _, s := range a.xid.s { // the highest code's message
		if g := c.byKey[cardKey(s.labels)]; g != nil && g.XID.V == s.v {
			g.XIDMsg = s.labels.Get("err_msg")
		}
	}
	for _, s := range a.class.s {
		if g := c.byKey[cardKey(s.labels)]; g != nil {
			cl := s.labels.Get("class")
			if gi := s.labels.Get("GPU_I_ID"); gi != "" {
				cl = "GI " + gi + " " + cl
			}
			g.Classes = append(g.Classes, cl)
		}
	}
	for _, g := range c.byKey {
		slices.Sort(g.Throttle)
		slices.Sort(g.Classes)
	}
}

// workloads lists each card's workloads, their memory and SM share
// joined by name, the largest memory first.
func (c *collection) workloads(a *answers) {
	if err := a.wlMem.err; err != nil {
		for _, g := range c.byKey {
			g.WorkloadErr = err.Error()
		}
	}
	wl := map[string]int{} // index in its card's Workloads
	for i, r := range []result{a.wlMem, a.wlSM} {
		for _, s := range r.s {
			g := c.byKey[cardKey(s.labels)]
			if g == nil {
				continue
			}
			k := cardKey(s.labels) + "\xff" + s.labels.Get("workload")
			j, ok := wl[k]
			if !ok {
				j = len(g.Workloads)
				g.Workloads = append(g.Workloads, workloadView{Name: s.labels.Get("workload")})
				wl[k] = j
			}
			if i == 0 {
				g.Workloads[j].Mem, g.Workloads[j].HasMem = s.v, true
			} else {
				g.Workloads[j].SM, g.Workloads[j].HasSM = s.v, true
			}
		}
	}
	for _, g := range c.byKey {
		sort.Slice(g.Workloads, func(i, j int) bool { return g.Workloads[i].Mem > g.Workloads[j].Mem })
	}
}

// sparklines draws each card's range of utilisation and memory, when both
// range queries answered.
func (c *collection) sparklines(a *answers) {
	if !a.spark {
		return
	}
	for _, g := range c.byKey {
		k := cardKey(labels.FromStrings("instance", g.Instance, "gpu", g.GPU, "UUID", g.UUID))
		if sp := (sparkline{Util: sparkPath(a.sparkUtil[k], c.p.spark), Mem: sparkPath(a.sparkMem[k], c.p.spark)}); sp.Util != "" || sp.Mem != "" {
			g.Spark = &sp
		}
	}
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

// sparkPath draws percentages (0 to 100) at the sparkline's steps as an
// SVG path in a (n-1)×20 box, one unit a step (a minute over the default
// hour). Steps are relative, and a run of equal steps is one line
// (exactly what the points draw), to keep the page small: 128 cards of
// two lines each.
func sparkPath(ps []point, sr sparkRange) string {
	var (
		b     strings.Builder
		start = sr.start.UnixMilli()
		step  = sr.step.Milliseconds()
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
		if (p.t-start)%step != 0 {
			continue
		}
		x := (p.t - start) / step
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
// one is asked for: firing first, then the longest active. line is the
// About table's count of the alerts firing on all nodes.
func alerts(rs []*rules.AlertingRule, node string, now time.Time) (out []alertView, line string) {
	var firing []string
	for _, r := range rs {
		for _, a := range r.ActiveAlerts() {
			if a.State == rules.StateFiring {
				f := a.Labels.Get(labels.AlertName) + " on " + a.Labels.Get("instance")
				if g := a.Labels.Get("gpu"); g != "" {
					f += " gpu " + g
				}
				firing = append(firing, f)
			}
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
	if len(firing) == 0 {
		return out, "none firing"
	}
	slices.Sort(firing)
	return out, fmt.Sprintf("%d firing: %s", len(firing), strings.Join(firing, ", "))
}

// downTargets lists the targets whose last scrape failed, with its error,
// those of node only when one is asked for. line is the About table's
// count of all targets up and down, naming those down.
func downTargets(active map[string][]*scrape.Target, node string, now time.Time) (out []targetView, line string) {
	up, down := 0, []string{}
	b := labels.NewBuilder(labels.EmptyLabels())
	for pool, ts := range active {
		for _, t := range ts {
			if t.Health() != scrape.HealthBad {
				up++
				continue
			}
			ls := t.Labels(b)
			down = append(down, fmt.Sprintf("%s %s: %v", ls.Get("job"), ls.Get("instance"), t.LastError()))
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
	slices.Sort(down)
	line = fmt.Sprintf("%d up, %d down", up, len(down))
	if len(down) > 0 {
		line += " (" + strings.Join(down, "; ") + ")"
	}
	return out, line
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
