package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app"
)

// queryAt runs an instant query at ts and returns its vector.
// samplesByJob maps the job label of each sample to its value.
func samplesByJob(v model.Vector) map[string]float64 {
	m := map[string]float64{}
	for _, s := range v {
		m[string(s.Metric["job"])] = float64(s.Value)
	}
	return m
}

// TestServeBadTargets: gpuscope scrapes, every second with a 500ms
// scrape_timeout, a target serving malformed exposition text, one that
// accepts the connection and never answers, one answering 500 and a
// healthy one, next to its built-in jobs (gpuscope, cadvisor, gpu with
// simulated GPUs; their timeout is the interval). Each bad target is down
// with its reason in /api/v1/targets lastError and the built-in
// TargetDown alert pending for it, and nothing of the malformed scrape is
// stored; the healthy target and the built-in jobs are up at every
// scrape, and every target, the hanging one too, is scraped at every
// interval; over many intervals of hanging scrapes gpuscope's goroutines
// and open files stay bounded. Not parallel: a scrape of a built-in job
// that misses its one-second timeout on a busy machine would fail it.
func TestServeBadTargets(t *testing.T) {
	const (
		// window is how long the bad targets are watched after all
		// targets have been scraped once: 30 scrape intervals.
		window = 30 * time.Second
		// maxGrowth bounds the growth of goroutines and open files over
		// the window; a leak per hanging scrape would be 30 or more.
		maxGrowth = 15
	)

	var served atomic.Int64
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := served.Add(1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# TYPE e2e_healthy_requests_total counter\ne2e_healthy_requests_total %d\n", n)
	}))
	defer healthy.Close()
	malformed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		// A valid sample, then a line the text parser refuses: the scrape
		// is all or nothing, so the valid sample must not be stored.
		io.WriteString(w, "e2e_before_error 1\ne2e_broken{gpu=\"0\" 5\n")
	}))
	defer malformed.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "e2e_internal 1", http.StatusInternalServerError)
	}))
	defer failing.Close()
	// The hanging target reads the request and never answers; its
	// handler ends only once gpuscope gives up and closes the connection
	// (the request's context ends then), so that the target's own
	// goroutines and sockets, in this process too, do not grow with the
	// hanging scrapes unless gpuscope's do.
	release := make(chan struct{})
	var hangs atomic.Int64
	hanging := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		hangs.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hanging.Close()
	defer close(release) // before Close, which waits for the handlers

	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
gpu:
  sim: {count: 2}
scrape_configs:
  - job_name: e2e-healthy
    scrape_timeout: 500ms
    static_configs: [{targets: [%q]}]
  - job_name: e2e-malformed
    scrape_timeout: 500ms
    static_configs: [{targets: [%q]}]
  - job_name: e2e-hanging
    scrape_timeout: 500ms
    static_configs: [{targets: [%q]}]
  - job_name: e2e-500
    scrape_timeout: 500ms
    static_configs: [{targets: [%q]}]
