package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/app/apptest"
)

// agentConfig is what the test agents run (apptest's).
const agentConfig = apptest.AgentConfig

// vectorByLabel runs q and maps each result's label l to its value.
func (p *process) vectorByLabel(q string, l model.LabelName) (map[string]float64, error) {
	v, err := p.instant(q)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for _, s := range v {
		m[string(s.Metric[l])] = float64(s.Value)
	}
	return m, nil
}

// TestClusterAgents: three agents, two listed in the config and one added
// to the file_sd file while the appliance runs, each seen with its own
// instance; a node that does not resolve is a down target with the
// reason; a stopped agent's targets go down and TargetDown fires.
func TestClusterAgents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	acfg := writeConfig(t, t.TempDir(), agentConfig)
	a := startAgent(t, "node-a", acfg)
	b := startAgent(t, "node-b", acfg)
	c := startAgent(t, "node-c", acfg)

	sdFile := filepath.Join(dir, "nodes.json")
	require.NoError(t, os.WriteFile(sdFile, []byte(`[]`), 0o644))
	cfg := writeConfig(t, dir, fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
cadvisor: {enabled: false}
gpu: {backend: none}
nodes:
  static:
    - {address: %s, name: node-a, labels: {rack: r1}}
    - {address: %s, name: node-b}
    - nosuch-node.invalid:9089
  files: [nodes.json]
  refresh_interval: 1s
# The built-in rules 30 times faster: TargetDown's for: 5m becomes 10s.
rules:
  builtin:
    time_scale: 30
`, a.addr(), b.addr()))
	p := serve(t, "", configFile(cfg))

	// node-c joins through the file, without a reload.
	require.NoError(t, os.WriteFile(sdFile, []byte(fmt.Sprintf(`[{"targets": [%q], "labels": {"instance": "node-c"}}]`, c.addr())), 0o644))

	nodes := []string{"node-a", "node-b", "node-c"}
	eventually(t, 60*time.Second, "every node's GPUs, containers and targets, by instance", func() error {
		gpus, err := p.vectorByLabel(`count by (instance) (DCGM_FI_DEV_GPU_UTIL{job="node-gpu"})`, "instance")
		if err != nil {
			return err
		}
		containers, err := p.vectorByLabel(`count by (instance) (container_cpu_usage_seconds_total{job="node-cadvisor"})`, "instance")
		if err != nil {
			return err
		}
		up, err := p.vectorByLabel(`sum by (instance) (up{job=~"node-.*"})`, "instance")
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if gpus[n] != 2 {
				return fmt.Errorf("%s: %v GPU series, want 2 (all: %v)", n, gpus[n], gpus)
			}
			if containers[n] < 1 {
				return fmt.Errorf("%s: no container series (all: %v)", n, containers)
			}
			if up[n] != 3 {
				return fmt.Errorf("%s: %v of 3 targets up (all: %v)", n, up[n], up)
			}
		}
		if v, ok := up["nosuch-node.invalid"]; !ok || v != 0 {
			return fmt.Errorf("the unresolvable node's targets: up sum %v (present %v), want 0", v, ok)
		}
		return nil
	})

	// GPU series carry the agent's own host name too, and the node's labels.
	v, err := p.instant(`last_over_time(DCGM_FI_DEV_GPU_UTIL{instance="node-a"}[5s])`)
	require.NoError(t, err)
	require.NotEmpty(t, v, "node-a's GPU series")
	for _, s := range v {
		require.Equal(t, model.LabelValue("node-a"), s.Metric["Hostname"])
		require.Equal(t, model.LabelValue("r1"), s.Metric["rack"])
	}

	// The unresolvable node is a down target that says why.
	code, body := p.get("/api/v1/targets?state=active")
	require.Equal(t, 200, code)
	var targets struct {
		Data struct {
			ActiveTargets []struct {
				Labels    map[string]string
				Health    string
				LastError string
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &targets))
	down := 0
	for _, tg := range targets.Data.ActiveTargets {
		if tg.Labels["instance"] == "nosuch-node.invalid" {
			down++
			require.Equal(t, "down", tg.Health)
			require.Contains(t, tg.LastError, "no such host")
		}
	}
	require.Equal(t, 3, down, "three down targets for the unresolvable node")

	// Receivers are off by default.
	code, body = p.post("/api/v1/write", "")
	require.Equal(t, 404, code)
	require.Contains(t, body, "--web.enable-remote-write-receiver")
	code, body = p.post("/api/v1/otlp/v1/metrics", "")
	require.Equal(t, 404, code)
	require.Contains(t, body, "--web.enable-otlp-receiver")

	// Stop node-b's agent: its targets go down, the others stay up.
	require.NoError(t, b.stop(), "the agent stops cleanly (the binary exits 0 after SIGTERM)")
	eventually(t, 30*time.Second, "node-b's targets down", func() error {
		up, err := p.vectorByLabel(`sum by (instance) (up{job=~"node-.*"})`, "instance")
		if err != nil {
			return err
		}
		if up["node-b"] != 0 || up["node-a"] != 3 || up["node-c"] != 3 {
			return fmt.Errorf("up by node: %v", up)
		}
		return nil
	})
	// The built-in rule pack's TargetDown fires for each of node-b's
	// three targets.
	eventually(t, 60*time.Second, "TargetDown firing for node-b", func() error {
		v, err := p.instant(`ALERTS{alertname="TargetDown",instance="node-b",alertstate="firing"}`)
		if err != nil {
			return err
		}
		if len(v) != 3 {
			return fmt.Errorf("ALERTS for node-b: %v", v)
		}
		return nil
	})
}

// TestClusterRemoteWrite: everything the sender stores reaches a second
// appliance through remote write; while the receiver is down for 30 s the
// sender's queue holds the samples (they stay in its WAL), and once the
// receiver is back every series has every sample. A second remote_write
// entry points at a port that refuses: the sender keeps running and
// reports the retries.
func TestClusterRemoteWrite(t *testing.T) {
	t.Parallel()
	recvDir := t.TempDir()
	recvPort := freePort(t)
	// The receiver evaluates no built-in rules: they would record the same
	// series (gpu:...:avg5m{sender="a"}) from the received samples that the
	// sender records and sends, and the sender's older copies would then be
	// refused as out of order, with the rest of their batch.
	recvCfg := writeConfig(t, t.TempDir(), fastConfig+"cadvisor: {enabled: false}\ngpu: {backend: none}\nrules: {builtin: {enabled: false}}\n")
	startReceiver := func() *process {
		return serve(t, recvDir, configFile(recvCfg), with(func(s *app.Settings) {
			s.ListenAddress, s.NodeName, s.EnableRemoteWriteReceiver = "127.0.0.1:"+strconv.Itoa(recvPort), "receiver", true
		}))
	}
	recv := startReceiver()

	refused := freePort(t) // nothing listens there
	// One shard: a queue behind on a loaded machine reshards, and
	// Prometheus's queue manager drops what a stopped shard was sending
	// ("non-recoverable error ... context canceled", seen here under
	// -race with the other in-process tests). The test is about an outage
	// and its backlog, not about resharding.
	sendCfg := writeConfig(t, t.TempDir(), fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
  external_labels: {sender: a}
cadvisor: {enabled: false}
gpu:
  backend: sim
  sim: {count: 2}
remote_write:
  - name: receiver
    url: %s/api/v1/write
    queue_config: {batch_send_deadline: 1s, max_backoff: 2s, min_shards: 1, max_shards: 1}
  - name: refused
    url: http://127.0.0.1:%d/api/v1/write
    queue_config: {max_backoff: 1s}
`, recv.URL, refused))
	// Shutdown waits for neither queue: the refused endpoint never takes
	// its backlog, and the default flush deadline would hold each stop for
	// a minute that the test does not look at.
	send := serve(t, "", configFile(sendCfg), with(func(s *app.Settings) { s.RemoteFlushDeadline = time.Second }))

	// Wait until the receiver has the sender's data, then open the window.
	eventually(t, 60*time.Second, "sender's series at the receiver", func() error {
		v, err := recv.instant(`up{sender="a",job="gpu"}`)
		if err == nil && len(v) != 1 {
			err = fmt.Errorf("up{sender=a,job=gpu} = %v", v)
		}
		return err
	})
	windowStart := time.Now()
	time.Sleep(5 * time.Second)

	require.NoError(t, recv.stop())
	// Longer than the queue's 2 s max_backoff many times over: it backs
	// off to the cap and holds the backlog.
	outage := 30 * time.Second
	time.Sleep(outage)

	// The refusing endpoint never stopped the sender.
	code, _ := send.get("/-/ready")
	require.Equal(t, 200, code)
	// Over the outage, not at the last self-scrape, which may have timed
	// out on a loaded machine and marked the series stale.
	v, err := send.instant(`max_over_time(prometheus_remote_storage_samples_retried_total{remote_name="refused"}[30s]) > 0`)
	require.NoError(t, err)
	_, metrics := send.get("/metrics")
	require.Len(t, v, 1, "retries to the refusing endpoint are counted; /metrics has:\n%s", grepLines(metrics, "remote_storage_samples_retried_total"))
	require.Contains(t, send.out.String(), "connection refused")
	// Nothing was sent during the outage: the samples wait in the queue
	// and the WAL.
	v, err = send.instant(fmt.Sprintf(`time() - last_over_time(prometheus_remote_storage_queue_highest_sent_timestamp_seconds{remote_name="receiver"}[10s]) > %g`, (outage - 15*time.Second).Seconds()))
	require.NoError(t, err)
	require.Len(t, v, 1, "the receiver's queue is behind by the outage")

	recv = startReceiver()
	time.Sleep(5 * time.Second)
	// Two seconds back: a scrape stamped just before now may still be
	// committing at the sender (a busy machine), and would then reach the
	// receiver but not the sender's count.
	windowEnd := time.Now().Add(-2 * time.Second)

	// Per series, the number of samples in the window must match: none lost
	// while the receiver was down, every series present.
	window := windowEnd.Sub(windowStart).Round(time.Second)
	sel := fmt.Sprintf(`{__name__=~".+",job=~"gpu|gpuscope"}[%ds]`, int(window.Seconds()))
	counts := func(p *process, query string) (map[string]int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, _, _, err := p.api().Query(ctx, query, windowEnd)
		if err != nil {
			return nil, err
		}
		m := map[string]int{}
		for _, s := range res.(model.Matrix) {
			delete(s.Metric, "sender")
			m[s.Metric.String()] = len(s.Values)
		}
		return m, nil
	}
	sent, err := counts(send, sel)
	require.NoError(t, err)
	require.Greater(t, len(sent), 50, "the sender has the gpu and gpuscope jobs' series")
	upKey := model.Metric{"__name__": "up", "instance": "e2e-node", "job": "gpuscope"}.String()
	require.GreaterOrEqual(t, sent[upKey], int(window.Seconds())-5, "the window holds a sample a second, outage included")
	eventually(t, 90*time.Second, "every series with every sample at the receiver", func() error {
		got, err := counts(recv, strings.Replace(sel, "{", `{sender="a",`, 1))
		if err != nil {
			return err
		}
		var missing []string
		for k, n := range sent {
			if got[k] != n {
				missing = append(missing, fmt.Sprintf("%s: %d of %d", k, got[k], n))
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return fmt.Errorf("%d of %d series incomplete, e.g. %v", len(missing), len(sent), missing[:min(3, len(missing))])
		}
		return nil
	})
	t.Logf("%d series over %s, %s of it with the receiver down: identical sample counts", len(sent), window, outage)
}

