// Package gputest holds what the tests of the GPU collector and of its
// backends share: reading a collector's series, a settable clock, and the
// checks that the NVML backend and gpu/sim's simulator must pass alike.
package gputest

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// Series is one gathered sample.
type Series struct {
	Labels map[string]string
	Value  float64
	Type   dto.MetricType
}

// Gather returns every series of the named metric.
func Gather(t testing.TB, reg prometheus.Gatherer, name string) []Series {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out []Series
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			s := Series{Labels: map[string]string{}, Type: mf.GetType()}
			for _, lp := range m.GetLabel() {
				s.Labels[lp.GetName()] = lp.GetValue()
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				s.Value = m.GetCounter().GetValue()
			default:
				s.Value = m.GetGauge().GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}

// Lookup returns the value of the series of name whose labels include
// match, and whether there is exactly one.
func Lookup(t testing.TB, reg prometheus.Gatherer, name string, match map[string]string) (float64, bool) {
	t.Helper()
	var found []Series
	for _, s := range Gather(t, reg, name) {
		ok := true
		for k, v := range match {
			if s.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		return 0, false
	}
	return found[0].Value, true
}

// MustLookup is Lookup failing the test where there is not exactly one
// series.
func MustLookup(t testing.TB, reg prometheus.Gatherer, name string, match map[string]string) float64 {
	t.Helper()
	v, ok := Lookup(t, reg, name, match)
	require.Truef(t, ok, "want exactly one %s%v", name, match)
	return v
}

// Clock is a settable clock for gpu.Options.Now.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock {
	return &Clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock d on.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// SyncBuffer is a bytes.Buffer safe for a logger written from Run's
// goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Bytes returns a copy of what was written.
func (s *SyncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

func (s *SyncBuffer) String() string { return string(s.Bytes()) }
