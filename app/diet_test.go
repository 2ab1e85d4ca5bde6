package app_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeSeriesDiet: a default serve exposes and stores none of the
// families the diet turns off, keeps those its rules and dashboards read,
// and a group turned on in self_metrics: is exposed and stored from the
// next reload on; a bad value is refused and changes nothing.
func TestServeSeriesDiet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := writeConfig(t, dir, fastConfig)
	p := serve(t, filepath.Join(dir, "data"), configFile(cfgFile))

	// exposed reports whether the endpoint's exposition has the family.
	exposed := func(path, family string) bool {
		code, body := p.get(path)
		require.Equal(t, 200, code, body)
		return strings.Contains(body, "\n# TYPE "+family+" ")
	}
	count := func(expr string) int {
		v, err := p.instant(`count(` + expr + `)`)
		require.NoError(t, err)
		if len(v) == 0 {
			return 0
		}
		return int(v[0].Value)
	}
	// stored counts the series that have had a sample in the test's
	// time, each at its newest: a scrape that missed its timeout on a busy
	// machine marks its series stale, which an instant read of now would
	// count as never stored.
	stored := func(selector string) int { return count(`last_over_time(` + selector + `[10m])`) }
	// Enough scrapes for every built-in job to have stored its families.
	eventually(t, 30*time.Second, "cadvisor and gpuscope jobs scraped", func() error {
		if n := count(`max_over_time(up{job=~"gpuscope|cadvisor"}[10m]) == 1`); n != 2 {
			return fmt.Errorf("%d of the 2 jobs up", n)
		}
		return nil
	})
	time.Sleep(3 * time.Second)

	for _, f := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_cpu_seconds_total", "prometheus_tsdb_head_series", "prometheus_rule_evaluation_failures_total", "gpuscope_config_last_reload_successful"} {
		require.True(t, exposed("/metrics", f), "%s is read by the built-in dashboards or alerts: kept", f)
	}
	for _, f := range []string{"go_gc_duration_seconds", "prometheus_engine_query_duration_seconds", "prometheus_tsdb_compaction_chunk_size_bytes", "prometheus_target_sync_length_seconds", "prometheus_rule_group_duration_seconds", "promhttp_metric_handler_requests_total"} {
		require.False(t, exposed("/metrics", f), "%s is off by default", f)
	}
	require.True(t, exposed("/metrics/cadvisor", "container_memory_working_set_bytes"))
	require.True(t, exposed("/metrics/cadvisor", "container_cpu_usage_seconds_total"))
	for _, f := range []string{"container_memory_failures_total", "container_tasks_state", "container_cpu_load_average_10s", "container_memory_max_usage_bytes", "container_pressure_cpu_stalled_seconds_total"} {
		require.False(t, exposed("/metrics/cadvisor", f), "%s is off by default", f)
	}
	require.Zero(t, stored(`{__name__=~"prometheus_engine_.+|go_gc_.+|container_memory_failures_total|container_tasks_state"}`), "nothing of the groups that are off is stored")
	require.Positive(t, stored(`prometheus_tsdb_head_series`))

	// A bad value is refused, and the diet stays as it was.
	require.NoError(t, os.WriteFile(cfgFile, []byte(fastConfig+"self_metrics:\n  families:\n    query_engine: on please\n"), 0o644))
	reloadErr := p.reload()
	eventually(t, 20*time.Second, "reload failure visible", func() error {
		if n := count(`last_over_time(gpuscope_config_last_reload_successful[10m]) == 0`); n != 1 {
			return fmt.Errorf("reload not failed yet")
		}
		return nil
	})
	require.ErrorContains(t, reloadErr, "self_metrics.families.query_engine")
	require.ErrorContains(t, reloadErr, "is not a boolean")
	require.False(t, exposed("/metrics", "prometheus_engine_query_duration_seconds"))

	// Turned on: exposed at once and stored from the next scrape.
	require.NoError(t, os.WriteFile(cfgFile, []byte(fastConfig+"self_metrics:\n  families:\n    query_engine: true\n"), 0o644))
	require.NoError(t, p.reload())
	eventually(t, 30*time.Second, "prometheus_engine_* stored after the reload", func() error {
		if n := stored(`{__name__=~"prometheus_engine_.+", job="gpuscope"}`); n == 0 {
			return fmt.Errorf("no prometheus_engine_* series yet")
		}
		return nil
	})
	require.True(t, exposed("/metrics", "prometheus_engine_query_duration_seconds"))
	require.False(t, exposed("/metrics", "go_gc_duration_seconds"), "the other groups stay off")
}