// TestClusterFederationAndPush: remote-write and OTLP pushes are
// queryable, and /federate agrees with instant queries, in text (read with
// Prometheus's own scrape parser) and protobuf.
func TestClusterFederationAndPush(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, t.TempDir(), fastConfig+`
  external_labels: {cluster: lab}
cadvisor: {enabled: false}
gpu: {backend: none}
`)
	p := serve(t, "", configFile(cfg), with(func(s *app.Settings) { s.EnableRemoteWriteReceiver, s.EnableOTLPReceiver = true, true }))

	// A remote-write push, as Grafana-managed recording rules or another
	// Prometheus send it: v1 protobuf, snappy.
	ts := time.Now().Add(-30 * time.Second).Truncate(time.Second)
	wr := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		{
			Labels:  []prompb.Label{{Name: "__name__", Value: "pushed_gpu_hours"}, {Name: "team", Value: "vision"}},
			Samples: []prompb.Sample{{Value: 12.5, Timestamp: ts.UnixMilli()}},
		},
		{
			Labels:  []prompb.Label{{Name: "__name__", Value: "pushed_gpu_hours"}, {Name: "team", Value: "nlp"}},
			Samples: []prompb.Sample{{Value: 3, Timestamp: ts.UnixMilli()}},
		},
	}}
	raw, err := wr.Marshal()
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, p.URL+"/api/v1/write", bytes.NewReader(snappy.Encode(nil, raw)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode, string(b))

	v, err := p.instant(`pushed_gpu_hours{team="vision"}`)
	require.NoError(t, err)
	require.Len(t, v, 1)
	require.Equal(t, model.SampleValue(12.5), v[0].Value)

	// An OTLP push, as a training job instrumented with OpenTelemetry
	// sends it.
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "trainer")
	rm.Resource().Attributes().PutStr("service.instance.id", "job-42")
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("train.loss")
	g := m.SetEmptyGauge().DataPoints().AppendEmpty()
	g.SetDoubleValue(0.25)
	g.SetTimestamp(pcommon.NewTimestampFromTime(time.Now().Add(-time.Second)))
	g.Attributes().PutStr("model", "resnet")
	body, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	require.NoError(t, err)
	resp, err = http.Post(p.URL+"/api/v1/otlp/v1/metrics", "application/x-protobuf", bytes.NewReader(body))
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	v, err = p.instant(`train_loss{model="resnet"}`)
	require.NoError(t, err)
	require.Len(t, v, 1, "OTLP gauge train.loss as train_loss")
	require.Equal(t, model.SampleValue(0.25), v[0].Value)
	require.Equal(t, model.LabelValue("trainer"), v[0].Metric["job"], "service.name becomes job")
	require.Equal(t, model.LabelValue("job-42"), v[0].Metric["instance"], "service.instance.id becomes instance")

	// Federation: the pushed series (fixed in time, so the comparison is
	// exact) and up (constant 1).
	eventually(t, 30*time.Second, "built-in gpuscope job scraped", func() error {
		v, err := p.instant(`up{job="gpuscope"}`)
		if err == nil && len(v) != 1 {
			err = fmt.Errorf("up = %v", v)
		}
		return err
	})
	match := []string{`pushed_gpu_hours`, `up`, `train_loss`}
	q := "?"
	for _, m := range match {
		q += "match[]=" + m + "&"
	}
	at := time.Now()
	code, text := p.get("/federate" + q)
	require.Equal(t, 200, code, text)
	fed := parseFederation(t, []byte(text), "text/plain; version=0.0.4")

	want := map[string]float64{}
	for _, m := range match {
		v, _, _, err := p.api().Query(context.Background(), m, at)
		require.NoError(t, err)
		for _, s := range v.(model.Vector) {
			ls := s.Metric.Clone()
			if _, ok := ls["cluster"]; !ok {
				ls["cluster"] = "lab"
			}
			want[ls.String()] = float64(s.Value)
		}
	}
	require.Equal(t, want, fed.values, "federation = instant queries, with external_labels")
	require.Equal(t, ts.UnixMilli(), fed.timestamps[model.Metric{"__name__": "pushed_gpu_hours", "cluster": "lab", "team": "vision"}.String()], "a federated sample keeps its timestamp")

	// The same through protobuf negotiation, as a Prometheus scraper asks.
	req, err = http.NewRequest(http.MethodGet, p.URL+"/federate"+q, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,text/plain;version=0.0.4;q=0.3")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "application/vnd.google.protobuf")
	pb := parseFederation(t, b, resp.Header.Get("Content-Type"))
	require.Equal(t, fed.values, pb.values, "protobuf and text federation agree")

	code, body2 := p.get("/federate?match[]=" + "up%7B")
	require.Equal(t, 400, code, "a bad selector is 400: %s", body2)
}

