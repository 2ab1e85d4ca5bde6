//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
		// Queries leave out the last 30 s by default (samples still being
		// ingested); the test reads a window it waited past.
		"-search.latencyOffset=5s",
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
