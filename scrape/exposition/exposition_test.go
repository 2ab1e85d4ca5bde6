package exposition

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

const families = 50

func registry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	for i := range families {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: fmt.Sprintf("family_%02d", i), Help: "A family."})
		g.Set(float64(i))
		reg.MustRegister(g)
	}
	return reg
}

// goneWriter is a connection the scraper has closed: every write fails.
type goneWriter struct{ header http.Header }

func (w *goneWriter) Header() http.Header { return w.header }
func (w *goneWriter) WriteHeader(int)     {}
func (w *goneWriter) Write([]byte) (int, error) {
	return 0, errors.New("io: read/write on closed pipe")
}

func TestAbandonedScrapeLogsOneLine(t *testing.T) {
	var logged bytes.Buffer
	h := Handler(registry(t), slog.New(slog.NewTextHandler(&logged, nil)))
	h.ServeHTTP(&goneWriter{header: http.Header{}}, httptest.NewRequest(http.MethodGet, "/metrics", nil))

	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	require.Len(t, lines, 1, "one line for the whole scrape:\n%s", logged.String())
	require.Contains(t, lines[0], "level=WARN")
	require.Contains(t, lines[0], "Scrape abandoned before the page was sent")
	require.Contains(t, lines[0], fmt.Sprintf("families_not_sent=%d", families))
	require.Contains(t, lines[0], `err="io: read/write on closed pipe"`)
}

func TestScrapeServedWhole(t *testing.T) {
	var logged bytes.Buffer
	h := Handler(registry(t), slog.New(slog.NewTextHandler(&logged, nil)))
	for range 2 { // each scrape on its own
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, families, strings.Count(rec.Body.String(), "# TYPE family_"))
		require.Contains(t, rec.Body.String(), "\nfamily_49 49\n")
	}
	require.Empty(t, logged.String(), "a whole scrape logs nothing")
}

// failingCollector reports one good metric and one error.
type failingCollector struct{ desc *prometheus.Desc }

func (c failingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c failingCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1)
	ch <- prometheus.NewInvalidMetric(c.desc, errors.New("device 3: NVML timeout"))
}

func TestFailingCollectorDoesNotFailThePage(t *testing.T) {
	reg := registry(t)
	reg.MustRegister(failingCollector{desc: prometheus.NewDesc("device_up", "Up.", nil, nil)})
	var logged bytes.Buffer
	h := Handler(reg, slog.New(slog.NewTextHandler(&logged, nil)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))

	require.Equal(t, http.StatusOK, rec.Code, "the rest of the page is served")
	require.Equal(t, families, strings.Count(rec.Body.String(), "# TYPE family_"))
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	require.Len(t, lines, 1, logged.String())
	require.Contains(t, lines[0], "level=WARN")
	require.Contains(t, lines[0], "error gathering metrics")
	require.Contains(t, lines[0], "device 3: NVML timeout", "the collector's error, as promhttp words it")
}
