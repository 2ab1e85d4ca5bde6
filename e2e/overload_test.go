//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuscope/gpuscope/app/apptest"
)

// overloadConfig scrapes the built-in jobs every second; rules keep their
// default interval.
const overloadConfig = `
global:
  scrape_interval: 1s
`

// overloadMemoryLimit is the memory cgroup limit the appliance runs under.
const overloadMemoryLimit = 512 << 20

// stormQueries are Grafana-like range queries over the simulated GPUs'
// and cAdvisor's series. Over 24 h at a 10 s step, the aggregations over
// every series of a job load a few hundred samples per step; the rates of
// one metric are light.
var stormQueries = []string{
	`rate(DCGM_FI_DEV_GPU_UTIL[1m])`,
	`avg by (gpu) (avg_over_time(DCGM_FI_DEV_POWER_USAGE[5m]))`,
	`sum by (__name__) ({job="gpu"})`,
	`rate(container_cpu_usage_seconds_total[1m])`,
	`avg by (__name__) ({job="cadvisor"})`,
}

// TestOverloadMaxSamples: waves of 50 concurrent 24 h range queries while
// the built-in jobs are scraped every second, with --query.max-samples
// low: the queries over the limit fail with Prometheus's 422 execution
// error, the others answer, no scrape is missed and the process stays
// within its cgroup's memory limit. Not parallel, nor TestOverloadTimeout:
// the storm takes the machine, and no scrape may be missed during it.
func TestOverloadMaxSamples(t *testing.T) {
	testOverload(t, []string{"--query.max-samples=1000"}, map[int]string{
		200: "",
		422: "execution: query processing would load too many samples into memory in query execution",
	}, 422)
}

// TestOverloadTimeout: the same storm with a --query.timeout shorter than
// the heavy queries take: they fail with Prometheus's 503 timeout error,
// also those that time out waiting for one of the --query.max-concurrency
// slots.
func TestOverloadTimeout(t *testing.T) {
	testOverload(t, []string{"--query.timeout=100ms"}, map[int]string{
		200: "",
		503: "timeout: query timed out in ",
	}, 503)
}

