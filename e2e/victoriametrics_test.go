package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// victoriaMetrics is a running single-node VictoriaMetrics (Debian's
// package victoria-metrics, which .ci/run installs).
type victoriaMetrics struct {
	t       *testing.T
	URL     string
	args    []string
	cmd     *exec.Cmd
	out     *pkgtest.SyncBuffer
	exited  chan struct{}
	exitErr error
}

// vmStorageRelTol is how far a value read back from VictoriaMetrics may be
// from the float gpuscope stored. VictoriaMetrics keeps a sample as a
// decimal (an int64 mantissa and a power of ten, lib/decimal) of 12 to 13
// significant digits: cAdvisor's 33260.036330465 comes back as
// 33260.03633046, a rule's 0.8686868686868687 as 0.868686868686
// (measured: up to 1.0e-12 relative). The values of one stored block
// share the power of ten, so the digits count from the block's largest
// value: a recorded derivative's -1.4902551611848084e-09 came back as
// -1.4902551e-09 beside larger values of its series. The raw comparison
// is therefore relative to the series' largest magnitude over the run.
// Integral values (GPU gauges, counts) come back exactly.
const vmStorageRelTol = 1e-11

// vmCounterRelTol is vmStorageRelTol for a rate: it subtracts two counter
// samples of about 3e4 (cAdvisor's CPU seconds) that differ by about 1
// over 15 to 30 s, so of the 13 digits kept about 8 are left (measured:
// 3.2e-9 relative). The queries that compute a rate use it.
const vmCounterRelTol = 1e-6

// vmCounterRateScale is, per series of a rate of counter, the magnitude
// that vmCounterRelTol is taken of when the rate itself is smaller: the
// counter's stored digits are off by up to vmStorageRelTol of its largest
// value M, the rate divides the difference of two of them by at least one
// scrape interval, so it can be off by 2·vmStorageRelTol·M/scrape even
// where it is 0. (An idle cgroup's rate came back as 5.7e-16 for 0:
// increase_prometheus subtracted a value from itself as stored in two
// blocks of different decimal exponents.) run holds the raw samples.
func vmCounterRateScale(run rangeResult, counter string, scrape time.Duration) map[string]float64 {
	out := map[string]float64{}
	for k, m := range run.magnitudes() {
		if withoutName, ok := strings.CutPrefix(k, counter+"{"); ok {
			out["{"+withoutName] = 2 * vmStorageRelTol * m / scrape.Seconds() / vmCounterRelTol
		}
	}
	return out
}

// vmArgs are VictoriaMetrics's flags for the test.
//
// -dedup.minScrapeInterval=1ms keeps one sample per series and
// millisecond. cAdvisor stamps its samples with the time of its own
// housekeeping, so a scrape often repeats the previous scrape's sample,
// timestamp and all. Prometheus's TSDB ignores such a duplicate, but its
// write-ahead log records it and remote write (which tails the log) sends
// it; without deduplication VictoriaMetrics stores both copies (measured:
// count_over_time 5 where gpuscope has 3) and every count and average
// rate over cAdvisor series differs. VictoriaMetrics documents this
// setting for exactly that case.
//
// -search.minStalenessInterval=5m: cAdvisor's dynamic housekeeping spaces
// an unchanging container's samples up to 60 s apart, and VictoriaMetrics
// otherwise looks back only about the median spacing of a series' samples,
// where PromQL looks back 5 minutes: a query_range step fell in such a gap
// (container_memory_working_set_bytes of /docker, created while the test
// ran) and VictoriaMetrics had no point where gpuscope had one.
//
// -search.disableCache: the response cache keeps answers for ranges older
// than -search.cacheTimestampOffset (5m), and would hide samples that
// arrive later, which is what happens after the outage.
func vmArgs(dataDir string, port int) []string {
	return []string{
		"-storageDataPath=" + dataDir,
		"-httpListenAddr=127.0.0.1:" + strconv.Itoa(port),
		"-dedup.minScrapeInterval=1ms",
		"-search.minStalenessInterval=5m",
		"-search.disableCache",
		"-loggerLevel=WARN",
	}
}

