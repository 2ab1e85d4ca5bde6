//go:build realgpu

package gpu

// The real-hardware check: on a machine with an NVIDIA GPU and driver,
//
//	go test -tags realgpu -run TestRealGPU -v ./gpu/
//
// reads every GPU through the NVML backend and compares it with
// nvidia-smi, run as the same user. scripts/check-real-gpu.sh runs it at
// idle and under each load of scripts/gpuload, as root and as an
// unprivileged user, and passes the load in:
//
//	GPUCHECK_LOAD      idle (default), fma, copy or alloc
//	GPUCHECK_LOAD_PID  the load's process id (fma, copy, alloc)
//	GPUCHECK_GPU       the index (nvidia-smi's) of the GPU the load runs on; default 0
//	GPUCHECK_OUT       a folder the test writes its last exposition into (optional)
//
// TestRealGPUAgainstNvidiaSMI, every GPU (values are read a moment apart,
// and some move by themselves):
//
//	UUID, pci_bus_id  exact
//	memory.total      ±64 MiB
//	memory.used       ±64 MiB (with or without the reserved part, as
//	                  nvidia-smi's accounting differs by driver)
//	memory.free       ±64 MiB
//	utilization       ±15 points
//	temperature       ±3 °C
//	power.draw        ±15 W or ±15 %, whichever is larger
//	clocks.sm         ±100 MHz or ±10 %, whichever is larger (DVFS)
//	clocks.mem        ±1 %
//	and no read fails in the second cycle.
//
// TestRealGPUUnderLoad, the load's GPU over eight cycles one second apart:
//
//	energy       DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION's increase within
//	             ±30 % of DCGM_FI_DEV_POWER_USAGE integrated over the same time
//	fma          median DCGM_FI_DEV_GPU_UTIL > 80 and median
//	             DCGM_FI_PROF_GR_ENGINE_ACTIVE > 0.8
//	copy         median DCGM_FI_PROF_DRAM_ACTIVE > 0.3
//	fma, copy, alloc: the container series of the load's cgroup (the id
//	             read from /proc/<pid>/cgroup) holds the memory that
//	             nvidia-smi --query-compute-apps lists for the processes of
//	             that cgroup, ±64 MiB; under alloc, that is at least 2 GiB.
//
// A value the driver does not give (nvidia-smi prints [N/A]) is logged,
// not compared. Lines starting "gpucheck:" carry the measured figures for
// the script's report.

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

const (
	realMemTolMiB      = 64
	realUtilTol        = 15
	realFMAUtilMin     = 80
	realFMAGrActiveMin = 0.8
	realCopyDRAMMin    = 0.3
	realEnergyTol      = 0.30
	realAllocMinMiB    = 2048
	realLoadCycles     = 8
)

// smiQuery runs nvidia-smi with a --query-*= argument and returns its CSV
// rows, fields trimmed, checking that each has want fields.
func smiQuery(t *testing.T, query string, want int) [][]string {
	t.Helper()
	out, err := exec.Command("nvidia-smi", query, "--format=csv,noheader,nounits").Output()
	require.NoError(t, err, "nvidia-smi %s", query)
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "No running") {
			continue
		}
		f := strings.Split(line, ",")
		require.Len(t, f, want, "nvidia-smi %s: %q", query, line)
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		rows = append(rows, f)
	}
	return rows
}

// smiNum parses an nvidia-smi number; [N/A] and [Not Supported] are NaN.
func smiNum(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

type smiGPU struct {
	index, uuid, busID                                               string
	util, memUsed, memFree, memTotal, temp, power, smClock, memClock float64
}

func nvidiaSMI(t *testing.T) []smiGPU {
	t.Helper()
	var gpus []smiGPU
	for _, f := range smiQuery(t, "--query-gpu=index,uuid,pci.bus_id,utilization.gpu,memory.used,memory.free,memory.total,temperature.gpu,power.draw,clocks.sm,clocks.mem", 11) {
		gpus = append(gpus, smiGPU{
			index: f[0], uuid: f[1], busID: f[2],
			util: smiNum(f[3]), memUsed: smiNum(f[4]), memFree: smiNum(f[5]), memTotal: smiNum(f[6]),
			temp: smiNum(f[7]), power: smiNum(f[8]), smClock: smiNum(f[9]), memClock: smiNum(f[10]),
		})
	}
	require.NotEmpty(t, gpus, "nvidia-smi lists no GPU")
	return gpus
}

// realCollector is an NVML collector on the real driver, sampling once a
// second, with every family on. When the test ends it keeps the last
// exposition in $GPUCHECK_OUT.
func realCollector(t *testing.T) (*Collector, *prometheus.Registry) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Backend = BackendNVML
	cfg.Families = Families{Profiling: true, Processes: true, ECC: true, RetiredPages: true, Violations: true, ClockEvents: true, NVLinkErrors: true}
	c, reg := testCollector(t, Options{Config: cfg, ProcRoot: "/proc", Interval: time.Second})
	c.collectOnce(bg)
	up, _ := lookup(t, reg, "gpuscope_gpu_collector_up", nil)
	require.Equal(t, 1.0, up, "NVML must load on a GPU machine")
	t.Cleanup(func() {
		dir := os.Getenv("GPUCHECK_OUT")
		if dir == "" {
			return
		}
		name := fmt.Sprintf("%s-uid%d.prom", strings.ReplaceAll(t.Name(), "/", "_"), os.Geteuid())
		if err := os.WriteFile(filepath.Join(dir, name), exposition(t, reg), 0o644); err != nil {
			t.Logf("cannot keep the exposition: %v", err)
		}
	})
	return c, reg
}

