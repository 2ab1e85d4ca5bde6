// Command dashload loads a running appliance's built-in Grafana dashboards
// as Grafana would, at intervals, and prints how long each load took.
//
//	go run ./bench/dashload -url http://127.0.0.1:9090 -range 24h -every 1m -for 10m
//
// A load is what a user opening the dashboard waits for: the dashboard's
// query variables resolved in order (label_values as
// /api/v1/label/<name>/values with match[] over the range, every variable
// on All), then every target of every panel (hidden ones skipped) sent to
// /api/v1/query_range over the range, or /api/v1/query at its end for
// instant targets, six requests in flight as a browser allows. Panels of a
// collapsed row are not loaded, as Grafana queries them only once the row
// is opened; -open-rows loads them too, as if the user opened every row. The step is
// Grafana's: the range over the panel's maxDataPoints (1000 unless set)
// rounded to a nice interval, never below the panel's min interval, the
// query's min step or the data source's scrape interval; start and end are
// aligned to it.
// Variables and macros are expanded by package dashboards, which follows
// Grafana's Prometheus data source. The dashboards are fetched from the
// appliance's /api/dashboards once.
//
// Each load prints one line; at the end one summary line per dashboard
// gives the number of queries, loads, and the median and maximum load.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gpuscope/gpuscope/dashboards"
)

// Options says what to load and how often.
type Options struct {
	URL string
	// Range is the dashboards' time range, ending now or at End.
	Range time.Duration
	// End, when set, ends the range there instead of now: data that
	// ends in the past (a generated day) is loaded as if it were now.
	End time.Time
	// Every is the time between the starts of two rounds of loads.
	Every time.Duration
	// For is how long to keep loading; 0 loads once.
	For time.Duration
	// Rounds, when above 0, is the number of rounds instead, one straight
	// after the other.
	Rounds int
	// ScrapeInterval is the data source's scrape interval (timeInterval).
	ScrapeInterval time.Duration
	// MaxDataPoints is a panel's default width in points.
	MaxDataPoints int
	// Concurrency is the number of requests in flight, as a browser allows.
	Concurrency int
	// Timeout bounds one load.
	Timeout time.Duration
	// OpenRows loads the panels of collapsed rows too.
	OpenRows bool
	// Decode decodes each answer as a Go client (client_golang) does; off,
	// answers are read but not decoded, which times the appliance's part
	// of a load apart from the client's (Grafana's) JSON decoding.
	Decode bool
}

func main() {
	var o Options
	fs := flag.NewFlagSet("dashload", flag.ContinueOnError)
	fs.StringVar(&o.URL, "url", "http://127.0.0.1:9090", "the appliance's base URL")
	fs.DurationVar(&o.Range, "range", 24*time.Hour, "dashboard time range, ending now")
	fs.Func("end", "end the range at this RFC 3339 time instead of now", func(s string) error {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return fmt.Errorf("want an RFC 3339 time such as 2026-12-02T05:00:00Z, got %q", s)
		}
		o.End = t
		return nil
	})
	fs.DurationVar(&o.Every, "every", time.Minute, "time between rounds of loads")
	fs.DurationVar(&o.For, "for", 0, "how long to keep loading (0: one round)")
	fs.IntVar(&o.Rounds, "rounds", 0, "load this many rounds one after the other instead (-every and -for unused)")
	fs.DurationVar(&o.ScrapeInterval, "scrape-interval", 15*time.Second, "the data source's scrape interval")
	fs.IntVar(&o.MaxDataPoints, "max-data-points", 1000, "a panel's default maxDataPoints")
	fs.IntVar(&o.Concurrency, "concurrency", 6, "requests in flight")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "limit for one dashboard load")
	fs.BoolVar(&o.OpenRows, "open-rows", false, "load the panels of collapsed rows too, as if every row were opened")
	fs.BoolVar(&o.Decode, "decode", true, "decode each answer as a Go client does (false: read it only, timing the appliance's part)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if err := o.validate(); err != nil || fs.NArg() > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected arguments %q", fs.Args())
		}
		fmt.Fprintln(os.Stderr, "dashload:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dashload:", err)
		os.Exit(1)
	}
}