`, host(healthy), host(malformed), host(hanging), host(failing)))
	p := serve(t, "", configFile(cfg), with(func(s *app.Settings) { s.GPUBackend = "sim" }))

	// Each target's health and last error, as the targets page shows it.
	want := map[string]struct {
		health promv1.HealthStatus
		errs   []string // parts of the last error; none: no error
	}{
		"e2e-healthy": {promv1.HealthGood, nil},
		"gpuscope":    {promv1.HealthGood, nil},
		"cadvisor":    {promv1.HealthGood, nil},
		"gpu":         {promv1.HealthGood, nil},
		// The text parser names the problem and quotes the line.
		"e2e-malformed": {promv1.HealthBad, []string{`expected label name, got "5"`, `while parsing: "e2e_broken{gpu=\"0\" 5"`}},
		"e2e-hanging":   {promv1.HealthBad, []string{"context deadline exceeded"}},
		"e2e-500":       {promv1.HealthBad, []string{"server returned HTTP status 500 Internal Server Error"}},
	}
	eventually(t, 30*time.Second, "every target scraped with the expected health and error", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := p.api().Targets(ctx)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, tg := range res.Active {
			job := string(tg.Labels["job"])
			w, ok := want[job]
			if !ok {
				return fmt.Errorf("unexpected target %s", tg.Labels)
			}
			seen[job] = true
			if tg.Health != w.health {
				return fmt.Errorf("%s: health %s (last error %q), want %s", job, tg.Health, tg.LastError, w.health)
			}
			if len(w.errs) == 0 && tg.LastError != "" {
				return fmt.Errorf("%s: last error %q, want none", job, tg.LastError)
			}
			for _, e := range w.errs {
				if !strings.Contains(tg.LastError, e) {
					return fmt.Errorf("%s: last error %q, want it to contain %q", job, tg.LastError, e)
				}
			}
		}
		if len(seen) != len(want) {
			return fmt.Errorf("targets seen: %v", seen)
		}
		return nil
	})

	// The resources of the process as its own scrape reports them, now and
	// after the window of hanging scrapes.
	resources := func(at time.Time) map[string]float64 {
		t.Helper()
		out := map[string]float64{}
		for _, m := range []string{"go_goroutines", "process_open_fds"} {
			v, err := p.queryAt(fmt.Sprintf(`max_over_time(%s{job="gpuscope"}[5s])`, m), at)
			require.NoError(t, err)
			require.Len(t, v, 1, m)
			out[m] = float64(v[0].Value)
		}
		return out
	}
	// cAdvisor starts in the background, some seconds after ready, with
	// goroutines of its own for every container on the host: measure from
	// a self-scrape at least two seconds after it started.
	eventually(t, 60*time.Second, "cAdvisor started", func() error {
		if !strings.Contains(p.out.String(), `msg="cAdvisor started"`) {
			return fmt.Errorf("not logged yet")
		}
		return nil
	})
	since := time.Now().Add(2 * time.Second)
	eventually(t, 30*time.Second, "a self-scrape after cAdvisor started", func() error {
		v, err := p.instant(`timestamp(go_goroutines{job="gpuscope"})`)
		if err != nil {
			return err
		}
		if len(v) != 1 || float64(v[0].Value) < float64(since.UnixMilli())/1e3 {
			return fmt.Errorf("last self-scrape %v, want after %s", v, since.Format(time.TimeOnly))
		}
		return nil
	})
	start := time.Now()
	before := resources(start)
	hangsBefore := hangs.Load()
	time.Sleep(window + 3*time.Second)
	// The window ends two seconds ago, so every scrape in it is stored.
	end := time.Now().Add(-2 * time.Second)
	require.True(t, end.Sub(start) >= window)
	after := resources(end)
	t.Logf("over %s of hanging scrapes: %v before, %v after; %d requests to the hanging target", end.Sub(start).Round(time.Second), before, after, hangs.Load()-hangsBefore)
	for m, v := range after {
		require.LessOrEqual(t, v-before[m], float64(maxGrowth), "%s grew from %v to %v while the target hung", m, before[m], v)
	}
	require.GreaterOrEqual(t, hangs.Load()-hangsBefore, int64(window/time.Second)-2, "the hanging target is scraped at every interval, not once")

	// Every target was scraped at every interval of the window, the bad
	// ones were down at each scrape and the others up at each scrape.
	rng := fmt.Sprintf("[%ds]", int(window.Seconds()))
	counts, err := p.queryAt(`count_over_time(up`+rng+`)`, end)
	require.NoError(t, err)
	ups, err := p.queryAt(`sum_over_time(up`+rng+`)`, end)
	require.NoError(t, err)
	upSum := samplesByJob(ups)
	require.Len(t, counts, len(want), "up of every target: %v", counts)
	t.Logf("scrapes in the last %s: %v, up: %v", window, samplesByJob(counts), upSum)
	// Each target as often as gpuscope's own job, which no bad target
	// touches: a loaded machine delays every scrape loop alike (a run
	// had 28 of 30 for every job), a hanging target delays only its own.
	self := samplesByJob(counts)["gpuscope"]
	require.InDelta(t, window.Seconds(), self, window.Seconds()/10, "self-scrapes in %s", window)
	for job, n := range samplesByJob(counts) {
		require.InDelta(t, self, n, 1, "scrapes of %s in %s, beside %v of gpuscope's own", job, window, self)
		if want[job].health == promv1.HealthGood {
			require.Equal(t, n, upSum[job], "%s was down at some scrape", job)
		} else {
			require.Zero(t, upSum[job], "%s was up at some scrape", job)
		}
	}
	// The healthy target's samples are all there.
	v, err := p.queryAt(`count_over_time(e2e_healthy_requests_total`+rng+`)`, end)
	require.NoError(t, err)
	require.Len(t, v, 1)
	require.InDelta(t, self, float64(v[0].Value), 1)

	// Nothing but the scrape's own series (and the alert on them) is
	// stored for the bad targets: the malformed scrape is discarded whole.
	v, err = p.queryAt(`{job=~"e2e-malformed|e2e-hanging|e2e-500", __name__!~"up|scrape_.+|ALERTS|ALERTS_FOR_STATE"}`, end)
	require.NoError(t, err)
	require.Empty(t, v, "samples of a failed scrape were stored")
	// The built-in TargetDown alert is pending (for: 5m) for the three bad
	// targets and no other.
	v, err = p.queryAt(`ALERTS{alertname="TargetDown"}`, end)
	require.NoError(t, err)
	alerting := map[string]string{}
	for _, s := range v {
		alerting[string(s.Metric["job"])] = string(s.Metric["alertstate"])
	}
	require.Equal(t, map[string]string{"e2e-malformed": "pending", "e2e-hanging": "pending", "e2e-500": "pending"}, alerting)
	// scrape_samples_scraped counts what was read: the sample before the
	// malformed line (read, then discarded with the scrape), none of the
	// others.
	v, err = p.queryAt(`scrape_samples_scraped{job=~"e2e-malformed|e2e-hanging|e2e-500"}`, end)
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"e2e-malformed": 1, "e2e-hanging": 0, "e2e-500": 0}, samplesByJob(v))
}

// TestServeSimGPULostAndBack is gpu/sim/lost_test.go through the binary: with
// gpu.sim.time_scale 10, simulated GPU 0 falls off the bus 10 s into the
// run for 15 s. Meanwhile its DCGM series are absent and
// gpuscope_gpu_collector_errors_total{gpu="0",field="device"} increases,
// while GPU 1 keeps reporting at every scrape and the collector stays up;
// then GPU 0 reports again and the counter stops. It counts the gpu job's
// successful scrapes (sum of up), not all of them: under load a scrape can
// miss its one-second timeout, and that scrape stores no GPU series at all.
func TestServeSimGPULostAndBack(t *testing.T) {
	t.Parallel()
	const (
		timeScale = 10
		lostAt    = 100 * time.Second // simulated: 10 s of real time
		lostFor   = 150 * time.Second // simulated: 15 s of real time
		lostReal  = lostFor / timeScale
	)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fastConfig+fmt.Sprintf(`