// testOverload runs the appliance with flags in its own cgroup, waits
// for some data, fires the storm and checks what came back (allowed maps
// each status code to the prefix of "errorType: error" it must carry;
// want must occur at least once), that every scrape of the storm's window
// was stored and that the process was not OOM-killed.
func testOverload(t *testing.T, flags []string, allowed map[int]string, want int) {
	cg := newAppCgroup(t, fmt.Sprintf("gpuscope-e2e-overload-%d", rand.IntN(1e6)), overloadMemoryLimit)
	cfg := writeConfig(t, t.TempDir(), overloadConfig)
	p := serveInCgroup(t, cg, append([]string{"--config.file=" + cfg, "--gpu.backend=sim"}, flags...)...)

	// GOMEMLIMIT is derived from the cgroup's limit (ratio 0.9), logged
	// and in effect.
	ratio := 0.9
	goLimit := uint64(float64(overloadMemoryLimit) * ratio)
	require.Contains(t, p.out.String(), `msg="Set GOMEMLIMIT"`)
	require.Contains(t, p.out.String(), "from=cgroup")
	require.Contains(t, p.out.String(), `limit="512.0 MiB"`)
	require.Contains(t, p.out.String(), "bytes="+strconv.FormatUint(goLimit, 10))
	code, body := p.get("/api/v1/status/runtimeinfo")
	require.Equal(t, 200, code, body)
	var info struct {
		Data struct{ GOMEMLIMIT uint64 }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &info))
	require.Equal(t, goLimit, info.Data.GOMEMLIMIT, "GOMEMLIMIT in /api/v1/status/runtimeinfo")

	// Some data to query: 15 scrapes of every built-in job.
	eventually(t, 60*time.Second, "15 scrapes stored", func() error {
		v, err := p.instant(`count_over_time(up[1m])`)
		if err != nil {
			return err
		}
		if len(v) != 3 {
			return fmt.Errorf("want 3 built-in jobs, got %v", v)
		}
		for _, s := range v {
			if s.Value < 15 {
				return fmt.Errorf("%v", v)
			}
		}
		return nil
	})

	// The storm: waves of 50 concurrent queries for at least 10 s.
	start := time.Now()
	var results []queryResult
	for waves := 0; waves == 0 || time.Since(start) < 10*time.Second; waves++ {
		results = append(results, queryStorm(t, p.URL, 50)...)
	}
	end := time.Now()

	byCode, byError := map[int]int{}, map[string]int{}
	for _, r := range results {
		byCode[r.code]++
		if r.code != http.StatusOK {
			byError[fmt.Sprintf("%d %s: %s", r.code, r.errorType, r.error)]++
		}
		prefix, ok := allowed[r.code]
		require.True(t, ok, "query %s answered %d: %s", r.query, r.code, r.body)
		if prefix != "" {
			require.True(t, strings.HasPrefix(r.errorType+": "+r.error, prefix), "query %s answered %d %s: %s, want %q", r.query, r.code, r.errorType, r.error, prefix)
		}
	}
	t.Logf("%d queries in %s: %v; errors: %v", len(results), end.Sub(start).Round(time.Millisecond), byCode, byError)
	require.Positive(t, byCode[want], "no query answered %d: %v", want, byCode)
	require.Positive(t, byCode[200], "no query answered 200: %v", byCode)

	// No scrape was missed, none failed: every second of the storm's
	// window has a sample of up = 1 for each built-in job and a sample of
	// each simulated GPU's utilization.
	w := int(math.Ceil(end.Sub(start).Seconds()))
	at := start.Add(time.Duration(w) * time.Second)
	time.Sleep(time.Until(at.Add(2 * time.Second)))
	v, err := p.queryAt(fmt.Sprintf(`max_over_time(scrape_duration_seconds[%ds])`, w), at)
	require.NoError(t, err)
	t.Logf("longest scrape of each job during the storm: %s", strings.ReplaceAll(v.String(), "\n", ", "))
	for _, c := range []struct {
		query string
		n     int
	}{
		{fmt.Sprintf(`count_over_time(up[%ds])`, w), 3},
		{fmt.Sprintf(`count_over_time(DCGM_FI_DEV_GPU_UTIL[%ds])`, w), 8},
	} {
		v, err := p.queryAt(c.query, at)
		require.NoError(t, err)
		require.Len(t, v, c.n, "%s: %v", c.query, v)
		for _, s := range v {
			require.InDelta(t, w, float64(s.Value), 1, "%s: samples in the %d s of the storm: %v", c.query, w, v)
		}
	}
	v, err = p.queryAt(fmt.Sprintf(`min_over_time(up[%ds])`, w), at)
	require.NoError(t, err)
	require.Len(t, v, 3)
	for _, s := range v {
		require.Equal(t, 1.0, float64(s.Value), "up during the storm: %v", v)
	}

	// The process is alive, answers, and the kernel did not have to
	// reclaim it: no OOM kill, not under OOM.
	select {
	case <-p.exited:
		t.Fatalf("gpuscope exited during the storm: %v", p.exitErr)
	default:
	}
	code, _ = p.get("/-/healthy")
	require.Equal(t, 200, code)
	st := cg.stats(t)
	t.Logf("%s: peak usage %d MiB of %d MiB, failcnt %d", cg.dir, st.peak>>20, overloadMemoryLimit>>20, st.failcnt)
	require.Zero(t, st.oomKills, "OOM kills in %s", cg.dir)
	require.False(t, st.underOOM, "%s under OOM", cg.dir)
	require.LessOrEqual(t, st.peak, uint64(overloadMemoryLimit))
}

// queryResult is one answer of the storm.
type queryResult struct {
	query            string
	code             int
	errorType, error string
	body             string
}

// queryStorm sends n range queries over the last 24 h at once, as
// Grafana's POST form, and returns the answers.
func queryStorm(t *testing.T, base string, n int) []queryResult {
	t.Helper()
	client := &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	now := time.Now()
	results := make([]queryResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := stormQueries[i%len(stormQueries)]
			resp, err := client.PostForm(base+"/api/v1/query_range", url.Values{
				"query": {q},
				"start": {strconv.FormatInt(now.Add(-24*time.Hour).Unix(), 10)},
				"end":   {strconv.FormatInt(now.Unix(), 10)},
				"step":  {"10"},
			})
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				errs[i] = err
				return
			}
			r := queryResult{query: q, code: resp.StatusCode, body: string(b)}
			if len(r.body) > 300 {
				r.body = r.body[:300] + "..."
			}
			if r.code != http.StatusOK {
				var e struct{ ErrorType, Error string }
				_ = json.Unmarshal(b, &e)
				r.errorType, r.error = e.ErrorType, e.Error
			} else if !strings.HasPrefix(r.body, `{"status":"success","data":{"resultType":"matrix"`) {
				r.code = -1 // not what a 200 must carry
			}
			results[i] = r
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...), "queries of the storm")
	return results
}