func TestRealGPUAgainstNvidiaSMI(t *testing.T) {
	c, reg := realCollector(t)
	look := func(name string, match map[string]string) (float64, bool) { return lookup(t, reg, name, match) }
	smi := nvidiaSMI(t)
	for _, g := range smi {
		t.Run("gpu"+g.index, func(t *testing.T) {
			look := func(name string, match map[string]string) (float64, bool) { return lookup(t, reg, name, match) }
			m := map[string]string{"gpu": g.index}
			_, ok := look("DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": g.index, "UUID": g.uuid, "pci_bus_id": g.busID})
			require.True(t, ok, "no DCGM_FI_DEV_GPU_TEMP with gpu=%s UUID=%s pci_bus_id=%s (exact identity)", g.index, g.uuid, g.busID)
			within := func(name string, want, tol float64) {
				t.Helper()
				if math.IsNaN(want) {
					t.Logf("%s: nvidia-smi has no value", name)
					return
				}
				got, ok := look(name, m)
				require.True(t, ok, "%s missing while nvidia-smi reports %v", name, want)
				t.Logf("gpucheck: gpu=%s %s gpuscope=%g nvidia-smi=%g", g.index, name, got, want)
				require.InDelta(t, want, got, tol, name)
			}
			within("DCGM_FI_DEV_FB_TOTAL", g.memTotal, realMemTolMiB)
			within("DCGM_FI_DEV_FB_FREE", g.memFree, realMemTolMiB)
			used, ok := look("DCGM_FI_DEV_FB_USED", m)
			require.True(t, ok, "DCGM_FI_DEV_FB_USED missing")
			reserved, _ := look("DCGM_FI_DEV_FB_RESERVED", m)
			t.Logf("gpucheck: gpu=%s DCGM_FI_DEV_FB_USED gpuscope=%g reserved=%g nvidia-smi=%g", g.index, used, reserved, g.memUsed)
			if math.Abs(used-g.memUsed) > realMemTolMiB {
				require.InDelta(t, g.memUsed, used+reserved, realMemTolMiB, "DCGM_FI_DEV_FB_USED (+reserved)")
			}
			within("DCGM_FI_DEV_GPU_UTIL", g.util, realUtilTol)
			within("DCGM_FI_DEV_GPU_TEMP", g.temp, 3)
			within("DCGM_FI_DEV_POWER_USAGE", g.power, math.Max(15, 0.15*g.power))
			within("DCGM_FI_DEV_SM_CLOCK", g.smClock, math.Max(100, 0.10*g.smClock))
			within("DCGM_FI_DEV_MEM_CLOCK", g.memClock, math.Max(1, 0.01*g.memClock))
		})
	}
	require.Equal(t, len(smi), countSeries(t, look, smi), "every GPU nvidia-smi lists, and no other")

	// A second cycle a second later: GPM and the NVLink rate have an
	// interval now, and nothing failed.
	time.Sleep(time.Second)
	c.collectOnce(bg)
	for _, e := range gather(t, reg, "gpuscope_gpu_collector_errors_total") {
		t.Errorf("read failed on a healthy GPU (uid %d): %v = %v", os.Geteuid(), e.labels, e.value)
	}
	for _, s := range gather(t, reg, "gpuscope_gpu_field_supported") {
		if s.value == 0 {
			t.Logf("gpucheck: not supported: gpu %s %s", s.labels["gpu"], s.labels["field"])
		}
	}
}

// countSeries counts the GPUs that have a DCGM_FI_DEV_FB_TOTAL series.
func countSeries(t *testing.T, look func(string, map[string]string) (float64, bool), smi []smiGPU) int {
	t.Helper()
	n := 0
	for _, g := range smi {
		if _, ok := look("DCGM_FI_DEV_FB_TOTAL", map[string]string{"gpu": g.index}); ok {
			n++
		}
	}
	return n
}

