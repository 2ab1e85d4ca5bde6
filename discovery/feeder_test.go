package discovery

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	promdiscovery "github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/file"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/stretchr/testify/require"
)

func newFeeder(t *testing.T) (*Feeder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	sdm, err := promdiscovery.CreateAndRegisterSDMetrics(reg)
	require.NoError(t, err)
	f := New(Options{Registerer: reg, SDMetrics: sdm, Name: "scrape"})
	t.Cleanup(f.Stop)
	return f, reg
}

// next is the next update on SyncCh, whole.
func next(t *testing.T, f *Feeder) map[string][]*targetgroup.Group {
	t.Helper()
	select {
	case g := <-f.SyncCh():
		return g
	case <-time.After(30 * time.Second):
		t.Fatal("no target update within 30 s")
		return nil
	}
}

func addresses(groups []*targetgroup.Group) []string {
	var out []string
	for _, g := range groups {
		for _, tg := range g.Targets {
			out = append(out, string(tg[model.AddressLabel]))
		}
	}
	return out
}

// managerRunning reports whether a discovery manager registered its
// metrics (it does so when it is created).
func managerRunning(t *testing.T, reg *prometheus.Registry) bool {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "prometheus_sd_discovered_targets" {
			return true
		}
	}
	return false
}

func staticConfig(addrs ...string) promdiscovery.StaticConfig {
	g := &targetgroup.Group{Source: "0"}
	for _, a := range addrs {
		g.Targets = append(g.Targets, model.LabelSet{model.AddressLabel: model.LabelValue(a)})
	}
	return promdiscovery.StaticConfig{g}
}

// TestStaticWithoutDiscoveryManager: static configs reach the reader at
// once, with no discovery manager (whose sender would wake ten times a
// second); a set without configs gets no groups, so its targets go.
func TestStaticWithoutDiscoveryManager(t *testing.T) {
	f, reg := newFeeder(t)
	require.NoError(t, f.ApplyConfig(map[string]promdiscovery.Configs{
		"gpuscope": {staticConfig("a:1")},
		"nodes":    {staticConfig("b:1", "c:1"), staticConfig("d:1")},
		"empty":    {},
	}))
	got := next(t, f)
	require.Equal(t, []string{"a:1"}, addresses(got["gpuscope"]))
	require.Equal(t, []string{"b:1", "c:1", "d:1"}, addresses(got["nodes"]))
	require.Contains(t, got, "empty")
	require.Empty(t, got["empty"])
	require.False(t, managerRunning(t, reg), "no discovery manager for static configs")

	// Two applies before the reader looks: it gets the newest only.
	require.NoError(t, f.ApplyConfig(map[string]promdiscovery.Configs{"gpuscope": {staticConfig("a:2")}}))
	require.NoError(t, f.ApplyConfig(map[string]promdiscovery.Configs{"gpuscope": {staticConfig("a:3")}}))
	got = next(t, f)
	require.Equal(t, []string{"a:3"}, addresses(got["gpuscope"]))
	require.NotContains(t, got, "nodes", "a removed set is not sent")
	select {
	case g := <-f.SyncCh():
		t.Fatalf("a stale update was left: %v", g)
	default:
	}
}

// TestFileSDStartsDiscovery: a file_sd config starts Prometheus's
// discovery manager, whose updates (the file's targets, then a change to
// the file) reach the reader; a later all-static config still goes
// through it.
func TestFileSDStartsDiscovery(t *testing.T) {
	f, reg := newFeeder(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "nodes.yml")
	require.NoError(t, os.WriteFile(path, []byte("- targets: [gpu-01:9089]\n"), 0o644))
	fileSD := &file.SDConfig{Files: []string{path}, RefreshInterval: model.Duration(time.Minute)}
	require.NoError(t, f.ApplyConfig(map[string]promdiscovery.Configs{"gpuscope": {staticConfig("a:1")}, "node": {fileSD}}))
	require.True(t, managerRunning(t, reg))

	want := func(job string, addrs ...string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := next(t, f)
			if a := addresses(got[job]); len(a) == len(addrs) && (len(a) == 0 || a[0] == addrs[0]) {
				require.Equal(t, addrs, a)
				return
			}
			require.True(t, time.Now().Before(deadline), "job %s never had %v", job, addrs)
		}
	}
	want("node", "gpu-01:9089")
	require.NoError(t, os.WriteFile(path, []byte("- targets: [gpu-02:9089, gpu-03:9089]\n"), 0o644))
	want("node", "gpu-02:9089", "gpu-03:9089")

	require.NoError(t, f.ApplyConfig(map[string]promdiscovery.Configs{"gpuscope": {staticConfig("a:9")}}))
	want("gpuscope", "a:9")
}

// TestStopWithoutRun: a feeder that never started a manager stops at once,
// and one stopped refuses to start one.
func TestStopWithoutRun(t *testing.T) {
	reg := prometheus.NewRegistry()
	sdm, err := promdiscovery.CreateAndRegisterSDMetrics(reg)
	require.NoError(t, err)
	f := New(Options{Registerer: reg, SDMetrics: sdm, Name: "notify"})
	f.Stop()
	err = f.ApplyConfig(map[string]promdiscovery.Configs{"am": {&file.SDConfig{Files: []string{"x.yml"}, RefreshInterval: model.Duration(time.Minute)}}})
	require.EqualError(t, err, "target feeder stopped")
	require.NoError(t, f.ApplyConfig(map[string]promdiscovery.Configs{"am": {staticConfig("am:9093")}}), "static configs need no manager")
}