func (o Options) validate() error {
	switch {
	case !strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://"):
		return fmt.Errorf("-url: want http(s)://host:port, got %q", o.URL)
	case o.Range <= 0:
		return fmt.Errorf("-range: must be above 0, got %s", o.Range)
	case o.Every <= 0:
		return fmt.Errorf("-every: must be above 0, got %s", o.Every)
	case o.For < 0:
		return fmt.Errorf("-for: must be at least 0, got %s", o.For)
	case o.Rounds < 0:
		return fmt.Errorf("-rounds: must be at least 0, got %d", o.Rounds)
	case o.ScrapeInterval <= 0:
		return fmt.Errorf("-scrape-interval: must be above 0, got %s", o.ScrapeInterval)
	case o.MaxDataPoints <= 0:
		return fmt.Errorf("-max-data-points: must be above 0, got %d", o.MaxDataPoints)
	case o.Concurrency <= 0:
		return fmt.Errorf("-concurrency: must be above 0, got %d", o.Concurrency)
	case o.Timeout <= 0:
		return fmt.Errorf("-timeout: must be above 0, got %s", o.Timeout)
	}
	return nil
}

// board is the part of a dashboard's JSON a load reads.
type board struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []dashboards.Variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title         string  `json:"title"`
	Collapsed     bool    `json:"collapsed"`
	Interval      string  `json:"interval"`
	MaxDataPoints int     `json:"maxDataPoints"`
	Panels        []panel `json:"panels"` // a collapsed row's panels
	Targets       []struct {
		Expr     string `json:"expr"`
		Instant  bool   `json:"instant"`
		Hide     bool   `json:"hide"`
		Interval string `json:"interval"` // the query's min step
	} `json:"targets"`
}

// target is one query of one panel, with what Grafana derives its step from.
type target struct {
	panel, expr   string
	instant       bool
	minInterval   time.Duration // the panel's min interval
	minStep       time.Duration // the query's min step
	maxDataPoints int
}

func (b board) targets(o Options) ([]target, error) {
	var out []target
	var walk func([]panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			if p.Collapsed && !o.OpenRows {
				continue
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
			piv, err := parseInterval(p.Interval)
			if err != nil {
				return fmt.Errorf("panel %q: %w", p.Title, err)
			}
			mdp := p.MaxDataPoints
			if mdp <= 0 {
				mdp = o.MaxDataPoints
			}
			for _, t := range p.Targets {
				if t.Hide || t.Expr == "" {
					continue
				}
				tiv, err := parseInterval(t.Interval)
				if err != nil {
					return fmt.Errorf("panel %q: %w", p.Title, err)
				}
				out = append(out, target{panel: p.Title, expr: t.Expr, instant: t.Instant, minInterval: piv, minStep: tiv, maxDataPoints: mdp})
			}
		}
		return nil
	}
	return out, walk(b.Panels)
}

func parseInterval(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := model.ParseDuration(strings.TrimPrefix(s, ">"))
	if err != nil {
		return 0, fmt.Errorf("interval %q: %w", s, err)
	}
	return time.Duration(d), nil
}

// request is a target as Grafana sends it over range r: its expression
// with variables and macros expanded, and its step and aligned range.
func (t target) request(vars map[string]dashboards.Selection, r dashboards.TimeRange) (string, promv1.Range) {
	pr := r
	pr.MaxDataPoints = t.maxDataPoints
	pr.ScrapeInterval = max(r.ScrapeInterval, t.minInterval, t.minStep)
	step := pr.Interval()
	// $__rate_interval is max($__interval + scrape interval, 4 × scrape
	// interval), the scrape interval being the query's min step if set,
	// else the data source's: not the panel's min interval.
	scrape := r.ScrapeInterval
	if t.minStep > 0 {
		scrape = t.minStep
	}
	expr := t.expr
	for _, m := range []string{"${__rate_interval}", "$__rate_interval"} {
		expr = strings.ReplaceAll(expr, m, model.Duration(max(step+scrape, 4*scrape)).String())
	}
	expr = dashboards.Interpolate(expr, vars, pr)
	s := step.Milliseconds()
	align := func(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli() / s * s) }
	return expr, promv1.Range{Start: align(r.From), End: align(r.To), Step: step}
}

