package scrape

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/file"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/storage"
)

func staticNode(address, name string, ls model.LabelSet) Node {
	n := Node{Address: address, Name: name, Labels: ls}
	if err := n.check(); err != nil {
		panic(err)
	}
	return n
}

func TestNodeJobs(t *testing.T) {
	nodes := DefaultNodes()
	nodes.Static = []Node{
		staticNode("gpu-01:9089", "", nil),
		staticNode("10.0.0.2:9089", "gpu-02", model.LabelSet{"rack": "b"}),
	}
	nodes.Files = []string{"/etc/gpuscope/nodes/*.yml"}
	nodes.HTTPClientConfig.BasicAuth = &config_util.BasicAuth{Username: "scraper", Password: "pw"}

	cfg, err := promconfig.Load("global: {scrape_interval: 7s}\n", nil)
	require.NoError(t, err)
	require.NoError(t, AddBuiltinJobs(cfg, Builtin{Address: "localhost:9089", Instance: "appliance", Cadvisor: true, GPU: true, Nodes: nodes}))

	byName := map[string]*promconfig.ScrapeConfig{}
	var names []string
	for _, j := range cfg.ScrapeConfigs {
		byName[j.JobName] = j
		names = append(names, j.JobName)
	}
	require.Equal(t, []string{JobSelf, JobCadvisor, JobGPU, JobNodeAgent, JobNodeCadvisor, JobNodeGPU}, names)

	for _, tc := range []struct{ job, path string }{
		{JobNodeAgent, "/metrics"},
		{JobNodeCadvisor, "/metrics/cadvisor"},
		{JobNodeGPU, "/metrics/gpu"},
	} {
		j := byName[tc.job]
		require.Equal(t, tc.path, j.MetricsPath, tc.job)
		require.Equal(t, model.Duration(7*time.Second), j.ScrapeInterval, "%s: the global interval", tc.job)
		require.Equal(t, "scraper", j.HTTPClientConfig.BasicAuth.Username, "%s: credentials for agents run with --web.config.file", tc.job)
		require.Len(t, j.ServiceDiscoveryConfigs, 2, tc.job)
		static := j.ServiceDiscoveryConfigs[0].(discovery.StaticConfig)
		require.Len(t, static, 2)
		require.Equal(t, model.LabelSet{"instance": "gpu-01"}, static[0].Labels)
		require.Equal(t, model.LabelSet{"instance": "gpu-02", "rack": "b"}, static[1].Labels)
		require.Equal(t, model.LabelValue("10.0.0.2:9089"), static[1].Targets[0][model.AddressLabel])
		fsd := j.ServiceDiscoveryConfigs[1].(*file.SDConfig)
		require.Equal(t, []string{"/etc/gpuscope/nodes/*.yml"}, fsd.Files)
	}
	require.True(t, byName[JobNodeCadvisor].HonorTimestamps, "node cAdvisor as the built-in one")
	require.True(t, byName[JobNodeCadvisor].TrackTimestampsStaleness, "node cAdvisor as the built-in one")

	// Without nodes there are no node jobs, but their names stay reserved.
	cfg, err = promconfig.Load("scrape_configs:\n  - job_name: node-gpu\n    static_configs: [{targets: ['x:1']}]\n", nil)
	require.NoError(t, err)
	err = AddBuiltinJobs(cfg, Builtin{Address: "localhost:9089", Instance: "n"})
	require.ErrorContains(t, err, `job_name "node-gpu" is reserved`)
	cfg, err = promconfig.Load("", nil)
	require.NoError(t, err)
	require.NoError(t, AddBuiltinJobs(cfg, Builtin{Address: "localhost:9089", Instance: "n"}))
	require.Len(t, cfg.ScrapeConfigs, 1)
}

// TestNodeInstanceLabel runs Prometheus's own target labelling over the
// node jobs: instance is the node's name, from the config or from the
// address of a file_sd target.
func TestNodeInstanceLabel(t *testing.T) {
	nodes := DefaultNodes()
	nodes.Files = []string{"nodes.json"}
	cfg, err := promconfig.Load("", nil)
	require.NoError(t, err)
	require.NoError(t, AddBuiltinJobs(cfg, Builtin{Address: "localhost:9089", Instance: "n", Nodes: nodes}))
	job := cfg.ScrapeConfigs[1]
	require.Equal(t, JobNodeAgent, job.JobName)

	for _, tc := range []struct {
		name             string
		target, group    model.LabelSet
		instance, labelX string
	}{
		{"host name", model.LabelSet{"__address__": "gpu-01:9089"}, nil, "gpu-01", ""},
		{"IPv4", model.LabelSet{"__address__": "10.1.2.3:9089"}, nil, "10.1.2.3", ""},
		{"IPv6", model.LabelSet{"__address__": "[fd00::1]:9089"}, nil, "fd00::1", ""},
		{"instance set by the group", model.LabelSet{"__address__": "10.1.2.3:9089"}, model.LabelSet{"instance": "gpu-07", "x": "y"}, "gpu-07", "y"},
		{"static node's name", model.LabelSet{"__address__": "10.1.2.3:9089"}, model.LabelSet{"instance": "gpu-08"}, "gpu-08", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, err := promscrape.PopulateLabels(labels.NewBuilder(labels.EmptyLabels()), job, tc.target, tc.group)
			require.NoError(t, err)
			require.Equal(t, tc.instance, ls.Get("instance"))
			require.Equal(t, tc.labelX, ls.Get("x"))
			require.Equal(t, JobNodeAgent, ls.Get("job"))
			require.Equal(t, string(tc.target["__address__"]), ls.Get("__address__"))
		})
	}
}

