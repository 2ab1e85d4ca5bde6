//go:build e2e

package e2e

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app/apptest"
)

// counterTarget serves n counters that count the scrapes (apptest's).
type counterTarget = apptest.CounterTarget

var newCounterTarget = apptest.NewCounterTarget

// TestCrashKeepsCommittedSamples is the CI size of bench/crash.sh: gpuscope
// scrapes 5000 counters at 1 s and is killed with SIGKILL just after the
// target answered a scrape, so most often while that scrape's samples are
// appended and committed. Restarted on the same directory it must return
// every sample committed before the kill: since a target's scrapes are
// sequential (the next starts after the previous one's commit), every
// scrape before the last one served is committed, so each series' values
// must be 1, 2, … with no hole, except the scrape in flight at the kill
// (and scrapes that failed, which `up` records). The values go on with the
// next number after the restart, and the gap in time is the downtime.
func TestCrashKeepsCommittedSamples(t *testing.T) {
	t.Parallel()
	const (
		series   = 5000
		interval = time.Second
		before   = 15 // scrapes before the kill
		after    = 5  // scrapes after the restart
	)
	target := newCounterTarget(t, series)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := writeConfig(t, dir, fmt.Sprintf(`
global:
  scrape_interval: 15s
  evaluation_interval: 15s
cadvisor: {enabled: false}
gpu: {backend: none}
scrape_configs:
  - job_name: crash
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs:
      - targets: [%q]
`, target.Addr()))
	testStart := time.Now()
	p := serve(t, data, "--config.file="+cfg)

	// The scrapes before the kill are stored.
	eventually(t, 90*time.Second, fmt.Sprintf("%d scrapes of %d series stored", before, series), func() error {
		v, err := p.instant(`count(crash_counter_total >= ` + strconv.Itoa(before) + `)`)
		if err != nil {
			return err
		}
		if len(v) != 1 || int(v[0].Value) != series {
			return fmt.Errorf("series at value %d or more: %v (target served %d scrapes)", before, v, target.Scrapes())
		}
		return nil
	})
	// What the API returns before the kill; all of it must be returned after.
	probes := []string{"00000", fmt.Sprintf("%05d", series/2), fmt.Sprintf("%05d", series-1)}
	preAt := time.Now()
	pre := rawSamples(t, p, probes, preAt, preAt.Sub(testStart))
	for _, s := range probes {
		require.GreaterOrEqual(t, len(pre[s]), before, "samples of series %s before the kill", s)
	}

	// Kill just after a scrape was served: gpuscope is then parsing,
	// appending and committing its 5000 samples.
	select {
	case <-target.Next(): // an earlier one
	default:
	}
	select {
	case <-target.Next():
	case <-time.After(10 * time.Second):
		t.Fatalf("no scrape served for 10s")
	}
	time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	p.signal(syscall.SIGKILL)
	killedAt := time.Now()
	code := p.wait(30 * time.Second)
	require.Equal(t, -1, code, "killed by a signal")
	lastServed := target.Scrapes() // the scrape in flight at the kill, if any
	t.Logf("killed %s after scrape %d was served", killedAt.Sub(mustServedAt(t, target, lastServed)), lastServed)

	p2 := serve(t, data, "--config.file="+cfg)
	readyAt := time.Now()
	downtime := readyAt.Sub(killedAt)
	require.Contains(t, p2.out.String(), "Replaying WAL")
	eventually(t, 60*time.Second, fmt.Sprintf("%d scrapes after the restart stored", after), func() error {
		v, err := p2.instant(`count(crash_counter_total >= ` + strconv.Itoa(lastServed+after) + `)`)
		if err != nil {
			return err
		}
		if len(v) != 1 || int(v[0].Value) != series {
			return fmt.Errorf("series at value %d or more: %v (target served %d scrapes)", lastServed+after, v, target.Scrapes())
		}
		return nil
	})
	// Evaluated at the moment scrape lastServed+after was served: its
	// samples (stamped when it started) are in, the next scrape's are not.
	endAt := mustServedAt(t, target, lastServed+after)
	window := "[" + strconv.Itoa(int(endAt.Sub(testStart).Seconds())+5) + "s]"

	// Scrapes that failed (up 0): each may have been served, and so be a
	// hole, without any fault of storage.
	failed := int(scalar(t, p2, endAt, `count_over_time(up{job="crash"}`+window+`) - sum_over_time(up{job="crash"}`+window+`)`))

	// Every series: starts at 1 (the first scrape), no reset, the same
	// number of samples and the same highest value as every other.
	require.Equal(t, float64(series), scalar(t, p2, endAt, `count(crash_counter_total)`), "series returned")
	lowest := scalar(t, p2, endAt, `max(min_over_time(crash_counter_total`+window+`))`)
	require.Equal(t, lowest, scalar(t, p2, endAt, `min(min_over_time(crash_counter_total`+window+`))`), "every series starts at the same scrape")
	require.True(t, lowest >= 1 && lowest <= float64(1+failed), "every series starts at scrape 1 (or after scrapes that failed): %v", lowest)
	require.Equal(t, 0.0, scalar(t, p2, endAt, `max(resets(crash_counter_total`+window+`))`), "counter resets")
	count := scalar(t, p2, endAt, `max(count_over_time(crash_counter_total`+window+`))`)
	require.Equal(t, count, scalar(t, p2, endAt, `min(count_over_time(crash_counter_total`+window+`))`), "every series has as many samples")
	top := scalar(t, p2, endAt, `max(max_over_time(crash_counter_total`+window+`))`)
	require.Equal(t, float64(lastServed+after), top, "highest value")
	require.Equal(t, top, scalar(t, p2, endAt, `min(max_over_time(crash_counter_total`+window+`))`), "every series has the same last value")
	holes := int(top) - int(count)
	t.Logf("scrapes served %d, samples per series %d, holes %d, failed scrapes %d", target.Scrapes(), int(count), holes, failed)
	require.LessOrEqual(t, holes, 1+failed, "values missing in every series: only the scrape in flight at the kill (and failed scrapes) may be")

	// The probed series in full: every sample returned before the kill is
	// returned again, with its timestamp; values before the one in flight
	// are all there.
	post := rawSamples(t, p2, probes, endAt, endAt.Sub(testStart)+5*time.Second)
	for _, s := range probes {
		got := map[model.Time]model.SampleValue{}
		values := map[int]model.Time{}
		for _, sp := range post[s] {
			got[sp.Timestamp] = sp.Value
			values[int(sp.Value)] = sp.Timestamp
		}
		for _, sp := range pre[s] {
			v, ok := got[sp.Timestamp]
			require.True(t, ok, "series %s: sample %v @%v returned before the kill is gone", s, sp.Value, sp.Timestamp)
			require.Equal(t, sp.Value, v, "series %s @%v", s, sp.Timestamp)
		}
		var missing []int
		for k := 1; k <= int(top); k++ {
			if _, ok := values[k]; !ok {
				missing = append(missing, k)
			}
		}
		if failed == 0 {
			require.Subset(t, []int{lastServed}, missing, "series %s: values missing other than the scrape in flight at the kill", s)
		}

		// The gap: from the last sample before the kill to the first after
		// the restart, against the downtime (kill to ready).
		last, ok := values[lastServed]
		if !ok {
			last, ok = values[lastServed-1]
		}
		if !ok && failed > 0 {
			continue
		}
		require.True(t, ok, "series %s: neither the last scrape served nor the one before it is stored", s)
		first, ok := values[lastServed+1]
		if !ok && failed > 0 {
			continue
		}
		require.True(t, ok, "series %s: first scrape after the restart (value %d) not stored", s, lastServed+1)
		require.True(t, first.Time().After(killedAt), "series %s: first sample after the restart", s)
		gap := first.Time().Sub(last.Time())
		// Up to one interval on each side: the last scrape started before
		// the kill, the first one after ready waits for its slot; and
		// slack for a loaded machine.
		require.Less(t, gap, downtime+2*interval+3*time.Second, "series %s: gap %s, downtime %s", s, gap, downtime)
		if s == probes[0] {
			t.Logf("downtime (kill to ready) %s, gap in the series %s; kept up to %s before the kill, scrape %d lost: %v",
				downtime.Round(time.Millisecond), gap.Round(time.Millisecond), killedAt.Sub(last.Time()).Round(time.Millisecond), lastServed, len(missing) > 0)
		}
	}
}

func mustServedAt(t *testing.T, c *counterTarget, k int) time.Time {
	t.Helper()
	at, ok := c.ServedAt(k)
	require.True(t, ok, "scrape %d served", k)
	return at
}

// rawSamples and scalar read the TSDB of p (apptest's).
func rawSamples(t *testing.T, p *process, series []string, at time.Time, window time.Duration) map[string][]model.SamplePair {
	return p.client().RawSamples(series, at, window)
}

func scalar(t *testing.T, p *process, at time.Time, q string) float64 {
	return p.client().Scalar(at, q)
}