// appCgroup is where the appliance runs: a memory cgroup with a limit
// and, where the kernel allows, a CPU weight ten times the default, so
// that the storm competes with the scrapes inside gpuscope while the CI
// machine's other processes do not decide whether gpuscope keeps up.
type appCgroup struct {
	// dir holds the memory controller's files.
	dir string
	// dirs are every cgroup the appliance joins (v1: one per hierarchy).
	dirs []string
	v2   bool
}

// newAppCgroup creates the appliance's cgroup, below the test's own
// (cgroup v1) or at the root of the unified hierarchy (v2), or skips the
// test when the kernel refuses the memory limit.
func newAppCgroup(t *testing.T, name string, memoryLimit int64) *appCgroup {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(cgroupRoot, &st); err != nil {
		t.Skipf("no cgroup filesystem at %s: %v", cgroupRoot, err)
	}
	cg := &appCgroup{v2: st.Type == unix.CGROUP2_SUPER_MAGIC}
	t.Cleanup(func() {
		for i := len(cg.dirs) - 1; i >= 0; i-- {
			removeCgroup(t, cg.dirs[i])
		}
	})
	mkdir := func(parent string) (string, error) {
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
		cg.dirs = append(cg.dirs, d)
		return d, nil
	}
	write := func(dir, file string, v string) error {
		return os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644)
	}
	if cg.v2 {
		ctl := filepath.Join(cgroupRoot, "cgroup.subtree_control")
		if err := os.WriteFile(ctl, []byte("+memory"), 0o644); err != nil {
			t.Skipf("kernel refused to enable the memory controller in %s: %v", ctl, err)
		}
		cpuErr := os.WriteFile(ctl, []byte("+cpu"), 0o644)
		d, err := mkdir(cgroupRoot)
		if err != nil {
			t.Skipf("kernel refused to create cgroup %s (the test needs root): %v", filepath.Join(cgroupRoot, name), err)
		}
		cg.dir = d
		if err := write(d, "memory.max", strconv.FormatInt(memoryLimit, 10)); err != nil {
			t.Skipf("kernel refused the memory limit of %s: %v", d, err)
		}
		if cpuErr == nil {
			cpuErr = os.WriteFile(filepath.Join(d, "cpu.weight"), []byte(apptest.CPUWeights["cpu.weight"]), 0o644)
		}
		if cpuErr != nil {
			t.Logf("no CPU weight for %s: %v", d, cpuErr)
		}
		return cg
	}
	for _, c := range []struct {
		controller, limitFile string
		value                 string
	}{
		{"memory", "memory.limit_in_bytes", strconv.FormatInt(memoryLimit, 10)},
		{"cpu", "cpu.shares", apptest.CPUWeights["cpu.shares"]},
	} {
		mount := filepath.Join(cgroupRoot, c.controller)
		parent := mount
		if own := ownCgroup(c.controller); own != "" {
			if fi, err := os.Stat(filepath.Join(mount, own)); err == nil && fi.IsDir() {
				parent = filepath.Join(mount, own)
			}
		}
		d, err := mkdir(parent)
		if err == nil {
			err = write(d, c.limitFile, c.value)
		}
		switch {
		case err != nil && c.controller == "memory":
			t.Skipf("kernel refused a memory cgroup with a limit below %s (the test needs root): %v", parent, err)
		case err != nil:
			t.Logf("no CPU weight below %s: %v", parent, err)
		case c.controller == "memory":
			cg.dir = d
		}
	}
	return cg
}

// removeCgroup deletes a cgroup; the kernel refuses while tasks remain,
// so it retries briefly after the appliance stopped.
func removeCgroup(t *testing.T, d string) {
	for i := 0; i < 50; i++ {
		if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("could not remove %s", d)
}

// ownCgroup is this process's cgroup v1 path in the hierarchy of
// controller, from /proc/self/cgroup.
func ownCgroup(controller string) string {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), controller) {
			return parts[2]
		}
	}
	return ""
}

