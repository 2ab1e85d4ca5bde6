package web

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/storage"
)

// newFederation serves /federate over a real TSDB holding, relative to now:
//
//	gpu_util{gpu="0"}            10 at now-2m, 20 at now-1m
//	gpu_util{gpu="1",cluster=x}  30 at now-30s (has its own cluster)
//	old_metric                   1 at now-10m (outside the 5m lookback)
//	gone_metric                  1 at now-2m, then a stale marker
//	latency (native histogram)   at now-1m
func newFederation(t *testing.T, ready bool, now time.Time) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	db, err := storage.Open(storage.Options{Dir: t.TempDir(), Retention: 24 * time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ms := func(d time.Duration) int64 { return now.Add(-d).UnixMilli() }
	app := db.Appender(context.Background())
	for _, s := range []struct {
		ls labels.Labels
		t  int64
		v  float64
	}{
		{labels.FromStrings("__name__", "gpu_util", "gpu", "0"), ms(2 * time.Minute), 10},
		{labels.FromStrings("__name__", "gpu_util", "gpu", "0"), ms(time.Minute), 20},
		{labels.FromStrings("__name__", "gpu_util", "gpu", "1", "cluster", "x"), ms(30 * time.Second), 30},
		{labels.FromStrings("__name__", "old_metric"), ms(10 * time.Minute), 1},
		{labels.FromStrings("__name__", "gone_metric"), ms(2 * time.Minute), 1},
		{labels.FromStrings("__name__", "gone_metric"), ms(time.Minute), math.Float64frombits(value.StaleNaN)},
	} {
		_, err := app.Append(0, s.ls, s.t, s.v)
		require.NoError(t, err)
	}
	h := &histogram.Histogram{
		Count: 3, Sum: 1.5, Schema: 0, ZeroThreshold: 0.001,
		PositiveSpans:   []histogram.Span{{Offset: 0, Length: 2}},
		PositiveBuckets: []int64{1, 1},
	}
	_, err = app.AppendHistogram(0, labels.FromStrings("__name__", "latency"), ms(time.Minute), h, nil)
	require.NoError(t, err)
	require.NoError(t, app.Commit())

	r := storage.NewReady()
	if ready {
		r.Set(db)
	}
	reg := prometheus.NewRegistry()
	hd := New(Options{Registerer: reg, Gatherer: reg})
	hd.MountFederation(FederationOptions{
		Queryable:      r,
		LookbackDelta:  5 * time.Minute,
		ExternalLabels: func() labels.Labels { return labels.FromStrings("cluster", "lab", "region", "eu") },
		Registerer:     reg,
	})
	hd.SetReady(ready)
	srv := httptest.NewServer(hd.echo)
	t.Cleanup(srv.Close)
	return srv, reg
}

func federate(t *testing.T, srv *httptest.Server, accept string, match ...string) (*http.Response, []byte) {
	t.Helper()
	q := url.Values{"match[]": match}
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/federate?"+q.Encode(), nil)
	require.NoError(t, err)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func TestFederationText(t *testing.T) {
	now := time.Now()
	srv, _ := newFederation(t, true, now)
	resp, body := federate(t, srv, "text/plain", `{__name__=~"gpu_util|old_metric|gone_metric|latency"}`)
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")

	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytesReader(body))
	require.NoError(t, err, string(body))
	require.Len(t, fams, 1, "only gpu_util: old_metric is past the lookback, gone_metric is stale, a native histogram needs protobuf:\n%s", body)
	ms := fams["gpu_util"].GetMetric()
	require.Len(t, ms, 2)
	byGPU := map[string]*dto.Metric{}
	for _, m := range ms {
		byGPU[labelMap(m)["gpu"]] = m
	}
	require.Equal(t, 20.0, byGPU["0"].GetUntyped().GetValue(), "the latest sample")
	// instance="" as in Prometheus: a series without an instance must not
	// take the federating Prometheus's target instance (honor_labels).
	require.Equal(t, map[string]string{"gpu": "0", "cluster": "lab", "region": "eu", "instance": ""}, labelMap(byGPU["0"]), "external labels added")
	require.Equal(t, map[string]string{"gpu": "1", "cluster": "x", "region": "eu", "instance": ""}, labelMap(byGPU["1"]), "a series' own label wins over the external one")
	require.Equal(t, now.Add(-30*time.Second).UnixMilli(), byGPU["1"].GetTimestampMs(), "the sample's own timestamp")
}

func TestFederationProtobuf(t *testing.T) {
	srv, _ := newFederation(t, true, time.Now())
	accept := `application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited`
	resp, body := federate(t, srv, accept, `latency`, `gpu_util{gpu="0"}`)
	require.Equal(t, 200, resp.StatusCode, string(body))
	format := expfmt.ResponseFormat(resp.Header)
	require.Equal(t, expfmt.TypeProtoDelim, format.FormatType())

	dec := expfmt.NewDecoder(bytesReader(body), format)
	fams := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		fams[mf.GetName()] = &mf
	}
	require.Len(t, fams, 2)
	require.Equal(t, dto.MetricType_HISTOGRAM, fams["latency"].GetType(), "native histograms go out in protobuf")
	hist := fams["latency"].GetMetric()[0].GetHistogram()
	require.Equal(t, 3.0, hist.GetSampleCountFloat())
	require.Equal(t, 1.5, hist.GetSampleSum())
	require.Equal(t, 20.0, fams["gpu_util"].GetMetric()[0].GetUntyped().GetValue())
}

func TestFederationErrors(t *testing.T) {
	srv, reg := newFederation(t, true, time.Now())
	resp, body := federate(t, srv, "", `gpu_util{`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "parse error")

	// No match[]: an empty answer, as Prometheus gives.
	resp, body = federate(t, srv, "text/plain")
	require.Equal(t, 200, resp.StatusCode)
	require.Empty(t, body)

	// The federation counters are registered with the handler's registry.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	require.True(t, names["prometheus_web_federation_errors_total"])
	require.True(t, names["prometheus_web_federation_warnings_total"])

	notReady, _ := newFederation(t, false, time.Now())
	resp, _ = federate(t, notReady, "", `up`)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "503 until the TSDB is open")
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
