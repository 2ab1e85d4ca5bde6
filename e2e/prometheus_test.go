//go:build e2e

package e2e

import (
	"cmp"
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

// scrapeRecord is one scrape as its scraper stored it: when it began (the
// timestamp of its up and scrape_duration_seconds samples), in
// milliseconds, how long it took, and whether it succeeded.
type scrapeRecord struct {
	at, took int64
	ok       bool
}

// scrapesOf returns the scrapes of job that r's up and
// scrape_duration_seconds series record, in time order.
