//go:build e2e && soak

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// TestSoakPrometheusFederationAndAgent: the pinned Prometheus (cmd/prometheus
// of ../tools) federates a `serve --demo` appliance's own series from
// /federate and scrapes a `gpuscope agent`'s /metrics/gpu and
// /metrics/cadvisor directly, as a site's existing Prometheus would. Over
// the same range it then holds every sample of the federated series that
// gpuscope holds and a federation that succeeded could read (see
// unfederated), and the seed's queries answer the same from both: exactly
// for the federated series; for the agent, which both scrape each at its
// own moment, with the same series.
func TestSoakPrometheusFederationAndAgent(t *testing.T) {
	pkgtest.RequireTime(t, 6*time.Minute)
	t.Parallel()
	tl := neighbourTools(t)

	agent := startAgent(t, "node-a", writeConfig(t, t.TempDir(), "gpu:\n  sim:\n    count: 2\n"))

	// Federation every 5 s, a third of gpuscope's 15 s: /federate returns
	// each series' latest sample with its timestamp, so every sample
	// gpuscope stores is seen at least once (honor_labels keeps gpuscope's
	// job and instance). track_timestamps_staleness marks a federated
	// series stale when /federate stops listing it (gpuscope's staleness
	// markers do not travel through /federate); without it Prometheus
	// would show a finished series for five more minutes.
	//
	// Federated are the scraped series of the appliance's own jobs, not
	// its rules' outputs (names with a colon, ALERTS): the demo evaluates
	// its rules every couple of seconds (time_scale 30), and /federate
	// gives only the latest sample per scrape, so no federation interval
	// gets every rule sample. Remote write is for everything (docs/remote-write.md,
	// "Federation").
	const promCfg = `
global:
  scrape_interval: 15s
scrape_configs:
  - job_name: gpuscope-federate
    scrape_interval: 5s
    honor_labels: true
    track_timestamps_staleness: true
    metrics_path: /federate
    params:
      match[]: ['%[3]s']
    static_configs: [{targets: ['%[1]s']}]
  - job_name: node-gpu
    metrics_path: /metrics/gpu
    static_configs: [{targets: ['%[2]s'], labels: {instance: node-a}}]
  - job_name: node-cadvisor
    metrics_path: /metrics/cadvisor
    static_configs: [{targets: ['%[2]s'], labels: {instance: node-a}}]
`
	own := `{job=~"gpu|cadvisor",__name__!~".*:.*|ALERTS.*"}`
	external := model.LabelSet{"appliance": "e2e-demo"}
	cfg := writeConfig(t, t.TempDir(), fmt.Sprintf(`
global:
  external_labels: {appliance: e2e-demo}
nodes:
  static: [{address: '%s', name: node-a}]
`, agent.addr()))
	// Prometheus starts first, on gpuscope's port-to-be, so that its first
	// federation finds gpuscope's first samples.
	var promURL string
	gs := serveWith(t, "", func(all []string) *process {
		listen := strings.TrimPrefix(all[1], "--web.listen-address=")
		require.NotEqual(t, all[1], listen, "serve's first flag is its listen address")
		promURL = startPrometheus(t, tl.Prometheus, writeConfig(t, t.TempDir(), fmt.Sprintf(promCfg, listen, agent.addr(), own)), freePort(t))
		return start(t, all...)
	}, []string{"--demo", "--config.file=" + cfg})
	started := time.Now()

	const step = 30 * time.Second
	// Ninety seconds: six of the demo's 15 s scrapes federated every 5 s,
	// enough for every seed query's range to hold samples of both.
	time.Sleep(90 * time.Second)
	// Twenty seconds back: the last federation (5 s) has fetched what
	// gpuscope stored by then.
	end := time.Now().Add(-20 * time.Second).Truncate(step)
	from := started.Truncate(step)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Every sample of the federated series, from before gpuscope started
	// to the end.
	window := end.Sub(started.Add(-time.Minute))
	want, err := allSamples(ctx, gs.URL, own, end, window, nil)
	require.NoError(t, err)
	require.Greater(t, len(want), 1000, "the demo's GPU and cAdvisor series")
	nans := dropNaN(want)
	scrapes := map[string][]scrapeRecord{}
	for _, job := range []string{"gpu", "cadvisor"} {
		scrapes[job] = scrapesOf(want, job)
		require.NotEmpty(t, scrapes[job], "gpuscope's record of its %s scrapes", job)
	}
	var (
		got         rangeResult
		missed      []missedSample
		federations []scrapeRecord
	)
	eventually(t, 30*time.Second, "Prometheus has every federated sample", func() error {
		got, err = allSamples(ctx, promURL, own, end, window, external)
		if err != nil {
			return err
		}
		dropNaN(got)
		record, err := allSamples(ctx, promURL, `{job="gpuscope-federate",__name__=~"up|scrape_duration_seconds"}`, end, window, nil)
		if err != nil {
			return err
		}
		federations = scrapesOf(record, "gpuscope-federate")
		missed = unfederated(want, got, scrapes, federations)
		if diff, _ := diffRanges(without(want, missed), got, 0, nil, nil); diff != "" {
			return fmt.Errorf("%s", diff)
		}
		return nil
	})
	t.Logf("federated: %d series, %d samples (%d NaN) identical in Prometheus and gpuscope", len(want), want.samples()-len(missed), nans)
	if len(missed) > 0 {
		failed := 0
		for _, f := range federations {
			if !f.ok {
				failed++
			}
		}
		t.Logf("left out: %d samples no federation could read (%d of %d federations failed; none that succeeded began after the sample was stored and ended before the next scrape), the first at %s",
			len(missed), failed, len(federations), model.Time(missed[0].at).Time().UTC().Format("15:04:05.000"))
	}

	// The seed's queries over the appliance's own series, at the same
	// steps: the same answers (the same engine over the same samples).
	ownOnly, err := labels.NewMatcher(labels.MatchRegexp, "job", "gpu|cadvisor")
	require.NoError(t, err)
	agentOnly, err := labels.NewMatcher(labels.MatchEqual, "instance", "node-a")
	require.NoError(t, err)
	// Of the agent's cAdvisor series only the root cgroup's: the two
	// scrape the agent at different moments, and a container of another
	// test that lives for seconds may be in one scrape and not the other.
	rootCgroup, err := labels.NewMatcher(labels.MatchRegexp, "id", "|/")
	require.NoError(t, err)
	// Federation copies samples with their timestamps, so a series
	// begins alike in both; the cgroups gpuscope saw in its first
	// scrapes are those that lived through the window.
	stable, err := stableCgroups(ctx, gs.URL, started.Add(15*time.Second), end)
	require.NoError(t, err)
	for _, sq := range seedQueries {
		q, err := withMatchers(sq.promql, ownOnly)
		require.NoError(t, err)
		want, err := queryRange(ctx, gs.URL, q, from, end, step, nil, false)
		require.NoError(t, err, q)
		got, err := queryRange(ctx, promURL, q, from, end, step, external, false)
		require.NoError(t, err, q)
		if sq.mayBeEmpty == "" {
			require.NotEmpty(t, want, "%s: gpuscope answers %s", sq.name, q)
		}
		if n := keepCgroups(want, stable) + keepCgroups(got, stable); n > 0 {
			t.Logf("%s: left out %d series of cgroups other tests made or removed in the window", sq.name, n)
		}
		reads, err := readsBack(q)
		require.NoError(t, err)
		whole := want
		if n := dropSteps(missed, reads, &want, &got); n > 0 {
			t.Logf("%s: left out %d steps that read a sample Prometheus could not federate", sq.name, n)
		}
		// A series that ends (a GPU falling off the bus, a container
		// leaving) is stale in gpuscope at its next scrape, and in
		// Prometheus at its next federation, up to 5 s later: a step in
		// between has a point in Prometheus only. Allowed where gpuscope
		// has the series at the step before and not at this one.
		afterEnd := func(key string, ts int64, _ float64) bool {
			_, before := whole[key][ts-step.Milliseconds()]
			return before
		}
		diff, maxRel := diffRanges(want, got, 1e-12, nil, afterEnd)
		require.Empty(t, diff, "%s: %s", sq.name, q)
		t.Logf("%s: %d series, %d points equal (largest relative difference %.2g)", sq.name, len(want), want.samples(), maxRel)

		// The agent, scraped by both: the same series. Values are read
		// by each at its own moment (the GPU collector's samples carry no
		// timestamp), so only the series are compared.
		q, err = withMatchers(sq.promql, agentOnly, rootCgroup)
		require.NoError(t, err)
		want, err = queryRange(ctx, gs.URL, q, from, end, step, nil, false)
		require.NoError(t, err, q)
		got, err = queryRange(ctx, promURL, q, from, end, step, nil, false)
		require.NoError(t, err, q)
		require.ElementsMatch(t, keys(want), keys(got), "%s: the agent's series from gpuscope and from Prometheus", q)
		t.Logf("%s over the agent: %d series in both", sq.name, len(want))
	}
}