type federated struct {
	values     map[string]float64
	timestamps map[string]int64
}

// parseFederation reads a /federate body with Prometheus's own scrape
// parser for its content type.
func parseFederation(t *testing.T, body []byte, contentType string) federated {
	t.Helper()
	parser, err := textparse.New(body, contentType, labels.NewSymbolTable(), textparse.ParserOptions{})
	require.NoError(t, err)
	f := federated{values: map[string]float64{}, timestamps: map[string]int64{}}
	for {
		e, err := parser.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if e != textparse.EntrySeries {
			continue
		}
		_, tsp, val := parser.Series()
		var ls labels.Labels
		parser.Labels(&ls)
		m := model.Metric{}
		ls.Range(func(l labels.Label) {
			if l.Value != "" { // federation adds instance="" to series without one
				m[model.LabelName(l.Name)] = model.LabelValue(l.Value)
			}
		})
		require.False(t, math.IsNaN(val), "no stale markers federated")
		f.values[m.String()] = val
		if tsp != nil {
			f.timestamps[m.String()] = *tsp
		}
	}
	return f
}

// TestAgentEndpoints: the agent serves its three endpoints, empty when a
// collector is off, and nothing else; a reload (SIGHUP) does not end it.
func TestAgentEndpoints(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, t.TempDir(), "cadvisor: {enabled: false}\n")
	a := startAgent(t, "bare", cfg)
	code, body := a.get("/metrics/gpu")
	require.Equal(t, 200, code)
	require.Contains(t, body, "DCGM_FI_DEV_GPU_UTIL", "--gpu.backend=sim")
	code, body = a.get("/metrics/cadvisor")
	require.Equal(t, 200, code, "served even with cAdvisor off")
	require.Empty(t, body)
	code, body = a.get("/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, "process_resident_memory_bytes")
	require.Contains(t, body, `gpuscope_build_info`)
	for _, path := range []string{"/api/v1/query?query=up", "/federate?match[]=up", "/api/v1/write"} {
		code, _ = a.get(path)
		require.Equal(t, 404, code, "%s: the agent has no TSDB and no API", path)
	}
	code, body = a.get("/")
	require.Equal(t, 200, code)
	require.Contains(t, body, "agent")
	require.NotContains(t, body, "api/v1/targets")

	require.ErrorIs(t, a.reload(), app.ErrAgentReloadsNothing, "SIGHUP: the binary logs this error")
	require.ErrorContains(t, a.reload(), "reloads nothing")
	code, _ = a.get("/-/ready")
	require.Equal(t, 200, code, "still running after SIGHUP")
	require.NoError(t, a.stop())
}

// grepLines is the lines of text that contain substr.
func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
