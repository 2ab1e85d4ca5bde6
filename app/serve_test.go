package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app"
)

// TestServeContainerCPU is the spine end to end: a CPU-burning process in a
// cgroup this test creates is seen by the in-process cAdvisor, scraped by
// the Prometheus scrape loop into the TSDB and answered by PromQL over the
// HTTP API; when the cgroup goes, its series goes stale. Not parallel: it
// measures the burner's CPU rate and wants every built-in job up.
func TestServeContainerCPU(t *testing.T) {
	cg := newCgroup(t, fmt.Sprintf("gpuscope-e2e-%d", rand.IntN(1e6)))
	dir := t.TempDir()
	p := serve(t, "", configFile(writeConfig(t, dir, fastConfig)))

	burner := cg.Burn(t)
	rateQuery := fmt.Sprintf(`rate(container_cpu_usage_seconds_total{id=%q}[10s])`, cg.ID)
	eventually(t, 60*time.Second, "burner's CPU rate near one core", func() error {
		v, err := p.instant(rateQuery)
		if err != nil {
			return err
		}
		if len(v) != 1 {
			return fmt.Errorf("%s returned %d series", rateQuery, len(v))
		}
		if r := float64(v[0].Value); r < 0.5 || r > 1.5 {
			return fmt.Errorf("rate %.3f outside [0.5, 1.5]", r)
		}
		return nil
	})

	// Every built-in job is up, labelled with the node name: each has had
	// a good scrape in the past minute (one that missed its one-second
	// timeout on a busy machine says up 0 for that once).
	up, err := p.instant(`max_over_time(up[1m])`)
	require.NoError(t, err)
	jobs := map[string]bool{}
	for _, s := range up {
		require.Equal(t, model.SampleValue(1), s.Value, "up of %s", s.Metric)
		require.Equal(t, model.LabelValue("e2e-node"), s.Metric["instance"], "instance of %s", s.Metric)
		jobs[string(s.Metric["job"])] = true
	}
	require.True(t, jobs["gpuscope"] && jobs["cadvisor"], "built-in jobs up: %v", jobs)

	// Kill the burner, remove the cgroup: the series must go stale (no value
	// at "now") within a few scrape intervals.
	require.NoError(t, burner.Process.Kill())
	_, _ = burner.Process.Wait()
	cg.Remove()
	eventually(t, 30*time.Second, "series of the removed cgroup stale", func() error {
		v, err := p.instant(fmt.Sprintf(`container_cpu_usage_seconds_total{id=%q}`, cg.ID))
		if err != nil {
			return err
		}
		if len(v) != 0 {
			return fmt.Errorf("still %d series at now: %v", len(v), v)
		}
		return nil
	})
}

