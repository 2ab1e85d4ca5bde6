package alertmanager

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are those Alertmanager's app package owns (app/metrics.go);
// the subsystems register their own.
type metrics struct {
	requestDuration *prometheus.HistogramVec
	receivers       prometheus.Gauge
	integrations    prometheus.Gauge
	inhibitionRules prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		requestDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:                            "alertmanager_http_request_duration_seconds",
			Help:                            "Histogram of latencies for HTTP requests.",
			Buckets:                         prometheus.DefBuckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}, []string{"handler", "method", "code"}),
		receivers: f.NewGauge(prometheus.GaugeOpts{
			Name: "alertmanager_receivers",
			Help: "Number of configured receivers.",
		}),
		integrations: f.NewGauge(prometheus.GaugeOpts{
			Name: "alertmanager_integrations",
			Help: "Number of configured integrations.",
		}),
		inhibitionRules: f.NewGauge(prometheus.GaugeOpts{
			Name: "alertmanager_inhibition_rules",
			Help: "Number of configured inhibition rules.",
		}),
	}
}
