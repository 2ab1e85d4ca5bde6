package web

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"
)

// TestGathered: the agent's page reads its collector's values as an
// appliance's scrape of the agent stores them, through the same engine.
func TestGathered(t *testing.T) {
	gatherAt := time.Unix(3600, 0)
	for _, tc := range []struct {
		name    string
		metrics func(*prometheus.Registry)
		query   string
		at      time.Time // default gatherAt
		want    []string
	}{
		{
			name: "a value is there at the gather time",
			metrics: func(r *prometheus.Registry) {
				g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_GPU_TEMP"}, []string{"gpu"})
				r.MustRegister(g)
				g.WithLabelValues("0").Set(71)
			},
			query: "DCGM_FI_DEV_GPU_TEMP",
			want:  []string{`{__name__="DCGM_FI_DEV_GPU_TEMP", gpu="0", instance="ws1"}=71`},
		},
		{
			name: "and for the lookback after it",
			metrics: func(r *prometheus.Registry) {
				g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
				r.MustRegister(g)
			},
			query: "g",
			at:    gatherAt.Add(5*time.Minute + time.Millisecond),
			want:  nil,
		},
		{
			name: "a histogram's and a summary's series, le and quantile as the scrape normalises them",
			metrics: func(r *prometheus.Registry) {
				h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lat_seconds", Buckets: []float64{1, 2}})
				s := prometheus.NewSummary(prometheus.SummaryOpts{Name: "size_bytes", Objectives: map[float64]float64{0.5: 0.05}})
				r.MustRegister(h, s)
				h.Observe(1.5)
				s.Observe(3)
			},
			query: `{__name__=~"lat_seconds.*|size_bytes.*"}`,
			want: []string{
				`{__name__="lat_seconds_bucket", instance="ws1", le="1.0"}=0`,
				`{__name__="lat_seconds_bucket", instance="ws1", le="2.0"}=1`,
				`{__name__="lat_seconds_bucket", instance="ws1", le="+Inf"}=1`,
				`{__name__="lat_seconds_sum", instance="ws1"}=1.5`,
				`{__name__="lat_seconds_count", instance="ws1"}=1`,
				`{__name__="size_bytes", instance="ws1", quantile="0.5"}=3`,
				`{__name__="size_bytes_sum", instance="ws1"}=3`,
				`{__name__="size_bytes_count", instance="ws1"}=1`,
			},
		},
		{
			name: "UTF-8 names and escaped label values",
			metrics: func(r *prometheus.Registry) {
				g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpu.temp"}, []string{"job.name"})
				r.MustRegister(g)
				g.WithLabelValues("a\"b\\c\nd").Set(1)
			},
			query: `{"gpu.temp"}`,
			want:  []string{`{__name__="gpu.temp", instance="ws1", "job.name"="a\"b\\c\nd"}=1`},
		},
		{
			name: "the collector's own instance label is exported_instance",
			metrics: func(r *prometheus.Registry) {
				g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g"}, []string{"instance"})
				r.MustRegister(g)
				g.WithLabelValues("elsewhere").Set(1)
			},
			query: "g",
			want:  []string{`{__name__="g", exported_instance="elsewhere", instance="ws1"}=1`},
		},
		{
			name: "an exposed timestamp is honoured, as the node jobs do",
			metrics: func(r *prometheus.Registry) {
				r.MustRegister(constCollector{
					prometheus.NewMetricWithTimestamp(gatherAt.Add(-10*time.Minute),
						prometheus.MustNewConstMetric(prometheus.NewDesc("old", "", nil, nil), prometheus.GaugeValue, 1)),
					prometheus.MustNewConstMetric(prometheus.NewDesc("fresh", "", nil, nil), prometheus.GaugeValue, 2),
				})
			},
			query: `{__name__=~"old|fresh"}`,
			want:  []string{`{__name__="fresh", instance="ws1"}=2`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			tc.metrics(reg)
			q, err := gather(reg, gatherAt, labels.FromStrings("instance", "ws1"))
			require.NoError(t, err)
			h := New(Options{Overview: OverviewOptions{Local: reg, Node: "ws1"}})
			at := tc.at
			if at.IsZero() {
				at = gatherAt
			}
			qry, err := h.localEngine.NewInstantQuery(context.Background(), q, nil, tc.query, at)
			require.NoError(t, err)
			defer qry.Close()
			vec, err := qry.Exec(context.Background()).Vector()
			require.NoError(t, err)
			var got []string
			for _, s := range vec {
				got = append(got, s.Metric.String()+"="+formatNum(s.F))
			}
			require.ElementsMatch(t, tc.want, got)
		})
	}
}

// TestGatheredFailure: a gatherer that fails with nothing gathered is an
// error on the page, and no GPU card.
func TestGatheredFailure(t *testing.T) {
	q, err := gather(failingGatherer{}, time.Unix(0, 0), labels.FromStrings("instance", "n"))
	require.ErrorContains(t, err, "gather the collector's metrics: no driver")
	sq, err := q.Querier(0, 0)
	require.NoError(t, err)
	ss := sq.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, labels.MetricName, ".+"))
	require.False(t, ss.Next())
}

func TestGatheredLabelQueries(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_GPU_TEMP"}, []string{"gpu"})
	reg.MustRegister(g)
	g.WithLabelValues("1").Set(1)
	g.WithLabelValues("0").Set(1)
	q, err := gather(reg, time.Unix(0, 0), labels.FromStrings("instance", "n"))
	require.NoError(t, err)
	sq, err := q.Querier(0, 0)
	require.NoError(t, err)
	vs, _, err := sq.LabelValues(context.Background(), "gpu", nil)
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1"}, vs)
	ns, _, err := sq.LabelNames(context.Background(), nil, labels.MustNewMatcher(labels.MatchEqual, "gpu", "0"))
	require.NoError(t, err)
	require.Equal(t, []string{"__name__", "gpu", "instance"}, ns)
}

type constCollector []prometheus.Metric

func (c constCollector) Describe(chan<- *prometheus.Desc) {}
func (c constCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c {
		ch <- m
	}
}

type failingGatherer struct{}

func (failingGatherer) Gather() ([]*dto.MetricFamily, error) { return nil, errors.New("no driver") }