// loadCycle is what the collector published for the load's GPU in one cycle.
type loadCycle struct {
	at                                     float64 // sample time, Unix seconds
	energyMJ, powerW, util, grActive, dram float64
}

func TestRealGPUUnderLoad(t *testing.T) {
	load := os.Getenv("GPUCHECK_LOAD")
	if load == "" {
		load = "idle"
	}
	require.Contains(t, []string{"idle", "fma", "copy", "alloc"}, load, "GPUCHECK_LOAD")
	gpu := os.Getenv("GPUCHECK_GPU")
	if gpu == "" {
		gpu = "0"
	}
	var pid int
	if load != "idle" {
		var err error
		pid, err = strconv.Atoi(os.Getenv("GPUCHECK_LOAD_PID"))
		require.NoError(t, err, "GPUCHECK_LOAD_PID must be the load's pid")
		_, err = os.Stat(fmt.Sprintf("/proc/%d", pid))
		require.NoError(t, err, "the load (pid %d) is not running", pid)
	}

	c, reg := realCollector(t)
	look := func(name string, match map[string]string) (float64, bool) { return lookup(t, reg, name, match) }
	m := map[string]string{"gpu": gpu}
	val := func(name string) float64 {
		v, ok := look(name, m)
		if !ok {
			return math.NaN()
		}
		return v
	}
	var cycles []loadCycle
	for i := range realLoadCycles {
		if i > 0 {
			time.Sleep(time.Second)
			c.collectOnce(bg)
		}
		at, _ := look("gpuscope_gpu_collector_last_success_timestamp_seconds", nil)
		cycles = append(cycles, loadCycle{
			at: at, energyMJ: val("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), powerW: val("DCGM_FI_DEV_POWER_USAGE"),
			util: val("DCGM_FI_DEV_GPU_UTIL"), grActive: val("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), dram: val("DCGM_FI_PROF_DRAM_ACTIVE"),
		})
	}
	// The first cycle has no GPM interval yet.
	med := func(get func(loadCycle) float64) float64 {
		var v []float64
		for _, cy := range cycles[1:] {
			if x := get(cy); !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		return median(v)
	}
	util := med(func(c loadCycle) float64 { return c.util })
	gr := med(func(c loadCycle) float64 { return c.grActive })
	dram := med(func(c loadCycle) float64 { return c.dram })
	t.Logf("gpucheck: load=%s uid=%d gpu=%s median GPU_UTIL=%.1f PROF_GR_ENGINE_ACTIVE=%.3f PROF_DRAM_ACTIVE=%.3f", load, os.Geteuid(), gpu, util, gr, dram)

	// profiling says why a profiling field has no value: a GPU or driver
	// without GPM and a user the driver keeps from profiling are not
	// gpuscope's fault; anything else is.
	profiling := func(t *testing.T, field string, v float64) bool {
		t.Helper()
		if !math.IsNaN(v) {
			return true
		}
		if s, ok := lookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": gpu, "field": field}); ok && s == 0 {
			t.Skipf("%s: not supported on this GPU or driver", field)
		}
		if os.Geteuid() != 0 {
			t.Skipf("%s: no value as uid %d (the driver may restrict profiling to root: NVreg_RestrictProfilingToAdminUsers)", field, os.Geteuid())
		}
		t.Fatalf("%s: no value as root", field)
		return false
	}

	t.Run("energy", func(t *testing.T) {
		first, last := cycles[0], cycles[len(cycles)-1]
		if math.IsNaN(first.energyMJ) || math.IsNaN(last.energyMJ) {
			t.Skip("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION not published (GPU older than Volta?)")
		}
		var integral float64 // J, trapezoids between samples
		for i := 1; i < len(cycles); i++ {
			a, b := cycles[i-1], cycles[i]
			require.False(t, math.IsNaN(a.powerW) || math.IsNaN(b.powerW), "DCGM_FI_DEV_POWER_USAGE missing in a cycle")
			integral += (a.powerW + b.powerW) / 2 * (b.at - a.at)
		}
		energy := (last.energyMJ - first.energyMJ) / 1000
		t.Logf("gpucheck: load=%s uid=%d energy counter %.1f J, power × time %.1f J over %.2f s, ratio %.3f",
			load, os.Geteuid(), energy, integral, last.at-first.at, energy/integral)
		require.Greater(t, integral, 0.0)
		require.InEpsilon(t, integral, energy, realEnergyTol, "energy counter increase vs power integrated")
	})

	switch load {
	case "fma":
		t.Run("fma keeps the GPU busy", func(t *testing.T) {
			require.Greater(t, util, float64(realFMAUtilMin), "median DCGM_FI_DEV_GPU_UTIL under the FMA loop")
			if profiling(t, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gr) {
				require.Greater(t, gr, realFMAGrActiveMin, "median DCGM_FI_PROF_GR_ENGINE_ACTIVE under the FMA loop")
			}
		})
	case "copy":
		t.Run("copy keeps device memory busy", func(t *testing.T) {
			if profiling(t, "DCGM_FI_PROF_DRAM_ACTIVE", dram) {
				require.Greater(t, dram, realCopyDRAMMin, "median DCGM_FI_PROF_DRAM_ACTIVE under the copy loop")
			}
		})
	}
	if load != "idle" {
		t.Run("the load's process and container", func(t *testing.T) {
			checkLoadProcess(t, load, pid, gpu, reg)
		})
	}
}

// checkLoadProcess compares the container series of the load's cgroup
// with nvidia-smi's compute processes in that cgroup.
func checkLoadProcess(t *testing.T, load string, pid int, gpu string, reg prometheus.Gatherer) {
	t.Helper()
	look := func(name string, match map[string]string) (float64, bool) { return lookup(t, reg, name, match) }
	id, err := cgroupOfPID(pid)
	require.NoError(t, err)
	busID := ""
	for _, g := range nvidiaSMI(t) {
		if g.index == gpu {
			busID = g.busID
		}
	}
	require.NotEmpty(t, busID, "nvidia-smi has no GPU %s", gpu)

	apps := smiQuery(t, "--query-compute-apps=gpu_bus_id,pid,used_memory", 3)
	t.Logf("nvidia-smi compute apps: %q", apps)
	var sumMiB float64
	seen, unknown := false, false
	for _, a := range apps {
		if !strings.EqualFold(a[0], busID) {
			continue
		}
		p, err := strconv.Atoi(a[1])
		if err != nil {
			continue
		}
		if p == pid {
			seen = true
		}
		appID, err := cgroupOfPID(p)
		if err != nil || appID != id {
			continue
		}
		mib := smiNum(a[2])
		if math.IsNaN(mib) {
			unknown = true
			continue
		}
		sumMiB += mib
		if p == pid && load == "alloc" {
			require.GreaterOrEqual(t, mib, float64(realAllocMinMiB), "the alloc load holds 2 GiB")
		}
	}
	if !seen {
		t.Skipf("nvidia-smi (uid %d) lists no compute process %d on GPU %s: in another PID namespace, or hidden from this user", os.Geteuid(), pid, gpu)
	}
	procs, ok := look("gpuscope_gpu_container_processes", map[string]string{"gpu": gpu, "id": id})
	require.True(t, ok, "no gpuscope_gpu_container_processes{gpu=%q,id=%q}: the load's cgroup (from /proc/%d/cgroup) is not attributed", gpu, id, pid)
	require.GreaterOrEqual(t, procs, 1.0)
	if unknown {
		t.Skipf("nvidia-smi (uid %d) shows no memory for a process of %s: the driver does not tell this user", os.Geteuid(), id)
	}
	memBytes, ok := look("gpuscope_gpu_container_memory_used_bytes", map[string]string{"gpu": gpu, "id": id})
	require.True(t, ok, "no gpuscope_gpu_container_memory_used_bytes{gpu=%q,id=%q}", gpu, id)
	t.Logf("gpucheck: load=%s uid=%d container %s memory gpuscope=%.0f MiB nvidia-smi=%.0f MiB", load, os.Geteuid(), id, memBytes/bytesPerMiB, sumMiB)
	require.InDelta(t, sumMiB, memBytes/bytesPerMiB, realMemTolMiB, "container GPU memory vs nvidia-smi --query-compute-apps")
}

// cgroupOfPID reads /proc/<pid>/cgroup as cAdvisor names the container:
// the cpu controller's path on cgroup v1, the "0::" path on v2. It is
// written apart from the collector's parser so that it checks it.
func cgroupOfPID(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", fmt.Errorf("read the load's cgroup: %w", err)
	}
	var v1, v2 string
	for _, line := range strings.Split(string(bytes.TrimSpace(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
		if slices.Contains(strings.Split(parts[1], ","), "cpu") {
			v1 = parts[2]
		}
	}
	p := v2
	if v1 != "" {
		p = v1
	}
	if p == "" {
		return "", fmt.Errorf("/proc/%d/cgroup has neither a cpu nor a unified line: %q", pid, b)
	}
	p = filepath.Clean(strings.TrimSuffix(p, " (deleted)"))
	return p, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
