package scrape

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/test/bufconn"

	"github.com/gpuscope/gpuscope/storage"
)

// target serves an exposition body over an in-memory listener, the way
// the appliance serves its own collectors to the built-in jobs.
type target struct {
	listener *bufconn.Listener
	server   *http.Server
}

// newTarget serves bodies in turn, one per scrape, so values change
// between scrapes as a live target's do.
func newTarget(t testing.TB, bodies ...[]byte) *target {
	tg := &target{listener: bufconn.Listen(1 << 20)}
	var next atomic.Int64
	tg.server = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(bodies[int(next.Add(1))%len(bodies)])
	})}
	go func() { _ = tg.server.Serve(tg.listener) }()
	t.Cleanup(func() { _ = tg.server.Close() })
	return tg
}

type fixture struct {
	scraper *Scraper
	db      *storage.DB
	counted *countingAppendable
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    chan error
}

// newFixture runs a Scraper into a real TSDB; the built-in jobs point at
// "node-a:9089", answered in memory by tg.
func newFixture(t testing.TB, tg *target, interval time.Duration) *fixture {
	reg := prometheus.NewRegistry()
	db, err := storage.Open(storage.Options{Dir: t.TempDir(), Retention: time.Hour, Registerer: reg})
	require.NoError(t, err)
	sd, err := discovery.CreateAndRegisterSDMetrics(reg)
	require.NoError(t, err)
	counted := &countingAppendable{next: db}
	s, err := New(Options{
		Registerer:  reg,
		SDMetrics:   sd,
		Appendable:  counted,
		SelfAddress: "node-a:9089",
		SelfDial:    func(ctx context.Context) (net.Conn, error) { return tg.listener.DialContext(ctx) },
	})
	require.NoError(t, err)

	cfg, err := promconfig.Load(fmt.Sprintf("global:\n  scrape_interval: %s\n  scrape_timeout: %s\n", model.Duration(interval), model.Duration(interval)), nil)
	require.NoError(t, err)
	require.NoError(t, AddBuiltinJobs(cfg, Builtin{Address: "node-a:9089", Instance: "node-a"}))
	require.NoError(t, s.ApplyConfig(cfg))

	ctx, cancel := context.WithCancel(context.Background())
	f := &fixture{scraper: s, db: db, counted: counted, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { f.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		f.stop(t)
		require.NoError(t, db.Close())
	})
	return f
}

func (f *fixture) stop(t testing.TB) {
	if f.cancel == nil {
		return
	}
	f.cancel()
	f.cancel = nil
	require.NoError(t, <-f.done)
}

// countingAppendable counts committed samples, so the benchmark can tell
// how many samples its CPU time bought without gathering metrics.
type countingAppendable struct {
	next    promstorage.AppendableV2
	samples atomic.Int64
}

func (c *countingAppendable) AppenderV2(ctx context.Context) promstorage.AppenderV2 {
	return &countingAppender{AppenderV2: c.next.AppenderV2(ctx), c: c}
}

type countingAppender struct {
	promstorage.AppenderV2
	c *countingAppendable
	n int64
}

func (a *countingAppender) Append(ref promstorage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, o promstorage.AppendV2Options) (promstorage.SeriesRef, error) {
	a.n++
	return a.AppenderV2.Append(ref, ls, st, t, v, h, fh, o)
}

func (a *countingAppender) Commit() error {
	err := a.AppenderV2.Commit()
	if err == nil {
		a.c.samples.Add(a.n)
	}
	return err
}

// TestBuiltinJobScrapesInMemory: the built-in job's address is answered by
// SelfDial, not the network (node-a does not resolve), and its series carry
// instance = the node name and the job's up = 1.
func TestBuiltinJobScrapesInMemory(t *testing.T) {
	tg := newTarget(t, []byte("# TYPE demo_total counter\ndemo_total{kind=\"a\"} 1\n"))
	f := newFixture(t, tg, 100*time.Millisecond)

	require.Eventually(t, func() bool {
		q, err := f.db.Querier(0, time.Now().Add(time.Minute).UnixMilli())
		require.NoError(t, err)
		defer q.Close()
		set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "demo_total"))
		if !set.Next() {
			return false
		}
		ls := set.At().Labels()
		require.Equal(t, "node-a", ls.Get("instance"))
		require.Equal(t, JobSelf, ls.Get("job"))
		require.Equal(t, "a", ls.Get("kind"))
		return true
	}, 10*time.Second, 50*time.Millisecond)

	// Stopping the scraper returns promptly and without error.
	f.stop(t)
}