// agentStub serves the three agent endpoints, each with one series.
func agentStub(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	for _, p := range []string{"/metrics", "/metrics/cadvisor", "/metrics/gpu"} {
		name := "stub" + strings.ReplaceAll(p, "/", "_")
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			fmt.Fprintf(w, "# TYPE %s gauge\n%s 1\n", name, name)
		})
	}
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// TestNodesFileSD: a node added to the file_sd file is scraped without a
// reload, with instance = its host; an address that does not resolve is
// a down target, and nothing else is disturbed.
func TestNodesFileSD(t *testing.T) {
	a, b := agentStub(t), agentStub(t)
	addr := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	dir := t.TempDir()
	sdFile := filepath.Join(dir, "nodes.json")
	require.NoError(t, os.WriteFile(sdFile, []byte(`[]`), 0o644))

	reg := prometheus.NewRegistry()
	db, err := storage.Open(storage.Options{Dir: t.TempDir(), Retention: time.Hour, Registerer: reg})
	require.NoError(t, err)
	sd, err := discovery.CreateAndRegisterSDMetrics(reg)
	require.NoError(t, err)
	s, err := New(Options{Registerer: reg, SDMetrics: sd, Appendable: db, DiscoveryReloadInterval: 100 * time.Millisecond})
	require.NoError(t, err)

	nodes := DefaultNodes()
	nodes.Static = []Node{staticNode(addr(a), "node-a", nil), staticNode("no-such-host.invalid:9089", "", nil)}
	nodes.Files = []string{sdFile}
	nodes.RefreshInterval = model.Duration(time.Second)
	cfg, err := promconfig.Load("global: {scrape_interval: 200ms, scrape_timeout: 200ms}\n", nil)
	require.NoError(t, err)
	require.NoError(t, AddBuiltinJobs(cfg, Builtin{Address: "localhost:1", Instance: "appliance", Nodes: nodes}))
	require.NoError(t, s.ApplyConfig(cfg))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, db.Close())
	})

	// up by job and instance, from the TSDB.
	up := func() map[string]float64 {
		q, err := db.Querier(0, time.Now().Add(time.Minute).UnixMilli())
		require.NoError(t, err)
		defer q.Close()
		set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "up"))
		m := map[string]float64{}
		for set.Next() {
			s := set.At()
			it := s.Iterator(nil)
			var v float64
			for it.Next() != 0 {
				_, v = it.At()
			}
			m[s.Labels().Get("job")+"/"+s.Labels().Get("instance")] = v
		}
		return m
	}
	waitUp := func(want map[string]float64) {
		t.Helper()
		require.Eventually(t, func() bool {
			got := up()
			for k, v := range want {
				if g, ok := got[k]; !ok || g != v {
					return false
				}
			}
			return true
		}, 20*time.Second, 50*time.Millisecond, "want %v", want)
	}
	waitUp(map[string]float64{
		"node-agent/node-a": 1, "node-cadvisor/node-a": 1, "node-gpu/node-a": 1,
		"node-agent/no-such-host.invalid": 0,
	})
	var lastErr string
	for _, tg := range s.Manager().TargetsActive()[JobNodeAgent] {
		if tg.Labels(labels.NewBuilder(labels.EmptyLabels())).Get("instance") == "no-such-host.invalid" {
			lastErr = tg.LastError().Error()
		}
	}
	require.Contains(t, lastErr, "no such host", "the down target says why")

	// Node b appears in the file: scraped without a reload, named after
	// its host.
	require.NoError(t, os.WriteFile(sdFile, []byte(fmt.Sprintf(`[{"targets": [%q], "labels": {"rack": "r2"}}]`, addr(b))), 0o644))
	waitUp(map[string]float64{"node-agent/127.0.0.1": 1, "node-cadvisor/127.0.0.1": 1, "node-gpu/127.0.0.1": 1})
}
