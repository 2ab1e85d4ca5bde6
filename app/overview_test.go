package app_test

import (
	"context"
	"fmt"
	"html"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

var (
	plainCardRe  = regexp.MustCompile(`(?s)<section class="gpu-card" data-instance="([^"]*)" data-gpu="([^"]*)" data-uuid="([^"]*)">(.*?)</section>`)
	plainFieldRe = regexp.MustCompile(`<span data-field="([a-z-]+)"(?: data-value="([^"]*)")?`)
	plainEvalRe  = regexp.MustCompile(`<body data-eval-time="([0-9.]+)">`)
	plainQueryRe = regexp.MustCompile(`<code data-query-field="([a-z-]+)">([^<]*)</code>`)
)

// plainCard is one GPU card of the page, read with plain HTTP.
type plainCard struct {
	instance, gpu, uuid string
	values              map[string]string // data-field: data-value
}

func parsePlainOverview(body string) (eval time.Time, cards []plainCard, queries map[string]string, err error) {
	m := plainEvalRe.FindStringSubmatch(body)
	if m == nil {
		return eval, nil, nil, fmt.Errorf("no <body data-eval-time>")
	}
	secs, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return eval, nil, nil, err
	}
	eval = time.UnixMilli(int64(math.Round(secs * 1000)))
	for _, c := range plainCardRe.FindAllStringSubmatch(body, -1) {
		card := plainCard{instance: html.UnescapeString(c[1]), gpu: c[2], uuid: c[3], values: map[string]string{}}
		for _, f := range plainFieldRe.FindAllStringSubmatch(c[4], -1) {
			card.values[f[1]] = html.UnescapeString(f[2])
		}
		cards = append(cards, card)
	}
	queries = map[string]string{}
	for _, q := range plainQueryRe.FindAllStringSubmatch(body, -1) {
		queries[q[1]] = html.UnescapeString(q[2])
	}
	return eval, cards, queries, nil
}

// TestOverviewPageDemo reads the overview page of `serve --demo` with
// plain HTTP: a card for each of the eight simulated GPUs whose numbers
// are what /api/v1/query returns, at the page's evaluation time, for the
// queries the page documents; the node filter; an unknown node; the
// status lines kept; and the page's size and time.
func TestOverviewPageDemo(t *testing.T) {
	t.Parallel()
	p := serve(t, "", demo)

	var (
		body  string
		cards []plainCard
		eval  time.Time
		qs    map[string]string
	)
	eventually(t, 60*time.Second, "eight GPU cards with utilisation, memory and temperature", func() error {
		var code int
		code, body = p.get("/")
		if code != 200 {
			return fmt.Errorf("GET / answered %d", code)
		}
		var err error
		if eval, cards, qs, err = parsePlainOverview(body); err != nil {
			return err
		}
		if len(cards) != 8 {
			return fmt.Errorf("%d GPU cards, want 8", len(cards))
		}
		for _, c := range cards {
			for _, f := range []string{"utilization", "memory-used", "memory-total", "temperature", "power", "last-xid", "throttle", "model"} {
				if c.values[f] == "" {
					return fmt.Errorf("GPU %s has no %s yet", c.gpu, f)
				}
			}
		}
		return nil
	})

	api := p.api()
	for _, f := range []string{"utilization", "memory-used", "memory-total", "temperature", "power"} {
		q := qs[f]
		require.NotEmpty(t, q, "the page documents the query of %s", f)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, _, _, err := api.Query(ctx, q, eval)
		cancel()
		require.NoError(t, err, q)
		vec := res.(model.Vector)
		for _, c := range cards {
			var want *model.Sample
			for _, s := range vec {
				if string(s.Metric["instance"]) == c.instance && string(s.Metric["gpu"]) == c.gpu && string(s.Metric["UUID"]) == c.uuid {
					want = s
				}
			}
			require.NotNil(t, want, "GPU %s %s: the API has no series for %s at %s", c.gpu, f, q, eval)
			got, err := strconv.ParseFloat(c.values[f], 64)
			require.NoError(t, err)
			require.InDelta(t, float64(want.Value), got, 1e-9*math.Max(1, math.Abs(got)), "GPU %s %s", c.gpu, f)
		}
	}
	require.Equal(t, "e2e-node", cards[0].instance)
	require.Contains(t, body, `<meta http-equiv="refresh" content="`)
	require.Contains(t, body, "<code>"+p.DataDir+"</code>", "the status lines stay: the data directory")
	require.Contains(t, body, `href="api/dashboards/`, "dashboard JSON downloads")
	eventually(t, 100*time.Second, "the MIG GPU's classes, per GPU instance, once the diagnosis rules ran", func() error {
		_, body := p.get("/")
		if !regexp.MustCompile(`<section class="gpu-card" data-instance="e2e-node" data-gpu="6" [^>]*>(?s:.*?)data-field="bottleneck" data-value="GI 1 `).MatchString(body) {
			return fmt.Errorf("GPU 6 not classed per GPU instance yet")
		}
		return nil
	})

	code, filtered := p.get("/?node=e2e-node")
	require.Equal(t, 200, code)
	require.Equal(t, 8, strings.Count(filtered, `<section class="gpu-card"`))
	code, unknown := p.get("/?node=no-such-node")
	require.Equal(t, 404, code)
	require.Contains(t, unknown, `No node named “no-such-node”`)
	require.Contains(t, unknown, `<a href="?node=e2e-node">e2e-node</a>`)
	require.NotContains(t, unknown, `class="gpu-card"`)

	// The figures for BENCHMARKS.md are bench/'s; this logs the demo's.
	start := time.Now()
	_, body = p.get("/")
	t.Logf("overview of 8 GPUs: %d bytes in %s", len(body), time.Since(start))
	require.Less(t, len(body), 200<<10)
}

