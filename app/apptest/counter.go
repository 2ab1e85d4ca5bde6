package apptest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// CounterTarget serves n counters that all count the scrapes served: the
// k-th scrape answers k for each. A stored value therefore names the
// scrape it came from, and a hole in a series' values is a scrape whose
// samples are not in the TSDB.
type CounterTarget struct {
	srv    *httptest.Server
	n      int
	mu     sync.Mutex
	k      int
	served map[int]time.Time // scrape number -> when its answer was written
	next   chan int          // scrape numbers, as served; never blocks
}

// NewCounterTarget starts one, stopped at the test's cleanup.
func NewCounterTarget(t testing.TB, n int) *CounterTarget {
	t.Helper()
	c := &CounterTarget{n: n, served: map[int]time.Time{}, next: make(chan int, 1)}
	prefix := make([]string, n)
	for i := range prefix {
		prefix[i] = fmt.Sprintf("crash_counter_total{series=\"%05d\"} ", i)
	}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.k++
		var b strings.Builder
		b.Grow(n * 32)
		b.WriteString("# TYPE crash_counter_total counter\n")
		v := strconv.Itoa(c.k)
		for _, p := range prefix {
			b.WriteString(p)
			b.WriteString(v)
			b.WriteByte('\n')
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(b.String()))
		c.served[c.k] = time.Now()
		select {
		case <-c.next:
		default:
		}
		c.next <- c.k
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *CounterTarget) Addr() string { return strings.TrimPrefix(c.srv.URL, "http://") }

// Scrapes is the number of scrapes served so far.
func (c *CounterTarget) Scrapes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.k
}

// Next has the number of each scrape as it is served; a reader that
// falls behind misses numbers, never blocks the target.
func (c *CounterTarget) Next() <-chan int { return c.next }

// ServedAt is when scrape k was answered.
func (c *CounterTarget) ServedAt(k int) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.served[k]
	return at, ok
}

// RawSamples returns the raw samples of crash_counter_total for the
// given series labels over (at-window, at], by series label.
func (c Client) RawSamples(series []string, at time.Time, window time.Duration) map[string][]model.SamplePair {
	t := c.T
	t.Helper()
	q := fmt.Sprintf(`crash_counter_total{series=~%q}[%ds]`, strings.Join(series, "|"), int(window.Seconds())+1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, _, _, err := c.API().Query(ctx, q, at)
	require.NoError(t, err, q)
	m, ok := v.(model.Matrix)
	require.True(t, ok, "%s is a %s", q, v.Type())
	out := map[string][]model.SamplePair{}
	for _, s := range m {
		out[string(s.Metric["series"])] = s.Values
	}
	require.Len(t, out, len(series), q)
	return out
}

// Scalar runs an instant query at at whose result is one sample and
// returns its value.
func (c Client) Scalar(at time.Time, q string) float64 {
	t := c.T
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, _, _, err := c.API().Query(ctx, q, at)
	require.NoError(t, err, q)
	vec, ok := v.(model.Vector)
	require.True(t, ok, "%s is a %s", q, v.Type())
	require.Len(t, vec, 1, q)
	return float64(vec[0].Value)
}
