//go:build e2e

package e2e

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUnfederated checks the federation test's excuse on made-up records:
// a sample Prometheus lacks is excused only when no federation that
// succeeded could have read it, and the seed queries then leave out just
// the steps that read it.
func TestUnfederated(t *testing.T) {
	s := func(sec float64) int64 { return int64(sec * 1000) }
	gpu := `DCGM_X{instance="e2e-node", job="gpu"}`
	want := rangeResult{
		gpu:                                  {s(0): 1, s(15): 2, s(30): 3, s(45): 4},
		`up{instance="e2e-node", job="gpu"}`: {s(0): 1, s(15): 1, s(30): 1, s(45): 1},
		`scrape_duration_seconds{instance="e2e-node", job="gpu"}`: {s(0): 0.1, s(15): 0.1, s(30): 0.1, s(45): 0.1},
	}
	got := rangeResult{gpu: {s(0): 1, s(30): 3, s(45): 4}}
	for k, v := range want {
		if k != gpu {
			got[k] = v
		}
	}
	scrapes := map[string][]scrapeRecord{"gpu": scrapesOf(want, "gpu")}
	require.Len(t, scrapes["gpu"], 4)
	// Federations every 5 s; those in the life of the sample at 15 s
	// (readable from 17.1, until 30) failed.
	var fed []scrapeRecord
	for f := 1.0; f < 50; f += 5 {
		fed = append(fed, scrapeRecord{at: s(f), took: 100, ok: f < 16 || f > 30})
	}
	missed := unfederated(want, got, scrapes, fed)
	require.Equal(t, []missedSample{{key: gpu, at: s(15), until: s(30)}}, missed)
	// One succeeded at 21: owed.
	fed[4].ok = true
	require.Empty(t, unfederated(want, got, scrapes, fed))
	// One that began at 16, before the sample was readable: not owed.
	fed[4].ok = false
	fed[3].ok = true
	require.Len(t, unfederated(want, got, scrapes, fed), 1)

	// cAdvisor stamps a sample before the scrape that stores it: one of
	// 12 s is stored by the scrape at 15 s, its next (27 s) at 30 s.
	cadvisor := `container_x{id="/", instance="e2e-node", job="cadvisor"}`
	for k, v := range map[string]map[int64]float64{
		cadvisor: {s(-3): 1, s(12): 2, s(27): 3},
		`up{instance="e2e-node", job="cadvisor"}`:                      {s(0): 1, s(15): 1, s(30): 1},
		`scrape_duration_seconds{instance="e2e-node", job="cadvisor"}`: {s(0): 0.1, s(15): 0.1, s(30): 0.1},
	} {
		want[k] = v
		got[k] = maps.Clone(v)
	}
	delete(got[cadvisor], s(12))
	scrapes["cadvisor"] = scrapesOf(want, "cadvisor")
	require.Equal(t, []missedSample{{key: cadvisor, at: s(12), until: s(27)}, {key: gpu, at: s(15), until: s(30)}}, unfederated(want, got, scrapes, fed))
	fed[4].ok = true
	require.Empty(t, unfederated(want, got, scrapes, fed))

	// An instant query reads it from 15 s until the next sample at 30 s.
	w := rangeResult{"{}": {s(0): 1, s(20): 2, s(30): 3, s(360): 4}}
	g := rangeResult{"{}": {s(0): 1, s(20): 9, s(30): 3, s(360): 4}}
	require.Equal(t, 1, dropSteps(missed, 0, &w, &g))
	require.Equal(t, rangeResult{"{}": {s(0): 1, s(30): 3, s(360): 4}}, g)
	// readsBack finds a query's longest range; over 5 minutes, a query
	// reads the sample from 15 s to 5 min 15 s.
	r, err := readsBack(`sum(rate(x[5m])) / avg(min_over_time(y[10m]))`)
	require.NoError(t, err)
	require.Equal(t, 10*time.Minute, r)
	w = rangeResult{"{}": {s(0): 1, s(30): 2, s(60): 3, s(360): 4}}
	g = w
	require.Equal(t, 2, dropSteps(missed, 5*time.Minute, &w, &g))
	require.Equal(t, rangeResult{"{}": {s(0): 1, s(360): 4}}, w)
}