// TestOverviewPageAgent: `gpuscope agent` has no TSDB; its page shows its
// own GPUs from the collector's current values.
func TestOverviewPageAgent(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, t.TempDir(), "cadvisor: {enabled: false}\n")
	a := startAgent(t, "ws-agent", cfg)
	var cards []plainCard
	eventually(t, 30*time.Second, "the agent's page shows its GPUs", func() error {
		code, body := a.get("/")
		if code != 200 {
			return fmt.Errorf("GET / answered %d", code)
		}
		var err error
		if _, cards, _, err = parsePlainOverview(body); err != nil {
			return err
		}
		if len(cards) == 0 {
			return fmt.Errorf("no GPU card")
		}
		if strings.Contains(body, `class="sparkline"`) || strings.Contains(body, "api/v1/targets") {
			return fmt.Errorf("the agent's page has sparklines or API links")
		}
		return nil
	})
	_, metrics := a.get("/metrics/gpu")
	for _, c := range cards {
		require.Equal(t, "ws-agent", c.instance)
		require.Contains(t, metrics, `UUID="`+c.uuid+`"`)
		_, err := strconv.ParseFloat(c.values["temperature"], 64)
		require.NoError(t, err, "GPU %s temperature %q", c.gpu, c.values["temperature"])
	}
	code, _ := a.get("/?node=elsewhere")
	require.Equal(t, 404, code)
}

// TestOverviewPageTargetDown: a node of nodes: that nothing answers is
// on the page, in the targets down with the scrape error, and can be
// filtered to.
func TestOverviewPageTargetDown(t *testing.T) {
	t.Parallel()
	gone := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cfg := writeConfig(t, t.TempDir(), "global:\n  scrape_interval: 1s\nnodes:\n  static:\n    - {address: \""+gone+"\", name: gone-node}\n")
	p := serve(t, "", configFile(cfg))
	eventually(t, 30*time.Second, "the node that does not answer is among the targets down", func() error {
		_, body := p.get("/")
		m := regexp.MustCompile(`(?s)<section id="targets-down">.*?</section>`).FindString(body)
		if !strings.Contains(m, `data-instance="gone-node"`) || !strings.Contains(m, "connection refused") {
			return fmt.Errorf("targets down: %q", m)
		}
		return nil
	})
	code, body := p.get("/?node=gone-node")
	require.Equal(t, 200, code)
	require.Contains(t, body, `<section class="node" data-instance="gone-node">`)
	require.Contains(t, body, "No GPU series from this node.")
	require.Contains(t, body, `<meta http-equiv="refresh" content="1">`, "the page refreshes every scrape interval")
}
