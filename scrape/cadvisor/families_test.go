package cadvisor

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/scrape/families"
)

// TestFamiliesDiet runs the real cAdvisor on this machine's cgroups with
// the default families and with every group on: the groups that are off
// are missing from /metrics/cadvisor and from the gatherer, the families
// the built-in rules read are there either way, and turning a group on
// brings its families back.
func TestFamiliesDiet(t *testing.T) {
	// The root cgroup exists on every machine, uses CPU and memory, and
	// reports pressure where the kernel has PSI. One collector at a time: cAdvisor's runtime factories are package
	// state, so each subtest stops its collector before the next starts.
	gather := func(name string, cfg Config) map[string]bool {
		seen := map[string]bool{}
		t.Run(name, func(t *testing.T) { seen = gatherIn(t, cfg) })
		return seen
	}
	def := gather("default", DefaultConfig())
	all := DefaultConfig()
	all.Families = families.Cadvisor{MemoryDetail: true, CPUDetail: true, NetworkDetail: true, PressureDetail: true, DiskDetail: true, SpecDetail: true}
	all.EnableMetrics = []string{"cpuLoad"}
	on := gather("every group on", all)

	for _, f := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_memory_rss", "container_memory_cache", "container_spec_memory_limit_bytes", "container_last_seen", "container_start_time_seconds", "machine_cpu_cores"} {
		require.True(t, def[f], "%s is read by the built-in rules: on by default", f)
		require.True(t, on[f], f)
	}
	for _, f := range []string{"container_memory_failures_total", "container_memory_max_usage_bytes", "container_memory_mapped_file", "container_cpu_user_seconds_total", "container_tasks_state", "container_cpu_load_average_10s"} {
		require.False(t, def[f], "%s is off by default", f)
		require.True(t, on[f], "%s is back with its group on", f)
	}
	if on["container_pressure_cpu_waiting_seconds_total"] { // PSI-less kernels have none
		require.False(t, def["container_pressure_cpu_waiting_seconds_total"])
		require.True(t, def["container_pressure_io_waiting_seconds_total"], "the Workloads dashboard reads the I/O stall")
	}
	for f := range def {
		require.True(t, families.Cadvisor{}.Keep(f), "%s served though its group is off", f)
	}
	require.Less(t, len(def), len(on))
	t.Logf("families: %d by default, %d with every group and cpuLoad on", len(def), len(on))
}

// gatherIn runs a collector with cfg until /metrics/cadvisor has the
// root cgroup's stats, and returns the families it served.
func gatherIn(t *testing.T, cfg Config) map[string]bool {
	t.Helper()
	c, err := New(Options{Config: cfg, Interval: 200 * time.Millisecond})
	require.NoError(t, err)
	runCollector(t, c)
	seen := map[string]bool{}
	require.Eventually(t, func() bool {
		rec := httptest.NewRecorder()
		c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics/cadvisor", nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `container_memory_working_set_bytes{`) {
			return false
		}
		for line := range strings.Lines(rec.Body.String()) {
			if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
				seen[strings.Fields(name)[0]] = true
			}
		}
		return true
	}, 20*time.Second, 100*time.Millisecond)
	mfs, err := c.Gatherer().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		// Other work's cgroups come and go, so the two reads may
		// differ in families; both obey the same groups.
		require.True(t, cfg.Families.Keep(mf.GetName()), "the gatherer serves %s though its group is off", mf.GetName())
	}
	return seen
}
