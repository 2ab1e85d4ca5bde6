package e2e

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// startPrometheus runs the pinned Prometheus (../tools) with config on
// port, its TSDB in a test directory, and waits until /-/ready answers.
func startPrometheus(t *testing.T, bin, config string, port int) string {
	t.Helper()
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	out := &pkgtest.SyncBuffer{}
	cmd := exec.Command(bin,
		"--config.file="+config,
		"--storage.tsdb.path="+filepath.Join(t.TempDir(), "prometheus"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port),
	)
	cmd.Stdout, cmd.Stderr = out, out
	// A test binary killed by go test's -timeout runs no cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var exitErr error
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		if t.Failed() {
			logOutput(t, "prometheus", out.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("prometheus exited before ready: %v\n%s", exitErr, out.String())
		default:
		}
		resp, err := http.Get(url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		require.True(t, time.Now().Before(deadline), "prometheus not ready after 60 s\n%s", out.String())
		time.Sleep(200 * time.Millisecond)
	}
}

// withMatchers returns q with the matchers added to every vector selector.
func withMatchers(q string, ms ...*labels.Matcher) (string, error) {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", q, err)
	}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			vs.LabelMatchers = append(vs.LabelMatchers, ms...)
		}
		return nil
	})
	return expr.String(), nil
}