gpu:
  backend: sim
  sim:
    count: 2
    time_scale: %d
    gpus:
      - {scenario: training, lost_at: %s, lost_for: %s}
`, timeScale, model.Duration(lostAt), model.Duration(lostFor)))
	p := serve(t, "", configFile(cfg))

	util := func() (map[string]bool, error) {
		v, err := p.instant(`DCGM_FI_DEV_GPU_UTIL`)
		if err != nil {
			return nil, err
		}
		got := map[string]bool{}
		for _, s := range v {
			got[string(s.Metric["gpu"])] = true
		}
		return got, nil
	}
	deviceErrors := func() (float64, error) {
		// The newest stored value, so that a scrape that missed its
		// timeout (and marked the series stale) reads as no change.
		v, err := p.instant(`last_over_time(gpuscope_gpu_collector_errors_total{gpu="0",field="device"}[1m])`)
		if err != nil || len(v) == 0 {
			return 0, err
		}
		if len(v) != 1 {
			return 0, fmt.Errorf("device errors: %v", v)
		}
		return float64(v[0].Value), nil
	}

	var first float64
	eventually(t, 60*time.Second, "GPU 0 lost: absent and counted, GPU 1 reporting", func() error {
		got, err := util()
		if err != nil {
			return err
		}
		if got["0"] || !got["1"] {
			return fmt.Errorf("GPUs reporting: %v", got)
		}
		first, err = deviceErrors()
		if err != nil || first < 1 {
			return fmt.Errorf("device errors of GPU 0: %v (%v)", first, err)
		}
		return nil
	})
	// It reported before (read from the stored series, so that a slow
	// start cannot miss the moment).
	v, err := p.instant(`count_over_time(DCGM_FI_DEV_GPU_UTIL{gpu="0"}[2m])`)
	require.NoError(t, err)
	require.Len(t, v, 1, "GPU 0 never reported before it was lost")
	require.Positive(t, float64(v[0].Value))
	eventually(t, 10*time.Second, "device errors of the lost GPU increase", func() error {
		n, err := deviceErrors()
		if err != nil || n <= first {
			return fmt.Errorf("device errors %v, were %v (%v)", n, first, err)
		}
		return nil
	})

	eventually(t, 40*time.Second, "GPU 0 reports again", func() error {
		got, err := util()
		if err != nil {
			return err
		}
		if !got["0"] || !got["1"] {
			return fmt.Errorf("GPUs reporting: %v", got)
		}
		return nil
	})
	back, err := deviceErrors()
	require.NoError(t, err)
	time.Sleep(3 * time.Second)
	n, err := deviceErrors()
	require.NoError(t, err)
	require.Equal(t, back, n, "device errors still counted after the GPU came back")

	// Over the whole run, read at one instant so that every count covers
	// the same scrapes: GPU 0 was absent from about lostFor/time_scale of
	// the successful scrapes, GPU 1 from none, and the collector counted
	// one device error per cycle of the lost window.
	rng := "[2m]"
	end := time.Now()
	v, err = p.queryAt(`count_over_time(DCGM_FI_DEV_GPU_UTIL`+rng+`)`, end)
	require.NoError(t, err)
	counts := map[string]float64{}
	for _, s := range v {
		counts[string(s.Metric["gpu"])] = float64(s.Value)
	}
	scrapes, err := p.queryAt(`sum_over_time(up{job="gpu"}`+rng+`)`, end)
	require.NoError(t, err)
	require.Len(t, scrapes, 1)
	total := float64(scrapes[0].Value)
	require.InDelta(t, total, counts["1"], 1, "GPU 1 missed successful scrapes")
	missed := total - counts["0"]
	require.InDelta(t, lostReal.Seconds(), missed, lostReal.Seconds()/2, "scrapes without GPU 0 (%v of %v)", missed, total)
	require.InDelta(t, lostReal.Seconds(), n, lostReal.Seconds()/2, "device errors: one per collector cycle while GPU 0 was lost")
	t.Logf("of %v successful gpu scrapes, %v without GPU 0, %v without GPU 1; %v device errors of GPU 0", total, missed, total-counts["1"], n)
	v, err = p.queryAt(`min_over_time(gpuscope_gpu_collector_up`+rng+`)`, end)
	require.NoError(t, err)
	require.Len(t, v, 1)
	require.Equal(t, model.SampleValue(1), v[0].Value, "the collector went down while one GPU was lost")
}