// startVictoriaMetrics starts VictoriaMetrics with args and waits until
// /health answers.
func startVictoriaMetrics(t *testing.T, url string, args []string) *victoriaMetrics {
	t.Helper()
	v := &victoriaMetrics{t: t, URL: url, args: args, out: &pkgtest.SyncBuffer{}, exited: make(chan struct{})}
	v.cmd = exec.Command("victoria-metrics", args...)
	v.cmd.Stdout, v.cmd.Stderr = v.out, v.out
	// A test binary killed by go test's -timeout runs no cleanup.
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, v.cmd.Start())
	go func() {
		v.exitErr = v.cmd.Wait()
		close(v.exited)
	}()
	t.Cleanup(func() {
		v.stop()
		if t.Failed() {
			logOutput(t, fmt.Sprintf("victoria-metrics %v", args), v.out.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-v.exited:
			t.Fatalf("victoria-metrics exited before ready: %v\n%s", v.exitErr, v.out.String())
		default:
		}
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return v
			}
		}
		require.True(t, time.Now().Before(deadline), "victoria-metrics not healthy after 60 s\n%s", v.out.String())
		time.Sleep(200 * time.Millisecond)
	}
}

// stop stops VictoriaMetrics as systemd would (SIGTERM: it flushes its
// in-memory parts to disk) and waits for it.
func (v *victoriaMetrics) stop() {
	select {
	case <-v.exited:
		return
	default:
	}
	_ = v.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-v.exited:
	case <-time.After(30 * time.Second):
		_ = v.cmd.Process.Kill()
		<-v.exited
		v.t.Errorf("victoria-metrics did not stop within 30 s of SIGTERM")
	}
}

// selfMetrics reads url's /metrics (text format) and sums, per name, the
// samples of each named metric whose labels include match.
func selfMetrics(url string, match map[string]string, names ...string) (map[string]float64, error) {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
lines:
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		if !want[name] {
			continue
		}
		for k, v := range match {
			if !strings.Contains(line, k+"="+strconv.Quote(v)) {
				continue lines
			}
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("%s/metrics: %q: %w", url, line, err)
		}
		out[name] += f
	}
	return out, nil
}