// TestServeRestartKeepsData: a stop (SIGTERM) ends cleanly with the TSDB
// closed, and a new appliance on the same directory returns the old
// samples.
func TestServeRestartKeepsData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fastConfig)
	data := filepath.Join(dir, "data")
	p := serve(t, data, configFile(cfg))
	firstStart := time.Now()
	eventually(t, 30*time.Second, "some samples of up stored", func() error {
		v, err := p.instant(`count_over_time(up{job="gpuscope"}[1m])`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value < 3 {
			return fmt.Errorf("want ≥3 samples, got %v", v)
		}
		return nil
	})
	stoppedAt := time.Now()
	// Counted two seconds back: a scrape stamped just before now may still
	// be committing (a busy machine), and would be counted after the
	// restart but not before.
	countAt := stoppedAt.Add(-2 * time.Second)
	const count = `count_over_time(up{job="gpuscope"}[1m])`
	before, _, _, err := p.api().Query(context.Background(), count, countAt)
	require.NoError(t, err)
	require.Len(t, before.(model.Vector), 1)
	require.NoError(t, p.stop(), "a clean stop (the binary exits 0 after SIGTERM)")
	require.Contains(t, p.out.String(), "Closing TSDB")

	p2 := serve(t, data, configFile(cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Every sample stored before the restart is still there.
	v, _, _, err := p2.api().QueryRange(ctx, count, promv1.Range{Start: countAt, End: countAt, Step: time.Second})
	require.NoError(t, err)
	m := v.(model.Matrix)
	require.Len(t, m, 1)
	require.Equal(t, before.(model.Vector)[0].Value, m[0].Values[0].Value, "samples in the minute before the restart")
	v, _, _, err = p2.api().QueryRange(ctx, `up{job="gpuscope"}`, promv1.Range{Start: firstStart, End: stoppedAt, Step: time.Second})
	require.NoError(t, err)
	require.NotEmpty(t, v.(model.Matrix), "query_range over the time before the restart")
}

// TestServeGrafanaCalls makes the calls Grafana's Prometheus data source
// makes (../shared/grafana-api.md §1) and checks status and shape.
func TestServeGrafanaCalls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := serve(t, "", configFile(writeConfig(t, dir, fastConfig)))
	// gpu is scraped too without a driver: it reports backend "none".
	eventually(t, 30*time.Second, "first scrapes of every built-in job stored", func() error {
		v, err := p.instant(`count by (job) (count_over_time(up[1m]) >= 2)`)
		if err != nil {
			return err
		}
		var jobs []string
		for _, s := range v {
			jobs = append(jobs, string(s.Metric["job"]))
		}
		sort.Strings(jobs)
		if !slices.Equal(jobs, []string{"cadvisor", "gpu", "gpuscope"}) {
			return fmt.Errorf("want cadvisor, gpu and gpuscope with 2 scrapes each, got %v", v)
		}
		return nil
	})
	now := time.Now()
	ts := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', -1, 64) }

	t.Run("health check: instant 1+1 at t≈4", func(t *testing.T) {
		code, body := p.post("/api/v1/query", "query=1%2B1&time=4")
		require.Equal(t, 200, code, body)
		var r struct {
			Status string
			Data   struct {
				ResultType string
				Result     []any
			}
		}
		require.NoError(t, json.Unmarshal([]byte(body), &r))
		require.Equal(t, "success", r.Status)
		require.Equal(t, "scalar", r.Data.ResultType)
		require.Equal(t, []any{4.0, "2"}, r.Data.Result)
	})

	t.Run("POST query_range with form body and URL parameters", func(t *testing.T) {
		form := url.Values{"query": {`up{job="gpuscope"}`}, "start": {ts(now.Add(-time.Minute))}, "end": {ts(now)}, "step": {"1"}}
		code, body := p.post("/api/v1/query_range?timeout=2m&customParam=1", form.Encode())
		require.Equal(t, 200, code, body)
		var r struct {
			Status string
			Data   struct {
				ResultType string
				Result     []struct {
					Metric map[string]string
					Values [][2]any
				}
			}
		}
		require.NoError(t, json.Unmarshal([]byte(body), &r))
		require.Equal(t, "matrix", r.Data.ResultType)
		require.Len(t, r.Data.Result, 1)
		require.Equal(t, "up", r.Data.Result[0].Metric["__name__"])
		require.NotEmpty(t, r.Data.Result[0].Values)
		require.IsType(t, "", r.Data.Result[0].Values[0][1], "sample values are JSON strings")
	})

	t.Run("labels via POST", func(t *testing.T) {
		code, body := p.post("/api/v1/labels", url.Values{"start": {ts(now.Add(-time.Hour))}, "end": {ts(now)}, "limit": {"40000"}}.Encode())
		require.Equal(t, 200, code, body)
		var r struct{ Data []string }
		require.NoError(t, json.Unmarshal([]byte(body), &r))
		require.Contains(t, r.Data, "__name__")
		require.Contains(t, r.Data, "job")
		require.Contains(t, r.Data, "instance")
	})

	t.Run("label values via GET", func(t *testing.T) {
		code, body := p.get("/api/v1/label/job/values?start=" + ts(now.Add(-time.Hour)) + "&end=" + ts(now) + "&limit=40000")
		require.Equal(t, 200, code, body)
		var r struct{ Data []string }
		require.NoError(t, json.Unmarshal([]byte(body), &r))
		require.Contains(t, r.Data, "gpuscope")
		require.Contains(t, r.Data, "cadvisor")
	})

	t.Run("series via POST", func(t *testing.T) {
		code, body := p.post("/api/v1/series", url.Values{"match[]": {`up`}, "start": {ts(now.Add(-time.Hour))}, "end": {ts(now)}}.Encode())
		require.Equal(t, 200, code, body)
		var r struct{ Data []map[string]string }
		require.NoError(t, json.Unmarshal([]byte(body), &r))
		require.NotEmpty(t, r.Data)
		for _, s := range r.Data {
			require.Equal(t, "up", s["__name__"])
			require.Equal(t, "e2e-node", s["instance"])
		}
	})

	t.Run("buildinfo: semver version, no features", func(t *testing.T) {
		code, body := p.get("/api/v1/status/buildinfo")
		require.Equal(t, 200, code, body)
		var r struct{ Data map[string]any }
		require.NoError(t, json.Unmarshal([]byte(body), &r))
		require.Regexp(t, `^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`, r.Data["version"])
		require.NotContains(t, r.Data, "features")
		for _, k := range []string{"revision", "branch", "buildUser", "buildDate", "goVersion"} {
			require.Contains(t, r.Data, k)
		}
	})

	t.Run("metadata, exemplars, rules and alerts answer success", func(t *testing.T) {
		for _, path := range []string{
			"/api/v1/metadata?limit=10",
			"/api/v1/query_exemplars?query=test&start=" + strconv.FormatInt(now.Add(-time.Hour).UnixMilli(), 10) + "&end=" + strconv.FormatInt(now.UnixMilli(), 10),
			"/api/v1/rules",
			"/api/v1/alerts",
			"/api/v1/targets",
			"/api/v1/status/config",
			"/api/v1/status/flags",
			"/api/v1/status/runtimeinfo",
			"/api/v1/status/tsdb",
			"/api/v1/status/walreplay",
			"/api/v1/format_query?query=up%7Bjob%3D%22a%22%7D",
		} {
			code, body := p.get(path)
			require.Equal(t, 200, code, "%s: %s", path, body)
			require.Contains(t, body, `"status":"success"`, path)
		}
	})
}

// TestServeUserScrapeConfigs: static_configs and file_sd_configs work as in
// Prometheus, and a target added to the file_sd file is picked up without
// a restart.
func TestServeUserScrapeConfigs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sdFile := filepath.Join(dir, "targets.json")
	require.NoError(t, os.WriteFile(sdFile, []byte(`[]`), 0o644))
	port := freePort(t)
	self := "127.0.0.1:" + strconv.Itoa(port)
	cfg := writeConfig(t, dir, fastConfig+fmt.Sprintf(`
scrape_configs:
  - job_name: static-self
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
        labels: {team: gpu}
  - job_name: file-self
    file_sd_configs:
      - files: [targets.json]
        refresh_interval: 1s
`, self))
	p := serve(t, filepath.Join(dir, "data"), configFile(cfg), with(func(s *app.Settings) { s.ListenAddress = self }))

	eventually(t, 30*time.Second, "static target up with its label", func() error {
		v, err := p.instant(`up{job="static-self",team="gpu"}`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value != 1 {
			return fmt.Errorf("up = %v", v)
		}
		return nil
	})
	require.NoError(t, os.WriteFile(sdFile, []byte(fmt.Sprintf(`[{"targets": [%q], "labels": {"source": "file"}}]`, self)), 0o644))
	eventually(t, 40*time.Second, "file_sd target up after the file changed", func() error {
		v, err := p.instant(`up{job="file-self",source="file"}`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value != 1 {
			return fmt.Errorf("up = %v", v)
		}
		return nil
	})
}
