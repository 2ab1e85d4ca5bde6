package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
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
	out := &syncBuffer{}
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
// the same range it then holds every federated sample gpuscope holds, and
// the seed's queries answer the same from both: exactly for the
// federated series; for the agent, which both scrape each at its own
// moment, with the same series.
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
	var got rangeResult
	eventually(t, 30*time.Second, "Prometheus has every federated sample", func() error {
		got, err = allSamples(ctx, promURL, own, end, window, external)
		if err != nil {
			return err
		}
		dropNaN(got)
		if diff, _ := diffRanges(want, got, 0, nil, nil); diff != "" {
			return fmt.Errorf("%s", diff)
		}
		return nil
	})
	t.Logf("federated: %d series, %d samples (%d NaN) identical in Prometheus and gpuscope", len(want), want.samples(), nans)

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
		// A series that ends (a GPU falling off the bus, a container
		// leaving) is stale in gpuscope at its next scrape, and in
		// Prometheus at its next federation, up to 5 s later: a step in
		// between has a point in Prometheus only. Allowed where gpuscope
		// has the series at the step before and not at this one.
		afterEnd := func(key string, ts int64, _ float64) bool {
			_, before := want[key][ts-step.Milliseconds()]
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

// keys returns r's series.
func keys(r rangeResult) []string {
	out := make([]string, 0, len(r))
	for k := range r {
		out = append(out, k)
	}
	return out
}