func run(ctx context.Context, o Options, w io.Writer) error {
	client, err := api.NewClient(api.Config{Address: o.URL})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	prom := promv1.NewAPI(client)
	boards, err := fetchBoards(ctx, o.URL)
	if err != nil {
		return err
	}
	times := map[string][]time.Duration{}
	queries := map[string]int{}
	end := time.Now().Add(o.For)
	for round := 1; ; round++ {
		start := time.Now()
		for _, b := range boards {
			n, vars, total, err := load(ctx, client, prom, b, o)
			if err != nil {
				return fmt.Errorf("round %d: %s: %w", round, b.UID, err)
			}
			queries[b.UID] = n
			times[b.UID] = append(times[b.UID], total)
			fmt.Fprintf(w, "load round=%d at=%s dashboard=%s queries=%d variables_ms=%d total_ms=%d\n",
				round, start.UTC().Format(time.TimeOnly), b.UID, n, vars.Milliseconds(), total.Milliseconds())
		}
		if o.Rounds > 0 {
			if round == o.Rounds {
				break
			}
			continue
		}
		next := start.Add(o.Every)
		if next.After(end) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(next)):
		}
	}
	for _, b := range boards {
		ts := times[b.UID]
		slices.Sort(ts)
		med := ts[len(ts)/2]
		if len(ts)%2 == 0 {
			med = (ts[len(ts)/2-1] + ts[len(ts)/2]) / 2
		}
		fmt.Fprintf(w, "dashboard=%s queries=%d loads=%d median_ms=%d max_ms=%d\n",
			b.UID, queries[b.UID], len(ts), med.Milliseconds(), ts[len(ts)-1].Milliseconds())
	}
	return nil
}

func fetchBoards(ctx context.Context, base string) ([]board, error) {
	var list []dashboards.Summary
	if err := getJSON(ctx, base+"/api/dashboards", &list); err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, errors.New("the appliance serves no dashboards")
	}
	var out []board
	for _, s := range list {
		var b board
		if err := getJSON(ctx, base+"/api/dashboards/"+s.UID, &b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", url, err)
	}
	return nil
}

// load opens one dashboard: variables, then every panel's queries. It
// returns the number of queries, the time to resolve the variables and
// the whole load's time.
func load(ctx context.Context, client api.Client, prom promv1.API, b board, o Options) (int, time.Duration, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	now := time.Now()
	to := now
	if !o.End.IsZero() {
		to = o.End
	}
	r := dashboards.TimeRange{From: to.Add(-o.Range), To: to, MaxDataPoints: o.MaxDataPoints, ScrapeInterval: o.ScrapeInterval}
	targets, err := b.targets(o)
	if err != nil {
		return 0, 0, 0, err
	}
	vars := map[string]dashboards.Selection{}
	for _, v := range b.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		selector, label, err := dashboards.LabelValuesQuery(q)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		var matches []string
		if selector != "" {
			matches = []string{dashboards.Interpolate(selector, vars, r)}
		}
		vals, _, _, err := prom.LabelValues(ctx, label, matches, r.From, r.To)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		sel := dashboards.Selection{Variable: v, All: true}
		for _, x := range vals {
			sel.Values = append(sel.Values, string(x))
		}
		vars[v.Name] = sel
	}
	varTime := time.Since(now)

	sem := make(chan struct{}, o.Concurrency)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, t := range targets {
		expr, rng := t.request(vars, r)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var err error
			switch {
			case !o.Decode:
				err = answer(ctx, client, t.instant, expr, rng, r.To)
			case t.instant:
				_, _, _, err = prom.Query(ctx, expr, r.To)
			default:
				_, _, _, err = prom.QueryRange(ctx, expr, rng)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("panel %q: %w\n%s", t.panel, err, expr))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return len(targets), varTime, time.Since(now), errors.Join(errs...)
}

// answer sends one query as promv1 would (a form POST) and reads the whole
// answer without decoding it, only checking that it succeeded.
func answer(ctx context.Context, client api.Client, instant bool, expr string, rng promv1.Range, at time.Time) error {
	seconds := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', -1, 64) }
	path, form := "/api/v1/query", url.Values{"query": {expr}, "time": {seconds(at)}}
	if !instant {
		path = "/api/v1/query_range"
		form = url.Values{"query": {expr}, "start": {seconds(rng.Start)}, "end": {seconds(rng.End)},
			"step": {strconv.FormatFloat(rng.Step.Seconds(), 'f', -1, 64)}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, client.URL(path, nil).String(), strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, body, err := client.Do(ctx, req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(body, []byte(`{"status":"success"`)) {
		return fmt.Errorf("%s: %.300s", resp.Status, body)
	}
	return nil
}