// TestPrometheusFederationAndAgent: the pinned Prometheus (cmd/prometheus
// of ../tools) federates a `serve --demo` appliance's own series from
// /federate and scrapes a `gpuscope agent`'s /metrics/gpu and
// /metrics/cadvisor directly, as a site's existing Prometheus would. Over
// the same range it then holds every sample of the federated series that
// gpuscope holds and a federation that succeeded could read (see
// unfederated), and the seed's queries answer the same from both: exactly
// for the federated series; for the agent, which both scrape each at its
// own moment, with the same series.
func TestPrometheusFederationAndAgent(t *testing.T) {
	pkgtest.RequireTime(t, 12*time.Minute)
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
	time.Sleep(4 * time.Minute)
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

// scrapeRecord is one scrape as its scraper stored it: when it began (the
// timestamp of its up and scrape_duration_seconds samples), in
// milliseconds, how long it took, and whether it succeeded.
type scrapeRecord struct {
	at, took int64
	ok       bool
}

// scrapesOf returns the scrapes of job that r's up and
// scrape_duration_seconds series record, in time order.
func scrapesOf(r rangeResult, job string) []scrapeRecord {
	var up, took map[int64]float64
	for k, vals := range r {
		if j, _ := labelOf(k, "job"); j != job {
			continue
		}
		switch {
		case strings.HasPrefix(k, "up{"):
			up = vals
		case strings.HasPrefix(k, "scrape_duration_seconds{"):
			took = vals
		}
	}
	out := make([]scrapeRecord, 0, len(up))
	for ts, v := range up {
		out = append(out, scrapeRecord{at: ts, took: int64(took[ts] * 1000), ok: v == 1})
	}
	slices.SortFunc(out, func(a, b scrapeRecord) int { return cmp.Compare(a.at, b.at) })
	return out
}

// missedSample is a sample of gpuscope's that Prometheus could not
// federate, and until when queries read it (its series' next sample).
type missedSample struct {
	key       string
	at, until int64
}

// commitLag is how long after its scrape ended a scraped sample may take
// to be appended and committed, and so be visible to /federate: seconds
// on a loaded machine (a run missed a sample that a federation 2 s after
// its scrape ended should have read).
const commitLag = 5 * time.Second

// unfederated returns the samples of want that got lacks and that no
// federation could have read. /federate gives each series' latest
// sample, so a sample can be federated from when the scrape that stored
// it has ended and been committed until the scrape that stores the
// series' next sample begins. A sample is owed when a federation that
// succeeded began and ended inside that span; on a loaded machine none
// may have (federations time out, gpuscope's own scrapes take seconds),
// and the sample is rightly missing. scrapes are gpuscope's own, by job;
// federations are Prometheus's.
func unfederated(want, got rangeResult, scrapes map[string][]scrapeRecord, federations []scrapeRecord) []missedSample {
	// storedBy returns the first scrape of job at or after ts: the one
	// that stored a sample of ts (cAdvisor stamps its samples with its
	// own housekeeping's time, before the scrape).
	storedBy := func(job string, ts int64) (scrapeRecord, int, bool) {
		s := scrapes[job]
		i, _ := slices.BinarySearchFunc(s, ts, func(r scrapeRecord, ts int64) int { return cmp.Compare(r.at, ts) })
		if i == len(s) {
			return scrapeRecord{}, i, false
		}
		return s[i], i, true
	}
	var missed []missedSample
	for k, samples := range want {
		job, _ := labelOf(k, "job")
		times := slices.Sorted(maps.Keys(samples))
		for i, ts := range times {
			if _, ok := got[k][ts]; ok {
				continue
			}
			scrape, n, ok := storedBy(job, ts)
			if !ok {
				continue // no record of the scrape: not excused
			}
			readable := scrape.at + scrape.took + commitLag.Milliseconds()
			// Until the scrape that stores the next sample, or, for the
			// series' last, the next scrape.
			until, next := int64(math.MaxInt64), int64(math.MaxInt64)
			if i+1 < len(times) {
				next = times[i+1]
				if s, _, ok := storedBy(job, next); ok {
					until = s.at
				}
			} else if n+1 < len(scrapes[job]) {
				until = scrapes[job][n+1].at
			}
			owed := slices.ContainsFunc(federations, func(f scrapeRecord) bool {
				return f.ok && f.at >= readable && f.at+f.took < until
			})
			if !owed {
				missed = append(missed, missedSample{key: k, at: ts, until: min(next, ts+5*time.Minute.Milliseconds())})
			}
		}
	}
	slices.SortFunc(missed, func(a, b missedSample) int { return cmp.Compare(a.at, b.at) })
	return missed
}

// without returns a copy of r without the missed samples.
func without(r rangeResult, missed []missedSample) rangeResult {
	out := make(rangeResult, len(r))
	for k, vals := range r {
		out[k] = maps.Clone(vals)
	}
	for _, m := range missed {
		delete(out[m.key], m.at)
		if len(out[m.key]) == 0 {
			delete(out, m.key)
		}
	}
	return out
}

// readsBack returns how far back from its evaluation time query q reads
// samples: its longest range selector (5m in rate(x[5m])), 0 for a
// query of instant selectors only.
func readsBack(q string) (time.Duration, error) {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", q, err)
	}
	var longest time.Duration
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if m, ok := node.(*parser.MatrixSelector); ok {
			longest = max(longest, m.Range)
		}
		return nil
	})
	return longest, nil
}

// dropSteps removes from want and got the steps whose evaluation reads a
// missed sample (an instant selector until the series' next sample, a
// range selector for its range), and returns how many it removed. The
// maps are replaced, not changed, as the caller may keep the originals.
func dropSteps(missed []missedSample, reads time.Duration, want, got *rangeResult) int {
	if len(missed) == 0 {
		return 0
	}
	reading := func(ts int64) bool {
		return slices.ContainsFunc(missed, func(m missedSample) bool {
			return ts >= m.at && ts < max(m.until, m.at+reads.Milliseconds())
		})
	}
	dropped := map[int64]bool{}
	for _, r := range []*rangeResult{want, got} {
		out := make(rangeResult, len(*r))
		for k, vals := range *r {
			kept := map[int64]float64{}
			for ts, v := range vals {
				if reading(ts) {
					dropped[ts] = true
					continue
				}
				kept[ts] = v
			}
			if len(kept) > 0 {
				out[k] = kept
			}
		}
		*r = out
	}
	return len(dropped)
}

// keys returns r's series.
func keys(r rangeResult) []string {
	out := make([]string, 0, len(r))
	for k := range r {
		out = append(out, k)
	}
	return out
}
