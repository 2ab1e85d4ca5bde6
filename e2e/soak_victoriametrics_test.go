//go:build e2e && soak

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// TestSoakVictoriaMetricsRemoteWrite: VictoriaMetrics single-node as the
// remote-write target of `serve --demo` (docs/remote-write.md, "Scale out"),
// scraping every 5 s. Over a 90 s window, 30 s of it with VictoriaMetrics
// stopped (six times the queue's 5 s max_backoff, so it backs off to the
// cap and holds a backlog of six scrapes), it ends up with
// every series and every sample gpuscope has for the same range, values
// equal (to VictoriaMetrics's decimal storage), and the seed's queries
// answer the same from both.
func TestSoakVictoriaMetricsRemoteWrite(t *testing.T) {
	pkgtest.Require(t, false, "victoria-metrics")
	pkgtest.RequireTime(t, 8*time.Minute)
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
  scrape_interval: 5s
  external_labels: {appliance: e2e-demo}
remote_write:
  - name: victoriametrics
    url: %s/api/v1/write
    queue_config: {max_backoff: 5s}
`, vmURL))
	gs := serve(t, "", "--demo", "--config.file="+cfg)
	started := time.Now()

	// A third of the demo's default 15 s, so that a short window holds
	// enough samples for every seed query's range.
	const scrape = 5 * time.Second
	eventually(t, 90*time.Second, "the demo's GPU series in VictoriaMetrics", func() error {
		res, err := queryRange(context.Background(), vmURL, `up{job="gpu"}`, time.Now().Add(-time.Minute), time.Now(), scrape, nil, false)
		if err == nil && len(res) != 1 {
			err = fmt.Errorf("up{job=gpu}: %v", res)
		}
		return err
	})

	// The window starts on a step, so that query_range's steps are the same
	// in both (VictoriaMetrics aligns a range's start to its step).
	const step = 15 * time.Second
	windowStart := time.Now().Truncate(step).Add(step)
	stopAt := windowStart.Add(30 * time.Second)
	outage := 30 * time.Second
	windowEnd := windowStart.Add(90 * time.Second)

	time.Sleep(time.Until(stopAt))
	before, err := selfMetrics(vmURL, nil, "vm_rows_inserted_total", "vm_deduplicated_samples_total")
	require.NoError(t, err)
	vm.stop()
	stoppedAt := time.Now()
	time.Sleep(outage - 5*time.Second)
	// gpuscope kept running and its queue is behind by most of the outage
	// (at least half of it: the last batch's 5 s deadline and a scrape
	// fall on either side of the stop).
	v, err := gs.instant(fmt.Sprintf(`time() - prometheus_remote_storage_queue_highest_sent_timestamp_seconds{remote_name="victoriametrics"} > %g`, (outage / 2).Seconds()))
	require.NoError(t, err)
	require.Len(t, v, 1, "the queue is behind while VictoriaMetrics is down")
	time.Sleep(time.Until(stoppedAt.Add(outage)))
	restartedAt := time.Now()
	vm = startVictoriaMetrics(t, vmURL, args)
	// How long the queue takes to send the outage's backlog: the last
	// sample it sent is less than a batch deadline and two scrape
	// intervals old again.
	eventually(t, 3*time.Minute, "the queue caught up after the outage", func() error {
		v, err := gs.instant(fmt.Sprintf(`time() - prometheus_remote_storage_queue_highest_sent_timestamp_seconds{remote_name="victoriametrics"} < %g`, (5*time.Second + 2*scrape).Seconds()))
		if err == nil && len(v) != 1 {
			err = fmt.Errorf("still behind")
		}
		return err
	})
	t.Logf("the queue sent the backlog of a %s outage in %s", restartedAt.Sub(stoppedAt).Round(time.Second), time.Since(restartedAt).Round(time.Second))

	// VictoriaMetrics leaves out the last -search.latencyOffset (5s) of
	// data; by then the queue has sent everything up to windowEnd.
	time.Sleep(time.Until(windowEnd.Add(10 * time.Second)))
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