// TestVictoriaMetricsRemoteWrite: VictoriaMetrics single-node as the
// remote-write target of `serve --demo` (docs/remote-write.md, "Scale out"). Over ten
// minutes, two of them with VictoriaMetrics stopped, it ends up with
// every series and every sample gpuscope has for the same range, values
// equal (to VictoriaMetrics's decimal storage), and the seed's queries
// answer the same from both.
func TestVictoriaMetricsRemoteWrite(t *testing.T) {
	pkgtest.Require(t, false, "victoria-metrics")
	pkgtest.RequireTime(t, 14*time.Minute)
	t.Parallel()

	vmPort := freePort(t)
	vmURL := "http://127.0.0.1:" + strconv.Itoa(vmPort)
	args := vmArgs(t.TempDir(), vmPort)
	vm := startVictoriaMetrics(t, vmURL, args)

	// The external label marks the appliance, as a multi-appliance setup
	// needs; the queue settings only make the test's backoff short.
	external := model.LabelSet{"appliance": "e2e-demo"}
	cfg := writeConfig(t, t.TempDir(), fmt.Sprintf(`
global:
  external_labels: {appliance: e2e-demo}
remote_write:
  - name: victoriametrics
    url: %s/api/v1/write
    queue_config: {max_backoff: 5s}
`, vmURL))
	gs := serve(t, "", "--demo", "--config.file="+cfg)
	started := time.Now()

	// scrape_interval is the default 15s: the demo's, and the seed's.
	const scrape = 15 * time.Second
	eventually(t, 90*time.Second, "the demo's GPU series in VictoriaMetrics", func() error {
		res, err := queryRange(context.Background(), vmURL, `up{job="gpu"}`, time.Now().Add(-time.Minute), time.Now(), scrape, nil, false)
		if err == nil && len(res) != 1 {
			err = fmt.Errorf("up{job=gpu}: %v", res)
		}
		return err
	})

	// The window starts on a step, so that query_range's steps are the same
	// in both (VictoriaMetrics aligns a range's start to its step).
	const step = 30 * time.Second
	windowStart := time.Now().Truncate(step).Add(step)
	stopAt := windowStart.Add(3 * time.Minute)
	outage := 2 * time.Minute
	windowEnd := windowStart.Add(8 * time.Minute)

	time.Sleep(time.Until(stopAt))
	before, err := selfMetrics(vmURL, nil, "vm_rows_inserted_total", "vm_deduplicated_samples_total")
	require.NoError(t, err)
	vm.stop()
	stoppedAt := time.Now()
	time.Sleep(outage - 10*time.Second)
	// gpuscope kept running and its queue is behind by the outage.
	v, err := gs.instant(`time() - prometheus_remote_storage_queue_highest_sent_timestamp_seconds{remote_name="victoriametrics"} > 90`)
	require.NoError(t, err)
	require.Len(t, v, 1, "the queue is behind while VictoriaMetrics is down")
	time.Sleep(time.Until(stoppedAt.Add(outage)))
	restartedAt := time.Now()
	vm = startVictoriaMetrics(t, vmURL, args)
	// How long the queue takes to send the outage's backlog: the last
	// sample it sent is less than two scrape intervals old again.
	eventually(t, 3*time.Minute, "the queue caught up after the outage", func() error {
		v, err := gs.instant(`time() - prometheus_remote_storage_queue_highest_sent_timestamp_seconds{remote_name="victoriametrics"} < 30`)
		if err == nil && len(v) != 1 {
			err = fmt.Errorf("still behind")
		}
		return err
	})
	t.Logf("the queue sent the backlog of a %s outage in %s", restartedAt.Sub(stoppedAt).Round(time.Second), time.Since(restartedAt).Round(time.Second))

	// VictoriaMetrics leaves out the last -search.latencyOffset (30s) of
	// data; by then the queue has sent everything up to windowEnd.
	time.Sleep(time.Until(windowEnd.Add(45 * time.Second)))
	eventually(t, 2*time.Minute, "the queue past the window's end", func() error {
		v, err := gs.instant(`prometheus_remote_storage_queue_highest_sent_timestamp_seconds{remote_name="victoriametrics"}`)
		if err == nil && (len(v) != 1 || float64(v[0].Value) <= float64(windowEnd.Unix())) {
			err = fmt.Errorf("highest sent: %v", v)
		}
		return err
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Every series with every sample, for the whole window and for the
	// outage alone: the samples scraped while VictoriaMetrics was down were
	// sent once it was back.
	windows := []struct {
		name     string
		from, to time.Time
	}{
		{"the window", windowStart, windowEnd},
		{"the outage", stoppedAt, restartedAt},
	}
	run, err := allSamples(ctx, gs.URL, `{__name__=~".+"}`, windowEnd, time.Since(started), nil)
	require.NoError(t, err)
	scale := run.magnitudes()
	for _, w := range windows {
		want, err := allSamples(ctx, gs.URL, `{__name__=~".+"}`, w.to, w.to.Sub(w.from), nil)
		require.NoError(t, err)
		nans := dropNaN(want)
		// The demo's node: 8 GPUs' DCGM series, cAdvisor's, gpuscope's own
		// and the rules'.
		require.Greater(t, len(want), 1000, "gpuscope's series in %s", w.name)
		var (
			got   rangeResult
			stale int
		)
		eventually(t, time.Minute, "VictoriaMetrics has "+w.name+"'s samples", func() error {
			got, err = allSamples(ctx, vmURL, `{__name__=~".+"}`, w.to, w.to.Sub(w.from), external)
			if err != nil {
				return err
			}
			stale = dropNaN(got)
			if diff, _ := diffRanges(want, got, vmStorageRelTol, scale, nil); diff != "" {
				return fmt.Errorf("%s: %s", w.name, diff)
			}
			return nil
		})
		_, maxRel := diffRanges(want, got, vmStorageRelTol, scale, nil)
		t.Logf("%s (%s to %s): %d series, %d samples in both, values equal to %.2g relative; left out: %d NaN samples only gpuscope has, %d staleness markers only VictoriaMetrics returns",
			w.name, w.from.UTC().Format("15:04:05"), w.to.UTC().Format("15:04:05"), len(want), want.samples(), maxRel, nans, stale)
	}

	// The seed's queries over the window, at the same steps, over the
	// cgroups that lived through it.
	stable, err := stableCgroups(ctx, gs.URL, windowStart, windowEnd)
	require.NoError(t, err)
	for _, q := range seedQueries {
		mq := q.promql
		if q.metricsQL != "" {
			mq = q.metricsQL
		}
		want, err := queryRange(ctx, gs.URL, q.promql, windowStart, windowEnd, step, nil, false)
		require.NoError(t, err, q.name)
		got, err := queryRange(ctx, vmURL, mq, windowStart, windowEnd, step, external, q.metricsQLKeepsName)
		require.NoError(t, err, q.name)
		if n := keepCgroups(want, stable) + keepCgroups(got, stable); n > 0 {
			t.Logf("%s: left out %d series of cgroups other tests made or removed in the window", q.name, n)
		}
		tol, scale := vmStorageRelTol, map[string]float64(nil)
		if q.counterRate {
			tol, scale = vmCounterRelTol, vmCounterRateScale(run, "container_cpu_usage_seconds_total", scrape)
		}
		if q.mayBeEmpty == "" {
			require.NotEmpty(t, want, "%s: gpuscope answers %s", q.name, q.promql)
		}
		diff, maxRel := diffRanges(want, got, tol, scale, nil)
		require.Empty(t, diff, "%s: gpuscope %s vs VictoriaMetrics %s", q.name, q.promql, mq)
		t.Logf("%s: %d series, %d points equal (largest relative difference %.2g)", q.name, len(want), want.samples(), maxRel)
		if q.metricsQL != "" {
			// MetricsQL's own answer to the PromQL text, for the record.
			native, err := queryRange(ctx, vmURL, q.promql, windowStart, windowEnd, step, external, false)
			require.NoError(t, err, q.name)
			_, maxRel := diffRanges(want, native, 0, nil, nil)
			t.Logf("%s: MetricsQL's own %s differs by up to %.2g relative", q.name, q.promql, maxRel)
		}
	}

	// The demo node's series by job, for the sizing in docs/remote-write.md.
	byJob, _, _, err := gs.api().Query(ctx, `count by (job) ({__name__=~".+"})`, windowEnd)
	require.NoError(t, err)
	t.Logf("series by job at the window's end: %v", strings.ReplaceAll(byJob.String(), "\n", "; "))

	// What remote write did, from both ends.
	sent, err := selfMetrics(gs.URL, map[string]string{"remote_name": "victoriametrics"},
		"prometheus_remote_storage_samples_total", "prometheus_remote_storage_samples_failed_total",
		"prometheus_remote_storage_samples_retried_total", "prometheus_remote_storage_samples_dropped_total",
		"prometheus_remote_storage_bytes_total")
	require.NoError(t, err)
	appended, err := selfMetrics(gs.URL, nil, "prometheus_tsdb_head_samples_appended_total")
	require.NoError(t, err)
	after, err := selfMetrics(vmURL, nil, "vm_rows_inserted_total", "vm_deduplicated_samples_total")
	require.NoError(t, err)
	require.Zero(t, sent["prometheus_remote_storage_samples_failed_total"], "no sample given up")
	t.Logf("gpuscope: %.0f samples appended to the TSDB; sent %.0f samples in %.0f bytes, %.0f retried, %.0f failed",
		appended["prometheus_tsdb_head_samples_appended_total"], sent["prometheus_remote_storage_samples_total"],
		sent["prometheus_remote_storage_bytes_total"], sent["prometheus_remote_storage_samples_retried_total"],
		sent["prometheus_remote_storage_samples_failed_total"])
	t.Logf("VictoriaMetrics: %.0f rows inserted (%.0f before the outage, %.0f after), %.0f duplicates removed after the restart",
		before["vm_rows_inserted_total"]+after["vm_rows_inserted_total"], before["vm_rows_inserted_total"],
		after["vm_rows_inserted_total"], after["vm_deduplicated_samples_total"])
}