type memoryStats struct {
	peak, failcnt, oomKills uint64
	underOOM                bool
}

// stats reads the cgroup's peak usage, how often it hit its limit and
// whether the OOM killer ran.
func (cg *appCgroup) stats(t *testing.T) memoryStats {
	t.Helper()
	var st memoryStats
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(cg.dir, name))
		if err != nil {
			return ""
		}
		return string(b)
	}
	keyed := func(text, key string) uint64 {
		for _, l := range strings.Split(text, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == key {
				n, _ := strconv.ParseUint(f[1], 10, 64)
				return n
			}
		}
		return 0
	}
	number := func(name string) uint64 {
		n, _ := strconv.ParseUint(strings.TrimSpace(read(name)), 10, 64)
		return n
	}
	if cg.v2 {
		events := read("memory.events")
		require.NotEmpty(t, events, "%s/memory.events", cg.dir)
		st.oomKills = keyed(events, "oom_kill")
		st.failcnt = keyed(events, "max")
		st.peak = number("memory.peak")
		return st
	}
	oom := read("memory.oom_control")
	require.NotEmpty(t, oom, "%s/memory.oom_control", cg.dir)
	st.oomKills = keyed(oom, "oom_kill")
	st.underOOM = keyed(oom, "under_oom") != 0
	st.failcnt = number("memory.failcnt")
	st.peak = number("memory.max_usage_in_bytes")
	return st
}

// serveInCgroup starts `gpuscope serve` as serve does, but inside cg from
// its first instruction, so that it reads the cgroup's memory limit at
// start.
func serveInCgroup(t *testing.T, cg *appCgroup, args ...string) *process {
	t.Helper()
	return serveWith(t, "", func(all []string) *process {
		// The shell moves itself into the cgroups and becomes gpuscope.
		sh := []string{"-c", `while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@"`, "sh"}
		for _, d := range cg.dirs {
			sh = append(sh, filepath.Join(d, "cgroup.procs"))
		}
		return startCommand(t, exec.Command("/bin/sh", append(append(sh, "--", binary), all...)...), all)
	}, args)
}

// newCPUCgroup creates a cgroup with ten times the default CPU weight (and
// no other limit) for the appliance, below the test's own (cgroup v1) or
// at the root of the unified hierarchy (v2). Where the kernel refuses
// (not root, read-only cgroupfs) it logs why and returns nil.
func newCPUCgroup(t *testing.T, name string) *appCgroup {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(cgroupRoot, &st); err != nil {
		t.Logf("no cgroup filesystem at %s: %v", cgroupRoot, err)
		return nil
	}
	cg := &appCgroup{v2: st.Type == unix.CGROUP2_SUPER_MAGIC}
	parent, file := filepath.Join(cgroupRoot, "cpu"), "cpu.shares"
	if cg.v2 {
		parent, file = cgroupRoot, "cpu.weight"
		if err := os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+cpu"), 0o644); err != nil {
			t.Logf("no CPU weight: kernel refused to enable the cpu controller: %v", err)
			return nil
		}
	} else if own := ownCgroup("cpu"); own != "" {
		if fi, err := os.Stat(filepath.Join(parent, own)); err == nil && fi.IsDir() {
			parent = filepath.Join(parent, own)
		}
	}
	d := filepath.Join(parent, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Logf("no CPU weight: kernel refused to create cgroup %s: %v", d, err)
		return nil
	}
	t.Cleanup(func() { removeCgroup(t, d) })
	if err := os.WriteFile(filepath.Join(d, file), []byte(apptest.CPUWeights[file]), 0o644); err != nil {
		t.Logf("no CPU weight for %s: %v", d, err)
		return nil
	}
	cg.dir, cg.dirs = d, []string{d}
	return cg
}

// serveFavoured is serve for a test that counts on every scrape being on
// time: gpuscope runs in a cgroup of its own with ten times the default
// CPU weight where the kernel allows, so that the CI machine's other
// processes do not decide whether it keeps up; elsewhere as serve does.
func serveFavoured(t *testing.T, args ...string) *process {
	t.Helper()
	if cg := newCPUCgroup(t, fmt.Sprintf("gpuscope-e2e-%s-%d", strings.ToLower(t.Name()), rand.IntN(1e6))); cg != nil {
		return serveInCgroup(t, cg, args...)
	}
	return serve(t, "", args...)
}