func TestAddBuiltinJobs(t *testing.T) {
	cfg, err := promconfig.Load("global: {scrape_interval: 7s}\nscrape_configs:\n  - job_name: mine\n    static_configs: [{targets: ['x:1']}]\n", nil)
	require.NoError(t, err)
	require.NoError(t, AddBuiltinJobs(cfg, Builtin{Address: "localhost:9089", Instance: "gpu-01", Cadvisor: true, GPU: true}))
	names := []string{}
	for _, j := range cfg.ScrapeConfigs {
		names = append(names, j.JobName)
	}
	require.Equal(t, []string{JobSelf, JobCadvisor, JobGPU, "mine"}, names)
	for _, j := range cfg.ScrapeConfigs[:3] {
		require.Equal(t, model.Duration(7*time.Second), j.ScrapeInterval, j.JobName)
		tgs := j.ServiceDiscoveryConfigs[0].(discovery.StaticConfig)
		require.Equal(t, model.LabelValue("gpu-01"), tgs[0].Labels["instance"], j.JobName)
		require.Equal(t, model.LabelValue("localhost:9089"), tgs[0].Targets[0]["__address__"], j.JobName)
	}
	require.Equal(t, "/metrics/cadvisor", cfg.ScrapeConfigs[1].MetricsPath)
	require.True(t, cfg.ScrapeConfigs[1].TrackTimestampsStaleness, "cAdvisor's timestamped series must still go stale")
	require.Equal(t, "/metrics/gpu", cfg.ScrapeConfigs[2].MetricsPath)

	// A user job may not take a built-in name.
	cfg, err = promconfig.Load("scrape_configs:\n  - job_name: cadvisor\n    static_configs: [{targets: ['x:1']}]\n", nil)
	require.NoError(t, err)
	err = AddBuiltinJobs(cfg, Builtin{Address: "localhost:9089", Instance: "n", Cadvisor: true})
	require.ErrorContains(t, err, `job_name "cadvisor" is reserved`)

	// Without the collectors their jobs are absent.
	cfg, err = promconfig.Load("", nil)
	require.NoError(t, err)
	require.NoError(t, AddBuiltinJobs(cfg, Builtin{Address: "localhost:9089", Instance: "n"}))
	require.Len(t, cfg.ScrapeConfigs, 1)
}

// exposition renders n counter series, gen changing every value.
func exposition(n, gen int) []byte {
	var b bytes.Buffer
	b.WriteString("# HELP bench_requests_total Requests.\n# TYPE bench_requests_total counter\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "bench_requests_total{path=\"/api/%d\",code=\"%d\"} %d\n", i/10, 200+i%10, gen*1000+i)
	}
	return b.Bytes()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScrapeAppend measures the whole ingest path per sample: HTTP
// scrape of a target over the in-memory connection, Prometheus's
// exposition parser and scrape cache, and the TSDB head append with WAL.
// It reports the process's CPU time per appended sample (cpu-ns/sample),
// so the scrape interval's idle time does not count.
func BenchmarkScrapeAppend(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("series=%d", n), func(b *testing.B) {
			tg := newTarget(b, exposition(n, 1), exposition(n, 2))
			f := newFixture(b, tg, 200*time.Millisecond)
			// Wait for the first scrape: it creates the series, a one-off
			// cost that steady-state ingest does not pay.
			for f.counted.samples.Load() < int64(n) {
				time.Sleep(10 * time.Millisecond)
			}
			b.ResetTimer()
			startCPU, startSamples := cpuTime(), f.counted.samples.Load()
			for f.counted.samples.Load() < startSamples+int64(n*b.N) {
				time.Sleep(10 * time.Millisecond)
			}
			b.StopTimer()
			samples := f.counted.samples.Load() - startSamples
			b.ReportMetric(float64((cpuTime()-startCPU).Nanoseconds())/float64(samples), "cpu-ns/sample")
		})
	}
}
